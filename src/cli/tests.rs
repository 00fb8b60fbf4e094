//! Tests of the command line: flags, env fallbacks, the values command.

use clap::CommandFactory;

use super::*;
use crate::watch_scope::WatchScope;

fn parse(args: &[&str]) -> Cli {
    Cli::try_parse_from(std::iter::once("tinycode-operator").chain(args.iter().copied()))
        .unwrap_or_else(|e| panic!("{args:?} refused: {e}"))
}

#[test]
fn command_line_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn settings_after_run() {
    let cli = parse(&[
        "run",
        "--metrics-addr",
        "127.0.0.1:9999",
        "--health-addr",
        "127.0.0.1:9998",
        "--concurrency",
        "2",
        "--leader-elect",
        "false",
        "--lease-duration-seconds",
        "7",
        "--lease-renew-deadline-seconds",
        "5",
        "--lease-retry-period-seconds",
        "1",
        "--watch-namespaces",
        "team-a",
        "--helm-bin",
        "/opt/helm",
        "--allowed-registries",
        "a.example,b.example",
        "--allowed-cluster-roles",
        "view,edit",
        "--operator-namespace",
        "ops",
    ]);
    assert!(matches!(cli.command, Some(Command::Run)));
    assert_eq!(cli.run.metrics_addr, "127.0.0.1:9999".parse().unwrap());
    assert_eq!(cli.run.health_addr, "127.0.0.1:9998".parse().unwrap());
    assert_eq!(cli.run.concurrency(), 2);
    assert!(!cli.run.leader_elect);
    assert_eq!(cli.run.lease_duration_seconds, 7);
    let t = cli.run.lease_timings().unwrap();
    assert_eq!(
        (t.lease_duration, t.renew_deadline, t.retry_period),
        (Duration::from_secs(7), Duration::from_secs(5), Duration::from_secs(1))
    );
    assert_eq!(cli.run.watch_scope("ops"), Ok(WatchScope::Namespace("team-a".into())));
    assert_eq!(cli.settings.helm_bin, PathBuf::from("/opt/helm"));
    assert_eq!(cli.settings.allowed_registries, ["a.example", "b.example"]);
    assert_eq!(cli.settings.allowed_cluster_roles, ["view", "edit"]);
    assert_eq!(cli.settings.operator_namespace, "ops");
}

#[test]
fn the_renew_deadline_must_be_shorter_than_the_lease() {
    assert_eq!(parse(&["run"]).run.lease_timings().unwrap(), crate::ops::leader::Timings::default());
    let six = parse(&["run", "--lease-duration-seconds", "6"]).run.lease_timings().unwrap();
    assert_eq!(six, crate::ops::leader::Timings::for_lease(Duration::from_secs(6)), "derived from the lease");
    let cli = parse(&["run", "--lease-duration-seconds", "10", "--lease-renew-deadline-seconds", "10"]);
    let err = cli.run.lease_timings().unwrap_err();
    assert!(err.contains("shorter than the lease duration"), "{err}");
}

#[test]
fn settings_before_run() {
    let cli = parse(&["--concurrency", "2", "--metrics-addr", "127.0.0.1:9999", "run"]);
    assert!(matches!(cli.command, Some(Command::Run)));
    assert_eq!(cli.run.concurrency(), 2);
    assert_eq!(cli.run.metrics_addr, "127.0.0.1:9999".parse().unwrap());
}

#[test]
fn metrics_auth_defaults_to_rbac_and_none_is_spelled_out() {
    use crate::ops::metrics_auth::MetricsAuth;
    if std::env::var_os("TINYCODE_METRICS_AUTH").is_none() {
        assert_eq!(parse(&["run"]).run.metrics_auth, MetricsAuth::Rbac);
    }
    assert_eq!(parse(&["run", "--metrics-auth", "none"]).run.metrics_auth, MetricsAuth::None);
    assert_eq!(parse(&["--metrics-auth", "rbac", "run"]).run.metrics_auth, MetricsAuth::Rbac);
    let refused = Cli::try_parse_from(["tinycode-operator", "run", "--metrics-auth", "off"]);
    assert!(refused.is_err(), "an unknown mode must not fall back to either");
}

#[test]
fn settings_on_both_sides_of_run() {
    let cli = parse(&["--concurrency", "2", "run", "--helm-timeout-seconds", "9"]);
    assert_eq!(cli.run.concurrency(), 2);
    assert_eq!(cli.settings.helm_timeout_seconds, 9);
    assert_eq!(parse(&["run", "--max-retries", "7"]).settings.max_retries, 7, "after run");
    assert_eq!(parse(&["--max-retries", "8", "run"]).settings.max_retries, 8, "before run");
}

