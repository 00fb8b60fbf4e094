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
//!
//! Private ranges (10/8, 172.16/12, 192.168/16, fc00::/7) stay allowed:
//! in-cluster model servers live there. `allow_loopback` exists for tests
//! with loopback stand-in servers; it never opens metadata, unspecified or
//! link-local addresses.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

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
fn embedded_v4(ip: Ipv6Addr) -> [Option<Ipv4Addr>; 2] {
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

/// The HTTP client's DNS resolver: looks names up with the system resolver
/// (through tokio) and fails the lookup when the name or *any* of its
/// addresses is refused, so a mixed answer cannot smuggle a bad address in
/// and the checked addresses are the ones the client connects to.
#[derive(Debug, Clone, Copy, Default)]
pub struct GuardedResolver {
    pub allow_loopback: bool,
}

impl GuardedResolver {
    pub fn new(allow_loopback: bool) -> Self {
        Self { allow_loopback }
    }

    /// Looks `host` up and checks the name and every address.
    pub async fn lookup(&self, host: &str) -> Result<Vec<SocketAddr>, Box<dyn std::error::Error + Send + Sync>> {
        check_host_name(host, self.allow_loopback).map_err(|reason| Refused { target: host.to_string(), reason })?;
        self.lookup_addresses(host).await
    }

    /// Looks `host` up and checks every address (not the name).
    async fn lookup_addresses(&self, host: &str) -> Result<Vec<SocketAddr>, Box<dyn std::error::Error + Send + Sync>> {
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, 0)).await?.collect();
        if addrs.is_empty() {
            return Err(format!("{host} resolves to no address").into());
        }
        for addr in &addrs {
            check_ip(addr.ip(), self.allow_loopback)
                .map_err(|reason| Refused { target: format!("{host} (resolves to {})", addr.ip()), reason })?;
        }
        Ok(addrs)
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let resolver = *self;
        Box::pin(async move {
            let addrs = resolver.lookup(name.as_str()).await?;
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// The [`Refused`] error somewhere in an error's source chain, if any.
pub fn find_refusal<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a Refused> {
    let mut current = Some(err);
    while let Some(e) = current {
        if let Some(r) = e.downcast_ref::<Refused>() {
            return Some(r);
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
        let err = match GuardedResolver::new(false).resolve(name).await {
            Ok(_) => panic!("localhost must be refused"),
            Err(e) => e,
        };
        let refused = find_refusal(err.as_ref()).expect("a Refused error");
        assert_eq!(refused.reason, Refusal::Loopback);
        assert!(err.to_string().contains("loopback"), "{err}");

        let name: Name = "localhost".parse().unwrap();
        let addrs: Vec<SocketAddr> = GuardedResolver::new(true).resolve(name).await.expect("allowed").collect();
        assert!(!addrs.is_empty());
        assert!(addrs.iter().all(|a| a.ip().is_loopback()), "{addrs:?}");

        // The address check on its own, past the name list.
        let err = GuardedResolver::new(false).lookup_addresses("localhost").await.expect_err("loopback address");
        let refused = find_refusal(err.as_ref()).expect("a Refused error");
        assert_eq!(refused.reason, Refusal::Loopback);
        assert!(refused.target.starts_with("localhost (resolves to "), "{}", refused.target);
    }
}
