//! Which helm the operator can run: helm 3, 3.17 or newer.
//!
//! 3.17 added `--take-ownership`, which adopting a release an earlier build kept
//! in the instance namespace needs ([`super::Mode::Adopt`]); `--skip-schema-validation`
//! (3.16) and the other flags of [`super::apply_args`] are older. Helm 4 is
//! refused: it applies server-side by default, and the operator's drift repair
//! and its own server-side writes were written for, and are tested only with,
//! helm 3's client-side apply (the e2e tests run helm v3.22.0).
//!
//! `tinycode-operator run` asks `helm version --short` once at start-up and
//! stops with [`check`]'s message instead of failing on the first instance.

use std::fmt;

/// The oldest helm the operator runs.
pub const MINIMUM: Version = Version { major: 3, minor: 17, patch: 0 };

/// A helm release number (pre-release and build suffixes dropped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The version in what `helm version --short` printed: `v3.22.0+g1234abc`,
/// `v3.17.0`, `v3.18.0-rc.1`, or helm 2's `Client: v2.17.0+g...`. None when
/// no `v<major>.<minor>[.<patch>]` is found.
pub fn parse(printed: &str) -> Option<Version> {
    printed.split_whitespace().find_map(parse_token)
}

fn parse_token(token: &str) -> Option<Version> {
    let number = token.strip_prefix('v')?.split(['+', '-']).next()?;
    let mut parts = number.split('.').map(|p| p.parse::<u64>().ok());
    let major = parts.next()??;
    let minor = parts.next()??;
    let patch = match parts.next() {
        None => 0,
        Some(p) => p?,
    };
    if parts.next().is_some() {
        return None;
    }
    Some(Version { major, minor, patch })
}

/// The version when `printed` names a helm the operator can run, else the
/// message to stop with: what was found, what is needed and where to set it.
pub fn check(bin: &str, printed: &str) -> Result<Version, String> {
    let needed = format!("helm 3, {}.{} or newer", MINIMUM.major, MINIMUM.minor);
    let Some(found) = parse(printed) else {
        return Err(format!(
            "{bin} (HELM_BIN) printed no version the operator understands ({:?}); it needs {needed}",
            printed.trim()
        ));
    };
    if found.major > MINIMUM.major {
        return Err(format!(
            "{bin} (HELM_BIN) is helm {found}; the operator needs {needed}: helm {} applies server-side by \
             default, which the operator was neither written nor tested for. Set HELM_BIN to a helm 3",
            found.major
        ));
    }
    if found < MINIMUM {
        return Err(format!(
            "{bin} (HELM_BIN) is helm {found}; the operator needs {needed} (it passes --take-ownership, \
             added in 3.17). Set HELM_BIN to a newer helm 3"
        ));
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(major: u64, minor: u64, patch: u64) -> Version {
        Version { major, minor, patch }
    }

    #[test]
    fn parses_what_helm_prints() {
        assert_eq!(parse("v3.22.0\n"), Some(v(3, 22, 0)), "hack/local-cluster.sh's helm");
        assert_eq!(parse("v3.17.3+ge4da497"), Some(v(3, 17, 3)), "a release build");
        assert_eq!(parse("v3.18.0-rc.1+g1234"), Some(v(3, 18, 0)));
        assert_eq!(parse("v4.0.1+g12500dd"), Some(v(4, 0, 1)));
        assert_eq!(parse("Client: v2.17.0+ga690bad"), Some(v(2, 17, 0)), "helm 2");
        assert_eq!(parse("v3.17"), Some(v(3, 17, 0)));
        assert_eq!(parse("version v3.19.1"), Some(v(3, 19, 1)), "the first word that is a version");
        for junk in ["", "helm", "version.BuildInfo{}", "vX.1.0", "v3", "v3.x.0", "v3.17.0.1"] {
            assert_eq!(parse(junk), None, "{junk:?}");
        }
    }

    #[test]
    fn versions_compare_by_number() {
        assert!(v(3, 9, 0) < v(3, 17, 0), "not as strings");
        assert!(v(3, 16, 4) < MINIMUM && MINIMUM <= v(3, 17, 0) && v(3, 17, 0) < v(3, 22, 0));
    }

    #[test]
    fn helm_3_17_and_newer_3_pass() {
        for ok in ["v3.17.0", "v3.17.0-rc.1", "v3.22.0", "v3.22.0+g0123456", "v3.100.0"] {
            assert!(check("helm", ok).is_ok(), "{ok}: {:?}", check("helm", ok));
        }
    }

    #[test]
    fn an_older_helm_is_refused_with_the_versions_and_the_setting() {
        for old in ["v3.16.4+g7877b45", "v3.9.0", "Client: v2.17.0+ga690bad"] {
            let e = check("/opt/helm", old).unwrap_err();
            let found = parse(old).unwrap().to_string();
            for needle in ["/opt/helm", "HELM_BIN", &found, "3.17 or newer", "--take-ownership"] {
                assert!(e.contains(needle), "{old}: {e:?} lacks {needle:?}");
            }
        }
    }

    #[test]
    fn helm_4_is_refused() {
        let e = check("helm", "v4.0.0+g1234").unwrap_err();
        for needle in ["helm 4.0.0", "HELM_BIN", "helm 3, 3.17 or newer", "server-side"] {
            assert!(e.contains(needle), "{e:?} lacks {needle:?}");
        }
    }

    /// A stand-in helm printing `out` for `version --short` (and failing otherwise).
    fn stand_in(dir: &std::path::Path, name: &str, script: &str) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    async fn ask(bin: std::path::PathBuf) -> Result<String, crate::helm::HelmError> {
        let (_tx, rx) = tokio::sync::watch::channel(false);
        let metrics = std::sync::Arc::new(crate::ops::metrics::Metrics::new());
        let helm = crate::helm::Helm::new(bin, "chart".into(), std::time::Duration::from_secs(5), rx, metrics).unwrap();
        helm.version().await
    }

    #[tokio::test]
    async fn helm_is_asked_with_version_short() {
        let dir = tempfile::tempdir().unwrap();
        let new = "[ \"$*\" = 'version --short' ] || exit 3; echo v3.22.0+g0123456";
        let printed = ask(stand_in(dir.path(), "new", new)).await.unwrap();
        assert_eq!(check("new", &printed).unwrap(), v(3, 22, 0));
        let old = ask(stand_in(dir.path(), "old", "echo v3.16.2")).await.unwrap();
        assert!(check("old", &old).unwrap_err().contains("is helm 3.16.2"));
        let failing = ask(stand_in(dir.path(), "failing", "echo broken >&2; exit 1")).await.unwrap_err();
        assert!(failing.to_string().contains("broken"), "{failing}");
        let missing = ask(dir.path().join("no-such-helm")).await.unwrap_err();
        assert!(missing.to_string().contains("HELM_BIN"), "{missing}");
    }

    #[test]
    fn no_version_is_refused() {
        let e = check("helm", "Error: unknown command \"version\"").unwrap_err();
        assert!(e.contains("HELM_BIN") && e.contains("3.17 or newer"), "{e}");
    }
}
