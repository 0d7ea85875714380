//! Several `railyard server` nodes on one PostgreSQL database: one leads (it holds
//! the writer lease and runs the engine), the others follow, forwarding every call
//! to it. A client may call any node and a worker poll any node. Each test has a
//! database of its own on the server `RAILYARD_TEST_POSTGRES` names (skipped, saying
//! so, without it) and short leases (`--node-lease 3s`), and every node shares one
//! keys directory, so task tokens verify whichever node leads.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use railyard_proto::v1::{self, RunStatus};
use railyard_sdk::{Client, Completion, ConnectOptions, StepWorker};
use railyard_store_postgres::testing::{TestDatabase, skipped, test_url};
use tokio::task::JoinHandle;

use crate::support::*;

/// Bounds a wait that should end long before; never a measure of anything.
pub(crate) const HANG: Duration = Duration::from_secs(90);

pub(crate) const LEASE: &str = "3s";

pub(crate) const WORKFLOW: &str = r#"{"id": "job", "version": "1", "name": "A job", "taskQueue": "jobs",
  "steps": [{"id": "one", "title": "One", "prompt": "do {{goal}}", "heartbeatTimeoutSeconds": 5}]}"#;

/// A schedule's target: a queue nobody polls, so its runs stay open.
pub(crate) const TICK: &str = r#"{"id": "tick", "version": "1", "name": "A tick", "taskQueue": "nobody",
  "steps": [{"id": "one", "title": "One", "prompt": "tick"}]}"#;

/// A database and the nodes on it.
pub(crate) struct Cluster {
    pub db: TestDatabase,
    pub sandbox: Sandbox,
    pub nodes: Vec<ServerProcess>,
}

impl Cluster {
    /// `n` nodes on a new database; the first started leads.
    pub(crate) fn start(test: &str, n: usize) -> Option<Self> {
        let Some(url) = test_url() else {
            eprintln!("{}", skipped(test));
            return None;
        };
        Some(Self::start_on(&url, n))
    }

    /// `n` nodes on a new database on the server at `url`.
    pub(crate) fn start_on(url: &str, n: usize) -> Self {
        Self::start_with(url, n, &[])
    }

    /// [`Cluster::start_on`], each node started with `args` too.
    pub(crate) fn start_with(url: &str, n: usize, args: &[&str]) -> Self {
        let db = TestDatabase::create(url).expect("a database of the test's own");
        let sandbox = Sandbox::new();
        sandbox.workflow("job.json", WORKFLOW);
        sandbox.workflow("tick.json", TICK);
        let mut cluster = Self {
            db,
            sandbox,
            nodes: Vec::new(),
        };
        for _ in 0..n {
            let node = cluster.node_with(args);
            cluster.nodes.push(node);
        }
        cluster
    }

    /// A new node on the database, started with `args` too.
    pub(crate) fn node_with(&self, args: &[&str]) -> ServerProcess {
        ServerProcess::start_on_store_with(
            self.db.url(),
            &self.sandbox.path("data"),
            &self.sandbox.path("workflows"),
            &[&["--node-lease", LEASE][..], args].concat(),
        )
    }

    /// The node holding the writer lease, by the database.
    pub(crate) fn holder(&self) -> String {
        self.db
            .query_text("SELECT node FROM writer_lease WHERE id = 1")
            .unwrap()
            .expect("a lease row")
    }
}

/// `GET path` on `http_addr` over HTTP/1.0: the status and the body.
pub(crate) fn http_get(http_addr: &str, path: &str) -> Option<(u16, String)> {
    let mut conn = std::net::TcpStream::connect(http_addr).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    conn.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
        .ok()?;
    let mut text = String::new();
    conn.read_to_string(&mut text).ok()?;
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((status, body))
}

/// A node's role by its `/healthz`: a follower says so (and whom it follows); a
/// leader's answer has no role.
pub(crate) fn role(node: &ServerProcess) -> Option<String> {
    let (_, body) = http_get(&node.http_addr, "/healthz")?;
    let json: serde_json::Value = serde_json::from_str(&body).ok()?;
    Some(json["role"].as_str().unwrap_or("leader").to_string())
}

