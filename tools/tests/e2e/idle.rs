//! Idle stop (`spec.idle.timeout`) against the real apiserver and helm, with
//! a loopback stand-in serving each instance's activity report
//! (CONTAINER.md, "Activity"): the operator's `--activity-url` points at it,
//! as no kubelet runs pods here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use tinycode_operator::api::TinycodeInstance;
use tinycode_operator::api::naming;

use super::deploy;
use crate::harness::*;

/// What the stand-in answers for an instance, and how often it was asked.
#[derive(Default)]
pub(crate) struct Reports {
    pub(crate) answers: HashMap<String, Value>,
    pub(crate) asked: HashMap<String, u32>,
}

pub(crate) type Shared = Arc<Mutex<Reports>>;

async fn report(State(shared): State<Shared>, Path((_ns, name)): Path<(String, String)>) -> axum::response::Response {
    use axum::response::IntoResponse;
    let mut r = shared.lock().unwrap();
    *r.asked.entry(name.clone()).or_default() += 1;
    match r.answers.get(&name) {
        // "now" stands for requests arriving all the time.
        Some(v) if v["lastActivity"] == "now" => {
            let mut v = v.clone();
            v["lastActivity"] = json!(k8s_openapi::jiff::Timestamp::now().to_string());
            axum::Json(v).into_response()
        }
        Some(v) => axum::Json(v.clone()).into_response(),
        None => axum::http::StatusCode::NOT_FOUND.into_response(),
    }
}

/// Starts the stand-in on 127.0.0.1; its URL template for `--activity-url`.
async fn stand_in(shared: Shared) -> Result<String, String> {
    let app = axum::Router::new().route("/{ns}/{name}", axum::routing::get(report)).with_state(shared);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.ctx("bind")?;
    let addr = listener.local_addr().ctx("addr")?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(format!("http://{addr}/{{namespace}}/{{name}}"))
}

/// Idle past the timeout → stopped with reason Idle, the spec untouched, no
/// helm run and no check while stopped; a busy agent and an instance in use
/// keep running; the cluster-admin's maximum caps a larger timeout; the start
/// annotation brings it back on the same data.
pub async fn idle_instances_stop_and_busy_or_used_ones_do_not(env: &mut Env) -> TestResult {
    with_stand_in(env, &[("TINYCODE_IDLE_TIMEOUT_MAX", "10m")], scenario).await
}

/// Runs `scenario` against an operator that reads activity from the
/// stand-in every second (with `extra` settings), then restarts the operator
/// as it was.
pub(crate) async fn with_stand_in(
    env: &mut Env,
    extra: &[(&str, &str)],
    scenario: impl AsyncFnOnce(&mut Env, &Shared) -> TestResult,
) -> TestResult {
    let shared: Shared = Arc::default();
    let template = stand_in(shared.clone()).await?;
    env.extra_env =
        vec![("TINYCODE_ACTIVITY_URL".into(), template), ("TINYCODE_ACTIVITY_CHECK_SECONDS".into(), "1".into())];
    env.extra_env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    env.start_operator()?;
    let result = scenario(env, &shared).await;
    env.extra_env.clear();
    env.start_operator()?;
    let quiet = env.records_quiet(6).await;
    result?;
    quiet
}

