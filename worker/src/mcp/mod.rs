//! MCP servers as the agent's tools: the worker's own (`[mcp_servers.NAME]` in its
//! config) and those a step's definition declares (`mcpServers`), their tools offered
//! to the model as `mcp__SERVER__TOOL`.
//!
//! A stdio server is started on first use and shared: the worker's servers by every
//! step, a definition's by the steps of the same run that declare the same server
//! (stopped when the last of them ends). A server that stopped is started again on
//! the call after the one that found it gone; that call is an error the model reads.
//! Every call has a timeout and its result is cut to a size, with a marker. `$NAME`
//! values come from the worker's environment as read at start (a definition's only
//! from the `mcp_env` list); they are passed to the server and replaced by
//! `[redacted]` in anything it says back or logs.

mod http;
mod render;
mod session;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use railyard_model::mcp::{self as defs, McpServer, Transport};
use serde_json::Value;
use tracing::warn;

use crate::provider::ToolSpec;
use crate::tools::ToolOutput;
use session::{CallError, Launch, Session, Target};

/// Default timeout of one tool call.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(120);
/// Default cut of one tool result, in bytes.
pub const DEFAULT_RESULT_CAP: usize = 64 * 1024;
/// How long a server may take to start and list its tools.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(60);
/// Most tools taken from one server.
const MAX_TOOLS_PER_SERVER: usize = 128;
/// Most MCP tools offered to one step.
const MAX_TOOLS_PER_STEP: usize = 256;
/// Largest input schema offered to the model, as JSON bytes.
const MAX_SCHEMA: usize = 32 * 1024;
/// Longest tool description offered, in bytes.
const MAX_DESCRIPTION: usize = 2048;

/// The worker's MCP settings.
#[derive(Clone)]
pub struct McpSettings {
    /// The worker's own servers, as configured (`$NAME`s not yet filled in).
    pub servers: BTreeMap<String, McpServer>,
    /// Values of the variables the worker's own servers name.
    pub config_env: BTreeMap<String, String>,
    /// Values of the variables a definition's servers may name (`mcp_env`).
    pub definition_env: BTreeMap<String, String>,
    /// Timeout of one tool call.
    pub call_timeout: Duration,
    /// Cut of one tool result, in bytes.
    pub result_cap: usize,
    /// How long a server may take to start.
    pub start_timeout: Duration,
    /// Internal networks streamable-HTTP servers may be reached on (else only
    /// public addresses).
    pub allow_networks: Vec<railyard_model::net::Network>,
}

impl Default for McpSettings {
    fn default() -> Self {
        Self {
            servers: BTreeMap::new(),
            config_env: BTreeMap::new(),
            definition_env: BTreeMap::new(),
            call_timeout: DEFAULT_CALL_TIMEOUT,
            result_cap: DEFAULT_RESULT_CAP,
            start_timeout: DEFAULT_START_TIMEOUT,
            allow_networks: Vec::new(),
        }
    }
}

impl std::fmt::Debug for McpSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Names only: the values are credentials.
        f.debug_struct("McpSettings")
            .field("servers", &self.servers.keys().collect::<Vec<_>>())
            .field("definition_env", &self.definition_env.keys().collect::<Vec<_>>())
            .field("call_timeout", &self.call_timeout)
            .field("result_cap", &self.result_cap)
            .finish_non_exhaustive()
    }
}

type Slot = Arc<tokio::sync::Mutex<Option<Arc<Session>>>>;

/// The worker's running MCP servers.
pub struct McpHub {
    settings: McpSettings,
    guard: Arc<crate::net::Guard>,
    pass_env: Vec<String>,
    slots: Mutex<HashMap<String, Slot>>,
    /// Steps holding each definition server (its key).
    users: Mutex<HashMap<String, usize>>,
}

impl McpHub {
    /// A hub with `settings`; servers get `pass_env` of the worker's environment
    /// besides the default few (the same list `bash` gets).
    pub fn new(settings: McpSettings, pass_env: Vec<String>) -> Self {
        Self {
            guard: Arc::new(crate::net::Guard {
                allowed: settings.allow_networks.clone(),
                setting: "mcp_allow_networks",
            }),
            settings,
            pass_env,
            slots: Mutex::new(HashMap::new()),
            users: Mutex::new(HashMap::new()),
        }
    }

    fn slot(&self, key: &str) -> Slot {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.entry(key.to_string()).or_default().clone()
    }

    /// The session of `key`, started when there is none. One that stopped is
    /// forgotten: started again here when `restart`, else reported (`Ok(None)`), so
    /// the call that finds it gone is the one that fails.
    async fn session(
        &self,
        key: &str,
        launch: &Launch,
        restart: bool,
    ) -> Result<Option<Arc<Session>>, String> {
        let slot = self.slot(key);
        let mut held = slot.lock().await;
        match held.as_ref() {
            Some(s) if !s.is_dead() => return Ok(Some(s.clone())),
            Some(_) if !restart => {
                *held = None;
                return Ok(None);
            }
            _ => *held = None,
        }
        let s = Arc::new(Session::start(launch, self.settings.start_timeout).await?);
        *held = Some(s.clone());
        Ok(Some(s))
    }

