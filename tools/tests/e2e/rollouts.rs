//! Rollouts that wait for the agent (README.md, "Rollouts that wait"),
//! against the real apiserver and helm, with the loopback activity stand-in
//! of `idle.rs` answering for each instance: a class change (a change the
//! instances did not ask for) applies at once to an instance whose agent is
//! not busy and waits for a busy one until the agent is done, the user asks
//! (`tinycode.dev/rollout-now`), the user changes the spec, or the class's
//! deadline passes; a tenant who rewrites the Deployment's values mark gets
//! it repaired at once, not a wait started over.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use tinycode_operator::api::naming;
use tinycode_operator::api::{RenderingStatus, TinycodeClass, TinycodeInstance};

use crate::harness::*;
use crate::idle::Shared;

/// The class's deadline in the last step, waited out once; the steps before
/// it run under a deadline of ten minutes, so nothing they see comes from it.
const DEADLINE_SECONDS: u64 = 40;
const LONG: &str = "10m";

/// A class change waits for the busy agent and not for the calm one; it
/// applies when asked, with the user's own change, when the agent is done,
/// and at the deadline (with a Warning event); status, the column's field and
/// the metric say what waits meanwhile, and helm does not run.
pub async fn rollouts_wait_for_busy_agents_until_their_deadline(env: &mut Env) -> TestResult {
    crate::idle::with_stand_in(env, &[], scenario).await
}