/// A client of `node` that retries a transient error for as long as a change of
/// leader may take on a loaded machine (a node stopping its server, the next one
/// starting its own), not the default's few seconds: the checks read through it.
pub(crate) fn client(node: &ServerProcess) -> Client {
    let opts = ConnectOptions {
        max_attempts: 40,
        ..ConnectOptions::default()
    };
    Client::lazy(&node.url, opts).expect("client")
}

/// Every run of the namespace, paged.
pub(crate) async fn all_runs(client: &Client) -> Vec<v1::RunInfo> {
    let mut runs = Vec::new();
    let mut token = String::new();
    loop {
        let page = client
            .list_runs(v1::ListRunsRequest {
                namespace: "default".into(),
                page_size: 500,
                page_token: token.clone(),
                ..Default::default()
            })
            .await
            .expect("list runs");
        runs.extend(page.runs);
        if page.next_page_token.is_empty() {
            return runs;
        }
        token = page.next_page_token;
    }
}

/// The due times (unix ms) of a schedule's runs, from their ids
/// (`<schedule>-<RFC 3339 due time>`).
pub(crate) fn due_times(runs: &[v1::RunInfo], schedule: &str) -> Vec<i64> {
    let prefix = format!("{schedule}-");
    let mut due: Vec<i64> = runs
        .iter()
        .filter_map(|r| r.run_id.strip_prefix(&prefix))
        .map(|t| {
            chrono::DateTime::parse_from_rfc3339(t)
                .unwrap_or_else(|e| panic!("run id suffix {t:?}: {e}"))
                .timestamp_millis()
        })
        .collect();
    due.sort_unstable();
    due
}

/// Due times one `every` apart with none missing and none twice.
pub(crate) fn assert_gap_free(due: &[i64], every_ms: i64) {
    let unique: BTreeSet<_> = due.iter().collect();
    assert_eq!(unique.len(), due.len(), "a due time fired twice: {due:?}");
    for pair in due.windows(2) {
        assert_eq!(pair[1] - pair[0], every_ms, "a gap or a stray fire: {due:?}");
    }
}

