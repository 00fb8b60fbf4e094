//! What Helm has recorded about a release, and whether its objects drifted
//! (pure). Helm keeps one Secret per revision labelled `owner=helm`,
//! `name=<release>`, `status=<state>`, `version=<n>`; reading those labels
//! costs one metadata list instead of a helm subprocess.
//!
//! A record left `pending-*` blocks every later helm run on its release, so
//! the controller discards it, but only when nobody may still be writing it
//! ([`may_discard_pending`]): this process runs no helm on the release, and
//! either this process wrote the record ([`WRITER_LABEL`]) or the record is
//! older than the leader lease duration and this process has led that long
//! (a previous leader stops a renew deadline, shorter than the lease, after
//! it last renewed; see [`crate::ops::leader`]).

use std::fmt;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// Field managers whose writes are the operator's own or the cluster's
/// bookkeeping, not drift.
pub const OWN_MANAGERS: &[&str] = &["helm", crate::FIELD_MANAGER, "kube-controller-manager"];

/// Label on a release record: the mark of the operator process whose helm
/// upgrade wrote it ([`crate::helm::Helm::writer`]).
pub const WRITER_LABEL: &str = "tinycode.dev/writer";

/// One revision's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub secret_name: String,
    /// The record's resourceVersion when read: a discard is conditional on
    /// it, so a record that moved on since (a cache trailing helm's final
    /// write) is never deleted.
    pub resource_version: Option<String>,
    pub version: i64,
    pub status: ReleaseStatus,
    pub created: Option<Timestamp>,
    /// [`WRITER_LABEL`], when the record has one.
    pub writer: Option<String>,
}

impl Record {
    pub fn is_pending(&self) -> bool {
        self.status.is_pending()
    }
}

/// A revision's state, as Helm labels its record (`status=<state>`), read
/// once from the label.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ReleaseStatus {
    Deployed,
    Failed,
    PendingInstall,
    PendingUpgrade,
    PendingRollback,
    Superseded,
    Uninstalling,
    Uninstalled,
    /// Helm's own `unknown`, or a label this build does not know: kept as written.
    Unknown(String),
}

impl ReleaseStatus {
    /// The state a record's `status` label names.
    pub fn parse(label: &str) -> Self {
        match label {
            "deployed" => Self::Deployed,
            "failed" => Self::Failed,
            "pending-install" => Self::PendingInstall,
            "pending-upgrade" => Self::PendingUpgrade,
            "pending-rollback" => Self::PendingRollback,
            "superseded" => Self::Superseded,
            "uninstalling" => Self::Uninstalling,
            "uninstalled" => Self::Uninstalled,
            other => Self::Unknown(other.to_string()),
        }
    }

    /// The label value.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Deployed => "deployed",
            Self::Failed => "failed",
            Self::PendingInstall => "pending-install",
            Self::PendingUpgrade => "pending-upgrade",
            Self::PendingRollback => "pending-rollback",
            Self::Superseded => "superseded",
            Self::Uninstalling => "uninstalling",
            Self::Uninstalled => "uninstalled",
            Self::Unknown(label) => label,
        }
    }

    /// A helm operation started and has not finished (or was interrupted):
    /// every later helm run on the release is refused while it stands. A
    /// `pending-*` state a newer helm adds counts too.
    pub fn is_pending(&self) -> bool {
        match self {
            Self::PendingInstall | Self::PendingUpgrade | Self::PendingRollback => true,
            Self::Unknown(label) => label.starts_with("pending-"),
            _ => false,
        }
    }

    /// The revision was deployed at some point (it is, or a later one replaced it).
    pub fn was_deployed(&self) -> bool {
        matches!(self, Self::Deployed | Self::Superseded)
    }
}

