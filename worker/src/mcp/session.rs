//! One running MCP server: a child process the worker started (stdio), its rmcp
//! client, the tools it listed, and the values to keep out of what it says.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, Tool};
use rmcp::service::{RoleClient, RunningService};
use serde_json::Value;
use tokio::io::AsyncReadExt;
use tracing::{info, warn};

use crate::tools::reaper;
use crate::tools::{BASH_DEFAULT_ENV, WORKER_SECRETS};

/// Longest stderr line of a server logged, in bytes.
const STDERR_LINE: usize = 1024;
/// Most stderr lines of one server logged; later ones are counted, not logged.
const STDERR_LINES: usize = 1000;
/// `PATH` when the worker has none.
const FALLBACK_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// What a server is started or reached with, every `$NAME` filled in.
#[derive(Clone)]
pub(crate) struct Launch {
    pub name: String,
    pub target: Target,
    /// Values filled in from the worker's environment: never logged or shown.
    pub secrets: Vec<String>,
}

/// How a server is reached.
#[derive(Clone)]
pub(crate) enum Target {
    /// A child process on its stdin and stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        env: Vec<(String, String)>,
        cwd: PathBuf,
        /// Variables of the worker's environment passed on besides the default few.
        pass_env: Vec<String>,
    },
    /// Streamable HTTP, only to addresses the guard allows.
    Http {
        url: String,
        headers: Vec<(String, String)>,
        guard: Arc<crate::net::Guard>,
    },
}

/// A server that is up.
pub(crate) struct Session {
    pub name: String,
    client: RunningService<RoleClient, ()>,
    pub tools: Vec<Tool>,
    pid: Option<u32>,
    /// Set when a call saw the server gone.
    dead: AtomicBool,
    secrets: Arc<Vec<String>>,
    /// Its call id (`RAILYARD_BASH_CALL`), by which the reaper finds what it orphaned.
    call: String,
    /// The process of a stdio server.
    child: Option<std::sync::Mutex<tokio::process::Child>>,
}

/// Why a call failed.
pub(crate) enum CallError {
    /// The server is gone (exited, its pipe closed): the session must be replaced.
    Gone(String),
    /// No answer in time.
    TimedOut,
    /// The server answered with a protocol error.
    Refused(String),
}

impl Session {
    /// Starts (or reaches) the server and lists its tools, within `timeout`.
    pub async fn start(launch: &Launch, timeout: Duration) -> Result<Session, String> {
        let secrets = Arc::new(launch.secrets.clone());
        let (command, args, env, cwd, pass_env) = match &launch.target {
            Target::Http { url, headers, guard } => {
                let up = async {
                    let client = super::http::connect(url, headers, guard.clone()).await?;
                    let tools = client
                        .list_all_tools()
                        .await
                        .map_err(|e| format!("did not list its tools: {e}"))?;
                    Ok::<_, String>((client, tools))
                };
                let (client, tools) = match tokio::time::timeout(timeout, up).await {
                    Ok(Ok(up)) => up,
                    Ok(Err(e)) => return Err(redact(&e, &secrets)),
                    Err(_) => return Err(format!("did not answer within {}s", timeout.as_secs())),
                };
                info!(server = %launch.name, tools = tools.len(), "MCP server reached over streamable HTTP");
                return Ok(Session {
                    name: launch.name.clone(),
                    client,
                    tools,
                    pid: None,
                    dead: AtomicBool::new(false),
                    secrets,
                    call: String::new(),
                    child: None,
                });
            }
            Target::Stdio {
                command,
                args,
                env,
                cwd,
                pass_env,
            } => (command, args, env, cwd, pass_env),
        };
        let mut cmd = tokio::process::Command::new(command);
        cmd.args(args)
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            // Its own process group: stopping it ends what it started too.
            .process_group(0)
            .env_clear()
            .env("HOME", cwd);
        let call = reaper::new_call();
        for name in BASH_DEFAULT_ENV
            .iter()
            .copied()
            .chain(pass_env.iter().map(String::as_str))
        {
            if WORKER_SECRETS.contains(&name) || name == "HOME" || name == reaper::CALL_VAR {
                continue;
            }
            if let Some(value) = std::env::var_os(name) {
                cmd.env(name, value);
            }
        }
        if std::env::var_os("PATH").is_none() {
            cmd.env("PATH", FALLBACK_PATH);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.env(reaper::CALL_VAR, &call);
        // Registered as the worker's own child, so no sweep takes it for an orphan.
        let mut child = reaper::spawn_shell(|| cmd.spawn(), |c| c.id()).map_err(|e| {
            // The command may hold a value filled in from the environment.
            let shown = redact(&crate::provider::excerpt(command, 100), &secrets);
            format!("cannot start {shown:?}: {e}")
        })?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err("the server's pipes could not be opened".into());
        };
        tokio::spawn(log_stderr(launch.name.clone(), stderr, secrets.clone()));
        let pid = child.id();
        let up = async {
            let client = ().serve((stdout, stdin)).await.map_err(|e| format!("did not initialize: {e}"))?;
            let tools = client
                .list_all_tools()
                .await
                .map_err(|e| format!("did not list its tools: {e}"))?;
            Ok::<_, String>((client, tools))
        };
        let (client, tools) = match tokio::time::timeout(timeout, up).await {
            Ok(Ok(up)) => up,
            Ok(Err(e)) => return Err(redact(&e, &secrets)),
            Err(_) => return Err(format!("did not start within {}s", timeout.as_secs())),
        };
        info!(server = %launch.name, pid, tools = tools.len(), "MCP server started");
        Ok(Session {
            name: launch.name.clone(),
            client,
            tools,
            pid,
            dead: AtomicBool::new(false),
            secrets,
            call,
            child: Some(std::sync::Mutex::new(child)),
        })
    }

