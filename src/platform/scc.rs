//! SecurityContextConstraints tiers: which one an instance needs, the SCC
//! objects themselves, the ClusterRole that grants `use` of each, and the
//! per-instance RoleBinding that is the grant.
//!
//! The grant is RBAC rather than an edit of the SCC's shared `users` list: a
//! read-modify-write of that list loses concurrent updates, a RoleBinding per
//! instance cannot.

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde::Serialize;

use crate::api::TinycodeInstanceSpec;
use crate::api::naming;
use crate::platform::openshift::SecurityContextConstraints;

/// Namespace label approving the hostPath tier: `true` for read-only host
/// directories, [`HOSTPATH_READWRITE`] for writable ones too.
pub const HOSTPATH_APPROVAL_LABEL: &str = "tinycode.dev/allow-hostpath";
/// The hostPath approval's value that also allows writes.
pub const HOSTPATH_READWRITE: &str = "readwrite";

/// Least-privileged tier that satisfies a spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SccTier {
    Restricted,
    Hostpath,
    Shell,
}

pub const ALL_TIERS: [SccTier; 3] = [SccTier::Restricted, SccTier::Hostpath, SccTier::Shell];

/// Container UID every tier pins.
pub const RUN_AS_UID: i64 = 1001;

/// `priority` of every tier's SCC. OpenShift treats a nil priority as 0 when
/// ordering SCCs, so 0 is equivalent to leaving it unset, but it is written
/// explicitly because the field is required (nullable) in the real schema and a
/// client-side `kubectl apply` drops a `null`.
pub const SCC_PRIORITY: i32 = 0;

impl SccTier {
    /// Shell wins over nothing and hostPath over nothing; shell with hostPath is
    /// refused by validation before this is asked.
    pub fn select(spec: &TinycodeInstanceSpec) -> SccTier {
        if spec.shell.enabled {
            SccTier::Shell
        } else if spec.storage.host_path.is_some() {
            SccTier::Hostpath
        } else {
            SccTier::Restricted
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SccTier::Restricted => "restricted",
            SccTier::Hostpath => "hostpath",
            SccTier::Shell => "shell",
        }
    }

    /// The SCC's name.
    pub fn scc_name(self) -> String {
        format!("tinycode-{}", self.as_str())
    }

    /// The ClusterRole granting `use` of this SCC (installed with the operator).
    pub fn use_cluster_role(self) -> String {
        format!("tinycode-scc-{}", self.as_str())
    }

