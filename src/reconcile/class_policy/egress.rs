//! Egress lists (pure): whether a list is one the proxy reads, and whether
//! an instance's own list (`spec.egress`) stays within its class's, so a
//! tenant can narrow what the class allows, never widen it.

use crate::api::{EgressCidr, EgressHost, EgressPolicy};
use crate::egress::policy::{CidrRule, HostRule, Net, Policy, PolicyFile};

/// Ports a rule with none listed allows (the proxy's default).
fn ports(p: &[i32]) -> Vec<u16> {
    let p: Vec<u16> = p.iter().filter_map(|p| u16::try_from(*p).ok()).collect();
    if p.is_empty() { crate::egress::policy::DEFAULT_PORTS.to_vec() } else { p }
}

/// Why the proxy would not read `list`, if it would not.
pub fn unreadable(list: &EgressPolicy) -> Option<String> {
    let file = PolicyFile {
        hosts: list.hosts.iter().map(|h| HostRule { host: h.host.clone(), ports: ports(&h.ports) }).collect(),
        cidrs: list.cidrs.iter().map(|c| CidrRule { cidr: c.cidr.clone(), ports: ports(&c.ports) }).collect(),
        ..PolicyFile::default()
    };
    Policy::new(&file).err()
}

/// Whether the class's host rule `outer` allows everything `inner` does.
fn host_within(inner: &EgressHost, outer: &EgressHost) -> bool {
    let (i, o) = (inner.host.to_ascii_lowercase(), outer.host.to_ascii_lowercase());
    let name_within = match (i.strip_prefix("*."), o.strip_prefix("*.")) {
        (None, None) => i == o,
        (None, Some(suffix)) => i.ends_with(&format!(".{suffix}")),
        // Any name below `inner`'s suffix is below `outer`'s when that suffix is the same or below it.
        (Some(inner_suffix), Some(suffix)) => inner_suffix == suffix || inner_suffix.ends_with(&format!(".{suffix}")),
        (Some(_), None) => false,
    };
    let outer_ports = ports(&outer.ports);
    name_within && ports(&inner.ports).iter().all(|p| outer_ports.contains(p))
}

/// Whether the class's CIDR rule `outer` holds every address and port of `inner`.
fn cidr_within(inner: &EgressCidr, outer: &EgressCidr) -> bool {
    let (Ok(i), Ok(o)) = (Net::parse(&inner.cidr), Net::parse(&outer.cidr)) else { return false };
    let outer_ports = ports(&outer.ports);
    o.holds(&i) && ports(&inner.ports).iter().all(|p| outer_ports.contains(p))
}

/// The entries of the instance's list the class's does not allow: (field, entry).
pub fn beyond(instance: &EgressPolicy, class: &EgressPolicy) -> Vec<(String, String)> {
    let hosts = instance.hosts.iter().enumerate().filter(|(_, h)| !class.hosts.iter().any(|o| host_within(h, o)));
    let cidrs = instance.cidrs.iter().enumerate().filter(|(_, c)| !class.cidrs.iter().any(|o| cidr_within(c, o)));
    hosts
        .map(|(i, h)| (format!("spec.egress.hosts[{i}]"), format!("{} on ports {:?}", h.host, ports(&h.ports))))
        .chain(
            cidrs.map(|(i, c)| {
                (format!("spec.egress.cidrs[{i}]"), format!("{} on ports {:?}", c.cidr, ports(&c.ports)))
            }),
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(v: serde_json::Value) -> EgressPolicy {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn an_instance_narrows_its_class_and_never_widens_it() {
        let class = list(serde_json::json!({
            "hosts": [{"host": "github.com"}, {"host": "*.pypi.org", "ports": [443, 80]}, {"host": "*.example.com"}],
            "cidrs": [{"cidr": "10.96.0.0/16", "ports": [443, 6443]}]
        }));
        let fields = |v: serde_json::Value| beyond(&list(v), &class).into_iter().map(|(f, _)| f).collect::<Vec<_>>();
        let within = serde_json::json!({
            "hosts": [{"host": "github.com"}, {"host": "files.pypi.org", "ports": [80]}, {"host": "*.pypi.org"},
                      {"host": "*.eu.example.com"}, {"host": "GitHub.com", "ports": [443]}],
            "cidrs": [{"cidr": "10.96.0.1/32"}, {"cidr": "10.96.4.0/24", "ports": [6443]}]
        });
        assert!(fields(within).is_empty());
        let beyond_it = serde_json::json!({
            "hosts": [{"host": "gitlab.com"}, {"host": "github.com", "ports": [22]}, {"host": "*.org"},
                      {"host": "pypi.org"}, {"host": "*.com"}, {"host": "example.com"}],
            "cidrs": [{"cidr": "10.0.0.0/8"}, {"cidr": "10.96.0.1/32", "ports": [22]}, {"cidr": "192.168.0.1/32"}]
        });
        assert_eq!(
            fields(beyond_it),
            vec![
                "spec.egress.hosts[0]",
                "spec.egress.hosts[1]",
                "spec.egress.hosts[2]",
                "spec.egress.hosts[3]",
                "spec.egress.hosts[4]",
                "spec.egress.hosts[5]",
                "spec.egress.cidrs[0]",
                "spec.egress.cidrs[1]",
                "spec.egress.cidrs[2]",
            ]
        );
        assert!(beyond(&list(serde_json::json!({})), &class).is_empty(), "an empty list: nothing but DNS");
        assert!(
            unreadable(&list(serde_json::json!({"hosts": [{"host": format!("{}.com", "a".repeat(64))}]}))).is_some()
        );
        assert!(unreadable(&class).is_none());
    }
}