impl fmt::Display for ReleaseStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Reads release records from Secret metadata; other Secrets are ignored.
pub fn records(metas: &[ObjectMeta]) -> Vec<Record> {
    let mut out: Vec<Record> = metas
        .iter()
        .filter_map(|m| {
            let labels = m.labels.as_ref()?;
            if labels.get("owner").map(String::as_str) != Some("helm") {
                return None;
            }
            Some(Record {
                secret_name: m.name.clone()?,
                resource_version: m.resource_version.clone(),
                version: labels.get("version")?.parse().ok()?,
                status: ReleaseStatus::parse(labels.get("status")?),
                created: m.creation_timestamp.as_ref().map(|t| t.0),
                writer: labels.get(WRITER_LABEL).cloned(),
            })
        })
        .collect();
    out.sort_by_key(|r| r.version);
    out
}

/// The name Helm's Secret driver gives the record of a release's revision.
pub fn record_name(release: &str, revision: i64) -> String {
    format!("sh.helm.release.v1.{release}.v{revision}")
}

/// The newest revision.
pub fn latest(records: &[Record]) -> Option<&Record> {
    records.iter().max_by_key(|r| r.version)
}

/// The newest revision before `failed` that was deployed (now `deployed` or
/// `superseded`): where a failed upgrade rolls back to.
pub fn last_good(records: &[Record], failed: i64) -> Option<&Record> {
    records.iter().filter(|r| r.version < failed && r.status.was_deployed()).max_by_key(|r| r.version)
}

/// What this process knows when deciding about a pending record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingCheck<'a> {
    /// This process runs helm on the release right now.
    pub helm_running: bool,
    /// This process's writer mark.
    pub own_writer: &'a str,
    /// The leader lease duration.
    pub lease_duration: Duration,
    /// How long this process has been the leader (its monotonic clock).
    pub leading_for: Duration,
    /// The local wall clock, against the apiserver's `creationTimestamp`.
    pub now: Timestamp,
}

impl<'a> PendingCheck<'a> {
    /// The check for `release` (stored in `namespace`) as of now.
    pub fn now(
        helm: &'a crate::helm::Helm,
        settings: &crate::settings::Settings,
        namespace: &str,
        release: &str,
    ) -> Self {
        Self {
            helm_running: helm.is_running(namespace, release),
            own_writer: helm.writer(),
            lease_duration: settings.lease_duration,
            leading_for: settings.leading_since.elapsed(),
            now: Timestamp::now(),
        }
    }

    /// Why `record` is kept for now (for the status message).
    pub fn wait_message(&self, record: &Record) -> String {
        format!(
            "revision {} of this instance's helm release is {}, written by another operator process; it is discarded \
             once it is older than the leader lease duration ({}s), in case that process is still running helm",
            record.version,
            record.status,
            self.lease_duration.as_secs()
        )
    }
}

/// Whether a pending `record` may be deleted: no helm run of this process is
/// working on it, and this process wrote it or it is older than the lease
/// duration (by its creation time, and by how long this process has led,
/// which holds even when the local clock disagrees with the apiserver's).
pub fn may_discard_pending(record: &Record, check: &PendingCheck) -> bool {
    if check.helm_running {
        return false;
    }
    if record.writer.as_deref() == Some(check.own_writer) {
        return true;
    }
    let lease = SignedDuration::try_from(check.lease_duration).unwrap_or(SignedDuration::MAX);
    let old = record.created.is_some_and(|c| c.checked_add(lease).is_ok_and(|expiry| expiry <= check.now));
    old && check.leading_for >= check.lease_duration
}

