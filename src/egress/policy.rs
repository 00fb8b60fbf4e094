//! The allow-list (pure): which host names, addresses and ports an agent's
//! connection may reach through the egress proxy.
//!
//! A name is allowed by a host rule (exact, or `*.suffix` for any name
//! below `suffix`, never `suffix` itself) naming its port. An IP literal is
//! allowed only by a CIDR rule: a host rule never opens an address the
//! agent spelled itself. Every address a name resolves to is checked again:
//! never loopback, link-local, unspecified, multicast or a metadata service
//! (the operator's own guard, [`crate::vllm::netguard`]), and never inside
//! the cluster's own ranges unless the name is a Service name of the
//! cluster domain or the address is in an allowed CIDR, so a public name
//! pointed at a Service address reaches nothing of the cluster. The names a
//! lookup passed through (CNAMEs, an ExternalName Service) must be allowed
//! too, or the answer is refused.

use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// Ports a rule with none listed allows.
pub const DEFAULT_PORTS: [u16; 1] = [443];

/// One host rule: a name, or `*.` and a suffix, with its ports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostRule {
    pub host: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<u16>,
}

/// One address range with its ports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CidrRule {
    pub cidr: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<u16>,
}

/// The allow-list the chart writes for the proxy (JSON), and the cluster's
/// ranges and domain it needs to tell a Service from a public host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyFile {
    #[serde(default)]
    pub hosts: Vec<HostRule>,
    #[serde(default)]
    pub cidrs: Vec<CidrRule>,
    /// The cluster's pod and Service ranges.
    #[serde(default)]
    pub cluster_cidrs: Vec<String>,
    /// The cluster's DNS domain (`cluster.local`).
    #[serde(default)]
    pub cluster_domain: String,
}

/// An address range, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Net {
    addr: IpAddr,
    len: u8,
}

impl Net {
    pub fn parse(s: &str) -> Result<Net, String> {
        let (addr, len) = s.split_once('/').ok_or_else(|| format!("{s:?}: expected ADDRESS/LENGTH"))?;
        let addr: IpAddr = addr.parse().map_err(|_| format!("{s:?}: not an IP address"))?;
        let len: u8 = len.parse().map_err(|_| format!("{s:?}: not a prefix length"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if len > max {
            return Err(format!("{s:?}: the prefix is at most {max} bits"));
        }
        Ok(Net { addr, len })
    }

    /// Whether every address of `inner` is in this range (same family).
    pub fn holds(&self, inner: &Net) -> bool {
        inner.len >= self.len && inner.addr.is_ipv4() == self.addr.is_ipv4() && self.contains(inner.addr)
    }

    /// Whether the range holds `ip`, or an IPv4 address `ip` carries (an
    /// IPv4-mapped, NAT64, 6to4 or Teredo form: what it reaches in the end).
    pub fn contains(&self, ip: IpAddr) -> bool {
        forms(ip).into_iter().flatten().any(|ip| match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => prefix_eq(&net.octets(), &ip.octets(), self.len),
            (IpAddr::V6(net), IpAddr::V6(ip)) => prefix_eq(&net.octets(), &ip.octets(), self.len),
            _ => false,
        })
    }
}

/// `ip` and the IPv4 addresses an IPv6 address carries.
fn forms(ip: IpAddr) -> [Option<IpAddr>; 4] {
    match ip {
        IpAddr::V6(v6) => {
            let [a, b] = crate::vllm::netguard::embedded_v4(v6);
            [Some(ip), v6.to_ipv4_mapped().map(IpAddr::V4), a.map(IpAddr::V4), b.map(IpAddr::V4)]
        }
        v4 => [Some(v4), None, None, None],
    }
}

fn prefix_eq(a: &[u8], b: &[u8], len: u8) -> bool {
    let (whole, rest) = (usize::from(len / 8), len % 8);
    if a[..whole] != b[..whole] {
        return false;
    }
    rest == 0 || {
        let mask = 0xffu8 << (8 - rest);
        a[whole] & mask == b[whole] & mask
    }
}

/// Why a connection is refused; each is one value of the metric's label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No host rule names this host and port.
    HostNotAllowed,
    /// An IP literal outside every allowed CIDR (and port).
    AddressNotAllowed,
    /// A name the lookup passed through (a CNAME) is not allowed.
    AliasNotAllowed(String),
    /// The name or an address it resolves to is never dialled.
    Guarded(String),
    /// A public name resolving into the cluster's own ranges.
    ClusterAddress(IpAddr),
    /// The name does not resolve (or not in time).
    Lookup(String),
    /// The request is malformed (two Host headers, a Host unlike the target).
    BadRequest(String),
}

