//! A local-cluster runner for end-to-end tests: real `railyard` processes on free
//! loopback ports, over a temporary directory, that can be killed with SIGKILL and
//! started again on the same data.
#![allow(dead_code)]

pub mod mock_model;
pub mod worker;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The `railyard` binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_railyard");

/// A temporary home for one test: `data/`, `workflows/` and `workspace/`.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
}

impl Sandbox {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        for sub in ["data", "workflows", "workspace"] {
            std::fs::create_dir_all(dir.path().join(sub)).expect("mkdir");
        }
        Self { dir }
    }

    pub fn path(&self, sub: &str) -> PathBuf {
        self.dir.path().join(sub)
    }

    /// Writes `workflows/<name>`.
    pub fn workflow(&self, name: &str, json: &str) {
        std::fs::write(self.path("workflows").join(name), json).expect("write workflow");
    }

    /// Starts a server on free ports over this sandbox's data and workflows.
    pub fn server(&self) -> ServerProcess {
        ServerProcess::start(&self.path("data"), &self.path("workflows"), None)
    }
}

impl Default for Sandbox {
    fn default() -> Self {
        Self::new()
    }
}

/// A `railyard server` process. Killed (SIGKILL) when dropped.
pub struct ServerProcess {
    pub child: Child,
    pub url: String,
    pub grpc_addr: String,
    pub http_addr: String,
    data: PathBuf,
    workflows: PathBuf,
}

impl ServerProcess {
    /// Starts a server; `grpc` pins the gRPC address (for restarts on the same port),
    /// otherwise a free port is taken. Returns once it prints its listening line.
    pub fn start(data: &Path, workflows: &Path, grpc: Option<&str>) -> Self {
        let mut child = Command::new(BIN)
            .arg("server")
            .args([
                "--listen",
                grpc.unwrap_or("127.0.0.1:0"),
                "--http-listen",
                "127.0.0.1:0",
            ])
            .arg("--data-dir")
            .arg(data)
            .arg("--workflows")
            .arg(workflows)
            .env(
                "RUST_LOG",
                std::env::var("TEST_SERVER_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn railyard server");
        let mut line = String::new();
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        out.read_line(&mut line).expect("read listening line");
        assert!(
            line.starts_with("railyard server listening "),
            "unexpected first line {line:?}"
        );
        let field = |name: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(name))
                .map(str::to_string)
                .expect("address")
        };
        let (grpc_addr, http_addr) = (field("grpc="), field("http="));
        drain(out);
        Self {
            child,
            url: format!("http://{grpc_addr}"),
            grpc_addr,
            http_addr,
            data: data.to_path_buf(),
            workflows: workflows.to_path_buf(),
        }
    }

    /// SIGKILL: no shutdown code runs.
    pub fn kill9(&mut self) {
        let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGKILL);
        let _ = self.child.wait();
    }

    /// SIGKILL, then a new server on the same data directory and gRPC address.
    pub fn crash_and_restart(mut self) -> Self {
        self.kill9();
        let (data, workflows, addr) = (self.data.clone(), self.workflows.clone(), self.grpc_addr.clone());
        // The port may linger briefly after the kill; retry the bind for a while.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let attempt = std::panic::catch_unwind(|| Self::start(&data, &workflows, Some(&addr)));
            match attempt {
                Ok(server) => return server,
                Err(e) if Instant::now() > deadline => std::panic::resume_unwind(e),
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }

    /// SIGTERM and wait for a clean exit.
    pub fn stop(mut self) -> std::process::ExitStatus {
        let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            assert!(Instant::now() < deadline, "server did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Runs a client command against this server.
    pub fn ry(&self, args: &[&str]) -> Output {
        ry(&self.url, args)
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Keeps reading a child's stdout on a thread, so the child never blocks on a full pipe.
pub fn drain(mut out: BufReader<ChildStdout>) {
    std::thread::spawn(move || {
        let mut sink = String::new();
        while out.read_line(&mut sink).map(|n| n > 0).unwrap_or(false) {
            sink.clear();
        }
    });
}

/// Runs `railyard ARGS --server URL` and returns its output.
pub fn ry(url: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .args(["--server", url])
        .env_remove("RAILYARD_NAMESPACE")
        .env_remove("RUST_LOG")
        .output()
        .expect("run railyard")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts success and returns stdout.
pub fn ok(o: Output) -> String {
    assert!(
        o.status.success(),
        "command failed ({}): {}{}",
        o.status,
        stdout(&o),
        stderr(&o)
    );
    stdout(&o)
}

/// Asserts success and parses stdout as JSON.
pub fn json(o: Output) -> serde_json::Value {
    let text = ok(o);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// Polls `check` every 50 ms until it returns `Some`, for at most `limit`.
/// For waiting on another process; never a timing assertion.
pub fn eventually<T>(limit: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "condition not reached within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
