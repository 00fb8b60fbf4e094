//! Which network addresses the operator may dial on a tenant's behalf.
//!
//! Tenants choose the URLs the operator probes (`spec.vllm[].url`, the
//! `tinycode.dev/vllm-url` annotation on discovered Services), so those URLs
//! are adversarial: pointed at the node itself (loopback, `0.0.0.0`), at
//! link-local neighbours or at a cloud metadata service, a probe would read
//! data the tenant must not see (server-side request forgery). Looking at
//! the URL text is not enough: the same address has many spellings
//! (`[::ffff:127.0.0.1]`, `[64:ff9b::7f00:1]`, `2130706433`) and a host name
//! can resolve to anything, or to something else a second later (DNS
//! rebinding). So the guard classifies the *address actually dialled*:
//!
//! * [`check_ip`] classifies one address, unwrapping IPv4-mapped,
//!   IPv4-compatible, NAT64, 6to4 and Teredo forms to the IPv4 addresses
//!   they carry;
//! * [`check_host_name`] refuses names that mean "this node" or "the
//!   metadata service" before any lookup;
//! * [`GuardedResolver`] is the HTTP client's DNS resolver: it resolves a
//!   name once and hands the client only addresses that passed
//!   [`check_ip`], so the address checked is the address connected to.
//!   Tenants also run the DNS names' servers, in effect, so lookups are
//!   bounded: at most [`DNS_SLOTS`] at once, each (wait included) within the
//!   probe timeout, through an async resolver whose lookups stop when their
//!   future is dropped. (`tokio::net::lookup_host` runs getaddrinfo on the
//!   blocking pool, where a lookup that hangs keeps its thread after any
//!   timeout: enough of them would fill the pool.)
//!
//! Private ranges (10/8, 172.16/12, 192.168/16, fc00::/7) stay allowed:
//! in-cluster model servers live there. `allow_loopback` exists for tests
//! with loopback stand-in servers; it never opens metadata, unspecified or
//! link-local addresses.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use hickory_resolver::config::{ResolveHosts, ResolverConfig};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::{ResolverBuilder, TokioResolver};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use tokio::sync::Semaphore;

/// DNS lookups in flight at once, across all probes.
pub const DNS_SLOTS: usize = 16;

/// Why an address or host name is never dialled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// 127.0.0.0/8, ::1, `localhost`: the operator's own node.
    Loopback,
    /// 0.0.0.0/8 and `::`: connecting to them reaches the local host.
    Unspecified,
    /// 169.254.0.0/16 and fe80::/10.
    LinkLocal,
    /// A cloud metadata service (instance credentials live there).
    Metadata,
    /// Multicast or broadcast: never a model server.
    NotUnicast,
}

impl Refusal {
    fn describe(self) -> &'static str {
        match self {
            Refusal::Loopback => "a loopback address",
            Refusal::Unspecified => "an unspecified address (it reaches the local host)",
            Refusal::LinkLocal => "a link-local address",
            Refusal::Metadata => "a cloud metadata service",
            Refusal::NotUnicast => "a multicast or broadcast address",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// A refused target, as an error: what was refused and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The host name or address as the caller gave it.
    pub target: String,
    pub reason: Refusal,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} is {}; it is never probed", self.target, self.reason)
    }
}

impl std::error::Error for Refused {}

/// Cloud metadata endpoints: AWS/GCP/Azure/OCI, Alibaba, Azure's wire server.
const METADATA_V4: &[Ipv4Addr] =
    &[Ipv4Addr::new(169, 254, 169, 254), Ipv4Addr::new(100, 100, 100, 200), Ipv4Addr::new(168, 63, 129, 16)];
/// AWS (fd00:ec2::254) and GCP (fd20:ce::254) metadata over IPv6.
const METADATA_V6: &[Ipv6Addr] =
    &[Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254), Ipv6Addr::new(0xfd20, 0xce, 0, 0, 0, 0, 0, 0x254)];
