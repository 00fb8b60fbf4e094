//! Platform policy (pure): which `TinycodeClass` applies to an instance,
//! what it fills in, and whether the instance stays within it.
//!
//! The class is the cluster-admin's, so everything it decides is applied to
//! an *effective* spec here, once; later stages (approvals, values) read only
//! that. A spec beyond its class is refused as a whole ([`Exceeds`]): nothing
//! is half-applied, and [`super::revoke`] takes back the modes a class
//! stopped permitting.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::api::duration::parse as parse_duration;
use crate::api::{
    DEFAULT_IMAGE, Mode, ResourceLists, ResourceMap, Resources, SecretName, TinycodeClass, TinycodeClassSpec,
    TinycodeInstanceSpec, WorkloadPolicy,
};
use crate::reconcile::rules::parse_quantity;
use crate::render::values::FromClass;
use crate::settings::{IdleSettings, Settings};

/// The class an instance names (or the default one), as found.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Choice {
    /// No class named and none marked default: no policy applies.
    #[default]
    None,
    Found {
        name: String,
        spec: Box<TinycodeClassSpec>,
        /// Said in status when several classes are marked default.
        warning: Option<String>,
    },
    /// spec.className names a class that does not exist (or was deleted).
    Missing(String),
}

/// Picks the class of an instance naming `class_name` among `classes`.
pub fn choose(class_name: Option<&str>, classes: &[Arc<TinycodeClass>]) -> Choice {
    let found = |c: &TinycodeClass| (c.metadata.name.clone().unwrap_or_default(), c.spec.clone());
    if let Some(name) = class_name {
        return match classes.iter().find(|c| c.metadata.name.as_deref() == Some(name)) {
            Some(c) if c.metadata.deletion_timestamp.is_none() => {
                Choice::Found { name: name.into(), spec: Box::new(c.spec.clone()), warning: None }
            }
            _ => Choice::Missing(name.into()),
        };
    }
    let mut defaults: Vec<(String, TinycodeClassSpec)> = classes
        .iter()
        .filter(|c| c.spec.default && c.metadata.deletion_timestamp.is_none())
        .map(|c| found(c))
        .collect();
    defaults.sort_by(|a, b| a.0.cmp(&b.0));
    let warning = (defaults.len() > 1).then(|| {
        let names: Vec<&str> = defaults.iter().map(|(n, _)| n.as_str()).collect();
        format!(
            "several TinycodeClasses are marked default ({}); {} applies, the first by name: a cluster-admin unmarks the others",
            names.join(", "),
            names[0]
        )
    });
    match defaults.into_iter().next() {
        Some((name, spec)) => Choice::Found { name, spec: Box::new(spec), warning },
        None => Choice::None,
    }
}

/// The name of the class an instance naming `class_name` gets, without
/// copying any class (the per-namespace count asks this of every instance).
/// Whether `inst` counts against `class`'s `maxInstancesPerNamespace`: its
/// spec chooses the class now, or what runs was last rendered with it
/// (`status.class`, which only the operator writes). Renaming an instance's
/// className to a missing class leaves its release running, so it still
/// counts until it runs under another class or is deleted.
pub fn counts_against(inst: &crate::api::TinycodeInstance, class: &str, classes: &[Arc<TinycodeClass>]) -> bool {
    chosen_name(inst.spec.class_name.as_deref(), classes) == Some(class)
        || inst.status.as_ref().and_then(|s| s.class.as_deref()) == Some(class)
}

pub fn chosen_name<'a>(class_name: Option<&'a str>, classes: &'a [Arc<TinycodeClass>]) -> Option<&'a str> {
    match class_name {
        Some(name) => classes
            .iter()
            .any(|c| c.metadata.name.as_deref() == Some(name) && c.metadata.deletion_timestamp.is_none())
            .then_some(name),
        None => classes
            .iter()
            .filter(|c| c.spec.default && c.metadata.deletion_timestamp.is_none())
            .filter_map(|c| c.metadata.name.as_deref())
            .min(),
    }
}

/// Why a spec is beyond its class: the field, and the limit in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exceeds {
    pub field: String,
    pub message: String,
}

/// The instance as its class shapes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    /// The spec with the class's defaults and placement filled in.
    pub spec: TinycodeInstanceSpec,
    /// What the class adds beyond the spec (for the values).
    pub from_class: FromClass,
    /// Idle stop as the class sets it (else the operator's settings).
    pub idle: IdleSettings,
    /// Longest a change the user did not make waits for a busy agent (the
    /// class's rollout.busyDeadline, else the operator's); None: never.
    pub rollout_busy_deadline: Option<Duration>,
    pub warnings: Vec<String>,
}