    /// Whether the server is known to be gone.
    pub fn is_dead(&self) -> bool {
        if self.dead.load(Ordering::Relaxed) || self.client.is_closed() {
            return true;
        }
        let Some(child) = &self.child else {
            return false;
        };
        let mut child = child.lock().unwrap_or_else(|p| p.into_inner());
        let exited = !matches!(child.try_wait(), Ok(None));
        if exited {
            self.dead.store(true, Ordering::Relaxed);
        }
        exited
    }

    /// Calls `tool` with `arguments`, waiting at most `timeout`.
    pub async fn call(
        &self,
        tool: &str,
        arguments: serde_json::Map<String, Value>,
        timeout: Duration,
    ) -> Result<Value, CallError> {
        if self.is_dead() {
            return Err(CallError::Gone("it had stopped".into()));
        }
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        match tokio::time::timeout(timeout, self.client.call_tool(params)).await {
            Err(_) if self.is_dead() => Err(CallError::Gone("it exited during the call".into())),
            Err(_) => Err(CallError::TimedOut),
            Ok(Ok(result)) => Ok(serde_json::to_value(&result).unwrap_or(Value::Null)),
            Ok(Err(e)) => {
                let text = redact(&e.to_string(), &self.secrets);
                if self.client.is_closed() || matches!(e, rmcp::ServiceError::TransportClosed) {
                    self.dead.store(true, Ordering::Relaxed);
                    Err(CallError::Gone(text))
                } else {
                    Err(CallError::Refused(text))
                }
            }
        }
    }

    /// `text` with the server's secret values replaced.
    pub fn redact(&self, text: &str) -> String {
        redact(text, &self.secrets)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // The whole group: a server started through `npx` or a shell has children.
        if let Some(pid) = self.pid {
            // What it started, setsid'd ones included, then its group.
            reaper::sweep(&self.call, Some(pid));
            if let Ok(p) = i32::try_from(pid) {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(p),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            reaper::forget_shell(pid);
            info!(server = %self.name, pid, "MCP server stopped");
        }
    }
}

/// `text` with each of `secrets` replaced by `[redacted]`.
pub(crate) fn redact(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_string();
    for s in secrets.iter().filter(|s| !s.is_empty()) {
        if out.contains(s.as_str()) {
            out = out.replace(s.as_str(), "[redacted]");
        }
    }
    out
}

/// Logs the server's stderr line by line, each cut, secrets replaced, at most
/// [`STDERR_LINES`] lines.
async fn log_stderr(name: String, mut stderr: tokio::process::ChildStderr, secrets: Arc<Vec<String>>) {
    let mut buf = vec![0u8; 4096];
    let mut line: Vec<u8> = Vec::new();
    let (mut logged, mut dropped) = (0usize, 0usize);
    let mut emit = |line: &mut Vec<u8>| {
        if logged < STDERR_LINES {
            let text = redact(&String::from_utf8_lossy(line), &secrets);
            let text = railyard_model::text::prefix(&text, STDERR_LINE);
            warn!(server = %name, line = %text.trim_end(), "MCP server stderr");
            logged += 1;
        } else {
            dropped += 1;
        }
        line.clear();
    };
    loop {
        let n = match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &buf[..n] {
            if b == b'\n' {
                emit(&mut line);
            } else if line.len() < STDERR_LINE * 4 {
                line.push(b);
            }
        }
    }
    if !line.is_empty() {
        emit(&mut line);
    }
    if dropped > 0 {
        warn!(server = %name, dropped, "MCP server stderr lines not logged");
    }
}
