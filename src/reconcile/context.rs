//! What every stage of the reconcile shares: the [`Context`] of all workers
//! and its events (the pure helpers are in [`super::basics`]). Apart from `mod.rs`, which only
//! wires the stages to kube's controller, so no stage reaches back to it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource};

use crate::api::TinycodeInstance;
use crate::helm::{Helm, manifest, remediation::RetryBudget};
use crate::ops::metrics::Metrics;
use crate::reconcile::basics::truncate;
use crate::reconcile::caches::{noise, stores, written};
use crate::reconcile::idle;
use crate::settings::Settings;
use crate::vllm;

/// Shared state of all reconcile workers.
pub struct Context {
    pub client: Client,
    pub settings: Settings,
    pub helm: Helm,
    /// Publishes Warning events: repeats of one fold into a series.
    pub recorder: Recorder,
    pub(super) reporter: Reporter,
    pub metrics: Arc<Metrics>,
    pub prober: vllm::Prober,
    pub stores: stores::Stores,
    pub(super) failures: Mutex<HashMap<ObjectRef<TinycodeInstance>, u32>>,
    /// Helm failures per instance and rendering (the Stalled decision).
    pub(super) retries: Mutex<RetryBudget<ObjectRef<TinycodeInstance>>>,
    /// Objects each release revision rendered, by record name.
    pub(super) manifests: Mutex<HashMap<String, Arc<Vec<manifest::ObjectRef>>>>,
    /// Namespaces found prepared, and when.
    pub(super) prepared: written::Prepared,
    /// Statuses written that the cache may not show yet.
    pub written: written::WrittenStatuses,
    /// Instances whose finalizer this process removed.
    pub(super) finalized: written::Finalized,
    /// The OpenID Connect provider of auth.mode oidc, when configured.
    pub oidc: Option<Arc<crate::signin::oidc::Provider>>,
    /// The last activity check of each instance with an idle timeout.
    pub activity: Arc<idle::Observations>,
    /// Reads activity reports: the idle checks, and a rollout asking whether an agent is busy.
    pub activity_reader: Arc<crate::activity::report::Reader>,
    /// Warning events of failures, at most one per namespace and reason a window.
    pub(super) failure_events: noise::FailureEvents,
}

impl Context {
    pub fn new(client: Client, settings: Settings, helm: Helm, metrics: Arc<Metrics>, stores: stores::Stores) -> Self {
        let reporter = Reporter { controller: "tinycode-operator".into(), instance: std::env::var("POD_NAME").ok() };
        // The recorder folds repeats of an event into one series, so a failing
        // instance does not flood its namespace with events.
        let recorder = Recorder::new(client.clone(), reporter.clone());
        let prober = vllm::Prober::new(settings.probes.clone());
        let retries = Mutex::new(RetryBudget::new(settings.max_retries));
        let oidc = settings.signin.oidc.clone().map(crate::signin::oidc::Provider::new);
        Self {
            oidc,
            activity: Arc::default(),
            activity_reader: Arc::new(crate::activity::report::Reader::new(&settings.probes)),
            client,
            settings,
            helm,
            recorder,
            reporter,
            metrics,
            prober,
            stores,
            failures: Mutex::default(),
            retries,
            manifests: Mutex::default(),
            prepared: written::Prepared::default(),
            written: written::WrittenStatuses::default(),
            finalized: written::Finalized::default(),
            failure_events: noise::FailureEvents::default(),
        }
    }

    /// Keeps what a release revision rendered (it never changes), by record name.
    pub(crate) fn remember_rendered(
        &self,
        record: &str,
        objs: Vec<manifest::ObjectRef>,
    ) -> Arc<Vec<manifest::ObjectRef>> {
        let objs = Arc::new(objs);
        let mut cache = self.manifests.lock().expect("lock");
        if cache.len() > 4096 {
            cache.clear();
        }
        cache.insert(record.to_string(), objs.clone());
        objs
    }

    /// Publishes an event on the instance (best effort). Normal events
    /// (an install, a rollout reaching Running) each say something new, so
    /// they skip the shared recorder: its cache would keep every one for
    /// minutes (a tenth of the heap at 400 new instances) only to fold a
    /// repeat into the first one's note.
    pub async fn event(&self, inst: &TinycodeInstance, type_: EventType, reason: &str, action: &str, note: String) {
        let ev = Event {
            type_,
            reason: reason.into(),
            note: Some(truncate(&note, 1000)),
            action: action.into(),
            secondary: None,
        };
        let once;
        let recorder = match type_ {
            EventType::Warning => &self.recorder,
            EventType::Normal => {
                once = Recorder::new(self.client.clone(), self.reporter.clone());
                &once
            }
        };
        if let Err(e) = recorder.publish(&ev, &inst.object_ref(&())).await {
            tracing::warn!(error = %e, "could not publish event");
        }
    }
}