    /// Forgets `session` of `key` (it stopped), so the next call starts it again.
    async fn forget(&self, key: &str, session: &Arc<Session>) {
        let slot = self.slot(key);
        let mut held = slot.lock().await;
        if held.as_ref().is_some_and(|s| Arc::ptr_eq(s, session)) {
            *held = None;
        }
    }

    /// Stops every server.
    pub fn shutdown(&self) {
        self.slots.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    fn hold(&self, key: &str) {
        *self
            .users
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key.to_string())
            .or_default() += 1;
    }

    fn release(&self, key: &str) {
        let mut users = self.users.lock().unwrap_or_else(|p| p.into_inner());
        let Some(n) = users.get_mut(key) else { return };
        *n = n.saturating_sub(1);
        if *n == 0 {
            users.remove(key);
            self.slots.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
        }
    }

    /// The MCP tools of a step: the worker's servers and `declared_json` (the step's
    /// `mcpServers`), those `allowed` lets through, started as needed. A server that
    /// cannot be started is left out, with a note for the model.
    pub(crate) async fn open(
        self: &Arc<Self>,
        declared_json: &str,
        workspace: &Path,
        allowed: &[String],
    ) -> StepMcp {
        let mut step = StepMcp {
            hub: self.clone(),
            tools: Vec::new(),
            held: Vec::new(),
            notes: Vec::new(),
        };
        let declared: BTreeMap<String, McpServer> = if declared_json.trim().is_empty() {
            BTreeMap::new()
        } else {
            match serde_json::from_str(declared_json) {
                Ok(d) => d,
                Err(e) => {
                    step.notes
                        .push(format!("the step's mcpServers could not be read: {e}"));
                    BTreeMap::new()
                }
            }
        };
        if let Err(e) = defs::check_servers("mcpServers", &declared) {
            step.notes
                .push(format!("the step's MCP servers were not started: {e}"));
            return step;
        }
        let mut servers: Vec<(String, String, Result<Launch, String>)> = Vec::new();
        for (name, server) in &self.settings.servers {
            if declared.contains_key(name) || !wanted(name, allowed) {
                continue;
            }
            let cwd = server
                .cwd
                .as_ref()
                .map_or_else(|| PathBuf::from("."), PathBuf::from);
            let launch = self.launch(name, server, cwd, &self.settings.config_env);
            servers.push((name.clone(), format!("worker:{name}"), launch));
        }
        for (name, server) in &declared {
            if !wanted(name, allowed) {
                continue;
            }
            let cwd = workspace.join(server.cwd.as_deref().unwrap_or(""));
            let key = format!(
                "run:{}:{name}:{}",
                cwd.display(),
                serde_json::to_string(server).unwrap_or_default()
            );
            let launch = self.launch(name, server, cwd, &self.settings.definition_env);
            self.hold(&key);
            step.held.push(key.clone());
            servers.push((name.clone(), key, launch));
        }
        for (name, key, launch) in servers {
            let launch = match launch {
                Ok(l) => Arc::new(l),
                Err(e) => {
                    warn!(server = %name, error = %e, "MCP server not started");
                    step.notes
                        .push(format!("MCP server {name} is not available: {e}"));
                    continue;
                }
            };
            let session = match self.session(&key, &launch, true).await {
                Ok(Some(s)) => s,
                Ok(None) => continue,
                Err(e) => {
                    warn!(server = %name, error = %e, "MCP server did not start");
                    step.notes
                        .push(format!("MCP server {name} is not available: {e}"));
                    continue;
                }
            };
            step.add_tools(&name, &key, &launch, &session, allowed);
        }
        step
    }

    /// What starts `server`: its `$NAME`s filled in from `env`.
    fn launch(
        &self,
        name: &str,
        server: &McpServer,
        cwd: PathBuf,
        env: &BTreeMap<String, String>,
    ) -> Result<Launch, String> {
        let mut secrets = Vec::new();
        let mut fill = |v: &str| {
            let names = defs::references(v)?;
            let filled = defs::substitute(v, |k| env.get(k).cloned())?;
            secrets.extend(
                names
                    .iter()
                    .filter_map(|k| env.get(*k))
                    .filter(|s| s.len() >= 4)
                    .cloned(),
            );
            Ok::<_, String>(filled)
        };
        if server.transport()? == Transport::Http {
            let url = fill(server.url.as_deref().unwrap_or_default())?;
            let headers = server
                .headers
                .iter()
                .map(|(k, v)| Ok((k.clone(), fill(v)?)))
                .collect::<Result<Vec<_>, String>>()?;
            secrets.sort();
            secrets.dedup();
            return Ok(Launch {
                name: name.to_string(),
                target: Target::Http {
                    url,
                    headers,
                    guard: self.guard.clone(),
                },
                secrets,
            });
        }
        let command = fill(server.command.as_deref().unwrap_or_default())?;
        let args = server
            .args
            .iter()
            .map(|a| fill(a))
            .collect::<Result<Vec<_>, _>>()?;
        let vars = server
            .env
            .iter()
            .map(|(k, v)| Ok((k.clone(), fill(v)?)))
            .collect::<Result<Vec<_>, String>>()?;
        secrets.sort();
        secrets.dedup();
        Ok(Launch {
            name: name.to_string(),
            target: Target::Stdio {
                command,
                args,
                env: vars,
                cwd,
                pass_env: self.pass_env.clone(),
            },
            secrets,
        })
    }
}

