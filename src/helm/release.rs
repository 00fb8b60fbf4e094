//! What Helm has recorded about a release, and whether its objects drifted
//! (pure). Helm keeps one Secret per revision labelled `owner=helm`,
//! `name=<release>`, `status=<state>`, `version=<n>`; reading those labels
//! costs one metadata list instead of a helm subprocess.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;

/// Field managers whose writes are the operator's own or the cluster's
/// bookkeeping, not drift.
pub const OWN_MANAGERS: &[&str] = &["helm", crate::FIELD_MANAGER, "kube-controller-manager"];

/// One revision's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub secret_name: String,
    pub version: i64,
    pub status: String,
    pub created: Option<Timestamp>,
}

impl Record {
    pub fn is_pending(&self) -> bool {
        self.status.starts_with("pending-")
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
                version: labels.get("version")?.parse().ok()?,
                status: labels.get("status")?.clone(),
                created: m.creation_timestamp.as_ref().map(|t| t.0),
            })
        })
        .collect();
    out.sort_by_key(|r| r.version);
    out
}

/// The newest revision.
pub fn latest(records: &[Record]) -> Option<&Record> {
    records.iter().max_by_key(|r| r.version)
}

/// The newest revision before `failed` that was deployed (now `deployed` or
/// `superseded`): where a failed upgrade rolls back to.
pub fn last_good(records: &[Record], failed: i64) -> Option<&Record> {
    records
        .iter()
        .filter(|r| r.version < failed && (r.status == "deployed" || r.status == "superseded"))
        .max_by_key(|r| r.version)
}

/// Whether a pending record (helm was interrupted, or is still at work)
/// may be discarded: when this process wrote it and is not running helm for
/// it now (the caller checks that), or when it is older than the leader
/// lease, so no previous leader can still be writing it.
pub fn may_discard_pending(record: &Record, now: Timestamp, lease: std::time::Duration, written_here: bool) -> bool {
    if written_here {
        return true;
    }
    let lease = k8s_openapi::jiff::SignedDuration::try_from(lease).unwrap_or(k8s_openapi::jiff::SignedDuration::MAX);
    record.created.is_some_and(|created| created.checked_add(lease).is_ok_and(|until| until < now))
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

    #[test]
    fn a_young_pending_record_of_another_leader_is_kept() {
        let now = Timestamp::from_second(1_000_000).unwrap();
        let lease = std::time::Duration::from_secs(15);
        let at = |secs: i64| Record {
            secret_name: "r".into(),
            version: 2,
            status: "pending-upgrade".into(),
            created: Some(Timestamp::from_second(secs).unwrap()),
        };
        assert!(!may_discard_pending(&at(1_000_000 - 5), now, lease, false), "younger than the lease");
        assert!(may_discard_pending(&at(1_000_000 - 5), now, lease, true), "this process wrote it");
        assert!(may_discard_pending(&at(1_000_000 - 16), now, lease, false), "older than the lease");
        let unknown = Record { created: None, ..at(0) };
        assert!(!may_discard_pending(&unknown, now, lease, false), "no creation time: keep");
    }
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
