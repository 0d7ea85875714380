//! The `bash` tool: `bash -c` in the workspace, with an allowlisted environment, in a
//! process group of its own that is killed when the command ends (background jobs
//! included), times out, or the step ends, and with capped output. What left the group
//! (`setsid`) is found and killed by [`super::reaper`].

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt};

use super::fs::Workspace;
use super::{ToolLimits, ToolOutput, opt_u64_arg, reaper, str_arg};

/// Variables `bash` takes from the worker's environment when they are set, besides the
/// configured pass-through list (`bash_env`). `HOME` is the workspace.
pub(crate) const BASH_DEFAULT_ENV: [&str; 5] = ["PATH", "LANG", "LC_ALL", "TERM", "TZ"];

/// The worker's own credentials: never passed to `bash`, not even when listed.
pub(crate) const WORKER_SECRETS: [&str; 3] = ["ANTHROPIC_API_KEY", "OPENAI_API_KEY", "RAILYARD_API_KEY"];

/// `PATH` when the worker has none.
const FALLBACK_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// How long output may keep trickling in after the shell exits and its group is killed
/// (a process that left the group, with `setsid`, and holds the pipes must not hang the step).
const DRAIN_GRACE: Duration = Duration::from_secs(2);

pub(super) async fn run(ws: &Workspace, input: &Value, limits: &ToolLimits) -> ToolOutput {
    let command = match str_arg(input, "command") {
        Ok(c) if !c.trim().is_empty() => c,
        Ok(_) => return ToolOutput::error("`command` is empty"),
        Err(e) => return ToolOutput::error(e),
    };
    let timeout = match opt_u64_arg(input, "timeout_secs") {
        Ok(Some(secs)) => Duration::from_secs(secs.max(1)).min(limits.bash_max_timeout),
        Ok(None) => limits.bash_timeout,
        Err(e) => return ToolOutput::error(e),
    };
    let call = reaper::new_call();
    let mut cmd = tokio::process::Command::new("bash");
    cmd.arg("-c")
        .arg(command)
        .current_dir(ws.root())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        // Its own process group, so killing it ends everything the command started.
        .process_group(0)
        .env_clear()
        .env("HOME", ws.root())
        .env(reaper::CALL_VAR, &call);
    for name in BASH_DEFAULT_ENV
        .iter()
        .copied()
        .chain(limits.bash_env.iter().map(String::as_str))
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
    let mut child = match reaper::spawn_shell(|| cmd.spawn(), |c| c.id()) {
        Ok(c) => c,
        Err(e) => return ToolOutput::error(format!("cannot start bash: {e}")),
    };
    let mut group = GroupGuard {
        pid: child.id(),
        call: call.clone(),
    };
    let stdout = Captured::shared();
    let stderr = Captured::shared();
    let readers = [
        child
            .stdout
            .take()
            .map(|r| tokio::spawn(read_capped(r, stdout.clone(), limits.output_cap))),
        child
            .stderr
            .take()
            .map(|r| tokio::spawn(read_capped(r, stderr.clone(), limits.output_cap))),
    ];

    let waited = tokio::time::timeout(timeout, child.wait()).await;
    let header = match waited {
        Ok(Ok(status)) => {
            // Background jobs end with the command: nothing it started outlives the call.
            group.finish().await;
            match (
                status.code(),
                std::os::unix::process::ExitStatusExt::signal(&status),
            ) {
                (Some(code), _) => Ok(code),
                (None, Some(sig)) => Err(format!("killed by signal {sig}")),
                (None, None) => Err("ended without an exit code".to_string()),
            }
        }
        Ok(Err(e)) => Err(format!("waiting for bash failed: {e}")),
        Err(_) => {
            group.kill_group();
            let _ = child.kill().await;
            group.finish().await;
            Err(format!(
                "timed out after {timeout:?}; the command and its process group were killed"
            ))
        }
    };
    for reader in readers.into_iter().flatten() {
        let abort = reader.abort_handle();
        if tokio::time::timeout(DRAIN_GRACE, reader).await.is_err() {
            abort.abort();
        }
    }
    let out = format_output(&stdout, &stderr, limits.output_cap);
    match header {
        Ok(0) => ToolOutput::ok(format!("exit code: 0\n{out}")),
        Ok(code) => ToolOutput::error(format!("exit code: {code}\n{out}")),
        Err(why) => ToolOutput::error(format!("{why}\n{out}")),
    }
}

