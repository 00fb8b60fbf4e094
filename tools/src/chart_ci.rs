//! The chart's lint inputs, `helm-charts/tinycode/ci/*-values.yaml`: one
//! values file per sample of `config/samples`, built by the operator's own
//! pipeline (the class step, the config and `values::build`), with the
//! approvals a cluster-admin would give it. `make generate` writes them and
//! `tools/tests/chart_ci.rs` fails when the committed ones differ, so a new
//! value reaches `make lint` (`helm lint --strict` over every file) without a
//! hand edit.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use tinycode_operator::api::TinycodeInstance;
use tinycode_operator::reconcile::class_policy::{self, Choice};
use tinycode_operator::render::config;
use tinycode_operator::render::values::{self, Approved, InstanceRef};
use tinycode_operator::settings::Settings;

/// One lint input: the values file, what it shows, the sample it comes from,
/// and what it changes about the sample.
struct Scenario {
    file: &'static str,
    about: &'static str,
    sample: &'static str,
    namespace: &'static str,
    /// A change to the sample's spec (YAML merged over it), if any.
    spec: Option<&'static str>,
    /// The spec of the TinycodeClass `ci` the instance gets (YAML), if any.
    class: Option<&'static str>,
}

const SCENARIOS: &[Scenario] = &[
    Scenario {
        file: "basic-values.yaml",
        about: "Default instance: PVC storage, a password Secret.",
        sample: "tinycode_v1alpha1_basic.yaml",
        namespace: "tinycode-dev",
        spec: None,
        class: None,
    },
    Scenario {
        file: "clusteradmin-values.yaml",
        about: "Cluster-admin mode: a kubeconfig Secret, an approved ClusterRole, the generated agent config.",
        sample: "tinycode_v1alpha1_clusteradmin.yaml",
        namespace: "sre-tools",
        // `view` is on the operator's default allow-list (README, Cluster-admin mode).
        spec: Some("clusterAdmin: {clusterRole: view}"),
        class: None,
    },
    Scenario {
        file: "git-values.yaml",
        about: "Git mode: clone a branch into the workspace.",
        sample: "tinycode_v1alpha1_git.yaml",
        namespace: "tinycode-dev",
        spec: None,
        class: None,
    },
    Scenario {
        file: "hostpath-values.yaml",
        about: "A host directory as the workspace (hostpath SCC tier).",
        sample: "tinycode_v1alpha1_hostpath.yaml",
        namespace: "tinycode-dev",
        spec: None,
        class: None,
    },
    Scenario {
        file: "ollama-values.yaml",
        about: "Bundled Ollama with models pulled at start.",
        sample: "tinycode_v1alpha1_ollama.yaml",
        namespace: "tinycode-dev",
        spec: None,
        class: None,
    },
    Scenario {
        file: "shared-values.yaml",
        about: "Shared team workspace: several replicas on a ReadWriteMany volume.",
        sample: "tinycode_v1alpha1_shared.yaml",
        namespace: "tinycode-dev",
        spec: None,
        class: None,
    },
    Scenario {
        file: "shell-values.yaml",
        about: "Host shell mode: hostPID and SYS_PTRACE (shell SCC tier).",
        sample: "tinycode_v1alpha1_shell.yaml",
        namespace: "tinycode-dev",
        spec: None,
        class: None,
    },
    Scenario {
        file: "vllm-discovery-values.yaml",
        about: "vLLM providers plus approved cross-namespace service discovery.",
        sample: "tinycode_v1alpha1_vllm.yaml",
        namespace: "tinycode-dev",
        spec: None,
        class: None,
    },
    Scenario {
        file: "model-keys-values.yaml",
        about: "A vLLM server that needs an API key: the model-key proxy beside tinycode holds it.",
        sample: "tinycode_v1alpha1_vllm.yaml",
        namespace: "tinycode-dev",
        spec: Some(
            "vllm: [{name: hosted, url: \"https://models.example.com/v1\", apiKeySecret: {name: model-keys, key: hosted}, models: {coder: {}}}]",
        ),
        class: None,
    },
    Scenario {
        file: "openshift-signin-values.yaml",
        about: "Sign-in through the cluster's OAuth server: oauth-proxy and the gate beside tinycode.",
        sample: "tinycode_v1alpha1_basic.yaml",
        namespace: "tinycode-dev",
        spec: Some("auth: {mode: openshift}"),
        class: None,
    },
    Scenario {
        file: "egress-values.yaml",
        about: "A class that limits egress: the egress proxy and the allow-list it enforces.",
        sample: "tinycode_v1alpha1_git.yaml",
        namespace: "tinycode-dev",
        spec: None,
        class: Some(
            "egress: {hosts: [{host: github.com}, {host: \"*.pypi.org\", ports: [443, 80]}, {host: vllm.models.svc.cluster.local, ports: [8000]}], cidrs: [{cidr: 10.96.0.1/32}]}",
        ),
    },
];

