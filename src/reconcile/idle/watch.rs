//! The activity check loop: the I/O half of idle stop. It reads each watched
//! instance's activity report on a steady schedule and wakes the reconcile of
//! those the pure decisions of [`super`] find idle (or judged otherwise than
//! status shows).

use std::sync::Arc;
use std::time::Duration;

use futures::channel::mpsc;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};

use super::{Observation, Observations, Verdict, in_force, verdict, watched};
use crate::activity::report as activity;
use crate::api::TinycodeInstance;
use crate::api::naming;
use crate::settings::IdleSettings;

/// Checks the instances with a timeout for as long as the process runs;
/// wakes the reconcile of those found idle.
pub async fn watch(
    instances: Store<TinycodeInstance>,
    settings: IdleSettings,
    reader: Arc<activity::Reader>,
    observations: Arc<Observations>,
    metrics: Arc<crate::ops::metrics::Metrics>,
    wake: mpsc::Sender<ObjectRef<TinycodeInstance>>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(settings.checks_in_flight));
    loop {
        let cycle = tokio::time::Instant::now();
        let mut due: Vec<Arc<TinycodeInstance>> =
            instances.state().into_iter().filter(|i| watched(i, &settings)).collect();
        // A steady order, so each instance is checked about once an interval.
        due.sort_by_key(|i| i.metadata.uid.clone());
        {
            let keep: std::collections::HashSet<_> = due.iter().map(|i| ObjectRef::from_obj(&**i)).collect();
            observations.lock().expect("lock").retain(|k, _| keep.contains(k));
        }
        let n = due.len().max(1) as u32;
        for (i, inst) in due.into_iter().enumerate() {
            tokio::time::sleep_until(cycle + settings.check_interval * i as u32 / n).await;
            let Ok(slot) = slots.clone().acquire_owned().await else { return };
            let (settings, reader, observations, metrics, mut wake) =
                (settings.clone(), reader.clone(), observations.clone(), metrics.clone(), wake.clone());
            tokio::spawn(async move {
                let (ns, name) = (inst.namespace().unwrap_or_default(), inst.name_any());
                let url = activity::url(&settings.url_template, &naming::fullname(&name), &ns, &name);
                let result = reader.read(&url).await;
                drop(slot);
                let now = Timestamp::now();
                let obs = Observation { at: now, result };
                let floor = inst.status.as_ref().and_then(|s| s.last_activity_time.as_deref()?.parse().ok());
                let limit = in_force(&inst, &settings).unwrap_or(Duration::MAX);
                let v = verdict(Some(&obs), limit, floor, now);
                metrics.activity_check(v.as_str());
                let key = ObjectRef::from_obj(&*inst);
                observations.lock().expect("lock").insert(key.clone(), obs.clone());
                // Status shows what activity is judged by: a check that says
                // otherwise concerns the reconcile; one that agrees costs nothing.
                let judged_by = match (&v, &obs.result) {
                    (Verdict::Unknown(_), _) | (_, Err(_)) => "unknown",
                    (_, Ok(a)) => a.judged_by.as_str(),
                };
                let shown = inst.status.as_ref().and_then(|s| s.idle.as_ref()).map(|i| i.judged_by.as_str());
                if matches!(v, Verdict::Idle { .. }) || shown != Some(judged_by) {
                    let _ = wake.try_send(key);
                }
            });
        }
        tokio::time::sleep_until(cycle + settings.check_interval).await;
    }
}