/// Whether a mode is in use by `spec`.
pub fn uses(spec: &TinycodeInstanceSpec, mode: Mode) -> bool {
    match mode {
        Mode::Shell => spec.shell.enabled,
        Mode::HostPath => spec.storage.host_path.is_some(),
        Mode::ClusterAdmin => spec.cluster_admin.enabled,
        Mode::Git => spec.git.is_some(),
        Mode::Ollama => spec.ollama.enabled,
    }
}

/// Whether `class` permits `mode` (no class, or no list: every mode).
pub fn permits(class: Option<&TinycodeClassSpec>, mode: Mode) -> bool {
    class.and_then(|c| c.permitted_modes.as_ref()).is_none_or(|modes| modes.contains(&mode))
}

/// Resources a class caps by default only when named: the rest (extended
/// resources such as GPUs) may not be asked for unless its `max` names them.
fn uncapped_by_default(resource: &str) -> bool {
    matches!(resource, "cpu" | "memory" | "ephemeral-storage")
}

/// Applies `choice` to `spec`. `rank` is how many older instances of the
/// same class live in the namespace. Every check below runs, so the refusal
/// names every field beyond the class at once.
pub fn apply(
    choice: &Choice,
    spec: &TinycodeInstanceSpec,
    settings: &Settings,
    rank: usize,
) -> Result<Applied, Vec<Exceeds>> {
    let (name, class, warning) = match choice {
        Choice::Found { name, spec, warning } => (name.as_str(), spec, warning.clone()),
        Choice::None => {
            // The instance limits its own agent: its list must be one the proxy reads.
            if let Some(e) = spec.egress.as_ref().and_then(egress::unreadable) {
                let message = format!("the proxy cannot read this list (spec.egress.{e}); correct it");
                return Err(vec![Exceeds { field: "spec.egress".into(), message }]);
            }
            return Ok(without_class(spec, settings));
        }
        Choice::Missing(name) => return Err(vec![missing(name)]),
    };
    let mut check = Check { of: format!("class {name:?}"), out: Vec::new() };
    let mut effective = spec.clone();
    let mut warnings: Vec<String> = warning.into_iter().collect();
    effective.image = Some(check.image(spec, class, settings));
    check.modes(spec, class);
    check.env(spec, class);
    let tinycode = class.tinycode.clone().unwrap_or_default();
    let (resources, extended) = check.tinycode_resources(spec, &tinycode);
    effective.resources = Some(resources);
    merge_placement(
        &mut effective.node_selector,
        &mut effective.tolerations,
        &tinycode,
        &mut warnings,
        "spec.nodeSelector",
    );
    let ollama = class.ollama.clone().unwrap_or_default();
    if spec.ollama.enabled {
        effective.ollama.resources = check.ollama_resources(spec, &ollama);
        merge_placement(
            &mut effective.ollama.node_selector,
            &mut effective.ollama.tolerations,
            &ollama,
            &mut warnings,
            "spec.ollama.nodeSelector",
        );
    }
    check.storage(spec, class);
    check.egress(spec, class);
    check.counts(spec, class, rank);
    // Pull secrets: the spec's, then the class's.
    for s in &class.image_pull_secrets {
        if !effective.image_pull_secrets.contains(s) {
            effective.image_pull_secrets.push(SecretName { name: s.name.clone() });
        }
    }
    if !check.out.is_empty() {
        return Err(check.out);
    }
    Ok(Applied {
        spec: effective,
        from_class: FromClass {
            name: Some(name.to_string()),
            tinycode_extended: extended,
            runtime_class_name: tinycode.runtime_class_name.clone(),
            ollama_runtime_class_name: ollama.runtime_class_name.clone(),
            // The instance's own list, within the class's (checked above), or the class's.
            egress: spec.egress.clone().or_else(|| class.egress.clone()),
        },
        idle: idle_settings(class.idle.as_ref(), &settings.idle),
        rollout_busy_deadline: rollout_busy_deadline(class.rollout.as_ref(), settings.rollout_busy_deadline),
        warnings,
    })
}

