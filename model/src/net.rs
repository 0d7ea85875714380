//! Which addresses are internal (loopback, private, link-local with the cloud
//! metadata address, CGNAT, multicast, reserved ranges), and IP networks a setting may
//! list to let some through: the rules the server's result delivery
//! (`engine/src/delivery/destination.rs`) and the worker's MCP servers and `web_fetch`
//! both apply.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An IP network, `addr/prefix` (a bare address is one host).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Network {
    addr: IpAddr,
    prefix: u8,
}

/// Why a network does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}: expected an IP network such as 127.0.0.0/8, ::1/128 or 10.1.2.3")]
pub struct BadNetwork(String);

impl FromStr for Network {
    type Err = BadNetwork;

    fn from_str(s: &str) -> Result<Self, BadNetwork> {
        let bad = || BadNetwork(crate::echo(s));
        let (addr, prefix) = match s.trim().split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s.trim(), None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p.parse::<u8>().ok().filter(|p| *p <= max).ok_or_else(bad)?,
            None => max,
        };
        Ok(Self { addr, prefix })
    }
}

impl std::fmt::Display for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl Network {
    /// Whether `ip` is in this network (an IPv4-mapped IPv6 address counts as its IPv4 one).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, canonical(ip)) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.prefix)).unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.prefix)).unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

/// `::ffff:a.b.c.d` as `a.b.c.d`; anything else as it is.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Whether `ip` is internal: not a public unicast address.
pub fn is_internal(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(a) => internal_v4(a),
        IpAddr::V6(a) => internal_v6(a),
    }
}

fn internal_v4(a: Ipv4Addr) -> bool {
    let [b0, b1, ..] = a.octets();
    a.is_unspecified()
        || a.is_loopback()
        || a.is_private()
        || a.is_link_local()
        || a.is_multicast()
        || a.is_broadcast()
        || a.is_documentation()
        || b0 == 0 // "this network"
        || (b0 == 100 && (64..128).contains(&b1)) // shared address space (CGNAT)
        || (b0 == 192 && b1 == 0 && a.octets()[2] == 0) // IETF protocol assignments
        || (b0 == 198 && (18..20).contains(&b1)) // benchmarking
        || b0 >= 240 // reserved
}

fn internal_v6(a: Ipv6Addr) -> bool {
    let s0 = a.segments()[0];
    a.is_unspecified()
        || a.is_loopback()
        || a.is_multicast()
        || (s0 & 0xfe00) == 0xfc00 // unique local
        || (s0 & 0xffc0) == 0xfe80 // link-local
        || (s0 & 0xffc0) == 0xfec0 // site-local (deprecated)
        || s0 == 0x2001 && a.segments()[1] == 0x0db8 // documentation
        // NAT64 and 6to4 carry an IPv4 address: judge that one.
        || (a.segments()[..6] == [0x64, 0xff9b, 0, 0, 0, 0]
            && internal_v4(Ipv4Addr::from((u128::from(a) as u32).to_be_bytes())))
        || (s0 == 0x2002
            && internal_v4(Ipv4Addr::new(
                (a.segments()[1] >> 8) as u8,
                a.segments()[1] as u8,
                (a.segments()[2] >> 8) as u8,
                a.segments()[2] as u8,
            )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_addresses_and_networks() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "169.254.169.254",
            "100.64.0.1",
            "::1",
            "fd00::1",
            "::ffff:192.168.0.1",
        ] {
            assert!(is_internal(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["1.1.1.1", "2606:4700:4700::1111"] {
            assert!(!is_internal(ip.parse().unwrap()), "{ip}");
        }
        let n: Network = "127.0.0.0/8".parse().unwrap();
        assert!(n.contains("127.9.9.9".parse().unwrap()) && !n.contains("10.0.0.1".parse().unwrap()));
        assert!("10.0.0.0/33".parse::<Network>().is_err());
    }
}
