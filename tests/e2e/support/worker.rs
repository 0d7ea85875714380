//! A `railyard worker` process for end-to-end tests, with only the model configuration
//! a test hands it.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::{BIN, drain, eventually};

/// A `railyard worker` process; SIGKILLed when dropped.
pub struct WorkerProcess {
    pub child: Child,
    pub identity: String,
}

impl WorkerProcess {
    /// Starts a worker and waits for its "polling" line. `env` is all the model
    /// configuration it gets: the test's own environment is kept out.
    pub fn start(
        server: &str,
        workspace: &Path,
        identity: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        Self::start_logged(server, workspace, identity, args, env, None)
    }

    /// [`WorkerProcess::start`] with the worker's log (its stderr) written to `log`.
    pub fn start_logged(
        server: &str,
        workspace: &Path,
        identity: &str,
        args: &[&str],
        env: &[(&str, &str)],
        log: Option<&Path>,
    ) -> Self {
        let stderr = match log {
            Some(path) => Stdio::from(std::fs::File::create(path).expect("worker log file")),
            None => Stdio::inherit(),
        };
        let mut cmd = Command::new(BIN);
        cmd.arg("worker")
            .args(["--server", server, "--identity", identity, "--workspace"])
            .arg(workspace)
            .args(args)
            .env(
                "RUST_LOG",
                std::env::var("TEST_WORKER_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::piped())
            .stderr(stderr);
        for var in [
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_BASE_URL",
            "OPENAI_API_KEY",
            "OPENAI_BASE_URL",
            "RAILYARD_SERVER",
            "RAILYARD_API_KEY",
            "RAILYARD_NAMESPACE",
            "RAILYARD_QUEUES",
            "RAILYARD_SLOTS",
            "RAILYARD_WORKSPACE",
            "RAILYARD_PROVIDER",
            "RAILYARD_MODEL",
            "RAILYARD_SCRIPT",
            "RAILYARD_IDENTITY",
            "RAILYARD_WORKER_CONFIG",
        ] {
            cmd.env_remove(var);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn railyard worker");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        out.read_line(&mut line).expect("read polling line");
        assert!(
            line.starts_with(&format!("railyard worker {identity} polling ")),
            "unexpected first line {line:?}"
        );
        drain(out);
        Self {
            child,
            identity: identity.to_string(),
        }
    }

    fn signal(&self, signal: Signal) {
        let _ = kill(Pid::from_raw(self.child.id() as i32), signal);
    }

    /// SIGTERM, and the exit status once the worker has shut down (within `limit`).
    pub fn terminate(&mut self, limit: Duration) -> std::process::ExitStatus {
        self.signal(Signal::SIGTERM);
        eventually(limit, || self.child.try_wait().ok().flatten())
    }

    /// SIGKILL: no shutdown code runs.
    pub fn kill9(&mut self) {
        self.signal(Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        self.kill9();
    }
}
