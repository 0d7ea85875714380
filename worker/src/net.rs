//! The worker's outbound HTTP to addresses a step may name (streamable-HTTP MCP
//! servers, `web_fetch`): a reqwest client that connects only to public addresses and
//! the networks a setting lists, follows no redirect by itself and uses no proxy, as
//! the server's result delivery does.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use railyard_model::net::{Network, is_internal};

/// The addresses a URL may reach.
#[derive(Debug, Clone, Default)]
pub(crate) struct Guard {
    /// Internal networks let through.
    pub allowed: Vec<Network>,
    /// The setting that lists them, named in a refusal.
    pub setting: &'static str,
}

impl Guard {
    /// Refuses an internal address outside the allowed networks.
    pub fn check(&self, ip: IpAddr) -> Result<(), String> {
        if is_internal(ip) && !self.allowed.iter().any(|n| n.contains(ip)) {
            return Err(format!(
                "{ip} is an internal address, which this worker does not reach ({} lists networks it may)",
                self.setting
            ));
        }
        Ok(())
    }

    /// Refuses a URL that is not http(s), has no host, or names a refused address.
    /// A host name is judged when it is resolved (see [`client`]).
    pub fn check_url(&self, url: &url::Url) -> Result<(), String> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "{}: only http and https URLs are fetched",
                crate::provider::excerpt(url.scheme(), 20)
            ));
        }
        match url.host() {
            Some(url::Host::Ipv4(ip)) => self.check(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => self.check(IpAddr::V6(ip)),
            Some(url::Host::Domain(_)) => Ok(()),
            None => Err("the URL has no host".into()),
        }
    }
}

/// Resolves with the system's resolver and keeps only the addresses the guard allows.
struct Resolver(Arc<Guard>);

impl reqwest::dns::Resolve for Resolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let guard = self.0.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            let resolved: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let mut refused = None;
            let allowed: Vec<SocketAddr> = resolved
                .into_iter()
                .filter(|a| guard.check(a.ip()).map_err(|e| refused = Some(e)).is_ok())
                .collect();
            if allowed.is_empty() {
                let e: Box<dyn std::error::Error + Send + Sync> = refused
                    .unwrap_or_else(|| format!("{host} resolved to no address"))
                    .into();
                return Err(e);
            }
            Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// A client under `guard`: names resolved through it, no redirect followed, no proxy,
/// connecting for at most `connect_timeout`.
pub(crate) fn client(guard: Arc<Guard>, connect_timeout: Duration) -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .connect_timeout(connect_timeout)
        .user_agent(concat!("railyard-worker/", env!("CARGO_PKG_VERSION")))
        .dns_resolver(Arc::new(Resolver(guard)))
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

/// The message of an error with its causes (the guard's refusal is one of a
/// connection error's causes).
pub(crate) fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text = format!("{text}: {s_text}");
        }
        source = s.source();
    }
    text
}
