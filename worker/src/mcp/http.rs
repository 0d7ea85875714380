//! Streamable-HTTP MCP servers: rmcp's client on the worker's guarded reqwest client
//! ([`crate::net`]): public addresses only (and the networks `mcp_allow_networks`
//! lists), no redirect, no proxy.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderName, HeaderValue};
use rmcp::ServiceExt;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

use crate::net::Guard;

/// Connects to the server at `url`, sending `headers` with every request.
pub(crate) async fn connect(
    url: &str,
    headers: &[(String, String)],
    guard: Arc<Guard>,
) -> Result<RunningService<RoleClient, ()>, String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("url: {e}"))?;
    match parsed.host() {
        Some(url::Host::Ipv4(ip)) => guard.check(IpAddr::V4(ip))?,
        Some(url::Host::Ipv6(ip)) => guard.check(IpAddr::V6(ip))?,
        Some(url::Host::Domain(_)) => {}
        None => return Err("url: no host".into()),
    }
    let client = crate::net::client(guard, Duration::from_secs(30))?;
    let mut custom = HashMap::new();
    for (k, v) in headers {
        let name = HeaderName::from_bytes(k.as_bytes())
            .map_err(|_| format!("headers: {k:?} is not a header name"))?;
        let mut value = HeaderValue::from_str(v).map_err(|_| format!("headers.{k}: not a header value"))?;
        value.set_sensitive(true);
        custom.insert(name, value);
    }
    let config = StreamableHttpClientTransportConfig::with_uri(url.to_string()).custom_headers(custom);
    let transport = StreamableHttpClientTransport::with_client(client, config);
    ().serve(transport)
        .await
        .map_err(|e| format!("did not initialize: {e}"))
}