#[test]
fn every_setting_is_global() {
    let cmd = Cli::command();
    for arg in cmd.get_arguments().filter(|a| !matches!(a.get_id().as_str(), "help" | "version")) {
        assert!(
            arg.is_global_set(),
            "--{} is not global: README says every setting goes before or after run",
            arg.get_id()
        );
    }
}

#[test]
fn no_subcommand_runs_the_controller_with_settings() {
    let cli = parse(&["--concurrency", "3"]);
    assert!(cli.command.is_none(), "main() treats a missing subcommand as run");
    assert_eq!(cli.run.concurrency(), 3);
}

#[test]
fn values_takes_settings_after_it() {
    let cli = parse(&["values", "-f", "x.yaml", "--allowed-registries", "a"]);
    match cli.command {
        Some(Command::Values { file, .. }) => assert_eq!(file, PathBuf::from("x.yaml")),
        other => panic!("{other:?}"),
    }
    assert_eq!(cli.settings.allowed_registries, ["a"]);
    let cli = parse(&["--allowed-registries", "b", "values", "-f", "x.yaml"]);
    assert_eq!(cli.settings.allowed_registries, ["b"]);
}

#[test]
fn unknown_flags_are_still_refused() {
    assert!(Cli::try_parse_from(["tinycode-operator", "run", "--no-such-flag"]).is_err());
}

#[test]
fn run_help_lists_the_settings_and_their_env() {
    let mut cmd = Cli::command();
    cmd.build();
    let run = cmd.find_subcommand_mut("run").expect("run subcommand");
    let help = run.render_help().to_string();
    for needle in [
        "--metrics-addr",
        "TINYCODE_METRICS_ADDR",
        "--health-addr",
        "TINYCODE_HEALTH_ADDR",
        "--concurrency",
        "TINYCODE_CONCURRENCY",
        "--leader-elect",
        "--allowed-registries",
        "TINYCODE_ALLOWED_REGISTRIES",
        "--helm-bin",
        "HELM_BIN",
        "--watch-namespaces",
        "WATCH_NAMESPACE",
    ] {
        assert!(help.contains(needle), "run --help lacks {needle}:\n{help}");
    }
}

#[test]
fn concurrency_defaults_to_four_per_core() {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    assert_eq!(parse(&["run"]).run.concurrency() as usize, (cores * 4).clamp(2, 16));
    assert_eq!(parse(&["run", "--concurrency", "1"]).run.concurrency(), 1, "a given value wins");
}

#[test]
fn tenant_guards_are_on_by_default_and_their_flags_are_checked() {
    let s = parse(&["run"]).settings.to_settings().unwrap();
    assert!(s.require_prepared_label, "preparation needs the cluster-admin's label by default");
    assert!(s.hostpath_allowed_prefixes.is_empty() && s.egress_deny_cidrs.is_empty());
    let s = parse(&[
        "run",
        "--require-prepared-label",
        "false",
        "--hostpath-allowed-prefixes",
        "/srv/,/home//dev",
        "--egress-deny-cidrs",
        "10.20.0.0/16,fd12::/16",
    ])
    .settings
    .to_settings()
    .unwrap();
    assert!(!s.require_prepared_label);
    assert_eq!(s.hostpath_allowed_prefixes, vec!["/srv", "/home/dev"], "normalised");
    assert_eq!(s.egress_deny_cidrs, vec!["10.20.0.0/16", "fd12::/16"]);
    for bad in [&["--hostpath-allowed-prefixes", "/srv/../etc"][..], &["--egress-deny-cidrs", "10.20.0.1/16"]] {
        let args: Vec<&str> = std::iter::once("run").chain(bad.iter().copied()).collect();
        let e = parse(&args).settings.to_settings().unwrap_err();
        assert!(e.contains(bad[0]), "{e}");
    }
}

/// The scope as `run` reads it from the command line (the list's own parsing
/// is tested in crate::watch_scope; the environment is the same value).
fn scope(args: &[&str]) -> Result<WatchScope, String> {
    let args: Vec<&str> = std::iter::once("run").chain(args.iter().copied()).collect();
    parse(&args).run.watch_scope(crate::settings::DEFAULT_OPERATOR_NAMESPACE)
}