/// No class: the spec as written, with the operator's defaults.
fn without_class(spec: &TinycodeInstanceSpec, settings: &Settings) -> Applied {
    let mut effective = spec.clone();
    effective.image = Some(spec.image.clone().unwrap_or_else(|| DEFAULT_IMAGE.to_string()));
    effective.resources = Some(spec.resources.clone().unwrap_or_default());
    Applied {
        spec: effective,
        from_class: FromClass { egress: spec.egress.clone(), ..FromClass::default() },
        idle: settings.idle.clone(),
        rollout_busy_deadline: settings.rollout_busy_deadline,
        warnings: Vec::new(),
    }
}

fn missing(name: &str) -> Exceeds {
    Exceeds {
        field: "spec.className".into(),
        message: format!(
            "TinycodeClass {name:?} does not exist (it may have been deleted); name an existing class (`kubectl get tinycodeclasses`) or ask a cluster-admin to create it"
        ),
    }
}

/// The checks of one spec against one class, collecting what is beyond it.
struct Check {
    /// `class "<name>"`, for messages.
    of: String,
    out: Vec<Exceeds>,
}

impl Check {
    fn exceeds(&mut self, field: &str, message: String) {
        self.out.push(Exceeds { field: field.into(), message });
    }

    /// The image that runs: the tenant's own only where the class allows it.
    fn image(&mut self, spec: &TinycodeInstanceSpec, class: &TinycodeClassSpec, settings: &Settings) -> String {
        let of = self.of.clone();
        let image = match (&spec.image, &class.image) {
            (Some(own), Some(fixed)) if class.allow_custom_image == Some(false) && own != fixed => {
                self.exceeds(
                    "spec.image",
                    format!("{of} runs only its image {fixed} (allowCustomImage: false); remove spec.image"),
                );
                fixed.clone()
            }
            (Some(own), None) if class.allow_custom_image == Some(false) => {
                self.exceeds(
                    "spec.image",
                    format!("{of} allows no custom image (allowCustomImage: false); remove spec.image"),
                );
                own.clone()
            }
            (Some(own), _) => own.clone(),
            (None, Some(image)) => image.clone(),
            (None, None) => DEFAULT_IMAGE.to_string(),
        };
        if spec.image.is_none() {
            crate::reconcile::rules::checks::image(&image, "spec.image", settings, &mut |field, message| {
                self.exceeds(
                    field,
                    format!("the image {of} gives ({message}); a cluster-admin fixes the class's image"),
                )
            });
        }
        image
    }

    /// spec.env puts Secrets where the agent (and any command it runs) reads
    /// them; a class may keep them out.
    fn env(&mut self, spec: &TinycodeInstanceSpec, class: &TinycodeClassSpec) {
        if class.allow_env_secrets == Some(false) && !spec.env.is_empty() {
            let message = format!(
                "{} keeps Secrets out of the agent's environment (allowEnvSecrets: false); remove spec.env, and give a model server's key as spec.vllm[].apiKeySecret (the model-key proxy holds it, not the agent)",
                self.of
            );
            self.exceeds("spec.env", message);
        }
    }

    fn modes(&mut self, spec: &TinycodeInstanceSpec, class: &TinycodeClassSpec) {
        for mode in Mode::ALL {
            if uses(spec, mode) && !permits(Some(class), mode) {
                let allowed: Vec<&str> = class.permitted_modes.iter().flatten().map(|m| m.as_str()).collect();
                let message = format!(
                    "{} does not permit the {} mode (permittedModes: [{}]); turn it off or use a class that permits it",
                    self.of,
                    mode.as_str(),
                    allowed.join(", ")
                );
                self.exceeds(mode.field(), message);
            }
        }
    }