async fn scenario(env: &mut Env, shared: &Shared) -> TestResult {
    let admin = env.client().await;
    // The instances are alice's, in her namespace; the class is the cluster-admin's.
    let alice = crate::tenancy::tenant(env, "alice", "rollout").await?;
    let (c, ns) = (alice.client.clone(), alice.ns.clone());
    let class = format!("{ns}-patient");
    let classes: Api<TinycodeClass> = Api::all(admin.clone());
    let spec = |cpu: &str, deadline: &str| json!({"tinycode": {"defaults": {"requests": {"cpu": cpu}}}, "rollout": {"busyDeadline": deadline}});
    let body: TinycodeClass = serde_json::from_value(json!({"apiVersion": "tinycode.dev/v1alpha1",
        "kind": "TinycodeClass", "metadata": {"name": class}, "spec": spec("100m", LONG)}))
    .ctx("class")?;
    if classes.get_opt(&class).await.ctx("class")?.is_some() {
        classes.delete(&class, &DeleteParams::default()).await.ctx("delete old class")?;
    }
    classes.create(&PostParams::default(), &body).await.ctx("create class")?;
    let change_class = |cpu: &'static str, deadline: &'static str| {
        let (classes, class) = (classes.clone(), class.clone());
        async move {
            classes
                .patch(&class, &PatchParams::default(), &Patch::Merge(json!({"spec": spec(cpu, deadline)})))
                .await
                .map(|_| ())
                .ctx("change the class")
        }
    };
    let answer = |name: &str, busy: bool| {
        shared.lock().unwrap().answers.insert(name.into(), json!({"lastActivity": "now", "busy": busy}));
    };
    answer("busy", true);
    answer("calm", false);
    for name in ["busy", "calm"] {
        apply_instance(&c, &ns, name, json!({"className": class})).await.ctx("apply instance")?;
    }
    for name in ["busy", "calm"] {
        run_to_running(&admin, &ns, name).await?;
    }
    // The stand-in's Deployment writes above are repaired as another
    // manager's (a repair applies a waiting change at once; CI run 25 saw
    // one land with the class change below): the releases first hold still.
    for name in ["busy", "calm"] {
        settled(env, &naming::release_name(&ns, name), 8).await?;
    }
    let revision = |name: &str| -> Result<i64, String> {
        Ok(env.release(&naming::release_name(&ns, name))?.ok_or("no release")?.0)
    };
    let (busy0, calm0) = (revision("busy")?, revision("calm")?);

    // A class change: the calm instance takes it at once, the busy one waits.
    change_class("110m", LONG).await?;
    wait_for("the calm instance's upgrade", WAIT, || async { Ok((revision("calm")? == calm0 + 1).then_some(())) })
        .await?;
    let held = waiting(&c, &ns, "busy").await?;
    ensure_eq(revision("busy")?, busy0, "the busy instance's revision while it waits")?;
    let running = Api::<Deployment>::namespaced(c.clone(), &ns).get(&naming::fullname("busy")).await.ctx("deploy")?;
    let hash = running.metadata.annotations.unwrap_or_default().get("tinycode.dev/values-hash").cloned();
    ensure_eq(hash.as_deref(), Some(held.current.as_str()), "status.rendering.current is what runs")?;
    ensure(held.pending != held.current, "pending is another rendering")?;
    ensure(
        held.message.contains("busy") && held.message.contains("tinycode.dev/rollout-now"),
        format!("the message says why and how to apply it now: {}", held.message),
    )?;
    ensure(has_event(&admin, &ns, "busy", "RolloutWaits").await?, "no RolloutWaits event")?;
    let (_, metrics) = metrics_get(env).await?;
    ensure_eq(metric_sum(&metrics, "tinycode_operator_rollouts_waiting"), 1.0, "instances waiting, as a metric")?;
    let calm = get_instance(&c, &ns, "calm").await?.ok_or("gone")?;
    let calm_rendering = calm.status.and_then(|s| s.rendering).ok_or("calm has no status.rendering")?;
    ensure(calm_rendering.pending.is_empty(), "the calm instance waits for nothing")?;

    // Attack: alice rewrites the Deployment's values mark, which would make
    // every reconcile see a new rendering running and start the wait over, so
    // the change would never apply while her agent says busy. A Deployment
    // written by anyone but the operator is repaired at once instead.
    let deployments = Api::<Deployment>::namespaced(c.clone(), &ns);
    let forged = json!({"metadata": {"annotations": {"tinycode.dev/values-hash": "forged"}}});
    deployments
        .patch(&naming::fullname("busy"), &PatchParams::default(), &Patch::Merge(forged))
        .await
        .ctx("alice rewrites the mark")?;
    let (rev, _) = applied(env, &c, &ns, "busy", busy0).await?;
    // Attack: she edits the pod template and keeps the mark. Also a repair,
    // applied at once with the change that waits.
    change_class("112m", LONG).await?;
    waiting(&c, &ns, "busy").await?;
    let edit = json!({"spec": {"template": {"metadata": {"annotations": {"alice": "was-here"}}}}});
    // Early in a second, so the repair's helm record falls in the same one
    // (times have one-second resolution): that write must not stay drift
    // and turn the next change into a repair that skips the wait (CI runs 32, 33).
    start_of_a_second().await;
    deployments
        .patch(&naming::fullname("busy"), &PatchParams::default(), &Patch::Merge(edit))
        .await
        .ctx("alice edits the pod template")?;
    let (rev, _) = applied(env, &c, &ns, "busy", rev).await?;

    // Asked for: applied now, and the request acknowledged.
    change_class("115m", LONG).await?;
    waiting(&c, &ns, "busy").await?;
    annotate(&c, &ns, "busy", "tinycode.dev/rollout-now", "n1").await?;
    ensure_eq(revision("busy")?, rev, "revision while the change waits")?;
    let (rev, done) = applied(env, &c, &ns, "busy", rev).await?;
    ensure_eq(done.last_handled_rollout_now.as_deref(), Some("n1"), "lastHandledRolloutNow")?;

    // The user's own change applies at once, with the one that waited.
    change_class("120m", LONG).await?;
    waiting(&c, &ns, "busy").await?;
    Api::<TinycodeInstance>::namespaced(c.clone(), &ns)
        .patch("busy", &PatchParams::default(), &Patch::Merge(json!({"spec": {"idle": {"timeout": "8h"}}})))
        .await
        .ctx("the user's change")?;
    ensure_eq(revision("busy")?, rev, "revision while the change waits")?;
    let (rev, _) = applied(env, &c, &ns, "busy", rev).await?;

    // The agent is done: applied at the next check, and said so.
    change_class("130m", LONG).await?;
    waiting(&c, &ns, "busy").await?;
    answer("busy", false);
    ensure_eq(revision("busy")?, rev, "revision while the change waits")?;
    let (rev, _) = applied(env, &c, &ns, "busy", rev).await?;
    ensure(has_event(&admin, &ns, "busy", "RolloutApplied").await?, "no RolloutApplied event")?;
    // Each of these applied well before the ten-minute deadline.
    ensure(!has_event(&admin, &ns, "busy", "RolloutDeadline").await?, "a deadline passed before the last step")?;

    // Busy past the deadline: applied then, with a Warning event; not before.
    answer("busy", true);
    change_class("140m", "40s").await?;
    let held = waiting(&c, &ns, "busy").await?;
    let since: k8s_openapi::jiff::Timestamp = held.since.as_deref().ok_or("no since")?.parse().ctx("since")?;
    let deadline = Duration::from_secs(DEADLINE_SECONDS);
    let started = Instant::now();
    applied_within(env, &c, &ns, "busy", rev + 1, deadline + WAIT).await?;
    let applied_at = k8s_openapi::jiff::Timestamp::now();
    ensure(
        applied_at.duration_since(since).unsigned_abs() >= deadline,
        format!("applied {:?} after it began to wait, before the {deadline:?} deadline", started.elapsed()),
    )?;
    ensure(has_event(&admin, &ns, "busy", "RolloutDeadline").await?, "no RolloutDeadline event")?;
    let (_, metrics) = metrics_get(env).await?;
    ensure_eq(metric_sum(&metrics, "tinycode_operator_rollouts_waiting"), 0.0, "instances waiting at the end")?;

    for name in ["busy", "calm"] {
        super::delete_and_wait_gone(&c, &ns, name).await?;
    }
    classes.delete(&class, &DeleteParams::default()).await.ctx("delete the class")?;
    Ok(())
}