/// A manager other than ours that wrote the object since `since`, if any.
/// Status writes (a subresource) are not drift. Times have one-second
/// resolution, so a write in the release's own second counts: at worst that
/// costs one extra (idempotent) upgrade, while missing it would leave drift.
pub fn foreign_write_after(meta: &ObjectMeta, since: Option<Timestamp>) -> Option<String> {
    meta.managed_fields.iter().flatten().find_map(|entry| {
        if entry.subresource.as_deref().is_some_and(|s| !s.is_empty()) {
            return None;
        }
        let manager = entry.manager.as_deref().unwrap_or_default();
        if OWN_MANAGERS.contains(&manager) {
            return None;
        }
        let written = entry.time.as_ref().map(|t| t.0);
        let after = match (written, since) {
            (Some(w), Some(s)) => w >= s,
            _ => true,
        };
        after.then(|| manager.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};
    use std::collections::BTreeMap;

    fn secret(name: &str, version: &str, status: &str, created: i64) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([
                ("owner".to_string(), "helm".to_string()),
                ("name".to_string(), "rel".to_string()),
                ("version".to_string(), version.to_string()),
                ("status".to_string(), status.to_string()),
            ])),
            creation_timestamp: Some(Time(Timestamp::from_second(created).unwrap())),
            ..Default::default()
        }
    }

    #[test]
    fn latest_is_the_highest_version_not_the_last_listed() {
        let rs = records(&[
            secret("sh.helm.release.v1.rel.v10", "10", "pending-upgrade", 300),
            secret("sh.helm.release.v1.rel.v9", "9", "deployed", 200),
            ObjectMeta { name: Some("unrelated".into()), ..Default::default() },
        ]);
        assert_eq!(rs.len(), 2);
        let l = latest(&rs).unwrap();
        assert_eq!((l.version, l.is_pending()), (10, true));
        assert!(!rs[0].is_pending());
    }

    #[test]
    fn the_status_label_is_parsed_once_and_written_back_as_read() {
        let known = [
            ("deployed", ReleaseStatus::Deployed),
            ("failed", ReleaseStatus::Failed),
            ("pending-install", ReleaseStatus::PendingInstall),
            ("pending-upgrade", ReleaseStatus::PendingUpgrade),
            ("pending-rollback", ReleaseStatus::PendingRollback),
            ("superseded", ReleaseStatus::Superseded),
            ("uninstalling", ReleaseStatus::Uninstalling),
            ("uninstalled", ReleaseStatus::Uninstalled),
            ("unknown", ReleaseStatus::Unknown("unknown".into())),
        ];
        for (label, status) in known {
            assert_eq!(ReleaseStatus::parse(label), status, "{label}");
            assert_eq!(status.to_string(), label);
        }
        let pending: Vec<&str> = ["deployed", "failed", "pending-install", "pending-upgrade", "pending-rollback"]
            .into_iter()
            .chain(["superseded", "uninstalling", "uninstalled", "unknown", "pending-future"])
            .filter(|l| ReleaseStatus::parse(l).is_pending())
            .collect();
        assert_eq!(pending, ["pending-install", "pending-upgrade", "pending-rollback", "pending-future"]);
        let rs = records(&[secret("v1", "1", "superseded", 1), secret("v2", "2", "deployed", 2)]);
        assert_eq!(
            rs.iter().map(|r| r.status.clone()).collect::<Vec<_>>(),
            [ReleaseStatus::Superseded, ReleaseStatus::Deployed]
        );
    }

    #[test]
    fn last_good_is_the_newest_deployed_or_superseded_before_the_failure() {
        let rs = records(&[
            secret("v1", "1", "superseded", 1),
            secret("v2", "2", "deployed", 2),
            secret("v3", "3", "failed", 3),
        ]);
        assert_eq!(last_good(&rs, 3).map(|r| r.version), Some(2));
        assert_eq!(last_good(&rs, 2).map(|r| r.version), Some(1));
        assert_eq!(last_good(&rs, 1), None, "a first install has nothing to go back to");
    }

    fn pending(created: Option<i64>, writer: Option<&str>) -> Record {
        Record {
            secret_name: "sh.helm.release.v1.rel.v3".into(),
            resource_version: Some("7".into()),
            version: 3,
            status: ReleaseStatus::PendingUpgrade,
            created: created.map(|s| Timestamp::from_second(s).unwrap()),
            writer: writer.map(Into::into),
        }
    }

    fn check(now: i64, leading_for: u64) -> PendingCheck<'static> {
        PendingCheck {
            helm_running: false,
            own_writer: "me",
            lease_duration: Duration::from_secs(15),
            leading_for: Duration::from_secs(leading_for),
            now: Timestamp::from_second(now).unwrap(),
        }
    }

    #[test]
    fn a_pending_record_is_discarded_only_when_nobody_may_still_write_it() {
        let c = check(1000, 60);
        assert!(may_discard_pending(&pending(Some(999), Some("me")), &c), "this process wrote it: at once");
        assert!(!may_discard_pending(&pending(Some(990), Some("other")), &c), "another writer, 10 s old");
        assert!(!may_discard_pending(&pending(Some(990), None), &c), "no writer mark, 10 s old");
        assert!(!may_discard_pending(&pending(Some(986), None), &c), "14 s old");
        assert!(may_discard_pending(&pending(Some(985), None), &c), "a lease duration old");
        assert!(may_discard_pending(&pending(Some(100), Some("other")), &c), "long abandoned");
        assert!(!may_discard_pending(&pending(None, Some("other")), &c), "age unknown");
    }

    #[test]
    fn a_running_helm_or_a_new_leader_keeps_the_record() {
        let mut c = check(1000, 60);
        c.helm_running = true;
        assert!(!may_discard_pending(&pending(Some(999), Some("me")), &c), "our helm is still writing it");
        assert!(!may_discard_pending(&pending(Some(100), None), &c));
        // Leading for less than a lease duration: the previous leader may have
        // written it just now, even if the local clock says it is old.
        let c = check(1000, 14);
        assert!(!may_discard_pending(&pending(Some(100), Some("other")), &c));
        assert!(may_discard_pending(&pending(Some(999), Some("me")), &c));
        assert!(may_discard_pending(&pending(Some(100), Some("other")), &check(1000, 15)));
    }

    #[test]
    fn the_writer_mark_is_read_from_the_labels() {
        let mut meta = secret("v4", "4", "pending-install", 1);
        meta.labels.as_mut().unwrap().insert(WRITER_LABEL.into(), "abc".into());
        assert_eq!(records(&[meta])[0].writer.as_deref(), Some("abc"));
        assert_eq!(records(&[secret("v4", "4", "pending-install", 1)])[0].writer, None);
    }

    fn entry(manager: &str, at: i64, subresource: Option<&str>) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some("Update".into()),
            time: Some(Time(Timestamp::from_second(at).unwrap())),
            subresource: subresource.map(Into::into),
            ..Default::default()
        }
    }

    #[test]
    fn drift_is_a_foreign_write_after_the_release() {
        let since = Some(Timestamp::from_second(1000).unwrap());
        let mut meta = ObjectMeta {
            managed_fields: Some(vec![entry("helm", 1001, None), entry("kube-controller-manager", 2000, None)]),
            ..Default::default()
        };
        assert_eq!(foreign_write_after(&meta, since), None);
        meta.managed_fields.as_mut().unwrap().push(entry("kubectl-edit", 900, None));
        assert_eq!(foreign_write_after(&meta, since), None, "an edit before the release was applied over");
        meta.managed_fields.as_mut().unwrap().push(entry("kubelet-standin", 1500, Some("status")));
        assert_eq!(foreign_write_after(&meta, since), None, "status writes are not drift");
        meta.managed_fields.as_mut().unwrap().push(entry("kubectl-patch", 1000, None));
        assert_eq!(foreign_write_after(&meta, since).as_deref(), Some("kubectl-patch"), "same second as the release");
        meta.managed_fields.as_mut().unwrap().pop();
        meta.managed_fields.as_mut().unwrap().push(entry("kubectl-edit", 1500, None));
        assert_eq!(foreign_write_after(&meta, since).as_deref(), Some("kubectl-edit"));
    }
}