/// Whether any tool of `server` may be offered under `allowed` (empty: every tool).
fn wanted(server: &str, allowed: &[String]) -> bool {
    allowed.is_empty() || allowed.iter().any(|p| defs::server_of(p) == Some(server))
}

/// One MCP tool offered to a step.
struct McpTool {
    key: String,
    launch: Arc<Launch>,
    server: String,
    tool: String,
    spec: ToolSpec,
}

/// The MCP tools of one step; the definition's servers are released when it drops.
pub(crate) struct StepMcp {
    hub: Arc<McpHub>,
    tools: Vec<McpTool>,
    held: Vec<String>,
    /// Servers that could not be started, for the model to know.
    pub notes: Vec<String>,
}

impl Drop for StepMcp {
    fn drop(&mut self) {
        for key in &self.held {
            self.hub.release(key);
        }
    }
}

impl StepMcp {
    fn add_tools(
        &mut self,
        server: &str,
        key: &str,
        launch: &Arc<Launch>,
        session: &Session,
        allowed: &[String],
    ) {
        let mut taken = 0;
        for tool in &session.tools {
            let name = format!("{}{server}__{}", defs::PREFIX, tool.name);
            if !allowed.is_empty() && !allowed.iter().any(|p| defs::matches(p, &name)) {
                continue;
            }
            let plain = name.len() <= 64
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            let schema = Value::Object((*tool.input_schema).clone());
            let schema_ok = schema.get("type").and_then(Value::as_str) == Some("object")
                && serde_json::to_string(&schema).map_or(0, |s| s.len()) <= MAX_SCHEMA;
            if !plain || !schema_ok || self.tools.iter().any(|t| t.spec.name == name) {
                warn!(server, tool = %crate::provider::excerpt(&tool.name, 64), plain, schema_ok,
                    "MCP tool left out: its name or input schema cannot be offered to the model");
                continue;
            }
            if taken >= MAX_TOOLS_PER_SERVER || self.tools.len() >= MAX_TOOLS_PER_STEP {
                warn!(
                    server,
                    "MCP server has more tools than a step is offered; the rest are left out"
                );
                break;
            }
            taken += 1;
            let description = tool.description.as_deref().unwrap_or_default();
            self.tools.push(McpTool {
                key: key.to_string(),
                launch: launch.clone(),
                server: server.to_string(),
                tool: tool.name.to_string(),
                spec: ToolSpec {
                    name,
                    description: format!(
                        "[MCP server {server}] {}",
                        railyard_model::text::prefix(description, MAX_DESCRIPTION)
                    ),
                    input_schema: schema,
                },
            });
        }
    }

    /// The specs of the step's MCP tools.
    pub fn specs(&self) -> impl Iterator<Item = ToolSpec> + '_ {
        self.tools.iter().map(|t| t.spec.clone())
    }

    /// Whether `name` is one of the step's MCP tools.
    pub fn has(&self, name: &str) -> bool {
        self.tools.iter().any(|t| t.spec.name == name)
    }

    /// Calls the MCP tool `name`; every failure is an error result for the model.
    pub async fn call(&self, name: &str, input: &Value) -> ToolOutput {
        let Some(t) = self.tools.iter().find(|t| t.spec.name == name) else {
            return ToolOutput::error(format!("tool {name:?} does not exist"));
        };
        let Value::Object(arguments) = input else {
            return ToolOutput::error(format!("the arguments of {name} must be a JSON object"));
        };
        let hub = &self.hub;
        let gone = |why: &str| {
            warn!(server = %t.server, tool = %t.tool, why, "MCP server gone");
            ToolOutput::error(format!(
                "MCP server {} stopped ({why}); it is started again on the next call",
                t.server
            ))
        };
        let session = match hub.session(&t.key, &t.launch, false).await {
            Ok(Some(s)) => s,
            Ok(None) => return gone("it had exited"),
            Err(e) => return ToolOutput::error(format!("MCP server {} could not be started: {e}", t.server)),
        };
        let timeout = hub.settings.call_timeout;
        match session.call(&t.tool, arguments.clone(), timeout).await {
            Ok(result) => render::output(&result, hub.settings.result_cap, |s| session.redact(s)),
            Err(CallError::Gone(why)) => {
                hub.forget(&t.key, &session).await;
                gone(&why)
            }
            Err(CallError::TimedOut) => {
                warn!(server = %t.server, tool = %t.tool, timeout_secs = timeout.as_secs(), "MCP call timed out");
                ToolOutput::error(format!(
                    "{name} did not answer within {}s; the call was abandoned",
                    timeout.as_secs()
                ))
            }
            Err(CallError::Refused(why)) => ToolOutput::error(format!("{name} failed: {why}")),
        }
    }
}