impl Refusal {
    /// The metric label.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::HostNotAllowed => "host_not_allowed",
            Refusal::AddressNotAllowed => "address_not_allowed",
            Refusal::AliasNotAllowed(_) => "alias_not_allowed",
            Refusal::Guarded(_) => "guarded_address",
            Refusal::ClusterAddress(_) => "cluster_address",
            Refusal::Lookup(_) => "lookup_failed",
            Refusal::BadRequest(_) => "bad_request",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::HostNotAllowed => f.write_str("the host and port are not in the class's egress allow-list"),
            Refusal::AddressNotAllowed => {
                f.write_str("an IP address is reached only through the allow-list's CIDRs, and none holds it")
            }
            Refusal::AliasNotAllowed(name) => write!(f, "the name is an alias of {name}, which is not allowed"),
            Refusal::Guarded(why) => write!(f, "refused: {why}"),
            Refusal::ClusterAddress(ip) => {
                write!(f, "the name resolves to {ip}, inside the cluster, and is not a Service name of the cluster")
            }
            Refusal::Lookup(why) => write!(f, "the name does not resolve: {why}"),
            Refusal::BadRequest(why) => write!(f, "bad request: {why}"),
        }
    }
}

/// The allow-list, parsed.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    hosts: Vec<(Pattern, Vec<u16>)>,
    cidrs: Vec<(Net, Vec<u16>)>,
    cluster: Vec<Net>,
    /// `.svc.` and the cluster domain, lowercase, without a trailing dot.
    service_suffix: String,
    /// Loopback targets pass the guard (tests only: the proxy's own pod).
    loopback: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    Exact(String),
    /// Any name ending in `.suffix` (the suffix stored with its dot).
    Below(String),
}

