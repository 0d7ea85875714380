//! A local-cluster runner for end-to-end tests: real `railyard` processes on free
//! loopback ports, over a temporary directory, that can be killed with SIGKILL and
//! started again on the same data.

pub mod mock_model;
pub mod pgctl;
pub mod worker;

use std::cell::RefCell;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use railyard_proto::v1::HistoryEvent;
use serde_json::Value;

/// The `railyard` binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_railyard");

/// A temporary home for one test: `data/`, `workflows/` and `workspace/`. It holds a
/// claim on the machine (see [`Claim`]) for as long as it lives.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
    _machine: Arc<Claim>,
}

impl Sandbox {
    /// A sandbox for a test that shares the machine with the other tests.
    pub fn new() -> Self {
        Self::with(Claim::share())
    }

    /// A sandbox for a test that loads the machine on purpose (the crash test): it
    /// waits until no other test holds a sandbox, and no test starts one until it ends.
    pub fn alone() -> Self {
        Self::with(Claim::alone())
    }

    fn with(machine: Arc<Claim>) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        for sub in ["data", "workflows", "workspace"] {
            std::fs::create_dir_all(dir.path().join(sub)).expect("mkdir");
        }
        Self {
            dir,
            _machine: machine,
        }
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

    /// [`Sandbox::server`] with more flags (`--auth` ...).
    pub fn server_with(&self, args: &[&str]) -> ServerProcess {
        ServerProcess::start_with(&self.path("data"), &self.path("workflows"), None, args)
    }
}

impl Default for Sandbox {
    fn default() -> Self {
        Self::new()
    }
}

/// A test's claim on the machine. The end-to-end tests are one binary whose tests run
/// side by side; a test that loads the machine on purpose takes it alone, so it neither
/// eats the time limits of the others nor has its own eaten. A claim waiting to be
/// alone goes first: no new shares are handed out meanwhile.
pub struct Claim {
    alone: bool,
}

/// Shares handed out, whether one test has the machine alone, and how many wait to.
struct Load {
    sharing: usize,
    alone: bool,
    waiting_alone: usize,
}

static LOAD: Mutex<Load> = Mutex::new(Load {
    sharing: 0,
    alone: false,
    waiting_alone: 0,
});
static LOAD_CHANGED: Condvar = Condvar::new();

thread_local! {
    /// The claim this test's thread holds, so that a second sandbox in the same test
    /// reuses it rather than queueing behind a test waiting to be alone (a deadlock).
    static HELD: RefCell<Weak<Claim>> = const { RefCell::new(Weak::new()) };
}

impl Claim {
    fn share() -> Arc<Self> {
        if let Some(held) = HELD.with(|h| h.borrow().upgrade()) {
            return held;
        }
        let mut load = Self::wait_until(|l| !l.alone && l.waiting_alone == 0);
        load.sharing += 1;
        drop(load);
        Self::hold(Self { alone: false })
    }

    fn alone() -> Arc<Self> {
        assert!(
            HELD.with(|h| h.borrow().upgrade()).is_none(),
            "a test takes the machine alone before it makes any other sandbox"
        );
        Self::lock().waiting_alone += 1;
        let mut load = Self::wait_until(|l| !l.alone && l.sharing == 0);
        load.waiting_alone -= 1;
        load.alone = true;
        drop(load);
        Self::hold(Self { alone: true })
    }

    fn hold(self) -> Arc<Self> {
        let claim = Arc::new(self);
        HELD.with(|h| *h.borrow_mut() = Arc::downgrade(&claim));
        claim
    }

    fn lock() -> MutexGuard<'static, Load> {
        // A test that panicked while holding the lock left the counts consistent.
        LOAD.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait_until(ready: impl Fn(&Load) -> bool) -> MutexGuard<'static, Load> {
        let mut load = Self::lock();
        while !ready(&load) {
            load = LOAD_CHANGED.wait(load).unwrap_or_else(PoisonError::into_inner);
        }
        load
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut load = Self::lock();
        if self.alone {
            load.alone = false;
        } else {
            load.sharing -= 1;
        }
        drop(load);
        LOAD_CHANGED.notify_all();
    }
}

/// A `railyard server` process. Killed (SIGKILL) when dropped.
pub struct ServerProcess {
    pub child: Child,
    pub url: String,
    pub grpc_addr: String,
    pub http_addr: String,
    data: PathBuf,
    /// `--store`, when the runs are not in redb in `data` (which then holds the keys).
    store: Option<String>,
    workflows: PathBuf,
    /// The extra flags it was started with, given again on a restart.
    args: Vec<String>,
}