    /// Namespace label a cluster-admin sets to approve this tier, if it needs approval.
    pub fn approval_label(self) -> Option<&'static str> {
        match self {
            SccTier::Restricted => None,
            SccTier::Hostpath => Some(HOSTPATH_APPROVAL_LABEL),
            SccTier::Shell => Some("tinycode.dev/allow-shell"),
        }
    }

    /// Refuses a writable host directory unless the namespace's hostPath
    /// approval says `readwrite` (a plain `true` approves read-only ones).
    pub fn check_host_path_write(
        cli: &str,
        namespace: &str,
        ns_labels: &BTreeMap<String, String>,
    ) -> Result<(), String> {
        if ns_labels.get(HOSTPATH_APPROVAL_LABEL).map(String::as_str) == Some(HOSTPATH_READWRITE) {
            return Ok(());
        }
        Err(format!(
            "spec.storage.hostPath.readOnly is false, and namespace {namespace} is approved for read-only host directories only; set readOnly: true, or a cluster-admin approves writes after review with `{cli} label namespace {namespace} {HOSTPATH_APPROVAL_LABEL}={HOSTPATH_READWRITE} --overwrite`"
        ))
    }

    /// Refuses a tier the namespace has not been approved for, with the approving command.
    pub fn check_approval(
        self,
        cli: &str,
        namespace: &str,
        ns_labels: &BTreeMap<String, String>,
    ) -> Result<(), String> {
        let Some(label) = self.approval_label() else { return Ok(()) };
        let value = ns_labels.get(label).map(String::as_str);
        // `readwrite` approves the hostPath tier for writable host directories too.
        if value == Some("true") || (self == SccTier::Hostpath && value == Some(HOSTPATH_READWRITE)) {
            return Ok(());
        }
        Err(format!(
            "the {} SCC needs a cluster-admin's approval for namespace {namespace}; after review, run `{cli} label namespace {namespace} {label}=true`",
            self.scc_name()
        ))
    }

    /// The SCC object this tier installs.
    pub fn scc(self) -> SecurityContextConstraints {
        let shell = self == SccTier::Shell;
        let hostpath = self == SccTier::Hostpath;
        let mut volumes: Vec<String> =
            ["configMap", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"]
                .map(String::from)
                .to_vec();
        if hostpath {
            volumes.push("hostPath".into());
        }
        volumes.sort();
        SecurityContextConstraints {
            metadata: ObjectMeta {
                name: Some(self.scc_name()),
                labels: Some(BTreeMap::from([
                    ("app.kubernetes.io/name".into(), "tinycode-operator".into()),
                    ("app.kubernetes.io/component".into(), "scc".into()),
                ])),
                annotations: Some(BTreeMap::from([(
                    "kubernetes.io/description".into(),
                    match self {
                        SccTier::Restricted => "tinycode default: UID 1001, no host access, all capabilities dropped",
                        SccTier::Hostpath => {
                            "tinycode with a host directory mounted at /projects; needs namespace approval"
                        }
                        SccTier::Shell => {
                            "tinycode with hostPID and SYS_PTRACE for the host shell; needs namespace approval"
                        }
                    }
                    .to_string(),
                )])),
                ..Default::default()
            },
            allow_host_dir_volume_plugin: hostpath,
            allow_host_ipc: false,
            allow_host_network: false,
            allow_host_pid: shell,
            allow_host_ports: false,
            allow_privilege_escalation: Some(false),
            allow_privileged_container: false,
            allowed_capabilities: Some(if shell { vec!["SYS_PTRACE".into()] } else { vec![] }),
            default_add_capabilities: Some(vec![]),
            required_drop_capabilities: Some(if shell { vec![] } else { vec!["ALL".into()] }),
            // Explicitly 0 rather than null: OpenShift orders SCCs treating a nil
            // priority as 0, so this admits exactly as null would, and unlike null it
            // survives a client-side `kubectl apply` (which drops nulls, leaving the
            // required field missing) as well as server-side apply and `oc create`.
            priority: Some(SCC_PRIORITY),
            read_only_root_filesystem: false,
            run_as_user: Some(serde_json::json!({"type": "MustRunAs", "uid": RUN_AS_UID})),
            se_linux_context: Some(serde_json::json!({"type": "MustRunAs"})),
            fs_group: Some(serde_json::json!({"type": "MustRunAs", "ranges": [{"min": 0, "max": 0}]})),
            supplemental_groups: Some(serde_json::json!({"type": "RunAsAny"})),
            seccomp_profiles: Some(vec!["runtime/default".into()]),
            volumes: Some(volumes),
            users: Some(vec![]),
            groups: Some(vec![]),
        }
    }

    /// ClusterRole with `use` on exactly this tier's SCC.
    pub fn use_role(self) -> ClusterRole {
        ClusterRole {
            metadata: ObjectMeta {
                name: Some(self.use_cluster_role()),
                labels: Some(BTreeMap::from([("app.kubernetes.io/name".into(), "tinycode-operator".into())])),
                ..Default::default()
            },
            rules: Some(vec![PolicyRule {
                api_groups: Some(vec!["security.openshift.io".into()]),
                resources: Some(vec!["securitycontextconstraints".into()]),
                resource_names: Some(vec![self.scc_name()]),
                verbs: vec!["use".into()],
                ..Default::default()
            }]),
            ..Default::default()
        }
    }

    /// [`Self::use_role`] as a manifest with apiVersion and kind.
    pub fn use_role_manifest(self) -> serde_json::Value {
        crate::platform::manifest(&self.use_role())
    }
}