    /// The tinycode container's cpu and memory (the spec's, else the class's
    /// defaults) and the extended resources (GPUs) the class's defaults add,
    /// all under the class's `tinycode.max`.
    fn tinycode_resources(
        &mut self,
        spec: &TinycodeInstanceSpec,
        tinycode: &WorkloadPolicy,
    ) -> (Resources, ResourceLists) {
        let defaults = tinycode.defaults.clone().unwrap_or_default();
        let resources = match &spec.resources {
            Some(own) => own.clone(),
            None => {
                let mut r = Resources::default();
                let pick =
                    |map: &ResourceMap, key: &str, fallback: &str| map.get(key).cloned().unwrap_or(fallback.into());
                r.limits.cpu = pick(&defaults.limits, "cpu", &r.limits.cpu);
                r.limits.memory = pick(&defaults.limits, "memory", &r.limits.memory);
                r.requests.cpu = pick(&defaults.requests, "cpu", &r.requests.cpu);
                r.requests.memory = pick(&defaults.requests, "memory", &r.requests.memory);
                r
            }
        };
        // cpu and memory went into `resources`; the rest (GPUs) rides along.
        let beyond = |map: &ResourceMap| -> ResourceMap {
            map.iter()
                .filter(|(k, _)| !matches!(k.as_str(), "cpu" | "memory"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        let extended = ResourceLists { requests: beyond(&defaults.requests), limits: beyond(&defaults.limits) };
        let mut all = extended.clone();
        for (map, amounts) in [(&mut all.requests, &resources.requests), (&mut all.limits, &resources.limits)] {
            map.insert("cpu".into(), amounts.cpu.clone());
            map.insert("memory".into(), amounts.memory.clone());
        }
        let of = format!("{} (tinycode.max)", self.of);
        cap("spec.resources", &all, tinycode, &of, &mut |f, m| self.exceeds(f, m));
        (resources, extended)
    }

    /// The bundled Ollama's resources: the spec's, else the class's
    /// defaults, bounded and under the class's `ollama.max`.
    fn ollama_resources(&mut self, spec: &TinycodeInstanceSpec, ollama: &WorkloadPolicy) -> Option<ResourceLists> {
        let mut lists = match &spec.ollama.resources {
            Some(own) => own.clone(),
            None => ollama.defaults.clone().unwrap_or_default(),
        };
        bound_limits(&mut lists, ollama);
        let of = format!("{} (ollama.max)", self.of);
        cap("spec.ollama.resources", &lists, ollama, &of, &mut |f, m| self.exceeds(f, m));
        (!lists.requests.is_empty() || !lists.limits.is_empty()).then_some(lists)
    }

    /// The class's egress list, read as its proxy will read it: admission
    /// checks its shape, not every rule of a host name (a label of at most
    /// 63 bytes), and a list the proxy refuses would leave the agent no way
    /// out at all. The instance's own list must stay within it.
    fn egress(&mut self, spec: &TinycodeInstanceSpec, class: &TinycodeClassSpec) {
        let of = self.of.clone();
        if let Some(e) = class.egress.as_ref().and_then(egress::unreadable) {
            self.exceeds("spec.className", format!("{of} has an egress list its proxy cannot read (spec.egress.{e}); a cluster-admin must correct the class"));
        }
        if let (Some(own), Some(allowed)) = (&spec.egress, &class.egress) {
            for (field, entry) in egress::beyond(own, allowed) {
                self.exceeds(&field, format!("{entry} is beyond the egress {of} allows (its spec.egress); narrow it to hosts, ranges and ports the class lists, or drop it"));
            }
        }
    }

    fn storage(&mut self, spec: &TinycodeInstanceSpec, class: &TinycodeClassSpec) {
        let Some(storage) = &class.storage else { return };
        let of = self.of.clone();
        for (field, asked, max, key) in [
            ("spec.storage.dataSize", &spec.storage.data_size, &storage.max_data_size, "maxDataSize"),
            ("spec.storage.projectsSize", &spec.storage.projects_size, &storage.max_projects_size, "maxProjectsSize"),
        ] {
            if let Some(max) = max
                && let (Some(a), Some(m)) = (parse_quantity(asked), parse_quantity(max))
                && a > m
            {
                self.exceeds(
                    field,
                    format!("{asked} exceeds {max}, the most {of} allows (storage.{key}); ask for less"),
                );
            }
        }
        if let Some(allowed) = &storage.allowed_storage_classes {
            match &spec.storage.storage_class_name {
                Some(sc) if allowed.contains(sc) => {}
                other => self.exceeds(
                    "spec.storage.storageClassName",
                    format!(
                        "{} is not one of the StorageClasses {of} allows ({}); set spec.storage.storageClassName to one of them",
                        other
                            .as_deref()
                            .map(|s| format!("{s:?}"))
                            .unwrap_or_else(|| "unset (the cluster's default)".into()),
                        allowed.join(", ")
                    ),
                ),
            }
        }
    }

    /// Pods per instance (every cap is per pod) and instances per namespace
    /// (the oldest keep running).
    fn counts(&mut self, spec: &TinycodeInstanceSpec, class: &TinycodeClassSpec, rank: usize) {
        let of = self.of.clone();
        if let Some(most) = max_replicas(class)
            && spec.replicas > most
        {
            self.exceeds(
                "spec.replicas",
                format!(
                    "{} pods exceed {most}, the most {of} allows per instance (maxReplicas; each pod gets up to tinycode.max); ask for fewer",
                    spec.replicas
                ),
            );
        }
        if let Some(max) = class.max_instances_per_namespace
            && rank >= max.max(0) as usize
        {
            self.exceeds(
                "spec.className",
                format!(
                    "the namespace already runs {rank} instances of {of}, the most it allows per namespace (maxInstancesPerNamespace: {max}); delete one or use another class"
                ),
            );
        }
    }
}

/// The most tinycode pods a class allows an instance: its `maxReplicas`,
/// else 1 where it caps the pod's resources (a cap per pod would otherwise
/// multiply), else none.
pub fn max_replicas(class: &TinycodeClassSpec) -> Option<i32> {
    class.max_replicas.or_else(|| class.tinycode.as_ref().is_some_and(|t| !t.max.is_empty()).then_some(1))
}

/// Under a class's `max`, a resource it caps always has a limit: without
/// one the container could use the whole node whatever `max` says. A limit
/// the spec leaves out is the class's default limit, unless that is below
/// the request (a pod the apiserver would refuse); then the class's `max`.
fn bound_limits(lists: &mut ResourceLists, policy: &WorkloadPolicy) {
    let defaults = policy.defaults.clone().unwrap_or_default();
    for (resource, max) in &policy.max {
        if lists.limits.contains_key(resource) {
            continue;
        }
        let request = lists.requests.get(resource).and_then(|r| parse_quantity(r));
        let limit = match defaults.limits.get(resource) {
            Some(d) if parse_quantity(d).zip(request).is_none_or(|(d, r)| d >= r) => d.clone(),
            _ => max.clone(),
        };
        lists.limits.insert(resource.clone(), limit);
    }
}

/// Every request and limit within the class's `max`; extended resources
/// only where `max` names them.
fn cap(field: &str, lists: &ResourceLists, policy: &WorkloadPolicy, of: &str, exceeds: &mut impl FnMut(&str, String)) {
    for (kind, map) in [("requests", &lists.requests), ("limits", &lists.limits)] {
        for (resource, asked) in map {
            let path = format!("{field}.{kind}.{resource}");
            match policy.max.get(resource) {
                Some(max) => {
                    if let (Some(a), Some(m)) = (parse_quantity(asked), parse_quantity(max))
                        && a > m
                    {
                        exceeds(
                            &path,
                            format!("{asked} exceeds {max}, the most {of} allows for {resource}; ask for less"),
                        );
                    }
                }
                None if !uncapped_by_default(resource) => exceeds(
                    &path,
                    format!(
                        "{of} offers no {resource} (its max does not name it); remove it or use a class that offers it"
                    ),
                ),
                None => {}
            }
        }
    }
}

/// The class's node selector over the spec's (the class wins a conflict, and
/// says so) and its tolerations after the spec's.
fn merge_placement(
    node_selector: &mut Option<BTreeMap<String, String>>,
    tolerations: &mut Option<Vec<k8s_openapi::api::core::v1::Toleration>>,
    policy: &WorkloadPolicy,
    warnings: &mut Vec<String>,
    field: &str,
) {
    if !policy.node_selector.is_empty() {
        let selector = node_selector.get_or_insert_with(BTreeMap::new);
        for (k, v) in &policy.node_selector {
            if let Some(own) = selector.insert(k.clone(), v.clone())
                && own != *v
            {
                warnings.push(format!("{field}.{k}={own} is overridden by the class's {k}={v}"));
            }
        }
    }
    if !policy.tolerations.is_empty() {
        let list = tolerations.get_or_insert_with(Vec::new);
        for t in &policy.tolerations {
            if !list.contains(t) {
                list.push(t.clone());
            }
        }
    }
}

/// What an instance's workloads run now, read from its Deployments' pod
/// templates (not from the spec, which a tenant may have changed since).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Running {
    /// The tinycode container's image (None: the workload does not run).
    pub image: Option<String>,
    /// The tinycode container's resources.
    pub tinycode: ResourceLists,
    /// The pod clones a repository (the git init container).
    pub git: bool,
    /// tinycode pods asked for (the Deployment's replicas).
    pub replicas: i32,
    /// The tinycode container takes Secrets into its environment (spec.env).
    pub env_secrets: bool,
    /// The bundled Ollama runs, with these resources.
    pub ollama: Option<ResourceLists>,
    /// The tinycode container runs without an egress proxy (no HTTPS_PROXY).
    pub open_egress: bool,
    /// The bundled Ollama runs without an egress proxy.
    pub ollama_open_egress: bool,
}

/// A part of what runs that its class no longer permits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Beyond {
    pub exceeds: Exceeds,
    /// The bundled Ollama's workload (else tinycode's).
    pub ollama: bool,
}

/// What of `running` the class `name` no longer permits: the image, the
/// git and Ollama modes, and resources above its caps. The same limits as
/// [`apply`], read on what the pods run, so tightening a class stops what
/// it no longer allows even while the spec is refused or suspended.
pub fn beyond_class(name: &str, class: &TinycodeClassSpec, running: &Running) -> Vec<Beyond> {
    let of = format!("class {name:?}");
    let mut out = Vec::new();
    let mut push = |ollama: bool, field: &str, message: String| {
        out.push(Beyond { exceeds: Exceeds { field: field.into(), message }, ollama })
    };
    if let Some(image) = &running.image {
        if class.allow_custom_image == Some(false) {
            let only = class.image.as_deref().unwrap_or(DEFAULT_IMAGE);
            if image != only {
                push(false, "spec.image", format!("{image} runs, and {of} runs only {only} (allowCustomImage: false)"));
            }
        }
        if let Some(most) = max_replicas(class)
            && running.replicas > most
        {
            push(
                false,
                "spec.replicas",
                format!("{} pods run, and {of} allows {most} per instance (maxReplicas)", running.replicas),
            );
        }
        if running.env_secrets && class.allow_env_secrets == Some(false) {
            push(
                false,
                "spec.env",
                format!("the agent holds Secrets in its environment, and {of} allows none (allowEnvSecrets: false)"),
            );
        }
        if running.git && !permits(Some(class), Mode::Git) {
            push(false, Mode::Git.field(), format!("{of} no longer permits the git mode (permittedModes)"));
        }
        if running.open_egress && class.egress.is_some() {
            push(false, "spec.className", format!("the agent runs without an egress proxy, and {of} limits egress"));
        }
        let mut exceeds = |field: &str, message: String| push(false, field, message);
        cap(
            "spec.resources",
            &running.tinycode,
            &class.tinycode.clone().unwrap_or_default(),
            &format!("{of} (tinycode.max)"),
            &mut exceeds,
        );
    }
    if let Some(lists) = &running.ollama {
        if running.ollama_open_egress && class.egress.is_some() {
            push(true, "spec.className", format!("Ollama runs without an egress proxy, and {of} limits egress"));
        }
        if !permits(Some(class), Mode::Ollama) {
            push(true, Mode::Ollama.field(), format!("{of} no longer permits the ollama mode (permittedModes)"));
        } else {
            let mut exceeds = |field: &str, message: String| push(true, field, message);
            cap(
                "spec.ollama.resources",
                lists,
                &class.ollama.clone().unwrap_or_default(),
                &format!("{of} (ollama.max)"),
                &mut exceeds,
            );
        }
    }
    out
}

/// Idle stop under a class: its default, maximum and rule where it sets
/// them; the operator's maximum still caps and its rule still holds.
pub fn idle_settings(policy: Option<&crate::api::IdlePolicy>, operator: &IdleSettings) -> IdleSettings {
    let Some(p) = policy else { return operator.clone() };
    let parse = |s: &Option<String>| s.as_deref().and_then(parse_duration);
    let nonzero = |d: Option<Duration>| d.filter(|d| !d.is_zero());
    let max = match (nonzero(parse(&p.max_timeout)), operator.max_timeout) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    IdleSettings {
        default_timeout: nonzero(parse(&p.timeout)).or(operator.default_timeout),
        max_timeout: max,
        required: p.required || operator.required,
        from_class: true,
        ..operator.clone()
    }
}

/// The busy deadline under a class: its own where it sets one (0: never
/// wait), else the operator's.
pub fn rollout_busy_deadline(
    policy: Option<&crate::api::RolloutPolicy>,
    operator: Option<Duration>,
) -> Option<Duration> {
    match policy.and_then(|p| p.busy_deadline.as_deref()).and_then(parse_duration) {
        Some(d) => (!d.is_zero()).then_some(d),
        None => operator,
    }
}

/// The rank of an instance among its namespace's instances of one class:
/// how many (not being deleted) were created before it, ties by name.
pub fn rank<'a>(me: (&str, &str), others: impl Iterator<Item = (&'a str, &'a str)>) -> usize {
    others.filter(|o| (o.0, o.1) < me).count()
}

mod egress;
#[cfg(test)]
mod tests;
