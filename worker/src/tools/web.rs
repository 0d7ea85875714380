//! `web_fetch`: GET an http(s) URL and return its text, HTML turned into plain text.
//!
//! Only public addresses are reached (and the networks `web_fetch_allow_networks`
//! lists): every hop of a redirect is checked again, host names when they are
//! resolved. At most [`MAX_BODY`] bytes of a body are read; the whole fetch, redirects
//! included, has [`FETCH_TIMEOUT`].

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{CONTENT_TYPE, LOCATION};
use serde_json::Value;

use super::{ToolLimits, ToolOutput, str_arg};
use crate::net::{Guard, describe};

/// Most bytes of a response body read.
pub(crate) const MAX_BODY: usize = 1 << 20;
/// Most redirects followed.
pub(crate) const MAX_REDIRECTS: usize = 5;
/// The whole fetch: connecting, redirects, reading the body.
pub(crate) const FETCH_TIMEOUT: Duration = Duration::from_secs(30);
/// Connecting to one host.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest URL taken from the model or a `Location` header.
const MAX_URL: usize = 8 * 1024;

/// The setting that lets internal networks through.
pub(crate) const ALLOW_SETTING: &str = "web_fetch_allow_networks";

/// Runs a `web_fetch` call; every failure is an error result naming what went wrong.
pub(super) async fn run(input: &Value, limits: &ToolLimits) -> ToolOutput {
    let url = match str_arg(input, "url") {
        Ok(u) => u.trim(),
        Err(e) => return ToolOutput::error(format!("web_fetch: {e}")),
    };
    if url.len() > MAX_URL {
        return ToolOutput::error(format!("web_fetch: the URL is longer than {MAX_URL} bytes"));
    }
    let url = match url::Url::parse(url) {
        Ok(u) => u,
        Err(e) => {
            return ToolOutput::error(format!(
                "web_fetch: {:?} is not a URL: {e}",
                crate::provider::excerpt(url, 200)
            ));
        }
    };
    let guard = Arc::new(Guard {
        allowed: limits.web_allow_networks.clone(),
        setting: ALLOW_SETTING,
    });
    match tokio::time::timeout(FETCH_TIMEOUT, fetch(url, guard, limits.read_cap)).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => ToolOutput::error(format!("web_fetch: {e}")),
        Err(_) => ToolOutput::error(format!(
            "web_fetch: no complete answer within {}s; the fetch was abandoned",
            FETCH_TIMEOUT.as_secs()
        )),
    }
}

async fn fetch(mut url: url::Url, guard: Arc<Guard>, text_cap: usize) -> Result<ToolOutput, String> {
    let client = crate::net::client(guard.clone(), CONNECT_TIMEOUT)?;
    let mut hops = Vec::new();
    let response = loop {
        guard.check_url(&url).map_err(|e| at(&url, e))?;
        let response = client
            .get(url.clone())
            .send()
            .await
            .map_err(|e| at(&url, describe(&e)))?;
        if !response.status().is_redirection() {
            break response;
        }
        let Some(location) = response.headers().get(LOCATION) else {
            break response;
        };
        if hops.len() >= MAX_REDIRECTS {
            return Err(format!("more than {MAX_REDIRECTS} redirects, the last to {url}"));
        }
        let next = location
            .to_str()
            .ok()
            .filter(|l| l.len() <= MAX_URL)
            .and_then(|l| url.join(l).ok())
            .ok_or_else(|| at(&url, "redirects to a Location that is not a URL".into()))?;
        hops.push(url);
        url = next;
    };
    let status = response.status();
    let mime = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let (body, cut) = read_body(response).await.map_err(|e| at(&url, e))?;
    let text = if mime.contains("html") {
        tokio::task::spawn_blocking(move || super::html::to_text(&body))
            .await
            .map_err(|e| format!("the HTML could not be turned into text: {e}"))??
    } else if is_text(&mime, &body) {
        String::from_utf8_lossy(&body).into_owned()
    } else {
        format!(
            "[{} bytes of {}: not text, not shown]",
            body.len(),
            if mime.is_empty() { "unknown type" } else { &mime }
        )
    };
    let mut text = super::truncate(
        &text,
        text_cap,
        "the page's text is longer than a tool result may be",
    );
    if cut {
        text.push_str(&format!(
            "\n[web_fetch: only the first {MAX_BODY} bytes of the body were read]"
        ));
    }
    let mut head = format!("URL: {url}\nStatus: {status}\n");
    if !mime.is_empty() {
        head.push_str(&format!("Content-Type: {mime}\n"));
    }
    if !hops.is_empty() {
        let from: Vec<String> = hops.iter().map(ToString::to_string).collect();
        head.push_str(&format!("Redirected from: {}\n", from.join(" -> ")));
    }
    let out = format!("{head}\n{text}");
    Ok(if status.is_success() {
        ToolOutput::ok(out)
    } else {
        ToolOutput::error(out)
    })
}

/// `why` about `url`.
fn at(url: &url::Url, why: String) -> String {
    let shown = crate::provider::excerpt(url.as_str(), 300);
    format!("{shown}: {why}")
}

/// Reads at most [`MAX_BODY`] bytes; the flag says whether the body went on.
async fn read_body(mut response: reqwest::Response) -> Result<(Vec<u8>, bool), String> {
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("reading the body: {}", describe(&e)))?
    {
        let room = MAX_BODY - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, true));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, false))
}

/// Whether a body of `mime` is shown as text: text types, JSON, XML, JavaScript, and
/// an untyped body that is UTF-8.
fn is_text(mime: &str, body: &[u8]) -> bool {
    mime.starts_with("text/")
        || ["json", "xml", "javascript", "yaml", "toml", "csv"]
            .iter()
            .any(|t| mime.contains(t))
        || (mime.is_empty() && std::str::from_utf8(body).is_ok())
}

#[cfg(test)]
#[path = "web_tests.rs"]
mod tests;
