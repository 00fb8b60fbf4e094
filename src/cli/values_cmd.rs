//! `tinycode-operator values`: what the operator would render for an
//! instance file, through the controller's own validate and plan stages.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::json;

use crate::api::TinycodeInstance;
use crate::settings::Settings;

/// What the operator would do for one CR, as JSON; non-zero with the status message when invalid.
pub fn command(
    file: &PathBuf,
    namespace: Option<String>,
    offline: bool,
    class: Option<&PathBuf>,
    settings: &Settings,
) -> ExitCode {
    match render(file, namespace, offline, class, settings) {
        Ok(out) => {
            println!("{}", serde_json::to_string_pretty(&out).expect("json"));
            ExitCode::SUCCESS
        }
        Err((code, message)) => {
            eprintln!("{message}");
            ExitCode::from(code)
        }
    }
}

/// The controller's own stages, on what can be known without a cluster; an
/// error is the exit code (2: unreadable input, 1: refused) and the message.
fn render(
    file: &PathBuf,
    namespace: Option<String>,
    offline: bool,
    class: Option<&PathBuf>,
    settings: &Settings,
) -> Result<serde_json::Value, (u8, String)> {
    let inst = read_instance(file, namespace).map_err(|m| (2, format!("error: {m}")))?;
    let class = class.map(|c| read_class(c, &inst)).transpose().map_err(|m| (2, format!("error: {m}")))?;
    let ns = inst.metadata.namespace.clone().unwrap_or_default();
    let warnings = crate::reconcile::stages::validate::spec_rules(&inst, settings)
        .map_err(|e| (1, format!("invalid spec: {e}")))?;
    let providers = if offline {
        Vec::new()
    } else {
        let targets: Vec<(String, String)> =
            inst.spec.vllm.iter().flatten().map(|p| (p.name.clone(), p.url.clone())).collect();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        runtime.block_on(crate::vllm::Prober::new(settings.probes.clone()).probe_all(&targets))
    };
    let mut observed = crate::reconcile::stages::observe::Observed::assumed(providers);
    let class_warning = match class {
        Some(c) => {
            observed.class =
                crate::reconcile::class_policy::choose(inst.spec.class_name.as_deref(), &[std::sync::Arc::new(c)]);
            None
        }
        None => inst.spec.class_name.as_ref().map(|name| {
            format!("spec.className {name}: its limits are not checked; pass --class <file> with the TinycodeClass to check them")
        }),
    };
    let valid = crate::reconcile::stages::validate::validate(&observed, &inst, settings, warnings)
        .map_err(|e| (1, format!("error: {}", e.message)))?;
    let plan = crate::reconcile::stages::plan::plan(&valid, &observed, settings);
    let mut warnings = valid.warnings.clone();
    for c in plan.conditions.iter().filter(|_| !offline) {
        if c.type_ == crate::reconcile::conditions::VLLM_WARNING && c.status
            || c.type_ == crate::reconcile::conditions::VLLM_CONFIG_READY && !c.status
        {
            warnings.push(c.message.clone());
        }
    }
    warnings.extend(valid.pending_approvals.iter().cloned());
    warnings.extend(class_warning);
    let generated = valid.spec.auth.password_secret.as_deref().is_none_or(str::is_empty);
    Ok(json!({
        "release": plan.release_name,
        "releaseNamespace": settings.operator_namespace,
        "namespace": ns,
        "scc": plan.tier.scc_name(),
        "class": valid.from_class.name,
        "password": {"secret": plan.values.auth.password_secret, "key": crate::reconcile::marks::PASSWORD_KEY, "generated": generated},
        "values": plan.values,
        "warnings": warnings,
    }))
}

/// The instance in `file` (`-`: stdin), its namespace set.
fn read_instance(file: &PathBuf, namespace: Option<String>) -> Result<TinycodeInstance, String> {
    let text =
        if file.as_os_str() == "-" { std::io::read_to_string(std::io::stdin()) } else { std::fs::read_to_string(file) };
    let text = text.map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let mut inst: TinycodeInstance =
        serde_saphyr::from_str(&text).map_err(|e| format!("{} is not a TinycodeInstance: {e}", file.display()))?;
    let ns = inst
        .metadata
        .namespace
        .clone()
        .or(namespace)
        .ok_or("metadata.namespace is unset; set it in the file or pass -n NAMESPACE")?;
    inst.metadata.namespace = Some(ns);
    Ok(inst)
}

/// The TinycodeClass in `file`; it must be the one the instance names (or,
/// naming none, it is taken as the default class).
fn read_class(file: &PathBuf, inst: &TinycodeInstance) -> Result<crate::api::TinycodeClass, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let mut class: crate::api::TinycodeClass =
        serde_saphyr::from_str(&text).map_err(|e| format!("{} is not a TinycodeClass: {e}", file.display()))?;
    let name = class.metadata.name.clone().unwrap_or_default();
    match inst.spec.class_name.as_deref() {
        Some(named) if named != name => {
            Err(format!("the instance names class {named:?} but {} holds class {name:?}", file.display()))
        }
        Some(_) => Ok(class),
        None => {
            class.spec.default = true;
            Ok(class)
        }
    }
}