async fn scenario(env: &mut Env, shared: &Shared) -> TestResult {
    let c = env.client().await;
    let ns = env.ns("idle");
    env.prepare_with_script(&ns)?;
    let hour_ago = (k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_hours(1)).to_string();
    {
        let mut r = shared.lock().unwrap();
        // In use until it has been seen Running; idle for an hour after.
        r.answers.insert("idle".into(), json!({"lastActivity": "now", "busy": false}));
        r.answers.insert("busy".into(), json!({"lastActivity": hour_ago, "busy": true}));
        r.answers.insert("used".into(), json!({"lastActivity": "now", "judgedBy": "requests"}));
        r.answers.insert("capped".into(), json!({"lastActivity": "now"}));
    }
    let timed = json!({"idle": {"timeout": "5s"}});
    for name in ["busy", "used", "idle"] {
        deploy(env, &c, &ns, name, timed.clone()).await?;
    }
    deploy(env, &c, &ns, "capped", json!({"idle": {"timeout": "48h"}})).await?;
    for name in ["busy", "used", "capped", "idle"] {
        run_to_running(&c, &ns, name).await?;
    }
    let pvcs = crate::pvc_uids(&c, &ns, "idle").await?;
    let release = naming::release_name(&ns, "idle");
    let revision = env.release(&release)?.ok_or("no release")?.0;
    shared.lock().unwrap().answers.insert("idle".into(), json!({"lastActivity": hour_ago, "busy": false}));

    // Idle for an hour against a 5 s timeout: stopped, the spec untouched.
    let inst = wait_phase(&c, &ns, "idle", "Stopped").await?;
    let (ready_status, reason, message) = ready(&inst);
    ensure_eq((ready_status.as_str(), reason.as_str()), ("False", "Idle"), "Ready")?;
    ensure(message.contains("tinycode.dev/start-requested-at"), format!("the message says how to start: {message}"))?;
    ensure(!inst.spec.stopped, "the operator wrote spec.stopped")?;
    let st = inst.status.clone().unwrap_or_default();
    let idle = st.idle.clone().ok_or("no status.idle")?;
    ensure_eq(
        (idle.timeout.as_str(), idle.stopped, idle.judged_by.as_str()),
        ("5s", true, "activity report"),
        "status.idle",
    )?;
    let recorded: k8s_openapi::jiff::Timestamp =
        st.last_activity_time.as_deref().ok_or("no status.lastActivityTime")?.parse().ctx("lastActivityTime")?;
    ensure_eq(
        recorded.as_second(),
        hour_ago.parse::<k8s_openapi::jiff::Timestamp>().ctx("ts")?.as_second(),
        "lastActivityTime",
    )?;
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), &ns);
    let replicas = deployments.get(&naming::fullname("idle")).await.ctx("deployment")?.spec.replicas;
    ensure_eq(replicas, Some(0), "replicas while idle")?;
    ensure_eq(env.release(&release)?.map(|r| r.0), Some(revision + 1), "one revision for the stop")?;
    ensure_eq(crate::pvc_uids(&c, &ns, "idle").await?, pvcs.clone(), "PVCs")?;
    let events = Api::<Event>::namespaced(c.clone(), &ns).list(&ListParams::default()).await.ctx("events")?;
    ensure(
        events.items.iter().any(|e| {
            e.reason.as_deref() == Some("IdleStopped")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("idle")
        }),
        "no IdleStopped event",
    )?;

    // Stopped: neither checked nor upgraded while it stays so. A check that
    // began before the stop was written may still land (CI run 14 saw one):
    // counted from when the count has held still for two seconds.
    let count = || shared.lock().unwrap().asked.get("idle").copied().unwrap_or(0);
    let mut asked = count();
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = count();
        if now == asked {
            break;
        }
        asked = now;
    }
    crate::tenancy::poke(&c, &ns, "idle", 1).await?;
    tokio::time::sleep(Duration::from_secs(4)).await;
    ensure_eq(count(), asked, "checks while stopped")?;
    ensure_eq(env.release(&release)?.map(|r| r.0), Some(revision + 1), "revision while stopped")?;

    // Well past their 5 s: a busy agent and an instance in use run on, and were checked.
    for name in ["busy", "used"] {
        let inst = get_instance(&c, &ns, name).await?.ok_or("gone")?;
        let st = inst.status.clone().unwrap_or_default();
        ensure_eq(st.phase.map(|p| p.as_str()), Some("Running"), &format!("{name}'s phase"))?;
        ensure(shared.lock().unwrap().asked.get(name).copied().unwrap_or(0) >= 3, format!("{name} was not checked"))?;
    }
    let used = get_instance(&c, &ns, "used").await?.ok_or("gone")?;
    ensure_eq(
        used.status.and_then(|s| s.idle).map(|i| i.judged_by),
        Some("requests".to_string()),
        "what the used instance is judged by",
    )?;
    // The cluster-admin's maximum caps the 48 h asked for.
    let capped =
        get_instance(&c, &ns, "capped").await?.ok_or("gone")?.status.and_then(|s| s.idle).ok_or("no status.idle")?;
    ensure_eq(capped.timeout.as_str(), "10m", "the capped timeout")?;
    ensure(capped.message.contains("--idle-timeout-max"), format!("the message names the cap: {}", capped.message))?;

    // Start again: the annotation, acknowledged in status; the same data.
    shared.lock().unwrap().answers.insert("idle".into(), json!({"lastActivity": "now", "busy": false}));
    Api::<TinycodeInstance>::namespaced(c.clone(), &ns)
        .patch(
            "idle",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"tinycode.dev/start-requested-at": "s1"}}})),
        )
        .await
        .ctx("annotate")?;
    wait_for("the start's revision", WAIT, || async {
        Ok(env.release(&release)?.filter(|r| r.0 == revision + 2 && r.1 == "deployed"))
    })
    .await?;
    let inst = run_to_running(&c, &ns, "idle").await?;
    let idle = inst.status.clone().and_then(|s| s.idle).ok_or("no status.idle")?;
    ensure_eq(
        (idle.stopped, idle.last_handled_start_at.as_deref()),
        (false, Some("s1")),
        "status.idle after the start",
    )?;
    let replicas = deployments.get(&naming::fullname("idle")).await.ctx("deployment")?.spec.replicas;
    ensure_eq(replicas, Some(1), "replicas after the start")?;
    ensure_eq(crate::pvc_uids(&c, &ns, "idle").await?, pvcs, "the same PVCs after the start")?;
    let events = Api::<Event>::namespaced(c.clone(), &ns).list(&ListParams::default()).await.ctx("events")?;
    ensure(events.items.iter().any(|e| e.reason.as_deref() == Some("Started")), "no Started event")?;
    // In use now: it runs on past its timeout.
    tokio::time::sleep(Duration::from_secs(7)).await;
    let inst = get_instance(&c, &ns, "idle").await?.ok_or("gone")?;
    ensure_eq(inst.status.and_then(|s| s.phase).map(|p| p.as_str()), Some("Running"), "phase once in use")?;
    for name in ["busy", "used", "capped", "idle"] {
        super::delete_and_wait_gone(&c, &ns, name).await?;
    }
    Ok(())
}

