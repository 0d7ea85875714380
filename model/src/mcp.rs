//! MCP servers a definition declares (`"mcpServers"` on a workflow or a step), in the
//! JSON shape Claude Code and Cursor use, and the `mcp__SERVER__TOOL` names their tools
//! go by in `allowedTools` and to the model.
//!
//! ```json
//! "mcpServers": {
//!   "github": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"],
//!              "env": {"GITHUB_TOKEN": "$GITHUB_TOKEN"}},
//!   "docs": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer $DOCS_TOKEN"}}
//! }
//! ```
//!
//! A value may name a variable of the worker's environment (`$NAME` or `${NAME}`): the
//! worker fills it in when it starts the server, so the definition (and so history)
//! only ever holds the name.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Most MCP servers one workflow or step declares.
pub const MAX_SERVERS: usize = 16;
/// Longest server name, in bytes.
pub const MAX_NAME: usize = 32;
/// Most `args`, `env` entries or `headers` of one server.
pub const MAX_ENTRIES: usize = 64;
/// Longest `command`, argument, variable, header or URL, in bytes.
pub const MAX_VALUE: usize = 4096;
/// The prefix of every MCP tool's name.
pub const PREFIX: &str = "mcp__";

/// One MCP server: a command the worker runs (stdio) or a URL it reaches (streamable HTTP).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct McpServer {
    /// `stdio` or `http` (also `streamable-http`); absent: from `command` or `url`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The program of a stdio server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Variables set for it (on top of the few every command gets).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Its working directory, relative to the run's workspace (absent: the workspace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// The endpoint of a streamable-HTTP server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Headers sent with every request to it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

/// How a server is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// A child process speaking JSON-RPC on its stdin and stdout.
    Stdio,
    /// Streamable HTTP.
    Http,
}

impl McpServer {
    /// Its transport, from `type`, else from `command` or `url`.
    pub fn transport(&self) -> Result<Transport, String> {
        match (self.kind.as_deref(), &self.command, &self.url) {
            (Some("stdio") | None, Some(_), None) => Ok(Transport::Stdio),
            (Some("http" | "streamable-http") | None, None, Some(_)) => Ok(Transport::Http),
            (Some(k), _, _) if !["stdio", "http", "streamable-http"].contains(&k) => Err(format!(
                "type: unknown transport {:?} (expected stdio or http)",
                crate::text::prefix(k, 40)
            )),
            (_, Some(_), Some(_)) => Err("give either `command` (stdio) or `url` (http), not both".into()),
            (Some("stdio"), None, _) => Err("command: a stdio server needs a command".into()),
            (Some(_), _, None) => Err("url: an http server needs a url".into()),
            _ => Err("needs a `command` (stdio) or a `url` (streamable HTTP)".into()),
        }
    }

    /// Checks the server's shape and bounds; errors start with the field's path under it.
    pub fn check(&self) -> Result<(), String> {
        let transport = self.transport()?;
        let size = |path: &str, v: &str| {
            if v.len() > MAX_VALUE {
                Err(format!(
                    "{path}: is {} bytes, more than the limit of {MAX_VALUE}",
                    v.len()
                ))
            } else {
                Ok(())
            }
        };
        if let Some(c) = &self.command {
            if c.trim().is_empty() {
                return Err("command: must not be empty".into());
            }
            size("command", c)?;
        }
        for (what, n) in [
            ("args", self.args.len()),
            ("env", self.env.len()),
            ("headers", self.headers.len()),
        ] {
            if n > MAX_ENTRIES {
                return Err(format!(
                    "{what}: {n} entries, more than the limit of {MAX_ENTRIES}"
                ));
            }
        }
        for (i, a) in self.args.iter().enumerate() {
            size(&format!("args[{i}]"), a)?;
        }
        for (k, v) in &self.env {
            if !is_variable_name(k) {
                return Err(format!(
                    "env: {:?} is not an environment variable name (letters, digits and _)",
                    crate::text::prefix(k, 40)
                ));
            }
            size(&format!("env.{k}"), v)?;
            check_references(&format!("env.{k}"), v)?;
        }
        for (k, v) in &self.headers {
            let token = !k.is_empty()
                && k.len() <= 256
                && k.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            if !token {
                return Err(format!(
                    "headers: {:?} is not a header name",
                    crate::text::prefix(k, 40)
                ));
            }
            if v.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
                return Err(format!("headers.{k}: must be one line"));
            }
            size(&format!("headers.{k}"), v)?;
            check_references(&format!("headers.{k}"), v)?;
        }
        if let Some(cwd) = &self.cwd {
            let inside = !cwd.starts_with('/') && !cwd.split('/').any(|p| p == "..");
            if !inside {
                return Err("cwd: must be a path inside the run's workspace (relative, no `..`)".into());
            }
            size("cwd", cwd)?;
        }
        if transport == Transport::Http
            && let Some(url) = &self.url
        {
            size("url", url)?;
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err("url: must be an http:// or https:// URL".into());
            }
        }
        Ok(())
    }
}

/// Whether `name` may name a server: letters, digits, `_` and `-`, no `__` (the
/// separator of tool names), at most [`MAX_NAME`] bytes.
pub fn is_server_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && !name.contains("__")
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Whether `name` is a plain environment variable name.
pub fn is_variable_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The variables `value` names (`$NAME`, `${NAME}`), in order; `$$` is a literal `$`.
pub fn references(value: &str) -> Result<Vec<&str>, String> {
    let mut out = Vec::new();
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            rest = tail;
            continue;
        }
        let (name, tail) = if let Some(braced) = after.strip_prefix('{') {
            let end = braced.find('}').ok_or("an unclosed `${`")?;
            (&braced[..end], &braced[end + 1..])
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        if !is_variable_name(name) {
            return Err("a `$` not followed by a variable name (write `$$` for a `$`)".into());
        }
        out.push(name);
        rest = tail;
    }
    Ok(out)
}