pub(crate) fn schedule(id: &str) -> v1::CreateScheduleRequest {
    v1::CreateScheduleRequest {
        namespace: "default".into(),
        schedule_id: id.into(),
        spec: Some(v1::ScheduleSpec {
            interval: "every 1s".into(),
            ..Default::default()
        }),
        action: Some(v1::ScheduleAction {
            workflow_id: "tick".into(),
            goal: "tick {{scheduledTime}}".into(),
            ..Default::default()
        }),
        policies: Some(v1::SchedulePolicies {
            overlap: v1::OverlapPolicy::AllowAll as i32,
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn three_nodes_serve_one_database_whichever_node_a_client_or_worker_calls() {
    let Some(c) = Cluster::start("cluster::three_nodes_serve_one_database", 3) else {
        return;
    };
    let [a, b, n3] = [&c.nodes[0], &c.nodes[1], &c.nodes[2]];
    assert_eq!(role(a).as_deref(), Some("leader"));
    for follower in [b, n3] {
        let (_, body) = http_get(&follower.http_addr, "/healthz").expect("healthz");
        let health: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(health["role"], "follower", "{health}");
        assert_eq!(
            health["leader"]["node"].as_str(),
            Some(c.holder().as_str()),
            "{health}"
        );
    }
    let rt = runtime();
    let _in = rt.enter();
    let (ca, cb, cc) = (client(a), client(b), client(n3));
    rt.block_on(async {
        // Started on A, watched on B, leased by a worker polling C.
        let run_id = ca
            .start_run("default", "job", "across nodes", HashMap::new())
            .await
            .expect("start on A");
        let mut watch = cb.watch_run("default", &run_id, 1).await.expect("watch on B");
        let worker = StepWorker::new(cc.clone(), "default", "jobs", "worker-on-c");
        let task = worker
            .poll(HANG)
            .await
            .expect("poll C")
            .expect("the run's step, through C");
        assert_eq!(task.run_id, run_id);

        // A signal sent to B reaches the step's heartbeat through C.
        cb.signal_run(v1::SignalRunRequest {
            namespace: "default".into(),
            run_id: run_id.clone(),
            signal_name: "steer".into(),
            payload_json: r#"{"text":"from B"}"#.into(),
            ..Default::default()
        })
        .await
        .expect("signal on B");
        let beat = worker
            .heartbeat(&task.task_token)
            .send()
            .await
            .expect("heartbeat on C");
        assert_eq!(
            beat.signals.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            ["steer"],
            "{beat:?}"
        );
        worker
            .complete(&task.task_token, Completion::notes("done through C"))
            .await
            .expect("complete on C");

        let mut seen = Vec::new();
        while let Some(event) = tokio::time::timeout(HANG, watch.message())
            .await
            .expect("the watch ends when the run closes")
            .expect("watch stream")
        {
            seen.push((event.event_id, event.event_type));
        }
        let history: Vec<_> = ca
            .full_history("default", &run_id)
            .await
            .unwrap()
            .into_iter()
            .map(|e| (e.event_id, e.event_type))
            .collect();
        assert_eq!(seen, history, "the watch on B saw every event");
        assert_eq!(history.last().map(|e| e.1.as_str()), Some("RunCompleted"));

        // A webhook posted to a follower starts one run per delivery id.
        cc.create_trigger(v1::CreateTriggerRequest {
            namespace: "default".into(),
            trigger_id: "hook".into(),
            spec: Some(v1::TriggerSpec {
                workflow_id: "job".into(),
                goal: "hook {{$.n}}".into(),
                ..Default::default()
            }),
            identity: "test".into(),
        })
        .await
        .expect("create a trigger on C");
        let http = reqwest::Client::new();
        let mut hooked = BTreeSet::new();
        for target in [b, n3, b] {
            let answer = http
                .post(format!("http://{}/hooks/default/hook", target.http_addr))
                .header("content-type", "application/json")
                .header("X-GitHub-Delivery", "delivery-1")
                .body(r#"{"n": 1}"#)
                .send()
                .await
                .expect("post the webhook");
            assert_eq!(answer.status(), 202);
            let json: serde_json::Value = answer.json().await.unwrap();
            hooked.insert(json["runId"].as_str().unwrap().to_string());
        }
        assert_eq!(hooked.len(), 1, "one run for one delivery id: {hooked:?}");

        // A schedule created on a follower fires each due time once.
        cb.create_schedule(schedule("tick"))
            .await
            .expect("create a schedule on B");
        let fired = |runs: &[v1::RunInfo]| due_times(runs, "tick").len();
        let mut runs = Vec::new();
        let deadline = tokio::time::Instant::now() + HANG;
        while fired(&runs) < 6 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the schedule did not fire"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
            runs = all_runs(&cc).await;
        }
        cc.delete_schedule("default", "tick").await.expect("delete on C");
        let runs = all_runs(&ca).await;
        assert_gap_free(&due_times(&runs, "tick"), 1000);
        let open = runs
            .iter()
            .filter(|r| r.run_id.starts_with("tick-") && r.status == RunStatus::Running as i32)
            .count();
        assert_eq!(open, due_times(&runs, "tick").len());
    });
}

#[test]
fn mcp_on_a_follower_keeps_its_session_there_and_acts_through_the_leader() {
    let Some(c) = Cluster::start("cluster::mcp_on_a_follower", 2) else {
        return;
    };
    let follower = &c.nodes[1];
    assert_eq!(role(follower).as_deref(), Some("follower"));
    let mut mcp = crate::mcp_http::HttpMcp::new(&format!("http://{}/mcp", follower.http_addr), None);
    let (status, init) = mcp.initialize();
    assert_eq!(status, 200, "{init}");
    let listed = mcp.tool("list_workflows", serde_json::json!({}));
    assert!(listed.to_string().contains("\"job\""), "{listed}");
    let started = mcp.tool(
        "start_workflow",
        serde_json::json!({"workflow_id": "job", "goal": "through the follower's /mcp"}),
    );
    assert_ne!(started["isError"], serde_json::json!(true), "{started}");
    let rt = runtime();
    let _in = rt.enter();
    let leader = client(&c.nodes[0]);
    let runs = rt.block_on(all_runs(&leader));
    assert!(
        runs.iter().any(|r| r.goal == "through the follower's /mcp"),
        "the run is on the leader: {runs:?}"
    );
}

#[test]
fn mcp_on_a_follower_opens_sessions_only_for_keys_the_leader_knows() {
    let Some(url) = test_url() else {
        eprintln!("{}", skipped("cluster::mcp_on_a_follower_checks_keys"));
        return;
    };
    let c = Cluster::start_with(&url, 2, &["--auth", "--mcp-max-sessions", "8"]);
    let follower = &c.nodes[1];
    assert_eq!(role(follower).as_deref(), Some("follower"));
    let admin = std::fs::read_to_string(c.sandbox.path("data").join("admin.key"))
        .expect("the first node writes the admin key")
        .trim()
        .to_string();
    let real = crate::mcp_http::key(&c.nodes[0], &admin, &["--role", "client"]);
    let mcp_url = format!("http://{}/mcp", follower.http_addr);
    // Forged keys of Railyard's shape, more than the session cap: each refused, none
    // holding a session.
    for i in 0..20 {
        let forged = format!("ry_{i:016x}_{}", "0".repeat(64));
        let mut mcp = crate::mcp_http::HttpMcp::new(&mcp_url, Some(&forged));
        let (status, answer) = mcp.initialize();
        assert_eq!(status, 401, "forged key {i}: {answer}");
        assert!(answer.to_string().contains("unknown API key"), "{answer}");
    }
    // A real key still gets its session and acts through the leader.
    let mut mcp = crate::mcp_http::HttpMcp::new(&mcp_url, Some(&real));
    let (status, init) = mcp.initialize();
    assert_eq!(status, 200, "{init}");
    let listed = mcp.tool("list_workflows", serde_json::json!({}));
    assert!(listed.to_string().contains("\"job\""), "{listed}");
}

/// Clients starting runs and workers completing them, through chosen nodes.
pub(crate) struct Load {
    stop_starting: Arc<AtomicBool>,
    stop_working: Arc<AtomicBool>,
    /// Run ids whose start was acknowledged.
    pub(crate) started: Arc<Mutex<Vec<String>>>,
    /// Run ids whose step's completion was acknowledged.
    completed: Arc<Mutex<Vec<String>>>,
    starters: Vec<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
}

impl Load {
    /// One starter per client in `starting`, one worker per client in `working`.
    pub(crate) fn spawn(starting: &[Client], working: &[Client]) -> Self {
        let load = Self {
            stop_starting: Arc::default(),
            stop_working: Arc::default(),
            started: Arc::default(),
            completed: Arc::default(),
            starters: Vec::new(),
            workers: Vec::new(),
        };
        let mut load = load;
        for (i, client) in starting.iter().enumerate() {
            let (client, stop, started) = (client.clone(), load.stop_starting.clone(), load.started.clone());
            load.starters.push(tokio::spawn(async move {
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    n += 1;
                    let req = v1::StartRunRequest {
                        namespace: "default".into(),
                        workflow_id: "job".into(),
                        goal: format!("load {i}-{n}"),
                        run_id: format!("load-{i}-{n}"),
                        ..Default::default()
                    };
                    match client.start_run_with(req).await {
                        Ok(r) => started.lock().unwrap().push(r.run_id),
                        Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                    }
                    tokio::time::sleep(Duration::from_millis(30)).await;
                }
            }));
        }
        for (i, client) in working.iter().enumerate() {
            let (stop, completed) = (load.stop_working.clone(), load.completed.clone());
            let worker = StepWorker::new(client.clone(), "default", "jobs", &format!("worker-{i}"));
            load.workers.push(tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    match worker.poll(Duration::from_secs(1)).await {
                        Ok(Some(task)) => {
                            let done = Completion::notes(format!("done by worker-{i}"));
                            if worker.complete(&task.task_token, done).await.is_ok() {
                                completed.lock().unwrap().push(task.run_id);
                            }
                        }
                        Ok(None) => {}
                        Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                    }
                }
            }));
        }
        load
    }

    pub(crate) fn started(&self) -> Vec<String> {
        self.started.lock().unwrap().clone()
    }

    pub(crate) fn completed(&self) -> Vec<String> {
        self.completed.lock().unwrap().clone()
    }

    pub(crate) async fn wait_started(&self, more_than: usize) {
        let deadline = tokio::time::Instant::now() + HANG;
        while self.started().len() <= more_than {
            assert!(tokio::time::Instant::now() < deadline, "no runs were started");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub(crate) async fn stop_starting(&mut self) {
        self.stop_starting.store(true, Ordering::SeqCst);
        for t in self.starters.drain(..) {
            let _ = tokio::time::timeout(HANG, t).await;
        }
    }

    pub(crate) async fn stop_working(&mut self) {
        self.stop_working.store(true, Ordering::SeqCst);
        for t in self.workers.drain(..) {
            let _ = tokio::time::timeout(HANG, t).await;
        }
    }
}

/// Waits until every run in `ids` is closed, asking `client`; their statuses.
pub(crate) async fn wait_closed(client: &Client, ids: &[String]) -> BTreeMap<String, i32> {
    let deadline = tokio::time::Instant::now() + HANG;
    loop {
        let runs = all_runs(client).await;
        let status: BTreeMap<String, i32> = runs.into_iter().map(|r| (r.run_id, r.status)).collect();
        let open: Vec<&String> = ids
            .iter()
            .filter(|id| status.get(*id).is_none_or(|s| *s == RunStatus::Running as i32))
            .collect();
        if open.is_empty() {
            return status;
        }
        if tokio::time::Instant::now() >= deadline {
            let mut told = Vec::new();
            for id in open.iter().take(5) {
                let seen = match status.get(*id) {
                    None => "missing".to_string(),
                    Some(_) => match client.full_history("default", id).await {
                        Ok(events) => {
                            let types: Vec<String> = events.into_iter().map(|e| e.event_type).collect();
                            format!("running: {types:?}")
                        }
                        Err(e) => format!("running, history unreadable: {e}"),
                    },
                };
                told.push(format!("{id} {seen}"));
            }
            panic!(
                "{} acknowledged runs still open or missing: {}",
                open.len(),
                told.join("; ")
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The event types of a run's history.
pub(crate) async fn types(client: &Client, run_id: &str) -> Vec<String> {
    client
        .full_history("default", run_id)
        .await
        .expect("history")
        .into_iter()
        .map(|e| e.event_type)
        .collect()
}

/// Every acknowledged start is there once and finished; every acknowledged
/// completion is in its run's history, and no step completed twice.
pub(crate) async fn check_nothing_lost_or_doubled(client: &Client, load: &Load) {
    let started = load.started();
    let unique: BTreeSet<_> = started.iter().collect();
    assert_eq!(unique.len(), started.len(), "a start acknowledged twice");
    let status = wait_closed(client, &started).await;
    for id in &started {
        assert_eq!(status.get(id), Some(&(RunStatus::Completed as i32)), "run {id}");
    }
    let completed: BTreeSet<_> = load.completed().into_iter().collect();
    // Every load run in the store, acknowledged or not (a start whose answer was lost
    // may have committed), has one history with one start and at most one completion.
    for id in status.keys().filter(|id| id.starts_with("load-")) {
        let types = types(client, id).await;
        let count = |t: &str| types.iter().filter(|x| *x == t).count();
        assert_eq!(count("RunStarted"), 1, "{id}: {types:?}");
        assert!(count("StepCompleted") <= 1, "{id} completed twice: {types:?}");
        if completed.contains(id) {
            assert_eq!(
                count("StepCompleted"),
                1,
                "{id}: an acknowledged completion is lost: {types:?}"
            );
        }
    }
}