/// Attack: under the cluster-admin's `--idle-stop-required`, a tenant keeps
/// pods running forever by suspending the instance, or by breaking its spec
/// on purpose (a class that does not exist). Both still stop when idle: the
/// workloads scaled to zero, status saying why, no helm run, the spec
/// untouched; resumed, the instance stays stopped until it is started.
pub async fn required_idle_stop_holds_while_suspended_or_refused(env: &mut Env) -> TestResult {
    let extra = [("TINYCODE_IDLE_TIMEOUT", "5s"), ("TINYCODE_IDLE_STOP_REQUIRED", "true")];
    with_stand_in(env, &extra, required_scenario).await
}

async fn required_scenario(env: &mut Env, shared: &Shared) -> TestResult {
    let admin = env.client().await;
    let alice = crate::tenancy::tenant(env, "alice", "idle-req").await?;
    let (c, ns) = (alice.client.clone(), alice.ns.clone());
    let hour_ago = (k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_hours(1)).to_string();
    for name in ["sus", "broken"] {
        shared.lock().unwrap().answers.insert(name.into(), json!({"lastActivity": "now"}));
        // Idle stop turned off in the spec: the cluster-admin's rule wins.
        deploy(env, &c, &ns, name, json!({"idle": {"timeout": "0"}})).await?;
    }
    let mut revisions = HashMap::new();
    for name in ["sus", "broken"] {
        let inst = run_to_running(&admin, &ns, name).await?;
        let idle = inst.status.and_then(|s| s.idle).ok_or("no status.idle")?;
        ensure_eq((idle.timeout.as_str(), idle.required), ("5s", true), "status.idle under the rule")?;
        revisions.insert(name, env.release(&naming::release_name(&ns, name))?.ok_or("no release")?.0);
    }
    // The tenant's moves, while in use: suspend one, break the other.
    let api = Api::<TinycodeInstance>::namespaced(c.clone(), &ns);
    api.patch("sus", &PatchParams::default(), &Patch::Merge(json!({"spec": {"suspend": true}})))
        .await
        .ctx("suspend")?;
    api.patch("broken", &PatchParams::default(), &Patch::Merge(json!({"spec": {"className": "no-such-class"}})))
        .await
        .ctx("break")?;
    wait_phase(&admin, &ns, "sus", "Suspended").await?;
    crate::tenancy::failed_with(&admin, &ns, "broken", "ClassNotFound").await?;
    // Now nobody uses them.
    for name in ["sus", "broken"] {
        shared.lock().unwrap().answers.insert(name.into(), json!({"lastActivity": hour_ago, "busy": false}));
    }
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), &ns);
    for name in ["sus", "broken"] {
        let inst = wait_for(&format!("{name} stopped for idleness"), WAIT, || async {
            let inst = get_instance(&admin, &ns, name).await?.ok_or("gone")?;
            let stopped = inst.status.as_ref().and_then(|s| s.idle.as_ref()).is_some_and(|i| i.stopped);
            let replicas = deployments.get(&naming::fullname(name)).await.ctx("deployment")?.spec.replicas;
            Ok((stopped && replicas == Some(0)).then_some(inst))
        })
        .await?;
        let st = inst.status.clone().unwrap_or_default();
        let idle = st.idle.clone().ok_or("no status.idle")?;
        ensure(
            idle.message.contains("while the spec is not applied"),
            format!("{name}: status says why it stopped: {}", idle.message),
        )?;
        ensure_eq(
            st.phase.map(|p| p.as_str()),
            Some(if name == "sus" { "Suspended" } else { "Failed" }),
            &format!("{name}'s phase (the refusal still shows)"),
        )?;
        ensure_eq(
            env.release(&naming::release_name(&ns, name))?.map(|r| r.0),
            revisions.get(name).copied(),
            &format!("{name}: helm ran"),
        )?;
    }
    let sus = get_instance(&admin, &ns, "sus").await?.ok_or("gone")?;
    ensure(sus.spec.suspend, "the operator wrote the spec")?;
    // Resumed: the spec applies again, and the stop holds until a start.
    api.patch("sus", &PatchParams::default(), &Patch::Merge(json!({"spec": {"suspend": false}})))
        .await
        .ctx("resume")?;
    wait_phase(&admin, &ns, "sus", "Stopped").await?;
    let replicas = deployments.get(&naming::fullname("sus")).await.ctx("deployment")?.spec.replicas;
    ensure_eq(replicas, Some(0), "replicas once resumed, before a start")?;
    for name in ["sus", "broken"] {
        super::delete_and_wait_gone(&admin, &ns, name).await?;
    }
    Ok(())
}

