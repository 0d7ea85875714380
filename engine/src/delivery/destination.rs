//! Where a delivery may connect to. By default only public addresses: loopback,
//! link-local (169.254.169.254 is a cloud metadata address), private, shared (CGNAT),
//! multicast and other special ranges are refused, so a client key cannot make the
//! server reach, or scan, its own network. `delivery.allow_networks` lets listed
//! networks through (tests and single-machine setups need loopback); the server's own
//! listen ports on its own addresses stay refused whatever it lists.
//!
//! The check is of the address actually connected to: [`Resolver`] filters what DNS
//! answers (so a name that resolves to an internal address is refused too), and the
//! sender checks a URL's literal IP, which never reaches a resolver. Redirects are
//! not followed and no proxy is used, so nothing else picks the address.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

pub use railyard_model::net::{BadNetwork, Network, canonical, is_internal};

/// Why a destination is refused. The message is for the server log and admins;
/// clients see a generic one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error(
        "destination {0} is an internal address, which this server does not deliver to \
         (delivery.allow_networks lists networks it may)"
    )]
    Internal(IpAddr),
    #[error("destination {0} is this server's own listener")]
    Own(SocketAddr),
}

/// The destination rules: the networks let through, and the server's own listeners.
#[derive(Debug, Clone, Default)]
pub struct Destinations {
    allowed: Vec<Network>,
    own: Vec<SocketAddr>,
}

impl Destinations {
    /// Rules allowing `allowed` besides public addresses, and never `own`.
    pub fn new(allowed: Vec<Network>, own: Vec<SocketAddr>) -> Self {
        Self { allowed, own }
    }

    /// Whether an IP may be connected to (on a port that is not the server's own).
    pub fn check_ip(&self, ip: IpAddr) -> Result<(), Refused> {
        if is_internal(ip) && !self.allowed.iter().any(|n| n.contains(ip)) {
            return Err(Refused::Internal(ip));
        }
        Ok(())
    }

    /// Whether `addr` may be connected to: [`Self::check_ip`], and not one of the
    /// server's own listeners: its port on the listen address, on loopback, or (when
    /// it listens on every address) on any internal one. A public address of this
    /// host is not known without asking the system, so it is not refused.
    pub fn check(&self, addr: SocketAddr) -> Result<(), Refused> {
        self.check_ip(addr.ip())?;
        let ip = canonical(addr.ip());
        let own = self.own.iter().any(|o| {
            o.port() == addr.port()
                && (canonical(o.ip()) == ip
                    || ip.is_loopback()
                    || ip.is_unspecified()
                    || (o.ip().is_unspecified() && is_internal(ip)))
        });
        if own {
            return Err(Refused::Own(addr));
        }
        Ok(())
    }

    /// Whether `port` is one of the server's own listen ports.
    pub fn is_own_port(&self, port: u16) -> bool {
        self.own.iter().any(|o| o.port() == port)
    }

    /// The rules a client's [`Resolver`] cannot apply to `url`: a literal IP
    /// (never resolved) and the server's own ports (the resolver does not see the
    /// port). A client with the [`Resolver`] checks every name it resolves.
    pub async fn check_url(&self, url: &url::Url) -> Result<(), Refused> {
        let Some(port) = url.port_or_known_default() else {
            return Ok(());
        };
        let literal = match url.host() {
            Some(url::Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
            _ => None,
        };
        if let Some(ip) = literal {
            return self.check(SocketAddr::new(ip, port));
        }
        if self.is_own_port(port)
            && let Some(host) = url.host_str()
            && let Ok(addrs) = tokio::net::lookup_host((host, port)).await
        {
            for addr in addrs {
                self.check(addr)?;
            }
        }
        Ok(())
    }
}

/// The delivery client's DNS resolver: resolves with the system's resolver and keeps
/// only the addresses [`Destinations::check_ip`] allows; none left is an error.
pub struct Resolver(pub Arc<Destinations>);

impl reqwest::dns::Resolve for Resolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let rules = self.0.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            let resolved: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let mut refused = None;
            let allowed: Vec<SocketAddr> = resolved
                .into_iter()
                .filter(|a| match rules.check_ip(a.ip()) {
                    Ok(()) => true,
                    Err(e) => {
                        refused = Some(e);
                        false
                    }
                })
                .collect();
            if allowed.is_empty() {
                let e: Box<dyn std::error::Error + Send + Sync> = match refused {
                    Some(e) => Box::new(e),
                    None => format!("{host} resolved to no address").into(),
                };
                return Err(e);
            }
            Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn internal_addresses_are_refused_unless_listed() {
        let none = Destinations::default();
        for a in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::1",
            "224.0.0.1",
            "255.255.255.255",
        ] {
            assert!(none.check_ip(ip(a)).is_err(), "{a} is internal");
        }
        for a in ["93.184.216.34", "2606:2800:220:1::1", "8.8.8.8", "::ffff:8.8.8.8"] {
            assert!(none.check_ip(ip(a)).is_ok(), "{a} is public");
        }
        let loopback = Destinations::new(
            vec!["127.0.0.0/8".parse().unwrap(), "::1".parse().unwrap()],
            vec!["127.0.0.1:7401".parse().unwrap()],
        );
        assert!(loopback.check("127.0.0.1:9000".parse().unwrap()).is_ok());
        assert!(loopback.check("[::1]:9000".parse().unwrap()).is_ok());
        assert!(loopback.check("[::ffff:127.0.0.2]:9000".parse().unwrap()).is_ok());
        assert!(loopback.check("10.0.0.1:9000".parse().unwrap()).is_err());
        assert_eq!(
            loopback.check("127.0.0.1:7401".parse().unwrap()),
            Err(Refused::Own("127.0.0.1:7401".parse().unwrap())),
            "the server's own port stays refused"
        );
        // Listening on every address: its port on any internal address is its own,
        // on a public one another server's.
        let everywhere = Destinations::new(
            vec!["10.0.0.0/8".parse().unwrap()],
            vec!["0.0.0.0:7401".parse().unwrap()],
        );
        assert!(everywhere.check("10.1.1.1:7401".parse().unwrap()).is_err());
        assert!(everywhere.check("10.1.1.1:7402".parse().unwrap()).is_ok());
        assert!(everywhere.check("93.184.216.34:7401".parse().unwrap()).is_ok());
    }

    #[test]
    fn networks_parse_and_bad_ones_are_named() {
        let n: Network = "10.0.0.0/8".parse().unwrap();
        assert!(n.contains(ip("10.255.0.1")) && !n.contains(ip("11.0.0.1")));
        assert_eq!(n.to_string(), "10.0.0.0/8");
        assert_eq!("::1".parse::<Network>().unwrap().to_string(), "::1/128");
        let all: Network = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("127.0.0.1")));
        for bad in ["10.0.0.0/33", "nope", "10.0.0.0/x", "::1/129"] {
            let e = bad.parse::<Network>().unwrap_err().to_string();
            assert!(e.contains(bad), "{e}");
        }
    }
}