/// Names of metadata services, refused whatever they resolve to.
const METADATA_NAMES: &[&str] =
    &["metadata.google.internal", "metadata", "metadata.goog", "instance-data", "instance-data.ec2.internal"];

/// Classifies an IPv4 address; `None` when it may be dialled.
fn classify_v4(ip: Ipv4Addr) -> Option<Refusal> {
    let [a, b, ..] = ip.octets();
    if METADATA_V4.contains(&ip) {
        Some(Refusal::Metadata)
    } else if a == 0 {
        Some(Refusal::Unspecified)
    } else if a == 127 {
        Some(Refusal::Loopback)
    } else if a == 169 && b == 254 {
        Some(Refusal::LinkLocal)
    } else if ip.is_multicast() || ip.is_broadcast() {
        Some(Refusal::NotUnicast)
    } else {
        None
    }
}

/// The IPv4 addresses an IPv6 address carries, when it is IPv4-mapped
/// (::ffff:a.b.c.d), IPv4-translated (::ffff:0:a.b.c.d), IPv4-compatible
/// (::a.b.c.d) or in a NAT64 prefix (the well-known 64:ff9b::/96 and the
/// local-use 64:ff9b:1::/96): the last 32 bits; 6to4 (2002::/16): bits
/// 16..48; Teredo (2001::/32): the server in bits 32..64 and the client in
/// the last 32 bits, inverted. Relays and tunnels deliver to the embedded
/// address, so each must pass like a plain IPv4 address.
pub(crate) fn embedded_v4(ip: Ipv6Addr) -> [Option<Ipv4Addr>; 2] {
    let s = ip.segments();
    let v4 = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    match s {
        [0, 0, 0, 0, 0, 0xffff, ..]
        | [0, 0, 0, 0, 0xffff, 0, ..]
        | [0, 0, 0, 0, 0, 0, ..]
        | [0x64, 0xff9b, 0, 0, 0, 0, ..]
        | [0x64, 0xff9b, 1, 0, 0, 0, ..] => [Some(v4(s[6], s[7])), None],
        [0x2002, ..] => [Some(v4(s[1], s[2])), None],
        [0x2001, 0, ..] => [Some(v4(s[2], s[3])), Some(v4(!s[6], !s[7]))],
        _ => [None, None],
    }
}

/// Classifies an IPv6 address; `None` when it may be dialled.
fn classify_v6(ip: Ipv6Addr) -> Option<Refusal> {
    if METADATA_V6.contains(&ip) {
        Some(Refusal::Metadata)
    } else if ip == Ipv6Addr::LOCALHOST {
        Some(Refusal::Loopback)
    } else if ip == Ipv6Addr::UNSPECIFIED {
        Some(Refusal::Unspecified)
    } else if let [Some(first), second] = embedded_v4(ip) {
        classify_v4(first).or_else(|| second.and_then(classify_v4))
    } else if (ip.segments()[0] & 0xffc0) == 0xfe80 {
        Some(Refusal::LinkLocal)
    } else if ip.is_multicast() {
        Some(Refusal::NotUnicast)
    } else {
        None
    }
}

/// Whether the operator may dial `ip`. Loopback is refused unless
/// `allow_loopback`; metadata, unspecified and link-local always are.
pub fn check_ip(ip: IpAddr, allow_loopback: bool) -> Result<(), Refusal> {
    let refusal = match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    };
    match refusal {
        None => Ok(()),
        Some(Refusal::Loopback) if allow_loopback => Ok(()),
        Some(r) => Err(r),
    }
}

/// Whether a host name may be looked up and dialled: names of metadata
/// services never, `localhost` and `*.localhost` only with `allow_loopback`.
/// Case and trailing dots do not matter.
pub fn check_host_name(host: &str, allow_loopback: bool) -> Result<(), Refusal> {
    let name = host.trim_end_matches('.').to_ascii_lowercase();
    if METADATA_NAMES.contains(&name.as_str()) {
        return Err(Refusal::Metadata);
    }
    if (name == "localhost" || name.ends_with(".localhost")) && !allow_loopback {
        return Err(Refusal::Loopback);
    }
    Ok(())
}