/// Ends everything the command started: its process group, and whatever left it
/// ([`reaper::sweep`]), when the command ends ([`GroupGuard::finish`]) and when dropped
/// armed (the step ended, e.g. canceled or out of time, while the command ran).
struct GroupGuard {
    /// The shell, until it was reaped and swept.
    pid: Option<u32>,
    call: String,
}

impl GroupGuard {
    fn kill_group(&self) {
        if let Some(pid) = self.pid.and_then(|p| i32::try_from(p).ok()) {
            let _ =
                nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
    }

    /// After the shell was reaped: kills its group and sweeps.
    async fn finish(&mut self) {
        self.kill_group();
        let call = self.call.clone();
        let _ = tokio::task::spawn_blocking(move || reaper::sweep(&call, None)).await;
        if let Some(pid) = self.pid.take() {
            reaper::forget_shell(pid);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        let Some(shell) = self.pid else {
            return;
        };
        self.kill_group();
        // The shell may still run; what it started is re-parented once it is gone.
        let call = std::mem::take(&mut self.call);
        let spawned = std::thread::Builder::new()
            .name("bash-sweep".into())
            .spawn(move || {
                reaper::sweep(&call, Some(shell));
                // Let the shell die (SIGKILL is not instant), then sweep what it orphaned.
                for _ in 0..200 {
                    let gone = std::fs::read_to_string(format!("/proc/{shell}/stat"))
                        .ok()
                        .and_then(|s| {
                            s.rsplit_once(')')
                                .map(|(_, r)| r.trim_start().starts_with(['Z', 'X']))
                        })
                        .unwrap_or(true);
                    if gone {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                reaper::sweep(&call, None);
                reaper::forget_shell(shell);
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start the thread that ends a canceled command's processes");
        }
    }
}

#[derive(Default)]
struct Captured {
    data: Vec<u8>,
    total: usize,
}

impl Captured {
    fn shared() -> Arc<Mutex<Captured>> {
        Arc::new(Mutex::new(Captured::default()))
    }
}

/// Reads to the end, keeping the first `cap` bytes but counting all, so a chatty
/// command never blocks on a full pipe.
async fn read_capped(mut r: impl AsyncRead + Unpin, into: Arc<Mutex<Captured>>, cap: usize) {
    let mut chunk = [0u8; 8192];
    loop {
        match r.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let mut c = into.lock().unwrap_or_else(|p| p.into_inner());
                let room = cap.saturating_sub(c.data.len()).min(n);
                c.data.extend_from_slice(&chunk[..room]);
                c.total += n;
            }
        }
    }
}

fn format_output(stdout: &Mutex<Captured>, stderr: &Mutex<Captured>, cap: usize) -> String {
    let section = |name: &str, c: &Mutex<Captured>| {
        let c = c.lock().unwrap_or_else(|p| p.into_inner());
        let mut text = String::from_utf8_lossy(&c.data).into_owned();
        if c.total > c.data.len() {
            text.push_str(&format!(
                "\n[... truncated: {} of {} bytes shown (cap {cap})]",
                c.data.len(),
                c.total
            ));
        }
        if text.is_empty() {
            format!("--- {name}: (empty)")
        } else {
            format!("--- {name} ---\n{text}")
        }
    };
    format!("{}\n{}", section("stdout", stdout), section("stderr", stderr))
}