/// The settings the lint inputs are built with: the defaults, the sample's
/// host directory allowed, and a fixed chart digest (the values hash would
/// otherwise change with every chart edit).
fn settings() -> Settings {
    Settings {
        hostpath_allowed_prefixes: vec!["/home/developer".into()],
        chart_digest: "chart-ci".into(),
        ..Settings::default()
    }
}

fn merge(base: &mut serde_json::Value, over: serde_json::Value) {
    match (base, over) {
        (serde_json::Value::Object(b), serde_json::Value::Object(o)) => {
            for (k, v) in o {
                merge(b.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (b, o) => *b = o,
    }
}

/// The instance of a scenario: its sample, in its namespace, with a uid.
fn instance(s: &Scenario, index: usize) -> TinycodeInstance {
    let text = crate::bundle::SAMPLES.iter().find(|(n, _)| *n == s.sample).expect("a sample of config/samples").1;
    let mut object: serde_json::Value = serde_saphyr::from_str(text).expect("the sample is YAML");
    if let Some(spec) = s.spec {
        merge(&mut object["spec"], serde_saphyr::from_str(spec).expect("the scenario's spec is YAML"));
    }
    let mut inst: TinycodeInstance = serde_json::from_value(object).expect("the sample is a TinycodeInstance");
    inst.metadata.namespace = Some(s.namespace.into());
    inst.metadata.uid = Some(format!("00000000-0000-4000-8000-{index:012}"));
    inst
}

/// What a cluster-admin approved: the spec's cluster role and discovery
/// namespaces (the samples ask only for what the README's steps approve).
fn approved(inst: &TinycodeInstance) -> Approved {
    let spec = &inst.spec;
    Approved {
        cluster_role: spec.cluster_admin.enabled.then(|| spec.cluster_admin.cluster_role.clone()).flatten(),
        discovery_namespaces: spec.discovery.as_ref().map(|d| d.namespaces.clone()).unwrap_or_default(),
        ..Approved::default()
    }
}

/// Every lint input: file name and content.
pub fn files() -> Vec<(String, String)> {
    let settings = settings();
    SCENARIOS
        .iter()
        .enumerate()
        .map(|(index, s)| {
            let inst = instance(s, index);
            let choice = match s.class {
                None => Choice::None,
                Some(class) => Choice::Found {
                    name: "ci".into(),
                    spec: Box::new(serde_saphyr::from_str(class).expect("the scenario's class is YAML")),
                    warning: None,
                },
            };
            let applied = class_policy::apply(&choice, &inst.spec, &settings, 0).expect("no class refuses a sample");
            let spec = applied.spec;
            let name = inst.metadata.name.clone().expect("samples are named");
            let uid = inst.metadata.uid.clone().unwrap_or_default();
            let refs = InstanceRef { name: &name, namespace: s.namespace, uid: &uid };
            let config_json = config::generate(&spec, &BTreeMap::new());
            let approved = Approved { class: applied.from_class, ..approved(&inst) };
            let values = values::build(&refs, &spec, &settings, &approved, config_json);
            let text = serde_saphyr::to_string(&values).expect("values serialise");
            let header = format!(
                "# {}\n# Generated by `tinycode-local chart-ci-values` (make generate) from config/samples/{}; do not edit.\n",
                s.about, s.sample
            );
            (s.file.to_string(), header + &text)
        })
        .collect()
}

/// Writes every lint input into `out`, removing values files it no longer makes.
pub fn command(out: &Path) -> ExitCode {
    let files = files();
    let result = (|| -> std::io::Result<()> {
        for entry in std::fs::read_dir(out)? {
            let path = entry?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
            if name.ends_with("-values.yaml") && !files.iter().any(|(f, _)| *f == name) {
                std::fs::remove_file(&path)?;
            }
        }
        for (file, text) in &files {
            std::fs::write(out.join(file), text)?;
        }
        Ok(())
    })();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: cannot write {}: {e}", out.display());
            ExitCode::from(1)
        }
    }
}