/// Attack: alice reads her idle-stopped instance's start credential (from
/// her front's Secret, as her front's gate does) and asks the operator's
/// relay, as the front would, to start bob's idle-stopped instance with it,
/// or another instance of her namespace, or with a made-up one: each refused
/// (401), bob's instance still stopped with no start annotation, and nothing
/// outside her namespace changed. Her own instance, asked 50 times at once,
/// answers "starting" every time and starts on the same data, the annotation
/// written by the relay. Password mode: no sign-in provider is configured,
/// and the front's Secret holds the start credential alone.
pub async fn the_relay_starts_only_the_instance_whose_credential_asks(env: &mut Env) -> TestResult {
    let port = crate::signin::free_port()?;
    let relay = format!("127.0.0.1:{port}");
    with_stand_in(env, &[("TINYCODE_OIDC_RELAY_ADDR", relay.as_str())], async move |env: &mut Env, shared: &Shared| {
        relay_scenario(env, shared, port).await
    })
    .await
}

async fn relay_scenario(env: &mut Env, shared: &Shared, port: u16) -> TestResult {
    let admin = env.client().await;
    let alice = crate::tenancy::tenant(env, "alice", "wake").await?;
    let bob = crate::tenancy::tenant(env, "bob", "wake-other").await?;
    for name in ["mine", "theirs"] {
        shared.lock().unwrap().answers.insert(name.into(), json!({"lastActivity": "now", "busy": false}));
    }
    let timed = json!({"idle": {"timeout": "5s"}});
    deploy(env, &alice.client, &alice.ns, "mine", timed.clone()).await?;
    deploy(env, &bob.client, &bob.ns, "theirs", timed).await?;
    run_to_running(&admin, &alice.ns, "mine").await?;
    run_to_running(&admin, &bob.ns, "theirs").await?;
    let pvcs = crate::pvc_uids(&admin, &alice.ns, "mine").await?;
    let hour_ago = (k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_hours(1)).to_string();
    for name in ["mine", "theirs"] {
        shared.lock().unwrap().answers.insert(name.into(), json!({"lastActivity": hour_ago, "busy": false}));
    }
    wait_phase(&admin, &alice.ns, "mine", "Stopped").await?;
    wait_phase(&admin, &bob.ns, "theirs", "Stopped").await?;

    // What her front mounts: the start credential alone (password mode).
    let secret = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(alice.client.clone(), &alice.ns)
        .get(&naming::signin_secret("mine"))
        .await
        .ctx("alice reads her front's Secret")?;
    let data = secret.data.unwrap_or_default();
    ensure_eq(data.keys().map(String::as_str).collect::<Vec<_>>(), vec!["start-credential"], "the front's Secret")?;
    let credential = String::from_utf8(data["start-credential"].0.clone()).ctx("utf-8")?;
    // Each ask from an address of its own, as fronts are pods of their own
    // (the relay keeps 4 connections per peer).
    let ask = |path: String, credential: String, peer: u8| async move {
        let client = reqwest::Client::builder().local_address(std::net::IpAddr::from([127, 0, 0, peer]));
        let answer = client
            .build()
            .ctx("client")?
            .post(format!("http://127.0.0.1:{port}{path}"))
            .bearer_auth(credential)
            .send()
            .await
            .ctx("ask the relay")?;
        let status = answer.status().as_u16();
        Ok::<_, String>((status, answer.json::<Value>().await.unwrap_or_default()))
    };

    let own_release = naming::release_name(&alice.ns, "mine");
    let stopped_revision = env.release(&own_release)?.ok_or("no release")?.0;
    let before = crate::tenancy::outside(&admin, &[&bob.ns], &own_release).await?;
    let attempts = [
        (format!("/start/{}/theirs", bob.ns), credential.clone()),
        (format!("/start/{}/theirs", alice.ns), credential.clone()),
        (format!("/start/{}/mine", bob.ns), credential.clone()),
        (format!("/start/{}/mine", alice.ns), "tsc1.00".to_string()),
        (format!("/start/{}/mine", alice.ns), credential.replacen("tsc1.", "trc1.", 1)),
    ];
    for (path, presented) in attempts {
        let (status, body) = ask(path.clone(), presented, 2).await?;
        ensure_eq(status, 401, &format!("{path}: {body}"))?;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let theirs = get_instance(&admin, &bob.ns, "theirs").await?.ok_or("bob's instance is gone")?;
    ensure_eq(theirs.status.and_then(|s| s.phase).map(|p| p.as_str()), Some("Stopped"), "bob's instance")?;
    let annotations = theirs.metadata.annotations.unwrap_or_default();
    ensure(!annotations.contains_key("tinycode.dev/start-requested-at"), "a start annotation on bob's instance")?;
    let mine = get_instance(&admin, &alice.ns, "mine").await?.ok_or("gone")?;
    ensure_eq(mine.status.and_then(|s| s.phase).map(|p| p.as_str()), Some("Stopped"), "refused asks started hers")?;
    ensure_eq(env.release(&own_release)?.map(|r| r.0), Some(stopped_revision), "her release after refused asks")?;
    crate::tenancy::same_world(&before, &crate::tenancy::outside(&admin, &[&bob.ns], &own_release).await?)?;

    // Her own, 50 times at once (in use from here on).
    shared.lock().unwrap().answers.insert("mine".into(), json!({"lastActivity": "now", "busy": false}));
    let path = format!("/start/{}/mine", alice.ns);
    let flood: Vec<_> = (0..50).map(|i| tokio::spawn(ask(path.clone(), credential.clone(), 10 + i))).collect();
    for answer in flood {
        let (status, body) = answer.await.ctx("join")??;
        ensure_eq((status, body["state"].as_str()), (200, Some("starting")), "an ask of her own front")?;
    }
    // The start's helm revision first: the stand-in's Deployment status
    // goes on the Deployment it scaled up.
    wait_for("the start's revision", WAIT, || async {
        Ok(env.release(&own_release)?.filter(|r| r.0 == stopped_revision + 1 && r.1 == "deployed"))
    })
    .await?;
    run_to_running(&admin, &alice.ns, "mine").await?;
    let mine = get_instance(&admin, &alice.ns, "mine").await?.ok_or("gone")?;
    let written_by = mine.metadata.managed_fields.iter().flatten().any(|m| {
        m.manager.as_deref() == Some("tinycode-operator-start")
            && m.fields_v1.as_ref().is_some_and(|f| f.0.to_string().contains("tinycode.dev/start-requested-at"))
    });
    ensure(written_by, "the start annotation written by the relay")?;
    ensure_eq(crate::pvc_uids(&admin, &alice.ns, "mine").await?, pvcs, "the same PVCs after the start")?;
    super::delete_and_wait_gone(&admin, &alice.ns, "mine").await?;
    super::delete_and_wait_gone(&admin, &bob.ns, "theirs").await
}