/// A host name as compared: lowercase, without a trailing dot.
pub fn normalize(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// Whether `s` is a DNS name (letters, digits, '-', '_' and dots; 253 bytes at most).
pub fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

impl Policy {
    pub fn new(file: &PolicyFile) -> Result<Policy, String> {
        let ports = |p: &[u16]| if p.is_empty() { DEFAULT_PORTS.to_vec() } else { p.to_vec() };
        let mut hosts = Vec::new();
        for rule in &file.hosts {
            let host = normalize(&rule.host);
            let pattern = match host.strip_prefix("*.") {
                Some(suffix) if valid_name(suffix) => Pattern::Below(format!(".{suffix}")),
                None if valid_name(&host) && host.parse::<IpAddr>().is_err() => Pattern::Exact(host),
                _ => return Err(format!("hosts: {:?} is not a host name or *.suffix", rule.host)),
            };
            hosts.push((pattern, ports(&rule.ports)));
        }
        let cidrs =
            file.cidrs.iter().map(|r| Ok((Net::parse(&r.cidr)?, ports(&r.ports)))).collect::<Result<_, String>>()?;
        let cluster = file.cluster_cidrs.iter().map(|c| Net::parse(c)).collect::<Result<_, String>>()?;
        let domain = normalize(if file.cluster_domain.is_empty() { "cluster.local" } else { &file.cluster_domain });
        Ok(Policy { hosts, cidrs, cluster, service_suffix: format!(".svc.{domain}"), loopback: false })
    }

    /// The same list, with loopback targets past the guard (tests and the
    /// bench, whose stand-ins listen there; the chart never asks for it).
    pub fn with_loopback(mut self) -> Policy {
        self.loopback = true;
        self
    }

    /// Whether a host rule allows `name` (normalized) on `port`.
    pub fn allows_name(&self, name: &str, port: u16) -> bool {
        let name = normalize(name);
        self.hosts.iter().any(|(pattern, ports)| {
            ports.contains(&port)
                && match pattern {
                    Pattern::Exact(h) => *h == name,
                    Pattern::Below(suffix) => name.ends_with(suffix.as_str()) && name.len() > suffix.len(),
                }
        })
    }

    /// Whether a CIDR rule allows `ip` on `port`.
    pub fn allows_address(&self, ip: IpAddr, port: u16) -> bool {
        self.cidrs.iter().any(|(net, ports)| ports.contains(&port) && net.contains(ip))
    }

    /// The decision on an IP literal the agent asked for.
    pub fn check_literal(&self, ip: IpAddr, port: u16) -> Result<(), Refusal> {
        crate::vllm::netguard::check_ip(ip, self.loopback).map_err(|r| Refusal::Guarded(r.to_string()))?;
        if self.allows_address(ip, port) { Ok(()) } else { Err(Refusal::AddressNotAllowed) }
    }

    /// The decision on a name before it is looked up.
    pub fn check_name(&self, name: &str, port: u16) -> Result<(), Refusal> {
        crate::vllm::netguard::check_host_name(name, self.loopback).map_err(|r| Refusal::Guarded(r.to_string()))?;
        if self.allows_name(name, port) { Ok(()) } else { Err(Refusal::HostNotAllowed) }
    }

    /// The decision on what `name` resolved to: the aliases it passed
    /// through and every address (a mixed answer is refused whole).
    pub fn check_answer(&self, name: &str, port: u16, aliases: &[String], ips: &[IpAddr]) -> Result<(), Refusal> {
        if let Some(alias) = aliases.iter().find(|a| !self.allows_name(a, port)) {
            return Err(Refusal::AliasNotAllowed(normalize(alias)));
        }
        if ips.is_empty() {
            return Err(Refusal::Lookup("no address".into()));
        }
        let service = self.is_service_name(name);
        for ip in ips {
            crate::vllm::netguard::check_ip(*ip, self.loopback)
                .map_err(|r| Refusal::Guarded(format!("{ip} is {r}")))?;
            let inside = self.cluster.iter().any(|net| net.contains(*ip));
            if inside && !service && !self.allows_address(*ip, port) {
                return Err(Refusal::ClusterAddress(*ip));
            }
        }
        Ok(())
    }

    /// `name` (normalized) as the proxy looks it up: a Service's short name
    /// (`<service>.<namespace>.svc`, as model server URLs are often written)
    /// gains the cluster domain; any other name stays as it is, and is
    /// looked up as written (fully qualified, no search list).
    pub fn qualify(&self, name: &str) -> String {
        let name = normalize(name);
        let short = self.service_suffix.trim_start_matches('.').split('.').next().unwrap_or("svc");
        match name.strip_suffix(&format!(".{short}")) {
            Some(rest) if rest.contains('.') => format!("{name}{}", &self.service_suffix[short.len() + 1..]),
            _ => name,
        }
    }

    /// Whether `name` is a Service's name in the cluster domain.
    fn is_service_name(&self, name: &str) -> bool {
        let name = normalize(name);
        name.ends_with(&self.service_suffix) && name.len() > self.service_suffix.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy::new(&PolicyFile {
            hosts: vec![
                HostRule { host: "git.example.test".into(), ports: vec![] },
                HostRule { host: "*.models.svc.cluster.local".into(), ports: vec![8000] },
                HostRule { host: "*.pkg.test".into(), ports: vec![443, 80] },
            ],
            cidrs: vec![CidrRule { cidr: "198.19.7.0/24".into(), ports: vec![22] }],
            cluster_cidrs: vec!["198.18.0.0/16".into(), "fd00:10::/64".into()],
            cluster_domain: "cluster.local".into(),
        })
        .unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn names_are_allowed_by_exact_rules_and_wildcards_on_their_ports() {
        let p = policy();
        assert_eq!(p.check_name("git.example.test", 443), Ok(()));
        assert_eq!(p.check_name("GIT.Example.Test.", 443), Ok(()), "case and a trailing dot do not matter");
        assert_eq!(p.check_name("git.example.test", 80), Err(Refusal::HostNotAllowed), "443 alone by default");
        assert_eq!(p.check_name("evil.git.example.test", 443), Err(Refusal::HostNotAllowed), "exact means exact");
        assert_eq!(p.check_name("a.pkg.test", 80), Ok(()));
        assert_eq!(p.check_name("a.b.pkg.test", 443), Ok(()), "any depth below the suffix");
        assert_eq!(p.check_name("pkg.test", 443), Err(Refusal::HostNotAllowed), "*.suffix is not the suffix");
        assert_eq!(p.check_name("evilpkg.test", 443), Err(Refusal::HostNotAllowed), "the dot counts");
        assert_eq!(p.check_name("vllm.models.svc.cluster.local", 8000), Ok(()));
        assert_eq!(p.check_name("vllm.other.svc.cluster.local", 8000), Err(Refusal::HostNotAllowed));
        assert!(matches!(p.check_name("metadata.google.internal", 443), Err(Refusal::Guarded(_))));
    }

    #[test]
    fn ip_literals_need_a_cidr_rule_and_pass_the_guard() {
        let p = policy();
        assert_eq!(p.check_literal(ip("198.19.7.9"), 22), Ok(()));
        assert_eq!(p.check_literal(ip("::ffff:198.19.7.9"), 22), Ok(()), "an IPv4-mapped spelling is the same address");
        assert_eq!(p.check_literal(ip("198.19.7.9"), 443), Err(Refusal::AddressNotAllowed));
        assert_eq!(p.check_literal(ip("198.19.8.1"), 22), Err(Refusal::AddressNotAllowed));
        assert!(matches!(p.check_literal(ip("169.254.169.254"), 80), Err(Refusal::Guarded(_))));
        assert!(matches!(p.check_literal(ip("127.0.0.1"), 443), Err(Refusal::Guarded(_))));
    }

    #[test]
    fn answers_are_checked_address_by_address_and_alias_by_alias() {
        let p = policy();
        let name = "git.example.test";
        assert_eq!(p.check_answer(name, 443, &[], &[ip("203.0.113.5")]), Ok(()));
        // A public name pointed into the cluster (a rebinding, or a record the tenant controls).
        assert_eq!(
            p.check_answer(name, 443, &[], &[ip("203.0.113.5"), ip("198.18.3.4")]),
            Err(Refusal::ClusterAddress(ip("198.18.3.4"))),
            "one bad address refuses the answer"
        );
        assert!(matches!(p.check_answer(name, 443, &[], &[ip("169.254.169.254")]), Err(Refusal::Guarded(_))));
        assert!(matches!(p.check_answer(name, 443, &[], &[ip("::1")]), Err(Refusal::Guarded(_))));
        // A Service name of the cluster may resolve inside it.
        let svc = "vllm.models.svc.cluster.local";
        assert_eq!(p.check_answer(svc, 8000, &[], &[ip("198.18.200.1")]), Ok(()));
        // An ExternalName Service (a CNAME) pointing somewhere not allowed.
        assert_eq!(
            p.check_answer(svc, 8000, &["evil.example.net.".into()], &[ip("203.0.113.9")]),
            Err(Refusal::AliasNotAllowed("evil.example.net".into()))
        );
        assert_eq!(p.check_answer(name, 443, &[], &[]), Err(Refusal::Lookup("no address".into())));
    }

    #[test]
    fn a_services_short_name_gains_the_cluster_domain() {
        let p = policy();
        assert_eq!(p.qualify("vllm.models.svc"), "vllm.models.svc.cluster.local");
        assert_eq!(p.qualify("VLLM.models.svc."), "vllm.models.svc.cluster.local");
        assert_eq!(p.qualify("vllm.models.svc.cluster.local"), "vllm.models.svc.cluster.local");
        assert_eq!(p.qualify("models.svc"), "models.svc", "a namespace's name alone is no Service");
        assert_eq!(p.qualify("git.example.test"), "git.example.test");
        assert_eq!(p.qualify("svc"), "svc");
    }

    #[test]
    fn every_reason_is_one_the_relay_names() {
        let ip = ip("10.0.0.1");
        let all = [
            Refusal::HostNotAllowed,
            Refusal::AddressNotAllowed,
            Refusal::AliasNotAllowed("x".into()),
            Refusal::Guarded("x".into()),
            Refusal::ClusterAddress(ip),
            Refusal::Lookup("x".into()),
            Refusal::BadRequest("x".into()),
        ];
        for r in all {
            assert!(crate::signin::egress::REASONS.iter().any(|(n, _)| *n == r.reason()), "{r:?}");
        }
        assert_eq!(crate::signin::egress::REASONS.len(), 7);
    }

    #[test]
    fn bad_rules_are_named() {
        let bad = |host: &str| {
            Policy::new(&PolicyFile {
                hosts: vec![HostRule { host: host.into(), ports: vec![] }],
                ..Default::default()
            })
        };
        for host in ["", "*", "*.", "a..b", "10.0.0.1", "a b", "*.*.x"] {
            assert!(bad(host).unwrap_err().contains("hosts"), "{host:?}");
        }
        let cidr = |c: &str| {
            Policy::new(&PolicyFile { cidrs: vec![CidrRule { cidr: c.into(), ports: vec![] }], ..Default::default() })
        };
        for c in ["10.0.0.0", "10.0.0.0/33", "x/8", "::/129"] {
            assert!(cidr(c).is_err(), "{c:?}");
        }
        assert!(cidr("10.0.0.0/8").is_ok());
        assert!(Net::parse("10.0.0.0/8").unwrap().contains(ip("10.255.0.1")));
        assert!(!Net::parse("10.0.0.0/9").unwrap().contains(ip("10.128.0.1")));
        // What an IPv6 address carries reaches that IPv4 address (NAT64, 6to4).
        assert!(Net::parse("10.0.0.0/8").unwrap().contains(ip("64:ff9b::a00:5")));
        assert!(Net::parse("10.0.0.0/8").unwrap().contains(ip("2002:a00:5::1")));
        assert!(Net::parse("0.0.0.0/0").unwrap().contains(ip("1.2.3.4")));
    }
}