#[test]
fn watch_namespaces_takes_none_one_or_refuses_several() {
    let team = Ok(WatchScope::Namespace("team-a".into()));
    if std::env::var_os("WATCH_NAMESPACE").is_none() {
        assert_eq!(scope(&[]), Ok(WatchScope::All), "absent: every namespace, as before");
    }
    assert_eq!(scope(&["--watch-namespaces", ""]), Ok(WatchScope::All), "OLM's value for all namespaces");
    assert_eq!(scope(&["--watch-namespaces", "team-a"]), team);
    assert_eq!(scope(&["--watch-namespaces=team-a"]), team);
    assert_eq!(scope(&["--watch-namespaces", " team-a , "]), team);
    assert_eq!(scope(&["--watch-namespace", "team-a"]), team, "the earlier spelling still works");
    assert_eq!(parse(&["--watch-namespaces", "team-a", "run"]).run.watch_scope("ops"), team, "before run too");
    for several in [
        &["--watch-namespaces", "team-a,team-b"][..],
        &["--watch-namespaces", "team-a", "--watch-namespaces", "team-b"],
    ] {
        let e = scope(several).unwrap_err();
        assert!(e.contains("--watch-namespaces") && e.contains("MultiNamespace"), "{e}");
    }
    let e = scope(&["--watch-namespaces", "Team_A"]).unwrap_err();
    assert!(e.contains("--watch-namespaces") && e.contains("\"Team_A\" is not a namespace name"), "{e}");
}

#[test]
fn watching_only_the_operators_own_namespace_is_refused() {
    let e = parse(&["run", "--watch-namespaces", "ops"]).run.watch_scope("ops").unwrap_err();
    assert!(e.contains("--watch-namespaces") && e.contains("operator's own namespace ops"), "{e}");
    assert!(e.contains("OwnNamespace"), "names the OLM install mode: {e}");
}

#[test]
fn the_gate_has_flags_of_its_own_with_their_defaults() {
    use crate::gate::Mode;
    let cli = parse(&["gate", "--namespace", "team-a", "--instance", "ide", "--mode", "oidc"]);
    let Some(Command::Gate(args)) = cli.command else { panic!("not the gate: {:?}", cli.command) };
    let s = args.to_settings();
    assert_eq!(s.listen, "127.0.0.1:4181".parse().unwrap());
    assert_eq!(s.upstream, "http://127.0.0.1:4096");
    assert_eq!((s.target.namespace.as_str(), s.target.instance.as_str()), ("team-a", "ide"));
    assert_eq!(s.mode, Mode::Oidc);
    assert_eq!((s.prefixes.user.as_str(), s.prefixes.groups.as_str()), ("", ""));
    assert_eq!(s.cache_ttl, Duration::from_secs(30));
    assert_eq!(s.relay_credential_file, PathBuf::from("/var/run/secrets/tinycode/gate/relay-credential"));
    assert_eq!(s.review_url, None, "oidc needs --review-url (the gate refuses to start without it)");
    assert_eq!(s.ca_file, PathBuf::from("/var/run/secrets/tinycode/gate/ca.crt"));
    assert_eq!(s.api_server, None, "from KUBERNETES_SERVICE_HOST/PORT when the gate starts");
    assert_eq!(s.password_file, Some(PathBuf::from("/var/run/secrets/tinycode/gate/password")));

    let cli = parse(&[
        "gate",
        "--namespace=n",
        "--instance=i",
        "--mode=openshift",
        "--listen=127.0.0.1:5000",
        "--upstream=http://127.0.0.1:5001",
        "--username-prefix=oidc:",
        "--groups-prefix=oidc-group:",
        "--cache-seconds=60",
        "--api-server=https://10.0.0.1:6443",
        "--password-file=",
    ]);
    let Some(Command::Gate(args)) = cli.command else { panic!("not the gate") };
    let s = args.to_settings();
    assert_eq!(s.mode, Mode::Openshift);
    assert_eq!((s.prefixes.user.as_str(), s.prefixes.groups.as_str()), ("oidc:", "oidc-group:"));
    assert_eq!(s.cache_ttl, Duration::from_secs(60));
    assert_eq!(s.api_server.as_deref(), Some("https://10.0.0.1:6443"));
    assert_eq!(s.password_file, None, "an empty --password-file sends no password");

    let refused = |args: &[&str]| Cli::try_parse_from(std::iter::once("tinycode-operator").chain(args.iter().copied()));
    assert!(refused(&["gate", "--namespace=n", "--instance=i"]).is_err(), "--mode is required");
    assert!(refused(&["gate", "--namespace=n", "--instance=i", "--mode=oidc", "--cache-seconds=61"]).is_err());
    assert!(refused(&["gate", "--namespace=n", "--instance=i", "--mode=ldap"]).is_err());
    assert!(refused(&["run", "--instance=i"]).is_err(), "gate flags are not run's");
    assert!(refused(&["--upstream=http://x", "gate", "--namespace=n", "--instance=i", "--mode=oidc"]).is_err());
}