fn check_references(path: &str, value: &str) -> Result<(), String> {
    references(value).map(|_| ()).map_err(|e| format!("{path}: {e}"))
}

/// `value` with each `$NAME` replaced by `lookup(NAME)`; a name it does not know is an
/// error naming the variable.
pub fn substitute(value: &str, lookup: impl Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
            continue;
        }
        let (name, tail) = if let Some(braced) = after.strip_prefix('{') {
            let end = braced.find('}').ok_or("an unclosed `${`")?;
            (&braced[..end], &braced[end + 1..])
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        let v = lookup(name).ok_or_else(|| format!("the variable {name} is not available to MCP servers"))?;
        out.push_str(&v);
        rest = tail;
    }
    out.push_str(rest);
    Ok(out)
}

/// The server named by an MCP tool name or `allowedTools` pattern
/// (`mcp__SERVER__TOOL`, `mcp__SERVER__*`, `mcp__SERVER`), if it is one.
pub fn server_of(tool: &str) -> Option<&str> {
    let rest = tool.strip_prefix(PREFIX)?;
    Some(rest.split("__").next().unwrap_or(rest))
}

/// Whether `pattern` (an `allowedTools` entry) matches the tool `name`: equal, or a
/// prefix ending in `*`; `mcp__SERVER` alone allows every tool of that server.
pub fn matches(pattern: &str, name: &str) -> bool {
    if let Some(prefix) = pattern.strip_suffix('*') {
        return name.starts_with(prefix);
    }
    if pattern == name {
        return true;
    }
    pattern.starts_with(PREFIX)
        && !pattern[PREFIX.len()..].contains("__")
        && name.strip_prefix(pattern).is_some_and(|t| t.starts_with("__"))
}

/// Checks the `mcpServers` block at `path`.
pub fn check_servers(path: &str, servers: &BTreeMap<String, McpServer>) -> Result<(), String> {
    if servers.len() > MAX_SERVERS {
        return Err(format!(
            "{path}: {} servers, more than the limit of {MAX_SERVERS}",
            servers.len()
        ));
    }
    for (name, server) in servers {
        if !is_server_name(name) {
            return Err(format!(
                "{path}: {:?} is not a server name (letters, digits, _ and -, no `__`, at most {MAX_NAME} bytes)",
                crate::text::prefix(name, 40)
            ));
        }
        server.check().map_err(|e| format!("{path}.{name}.{e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_code_blocks_parse_and_check() {
        let block: BTreeMap<String, McpServer> = serde_json::from_str(
            r#"{"gh": {"command": "npx", "args": ["-y", "x"], "env": {"T": "$GITHUB_TOKEN"}},
                "docs": {"type": "http", "url": "https://m.example/mcp", "headers": {"Authorization": "Bearer ${TOK}"}}}"#,
        )
        .unwrap();
        check_servers("mcpServers", &block).unwrap();
        assert_eq!(block["gh"].transport(), Ok(Transport::Stdio));
        assert_eq!(block["docs"].transport(), Ok(Transport::Http));
        let bad: BTreeMap<String, McpServer> =
            serde_json::from_str(r#"{"a": {"command": "x", "env": {"T": "$"}}}"#).unwrap();
        let e = check_servers("steps[0].mcpServers", &bad).unwrap_err();
        assert!(e.starts_with("steps[0].mcpServers.a.env.T: "), "{e}");
        let bad: BTreeMap<String, McpServer> = serde_json::from_str(r#"{"a__b": {"command": "x"}}"#).unwrap();
        assert!(check_servers("mcpServers", &bad).is_err());
        let bad: BTreeMap<String, McpServer> = serde_json::from_str(r#"{"a": {"args": ["x"]}}"#).unwrap();
        assert!(
            check_servers("mcpServers", &bad)
                .unwrap_err()
                .contains("needs a `command`")
        );
        let bad: BTreeMap<String, McpServer> =
            serde_json::from_str(r#"{"a": {"command": "x", "cwd": "../up"}}"#).unwrap();
        assert!(
            check_servers("mcpServers", &bad)
                .unwrap_err()
                .starts_with("mcpServers.a.cwd:")
        );
    }

    #[test]
    fn substitution_and_patterns() {
        let env = |k: &str| (k == "T").then(|| "secret".to_string());
        assert_eq!(
            substitute("Bearer $T, ${T}! $$5", env).unwrap(),
            "Bearer secret, secret! $5"
        );
        assert!(substitute("$NOPE", env).unwrap_err().contains("NOPE"));
        assert_eq!(references("a $X ${Y_2} $$").unwrap(), vec!["X", "Y_2"]);
        assert!(matches("mcp__gh__*", "mcp__gh__list"));
        assert!(matches("mcp__gh", "mcp__gh__list"));
        assert!(!matches("mcp__gh", "mcp__ghx__list"));
        assert!(matches("mcp__gh__list", "mcp__gh__list"));
        assert!(!matches("mcp__gh__list", "mcp__gh__lists"));
        assert_eq!(server_of("mcp__gh__*"), Some("gh"));
        assert_eq!(server_of("bash"), None);
    }
}