/// A lookup that did not give an answer in time, or no usable answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupFailed {
    pub host: String,
    pub reason: String,
}

impl fmt::Display for LookupFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "looking up {} failed: {}", self.host, self.reason)
    }
}

impl std::error::Error for LookupFailed {}

/// The HTTP client's DNS resolver: looks names up (with /etc/resolv.conf and
/// /etc/hosts, like the system resolver) and fails the lookup when the name
/// or *any* of its addresses is refused, so a mixed answer cannot smuggle a
/// bad address in and the checked addresses are the ones the client
/// connects to. Clones share the resolver, its cache and its slots.
#[derive(Clone)]
pub struct GuardedResolver {
    pub allow_loopback: bool,
    inner: Arc<Inner>,
}

struct Inner {
    resolver: TokioResolver,
    /// Lookups in flight; a lookup holds its slot until it ends or is dropped.
    slots: Semaphore,
    /// Bound on one lookup, the wait for a slot included.
    timeout: Duration,
}

impl fmt::Debug for GuardedResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuardedResolver")
            .field("allow_loopback", &self.allow_loopback)
            .field("timeout", &self.inner.timeout)
            .field("free_slots", &self.inner.slots.available_permits())
            .finish()
    }
}

impl GuardedResolver {
    /// A resolver configured like the system's (/etc/resolv.conf), each
    /// lookup bounded by `timeout`.
    #[cfg(test)]
    pub fn new(allow_loopback: bool, timeout: Duration) -> Self {
        Self::with_nameservers(allow_loopback, timeout, &[])
    }

    /// A resolver configured like the system's, asking only `nameservers` when any are given
    /// (`/etc/hosts` still answers first).
    pub fn with_nameservers(allow_loopback: bool, timeout: Duration, nameservers: &[SocketAddr]) -> Self {
        if !nameservers.is_empty() {
            use hickory_resolver::config::NameServerConfigGroup;
            let mut servers = NameServerConfigGroup::new();
            for s in nameservers {
                servers.merge(NameServerConfigGroup::from_ips_clear(&[s.ip()], s.port(), true));
            }
            let config = ResolverConfig::from_parts(None, vec![], servers);
            let builder = TokioResolver::builder_with_config(config, TokioConnectionProvider::default());
            return Self::build(allow_loopback, timeout, DNS_SLOTS, builder);
        }
        let builder = TokioResolver::builder_tokio().unwrap_or_else(|e| {
            // No name server: IP literals and /etc/hosts still resolve.
            tracing::warn!(error = %e, "cannot read the system DNS configuration; host names will not resolve");
            TokioResolver::builder_with_config(ResolverConfig::new(), TokioConnectionProvider::default())
        });
        Self::build(allow_loopback, timeout, DNS_SLOTS, builder)
    }

    fn build(
        allow_loopback: bool,
        timeout: Duration,
        slots: usize,
        mut builder: ResolverBuilder<TokioConnectionProvider>,
    ) -> Self {
        let options = builder.options_mut();
        // The resolver's own per-query timeout bounds the work a dropped
        // lookup leaves behind (a query already sent waits for its answer).
        options.timeout = timeout;
        options.use_hosts_file = ResolveHosts::Always;
        let resolver = builder.build();
        Self { allow_loopback, inner: Arc::new(Inner { resolver, slots: Semaphore::new(slots), timeout }) }
    }

    /// Looks `host` up and checks the name and every address.
    pub async fn lookup(&self, host: &str) -> Result<Vec<SocketAddr>, Box<dyn std::error::Error + Send + Sync>> {
        check_host_name(host, self.allow_loopback).map_err(|reason| Refused { target: host.to_string(), reason })?;
        self.lookup_addresses(host).await
    }