/// The RoleBinding that lets the instance's ServiceAccount use its tier's SCC.
pub fn grant(name: &str, namespace: &str, tier: SccTier, owner: OwnerReference) -> RoleBinding {
    RoleBinding {
        metadata: ObjectMeta {
            name: Some(naming::scc_grant(name, tier.as_str())),
            namespace: Some(namespace.into()),
            labels: Some(naming::instance_labels(name, "scc-grant")),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: tier.use_cluster_role(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: naming::service_account(name),
            namespace: Some(namespace.into()),
            ..Default::default()
        }]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: serde_json::Value) -> TinycodeInstanceSpec {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn tier_is_least_privileged_for_the_spec() {
        assert_eq!(SccTier::select(&spec(serde_json::json!({}))), SccTier::Restricted);
        assert_eq!(
            SccTier::select(&spec(serde_json::json!({"storage": {"hostPath": {"path": "/srv"}}}))),
            SccTier::Hostpath
        );
        assert_eq!(SccTier::select(&spec(serde_json::json!({"shell": {"enabled": true}}))), SccTier::Shell);
        assert_eq!(SccTier::select(&spec(serde_json::json!({"shell": {"enabled": false}}))), SccTier::Restricted);
    }

    #[test]
    fn privileged_tiers_need_namespace_approval() {
        let none = BTreeMap::new();
        assert!(SccTier::Restricted.check_approval("oc", "team", &none).is_ok());
        let e = SccTier::Shell.check_approval("oc", "team", &none).unwrap_err();
        assert!(e.contains("oc label namespace team tinycode.dev/allow-shell=true"), "{e}");
        let hostpath_ok = BTreeMap::from([("tinycode.dev/allow-hostpath".to_string(), "true".to_string())]);
        assert!(SccTier::Hostpath.check_approval("oc", "team", &hostpath_ok).is_ok());
        assert!(
            SccTier::Shell.check_approval("oc", "team", &hostpath_ok).is_err(),
            "hostpath approval must not approve shell"
        );
        let e = SccTier::check_host_path_write("oc", "team", &hostpath_ok).unwrap_err();
        assert!(e.contains("`oc label namespace team tinycode.dev/allow-hostpath=readwrite --overwrite`"), "{e}");
    }

    #[test]
    fn scc_objects_match_the_tier_table() {
        let r = SccTier::Restricted.scc();
        assert!(!r.allow_host_pid && !r.allow_host_dir_volume_plugin && !r.allow_privileged_container);
        assert_eq!(r.required_drop_capabilities, Some(vec!["ALL".to_string()]));
        assert!(!r.volumes.as_ref().unwrap().contains(&"hostPath".to_string()));
        let h = SccTier::Hostpath.scc();
        assert!(h.allow_host_dir_volume_plugin && !h.allow_host_pid);
        assert!(h.volumes.as_ref().unwrap().contains(&"hostPath".to_string()));
        let s = SccTier::Shell.scc();
        assert!(s.allow_host_pid && !s.allow_host_dir_volume_plugin);
        assert_eq!(s.allowed_capabilities, Some(vec!["SYS_PTRACE".to_string()]));
        for scc in [r, h, s] {
            assert_eq!(scc.run_as_user.as_ref().unwrap()["uid"], 1001);
            assert_eq!(scc.allow_privilege_escalation, Some(false));
            assert_eq!(scc.seccomp_profiles, Some(vec!["runtime/default".to_string()]));
        }
    }

    #[test]
    fn scc_priority_is_an_explicit_zero() {
        for tier in ALL_TIERS {
            let m = crate::platform::openshift::scc_manifest(&tier.scc());
            assert_eq!(m["priority"], serde_json::json!(0), "{}", tier.scc_name());
        }
    }

    /// Every field the real OpenShift SCC schema requires is present and not null
    /// (a client-side apply drops nulls). Skipped when the real CRDs are absent.
    #[test]
    fn scc_manifests_carry_every_required_field_of_the_real_schema() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../shared/openshift-crds/securitycontextconstraints.security.openshift.io.yaml");
        let Ok(text) = std::fs::read_to_string(&path) else {
            eprintln!("skipped: {} is absent", path.display());
            return;
        };
        let crd: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
        let required = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["required"].as_array().unwrap().clone();
        assert!(required.contains(&serde_json::json!("priority")));
        for tier in ALL_TIERS {
            let m = crate::platform::openshift::scc_manifest(&tier.scc());
            for field in &required {
                let field = field.as_str().unwrap();
                assert!(!m[field].is_null(), "{} lacks required {field} (or it is null)", tier.scc_name());
            }
        }
    }

    #[test]
    fn grant_binds_the_instance_service_account_to_one_tier() {
        let owner = OwnerReference {
            api_version: "tinycode.dev/v1alpha1".into(),
            kind: "TinycodeInstance".into(),
            name: "dev".into(),
            uid: "u".into(),
            controller: Some(true),
            ..Default::default()
        };
        let rb = grant("dev", "team", SccTier::Hostpath, owner);
        assert_eq!(rb.metadata.name.as_deref(), Some("dev-tinycode-scc-hostpath"));
        assert_eq!(rb.role_ref.name, "tinycode-scc-hostpath");
        let subject = &rb.subjects.unwrap()[0];
        assert_eq!((subject.name.as_str(), subject.namespace.as_deref()), ("dev-tinycode", Some("team")));
        let role = SccTier::Hostpath.use_role();
        assert_eq!(role.rules.unwrap()[0].resource_names, Some(vec!["tinycode-hostpath".to_string()]));
    }
}