impl ServerProcess {
    /// Starts a server; `grpc` pins the gRPC address (for restarts on the same port),
    /// otherwise a free port is taken. Returns once it prints its listening line.
    pub fn start(data: &Path, workflows: &Path, grpc: Option<&str>) -> Self {
        Self::start_with(data, workflows, grpc, &[])
    }

    /// [`ServerProcess::start`] with more flags.
    pub fn start_with(data: &Path, workflows: &Path, grpc: Option<&str>, args: &[&str]) -> Self {
        Self::launch(data, None, workflows, grpc, args)
    }

    /// A server whose runs are in `store` (`--store`), its keys in `keys`.
    pub fn start_on_store(store: &str, keys: &Path, workflows: &Path) -> Self {
        Self::launch(keys, Some(store), workflows, None, &[])
    }

    /// [`ServerProcess::start_on_store`] with more flags (`--node-lease 3s` ...).
    pub fn start_on_store_with(store: &str, keys: &Path, workflows: &Path, args: &[&str]) -> Self {
        Self::launch(keys, Some(store), workflows, None, args)
    }

    fn launch(data: &Path, store: Option<&str>, workflows: &Path, grpc: Option<&str>, args: &[&str]) -> Self {
        let mut cmd = Command::new(BIN);
        cmd.arg("server").args([
            "--listen",
            grpc.unwrap_or("127.0.0.1:0"),
            "--http-listen",
            "127.0.0.1:0",
        ]);
        match store {
            Some(store) => cmd.args(["--store", store]).arg("--keys-dir").arg(data),
            None => cmd.arg("--data-dir").arg(data),
        };
        let mut child = cmd
            .arg("--workflows")
            .arg(workflows)
            .args(args)
            .env_remove("RAILYARD_AUTH")
            .env_remove("RAILYARD_STORE")
            .env_remove("RAILYARD_DATA_DIR")
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
            store: store.map(str::to_string),
            workflows: workflows.to_path_buf(),
            args: args.iter().map(|a| a.to_string()).collect(),
        }
    }

    /// SIGKILL: no shutdown code runs.
    pub fn kill9(&mut self) {
        let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGKILL);
        let _ = self.child.wait();
    }

    /// SIGKILL, then a new server on the same data directory, gRPC address and flags.
    pub fn crash_and_restart(mut self) -> Self {
        self.kill9();
        self.restart()
    }

    /// A new server on the same data directory, gRPC address and flags, once this one
    /// has ended ([`ServerProcess::kill9`]).
    pub fn restart(self) -> Self {
        let (data, workflows, addr) = (self.data.clone(), self.workflows.clone(), self.grpc_addr.clone());
        let store = self.store.clone();
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        // The port may linger briefly after the kill; retry the bind for a while.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let attempt = std::panic::catch_unwind(|| {
                Self::launch(&data, store.as_deref(), &workflows, Some(&addr), &args)
            });
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

    /// Runs a client command against this server with extra environment variables.
    pub fn ry_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        command(&self.url, args)
            .envs(env.iter().copied())
            .output()
            .expect("run railyard")
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
    command(url, args).output().expect("run railyard")
}

/// `railyard ARGS --server URL`, without the client's environment variables.
fn command(url: &str, args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .args(["--server", url])
        .env_remove("RAILYARD_NAMESPACE")
        .env_remove("RAILYARD_API_KEY")
        .env_remove("RUST_LOG");
    command
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

/// A runtime and a client of the server at `url`, for a test that drives it from
/// synchronous code.
pub fn connect(url: &str) -> (tokio::runtime::Runtime, railyard_sdk::Client) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = rt.block_on(railyard_sdk::Client::connect(url)).unwrap();
    (rt, client)
}

/// Starts a run of `workflow` in the default namespace and waits up to `limit` for it
/// to leave RUNNING; answers its id and its status's short name.
pub fn run_until_closed(
    rt: &tokio::runtime::Runtime,
    client: &railyard_sdk::Client,
    workflow: &str,
    goal: &str,
    limit: Duration,
) -> (String, String) {
    let run = rt
        .block_on(client.start_run("default", workflow, goal, std::collections::HashMap::new()))
        .unwrap();
    let status = eventually(limit, || {
        let r = rt.block_on(client.describe_run("default", &run)).ok()?.run?;
        let s = railyard_proto::v1::RunStatus::try_from(r.status)
            .ok()?
            .short_name()
            .to_string();
        (s != "RUNNING").then_some(s)
    });
    (run, status)
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

/// A history event's attributes as JSON (`Null` if they do not parse).
pub fn attrs(e: &HistoryEvent) -> Value {
    serde_json::from_str(&e.attributes_json).unwrap_or(Value::Null)
}
