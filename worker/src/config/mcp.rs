//! The worker's MCP settings: its own servers (`[mcp_servers.NAME]`), the variables a
//! definition's servers may name (`mcp_env`), and the bounds of a call.

use std::collections::BTreeMap;
use std::time::Duration;

use railyard_config::{ConfigError, Loaded};
use railyard_model::mcp as defs;

use super::ConfigLayer;
use crate::mcp::{DEFAULT_CALL_TIMEOUT, DEFAULT_RESULT_CAP, McpSettings};

/// Longest MCP call timeout: an hour.
const MAX_CALL_TIMEOUT: Duration = Duration::from_secs(3600);
/// Smallest and largest result cut.
const RESULT_CAP: (usize, usize) = (1024, 16 << 20);

/// Checks the MCP keys and reads the variables they name from `env`, now: the
/// worker's environment is wiped later ([`crate::secrets::protect_process`]).
pub(super) fn resolve(
    loaded: &Loaded<ConfigLayer>,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<McpSettings, ConfigError> {
    let layer = &loaded.value;
    let servers = layer.mcp_servers.clone().unwrap_or_default();
    defs::check_servers("mcp_servers", &servers).map_err(|e| loaded.invalid("mcp_servers", e))?;
    let mut config_env = BTreeMap::new();
    for (name, server) in &servers {
        let values = server
            .env
            .values()
            .chain(server.headers.values())
            .chain(server.args.iter())
            .chain(server.command.iter());
        for value in values {
            for var in
                defs::references(value).map_err(|e| loaded.invalid("mcp_servers", format!("{name}: {e}")))?
            {
                let found = env(var).ok_or_else(|| {
                    loaded.invalid(
                        "mcp_servers",
                        format!("{name} names ${var}, which is not set in the worker's environment"),
                    )
                })?;
                config_env.insert(var.to_string(), found);
            }
        }
    }
    let mut definition_env = BTreeMap::new();
    for name in layer
        .mcp_env
        .iter()
        .flatten()
        .map(|n| n.trim())
        .filter(|n| !n.is_empty())
    {
        if !defs::is_variable_name(name) {
            let shown = crate::provider::excerpt(name, 40);
            return Err(loaded.invalid(
                "mcp_env",
                format!("{shown:?} is not an environment variable name (letters, digits and _)"),
            ));
        }
        if crate::tools::WORKER_SECRETS.contains(&name) {
            return Err(loaded.invalid(
                "mcp_env",
                format!("{name} is a credential of the worker and is never passed to MCP servers"),
            ));
        }
        if let Some(value) = env(name) {
            definition_env.insert(name.to_string(), value);
        }
    }
    let call_timeout = match layer.mcp_call_timeout {
        None => DEFAULT_CALL_TIMEOUT,
        Some(d) if d.is_zero() || d > MAX_CALL_TIMEOUT => {
            return Err(loaded.invalid(
                "mcp_call_timeout_secs",
                "must be more than 0 and at most 3600 seconds",
            ));
        }
        Some(d) => d,
    };
    let result_cap = match layer.mcp_result_max_bytes {
        None => DEFAULT_RESULT_CAP,
        Some(n) if !(RESULT_CAP.0..=RESULT_CAP.1).contains(&n) => {
            return Err(loaded.invalid(
                "mcp_result_max_bytes",
                format!("must be between {} and {}", RESULT_CAP.0, RESULT_CAP.1),
            ));
        }
        Some(n) => n,
    };
    let allow_networks = networks(loaded, "mcp_allow_networks", &layer.mcp_allow_networks)?;
    Ok(McpSettings {
        allow_networks,
        servers,
        config_env,
        definition_env,
        call_timeout,
        result_cap,
        ..McpSettings::default()
    })
}

/// The IP networks of the list setting `key`.
pub(super) fn networks(
    loaded: &Loaded<ConfigLayer>,
    key: &str,
    list: &Option<Vec<String>>,
) -> Result<Vec<railyard_model::net::Network>, ConfigError> {
    list.iter()
        .flatten()
        .map(|n| {
            n.parse()
                .map_err(|e: railyard_model::net::BadNetwork| loaded.invalid(key, e.to_string()))
        })
        .collect()
}