/// Sleeps until 20 ms into the next second of the wall clock.
async fn start_of_a_second() {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let into = Duration::from_nanos(u64::from(since.subsec_nanos()));
    tokio::time::sleep(Duration::from_millis(1020) - into).await;
}

/// Waits until `name`'s status says a rendering waits; returns status.rendering.
async fn waiting(c: &Client, ns: &str, name: &str) -> Result<RenderingStatus, String> {
    wait_for(&format!("{name}'s rollout to wait"), WAIT, || async {
        let inst = get_instance(c, ns, name).await?.ok_or("gone")?;
        let r = inst.status.and_then(|s| s.rendering).unwrap_or_default();
        Ok((!r.pending.is_empty() && r.since.is_some()).then_some(r))
    })
    .await
}

/// Waits until `name`'s release is past `revision` (a repair of another
/// manager's write may take more than one helm run, until the cache shows the
/// new record) and nothing waits; returns the revision and status.rendering.
async fn applied(env: &Env, c: &Client, ns: &str, name: &str, revision: i64) -> Result<(i64, RenderingStatus), String> {
    let release = naming::release_name(ns, name);
    let r = wait_for(&format!("{name} past revision {revision}, nothing waiting"), WAIT, || async {
        let at = env.release(&release)?.map(|r| r.0).unwrap_or_default();
        let inst = get_instance(c, ns, name).await?.ok_or("gone")?;
        let r = inst.status.and_then(|s| s.rendering).unwrap_or_default();
        Ok((at > revision && r.pending.is_empty() && r.since.is_none()).then_some(r))
    })
    .await?;
    // Settled: the revision holds still for three seconds.
    Ok((settled(env, &release, 3).await?, r))
}

/// `release`'s revision once it has held still for `seconds`.
async fn settled(env: &Env, release: &str, seconds: u32) -> Result<i64, String> {
    let (mut at, mut still) = (0, 0);
    while still < seconds {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = env.release(release)?.map(|r| r.0).unwrap_or_default();
        still = if now == at { still + 1 } else { 0 };
        at = now;
    }
    Ok(at)
}

async fn applied_within(
    env: &Env,
    c: &Client,
    ns: &str,
    name: &str,
    revision: i64,
    within: Duration,
) -> Result<RenderingStatus, String> {
    let release = naming::release_name(ns, name);
    wait_for(&format!("{name} at revision {revision}, nothing waiting"), within, || async {
        let at = env.release(&release)?.map(|r| r.0);
        ensure(at <= Some(revision), format!("{name} went past revision {revision}: {at:?}"))?;
        let inst = get_instance(c, ns, name).await?.ok_or("gone")?;
        let r = inst.status.and_then(|s| s.rendering).unwrap_or_default();
        Ok((at == Some(revision) && r.pending.is_empty() && r.since.is_none()).then_some(r))
    })
    .await
}

async fn annotate(c: &Client, ns: &str, name: &str, key: &str, value: &str) -> TestResult {
    let patch: Value = json!({"metadata": {"annotations": {key: value}}});
    Api::<TinycodeInstance>::namespaced(c.clone(), ns)
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map(|_| ())
        .ctx("annotate")
}

async fn has_event(c: &Client, ns: &str, name: &str, reason: &str) -> Result<bool, String> {
    let events = Api::<Event>::namespaced(c.clone(), ns).list(&ListParams::default()).await.ctx("events")?;
    Ok(events.items.iter().any(|e| {
        e.reason.as_deref() == Some(reason) && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
    }))
}