    /// Looks `host` up and checks every address (not the name).
    async fn lookup_addresses(&self, host: &str) -> Result<Vec<SocketAddr>, Box<dyn std::error::Error + Send + Sync>> {
        // An IP literal is its own answer; the resolver would search for it
        // as a name first when resolv.conf sets ndots above 4 (Kubernetes: 5).
        let ips = match host.parse::<IpAddr>() {
            Ok(ip) => vec![ip],
            Err(_) => self.resolve_name(host).await?,
        };
        if ips.is_empty() {
            return Err(format!("{host} resolves to no address").into());
        }
        for ip in &ips {
            check_ip(*ip, self.allow_loopback)
                .map_err(|reason| Refused { target: format!("{host} (resolves to {ip})"), reason })?;
        }
        Ok(ips.into_iter().map(|ip| SocketAddr::new(ip, 0)).collect())
    }

    /// The addresses of `host`, within a slot and the timeout.
    async fn resolve_name(&self, host: &str) -> Result<Vec<IpAddr>, LookupFailed> {
        Ok(self.resolve_with_aliases(host).await?.0)
    }

    /// The addresses of `host` and the names its answer's CNAME records
    /// point to, within a slot and the timeout, unchecked: the caller
    /// (the egress proxy) checks names and addresses against its own list.
    pub async fn resolve_with_aliases(&self, host: &str) -> Result<(Vec<IpAddr>, Vec<String>), LookupFailed> {
        let inner = &self.inner;
        let failed = |reason: String| LookupFailed { host: host.to_string(), reason };
        let deadline = tokio::time::Instant::now() + inner.timeout;
        let Ok(slot) = tokio::time::timeout_at(deadline, inner.slots.acquire()).await else {
            return Err(failed("DNS busy: too many lookups in flight".into()));
        };
        let answer = tokio::time::timeout_at(deadline, inner.resolver.lookup_ip(host)).await;
        drop(slot);
        match answer {
            Err(_) => Err(failed(format!("no answer within {:?}", inner.timeout))),
            Ok(Err(e)) => Err(failed(e.to_string())),
            Ok(Ok(lookup)) => {
                let aliases = lookup
                    .as_lookup()
                    .records()
                    .iter()
                    .filter_map(|r| match r.data() {
                        hickory_resolver::proto::rr::RData::CNAME(target) => Some(target.0.to_ascii()),
                        _ => None,
                    })
                    .collect();
                Ok((lookup.iter().collect(), aliases))
            }
        }
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let resolver = self.clone();
        Box::pin(async move {
            let addrs = resolver.lookup(name.as_str()).await?;
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// The [`Refused`] error somewhere in an error's source chain, if any.
pub fn find_refusal<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a Refused> {
    find_in_chain(err)
}

/// The [`LookupFailed`] error somewhere in an error's source chain, if any.
pub fn find_lookup_failure<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a LookupFailed> {
    find_in_chain(err)
}

fn find_in_chain<'a, T: std::error::Error + 'static>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a T> {
    let mut current = Some(err);
    while let Some(e) = current {
        if let Some(found) = e.downcast_ref::<T>() {
            return Some(found);
        }
        current = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// Generous bound for lookups that must succeed on a busy machine.
    const PATIENCE: Duration = Duration::from_secs(5);

    #[test]
    fn refused_addresses_in_every_spelling() {
        for (addr, why) in [
            ("127.0.0.1", Refusal::Loopback),
            ("127.255.1.2", Refusal::Loopback),
            ("::1", Refusal::Loopback),
            ("::ffff:127.0.0.1", Refusal::Loopback),
            ("::ffff:7f00:1", Refusal::Loopback),
            ("::127.0.0.1", Refusal::Loopback),
            ("64:ff9b::7f00:1", Refusal::Loopback),
            ("64:ff9b:1::7f00:1", Refusal::Loopback),
            ("::ffff:0:127.0.0.1", Refusal::Loopback),
            ("0.0.0.0", Refusal::Unspecified),
            ("0.1.2.3", Refusal::Unspecified),
            ("::", Refusal::Unspecified),
            ("::ffff:0.0.0.0", Refusal::Unspecified),
            ("::0.0.0.2", Refusal::Unspecified),
            ("169.254.10.1", Refusal::LinkLocal),
            ("fe80::1", Refusal::LinkLocal),
            ("febf::1", Refusal::LinkLocal),
            ("::ffff:169.254.1.1", Refusal::LinkLocal),
            ("169.254.169.254", Refusal::Metadata),
            ("100.100.100.200", Refusal::Metadata),
            ("168.63.129.16", Refusal::Metadata),
            ("fd00:ec2::254", Refusal::Metadata),
            ("fd20:ce::254", Refusal::Metadata),
            ("::ffff:169.254.169.254", Refusal::Metadata),
            ("::ffff:a9fe:a9fe", Refusal::Metadata),
            ("64:ff9b::a9fe:a9fe", Refusal::Metadata),
            ("::169.254.169.254", Refusal::Metadata),
            // 6to4: the IPv4 address is bits 16..48.
            ("2002:7f00:0001::", Refusal::Loopback),
            ("2002:7f00:1:abcd::5", Refusal::Loopback),
            ("2002:a9fe:a9fe::1", Refusal::Metadata),
            ("2002:a9fe:101::", Refusal::LinkLocal),
            ("2002::", Refusal::Unspecified),
            // Teredo, server 65.54.227.120, client (inverted) 127.0.0.1 / 169.254.169.254.
            ("2001:0:4136:e378:8000:63bf:80ff:fffe", Refusal::Loopback),
            ("2001:0:4136:e378:8000:63bf:5601:5601", Refusal::Metadata),
            // Teredo, server 127.0.0.1 / 169.254.169.254, client (inverted) 8.8.8.8.
            ("2001:0:7f00:1::f7f7:f7f7", Refusal::Loopback),
            ("2001:0:a9fe:a9fe:0:0:f7f7:f7f7", Refusal::Metadata),
            ("224.0.0.1", Refusal::NotUnicast),
            ("255.255.255.255", Refusal::NotUnicast),
            ("ff02::1", Refusal::NotUnicast),
        ] {
            assert_eq!(check_ip(ip(addr), false), Err(why), "{addr}");
        }
    }

    #[test]
    fn private_and_public_addresses_are_allowed() {
        for addr in [
            "10.0.0.5",
            "172.16.0.1",
            "172.31.255.254",
            "192.168.1.9",
            "100.64.0.1",
            "8.8.8.8",
            "fd12::1",
            "fd00:ec2::253",
            "2001:db8::1",
            "::ffff:10.0.0.5",
            "64:ff9b::a00:5",
            "2606:4700:4700::1111",
            "2a00:1450:4001:80b::200e",
            // 2001:db8::/32 is not Teredo (that is 2001:0::/32).
            "2001:db8:7f00:1::",
            // 6to4 and Teredo around public IPv4 addresses (8.8.8.8; 65.54.227.120 and 1.2.3.4).
            "2002:808:808::1",
            "2001:0:4136:e378:8000:63bf:fefd:fcfb",
        ] {
            assert_eq!(check_ip(ip(addr), false), Ok(()), "{addr}");
        }
    }

    #[test]
    fn loopback_exception_opens_loopback_only() {
        for addr in
            ["127.0.0.1", "127.9.9.9", "::1", "::ffff:127.0.0.1", "::127.0.0.1", "64:ff9b::7f00:1", "2002:7f00:1::"]
        {
            assert_eq!(check_ip(ip(addr), true), Ok(()), "{addr}");
        }
        for addr in ["169.254.169.254", "0.0.0.0", "::", "fe80::1", "169.254.1.1", "fd00:ec2::254", "::ffff:0.0.0.0"] {
            assert!(check_ip(ip(addr), true).is_err(), "{addr} stays refused");
        }
    }

    #[test]
    fn refused_names_ignore_case_and_trailing_dots() {
        for (name, why) in [
            ("localhost", Refusal::Loopback),
            ("localhost.", Refusal::Loopback),
            ("LOCALHOST", Refusal::Loopback),
            ("api.localhost", Refusal::Loopback),
            ("Api.LocalHost.", Refusal::Loopback),
            ("metadata.google.internal", Refusal::Metadata),
            ("METADATA.GOOGLE.INTERNAL.", Refusal::Metadata),
            ("metadata", Refusal::Metadata),
            ("Metadata.", Refusal::Metadata),
        ] {
            assert_eq!(check_host_name(name, false), Err(why), "{name}");
        }
        assert_eq!(check_host_name("localhost.", true), Ok(()));
        assert_eq!(check_host_name("metadata.google.internal", true), Err(Refusal::Metadata));
        for ok in ["vllm.models.svc", "vllm.models.svc.cluster.local.", "models.example.com", "localhost-proxy.ns"] {
            assert_eq!(check_host_name(ok, false), Ok(()), "{ok}");
        }
    }

    #[tokio::test]
    async fn resolver_refuses_a_name_resolving_to_loopback() {
        // `localhost` resolves from /etc/hosts: no network traffic.
        let name: Name = "localhost".parse().unwrap();
        let err = match GuardedResolver::new(false, PATIENCE).resolve(name).await {
            Ok(_) => panic!("localhost must be refused"),
            Err(e) => e,
        };
        let refused = find_refusal(err.as_ref()).expect("a Refused error");
        assert_eq!(refused.reason, Refusal::Loopback);
        assert!(err.to_string().contains("loopback"), "{err}");

        let name: Name = "localhost".parse().unwrap();
        let addrs: Vec<SocketAddr> =
            GuardedResolver::new(true, PATIENCE).resolve(name).await.expect("allowed").collect();
        assert!(!addrs.is_empty());
        assert!(addrs.iter().all(|a| a.ip().is_loopback()), "{addrs:?}");

        // The address check on its own, past the name list.
        let err =
            GuardedResolver::new(false, PATIENCE).lookup_addresses("localhost").await.expect_err("loopback address");
        let refused = find_refusal(err.as_ref()).expect("a Refused error");
        assert_eq!(refused.reason, Refusal::Loopback);
        assert!(refused.target.starts_with("localhost (resolves to "), "{}", refused.target);
    }

    /// A DNS server on loopback that reads queries and never answers, with
    /// the names asked so far (each once).
    async fn silent_dns() -> (SocketAddr, Arc<std::sync::Mutex<Vec<String>>>) {
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = socket.local_addr().unwrap();
        let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = asked.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 1500];
            while let Ok(n) = socket.recv(&mut buf).await {
                let name = query_name(&buf[..n]);
                let mut seen = seen.lock().unwrap();
                if !seen.contains(&name) {
                    seen.push(name);
                }
            }
        });
        (addr, asked)
    }

    /// The question name of a DNS query (labels after the 12-byte header).
    fn query_name(packet: &[u8]) -> String {
        let mut labels = Vec::new();
        let mut at = 12;
        while let Some(&len) = packet.get(at).filter(|l| **l > 0) {
            let label = packet.get(at + 1..at + 1 + usize::from(len)).unwrap_or_default();
            labels.push(String::from_utf8_lossy(label).into_owned());
            at += 1 + usize::from(len);
        }
        labels.join(".")
    }

    /// A resolver asking only `server`, with `slots` lookup slots.
    fn resolver_via(server: SocketAddr, slots: usize, timeout: Duration) -> GuardedResolver {
        use hickory_resolver::config::NameServerConfigGroup;
        let servers = NameServerConfigGroup::from_ips_clear(&[server.ip()], server.port(), true);
        let config = ResolverConfig::from_parts(None, vec![], servers);
        let builder = TokioResolver::builder_with_config(config, TokioConnectionProvider::default());
        GuardedResolver::build(true, timeout, slots, builder)
    }

    fn failure<'a>(err: &'a (dyn std::error::Error + 'static)) -> &'a LookupFailed {
        find_lookup_failure(err).unwrap_or_else(|| panic!("not a lookup failure: {err}"))
    }

    #[tokio::test]
    async fn a_lookup_without_an_answer_times_out_and_frees_its_slot() {
        let (server, asked) = silent_dns().await;
        let resolver = resolver_via(server, 1, Duration::from_millis(300));
        let started = std::time::Instant::now();
        let err = resolver.lookup("models.never-answers.test").await.expect_err("no answer");
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(250) && took < PATIENCE, "took {took:?}");
        assert!(failure(err.as_ref()).reason.contains("no answer within"), "{err}");
        assert_eq!(resolver.inner.slots.available_permits(), 1, "the slot is given back");
        assert!(
            asked.lock().unwrap().iter().any(|n| n.starts_with("models.never-answers.test")),
            "the server was asked"
        );

        // The one slot is free: IP literals and /etc/hosts names still resolve.
        let addrs = resolver.lookup("127.0.0.1").await.expect("an IP literal");
        assert_eq!(addrs, [SocketAddr::new(ip("127.0.0.1"), 0)]);
        let addrs = resolver.lookup("localhost").await.expect("localhost");
        assert!(!addrs.is_empty() && addrs.iter().all(|a| a.ip().is_loopback()), "{addrs:?}");
        // A name needing the server gets the slot again (and times out, not "busy").
        let err = resolver.lookup("again.never-answers.test").await.expect_err("no answer");
        assert!(failure(err.as_ref()).reason.contains("no answer within"), "{err}");

        // A lookup whose caller gives up (the HTTP client's timeout) frees its slot too.
        let gave_up =
            tokio::time::timeout(Duration::from_millis(50), resolver.lookup("dropped.never-answers.test")).await;
        assert!(gave_up.is_err(), "the lookup cannot have finished");
        assert_eq!(resolver.inner.slots.available_permits(), 1, "a dropped lookup gives its slot back");
    }

    #[tokio::test]
    async fn lookups_beyond_the_slots_wait_and_then_report_busy() {
        let (server, asked) = silent_dns().await;
        let timeout = Duration::from_millis(600);
        let resolver = resolver_via(server, 2, timeout);
        // Three lookups at once: two take the slots, the third waits.
        let watch = async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            (resolver.inner.slots.available_permits(), asked.lock().unwrap().clone())
        };
        let names = ["one.never-answers.test", "two.never-answers.test", "three.never-answers.test"];
        let (results, (free, asked_then)) =
            tokio::join!(futures::future::join_all(names.iter().map(|n| resolver.lookup(n))), watch);
        assert_eq!(free, 0);
        assert_eq!(asked_then.len(), 2, "only two lookups reached the server: {asked_then:?}");
        assert!(!asked_then.iter().any(|n| n.starts_with("three.")), "{asked_then:?}");
        for r in results {
            let err = r.expect_err("no answer");
            failure(err.as_ref());
        }
        assert_eq!(resolver.inner.slots.available_permits(), 2);

        // With every slot held, a lookup waits out the timeout and is refused as busy, unasked.
        let held = resolver.inner.slots.acquire_many(2).await.unwrap();
        let err = resolver.lookup("four.never-answers.test").await.expect_err("busy");
        assert!(failure(err.as_ref()).reason.contains("DNS busy"), "{err}");
        // By name: the earlier lookups' late retries may still arrive now.
        let asked_now = asked.lock().unwrap().clone();
        assert!(
            !asked_now.iter().any(|n| n.starts_with("four.")),
            "a lookup without a slot sends nothing: {asked_now:?}"
        );
        drop(held);
    }
}
