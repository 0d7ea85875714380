//! Several nodes on one PostgreSQL database, under faults: the leader SIGKILLed under
//! load (nothing acknowledged lost or doubled; runs redelivered and finished through
//! the new leader), and the leader stopped (SIGSTOP) past its lease and continued
//! (it writes nothing more and follows), and the database stopped and started again
//! under load (calls answer `UNAVAILABLE` meanwhile; the nodes reconnect by
//! themselves). Counts checked exactly; the deadlines only bound hangs.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use railyard_proto::v1::{self, RunStatus};
use railyard_sdk::{Client, Completion, ConnectOptions, StepWorker};
use railyard_store_postgres::testing::{skipped, test_url};
use tokio::task::JoinHandle;

use crate::cluster::*;

/// Clients starting runs and workers completing them, through chosen nodes.
struct Load {
    stop_starting: Arc<AtomicBool>,
    stop_working: Arc<AtomicBool>,
    /// Run ids whose start was acknowledged.
    started: Arc<Mutex<Vec<String>>>,
    /// Run ids whose step's completion was acknowledged.
    completed: Arc<Mutex<Vec<String>>>,
    starters: Vec<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
}

impl Load {
    /// One starter per client in `starting`, one worker per client in `working`.
    fn spawn(starting: &[Client], working: &[Client]) -> Self {
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

    fn started(&self) -> Vec<String> {
        self.started.lock().unwrap().clone()
    }

    fn completed(&self) -> Vec<String> {
        self.completed.lock().unwrap().clone()
    }

    async fn wait_started(&self, more_than: usize) {
        let deadline = tokio::time::Instant::now() + HANG;
        while self.started().len() <= more_than {
            assert!(tokio::time::Instant::now() < deadline, "no runs were started");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn stop_starting(&mut self) {
        self.stop_starting.store(true, Ordering::SeqCst);
        for t in self.starters.drain(..) {
            let _ = tokio::time::timeout(HANG, t).await;
        }
    }

    async fn stop_working(&mut self) {
        self.stop_working.store(true, Ordering::SeqCst);
        for t in self.workers.drain(..) {
            let _ = tokio::time::timeout(HANG, t).await;
        }
    }
}

/// Waits until every run in `ids` is closed, asking `client`; their statuses.
async fn wait_closed(client: &Client, ids: &[String]) -> BTreeMap<String, i32> {
    let deadline = tokio::time::Instant::now() + HANG;
    loop {
        let runs = all_runs(client).await;
        let status: BTreeMap<String, i32> = runs.into_iter().map(|r| (r.run_id, r.status)).collect();
        let open = ids
            .iter()
            .filter(|id| status.get(*id).is_none_or(|s| *s == RunStatus::Running as i32))
            .count();
        if open == 0 {
            return status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{open} acknowledged runs still open or missing"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The event types of a run's history.
async fn types(client: &Client, run_id: &str) -> Vec<String> {
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
async fn check_nothing_lost_or_doubled(client: &Client, load: &Load) {
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

#[test]
fn the_leader_killed_under_load_loses_and_doubles_nothing_and_the_runs_finish_through_the_new_one() {
    let Some(mut c) = Cluster::start("cluster_faults::the_leader_killed_under_load", 3) else {
        return;
    };
    let killed = c.holder();
    let rt = runtime();
    let _in = rt.enter();
    let clients: Vec<Client> = c.nodes.iter().map(client).collect();
    rt.block_on(async {
        // Clients start runs through every node; workers poll every node.
        let mut load = Load::spawn(&clients, &clients);
        load.wait_started(15).await;
        c.nodes[0].kill9();
        let before = load.started().len();
        // The load goes on through the followers until one of them leads.
        load.wait_started(before + 15).await;
        load.stop_starting().await;
        let survivor = &clients[1];
        check_nothing_lost_or_doubled(survivor, &load).await;
        load.stop_working().await;
    });
    let holder = c.holder();
    assert_ne!(holder, killed, "a follower took over the killed leader's lease");
    assert!(
        c.nodes[1..].iter().any(|n| role(n).as_deref() == Some("leader")),
        "one of the others leads"
    );
}

#[test]
fn a_leader_stopped_past_its_lease_writes_nothing_once_continued_and_follows() {
    let Some(c) = Cluster::start("cluster_faults::a_leader_stopped_past_its_lease", 3) else {
        return;
    };
    let stopped = c.holder();
    let old = &c.nodes[0];
    let rt = runtime();
    let _in = rt.enter();
    let clients: Vec<Client> = c.nodes.iter().map(client).collect();
    rt.block_on(async {
        clients[1]
            .create_schedule(schedule("tick"))
            .await
            .expect("create a schedule");
        // Load through the followers only: the stopped node's callers would wait.
        let mut load = Load::spawn(&clients[1..], &clients[1..]);
        load.wait_started(10).await;
        let pid = Pid::from_raw(old.child.id() as i32);
        kill(pid, Signal::SIGSTOP).expect("SIGSTOP");
        let deadline = tokio::time::Instant::now() + HANG;
        while c.holder() == stopped {
            assert!(
                tokio::time::Instant::now() < deadline,
                "nobody took the lease over"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let taken = c.holder();
        let epoch =
            c.db.query_text("SELECT epoch::text FROM writer_lease WHERE id = 1")
                .unwrap();
        // Past the takeover the old leader's timers and schedule are all due.
        let before = load.started().len();
        load.wait_started(before + 10).await;
        kill(pid, Signal::SIGCONT).expect("SIGCONT");
        let deadline = tokio::time::Instant::now() + HANG;
        while role(old).as_deref() != Some("follower") {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the old leader did not step down"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let (_, body) = http_get(&old.http_addr, "/healthz").expect("healthz");
        let health: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            health["leader"]["node"].as_str(),
            Some(taken.as_str()),
            "{health}"
        );
        // A call through the old leader now reaches the new one.
        let through_old = clients[0]
            .start_run("default", "job", "through the old leader", Default::default())
            .await
            .expect("start through the old leader, now a follower");
        load.wait_started(load.started().len() + 5).await;
        load.stop_starting().await;
        clients[2]
            .delete_schedule("default", "tick")
            .await
            .expect("delete the schedule");

        // It claimed nothing back, and nothing it held was written twice.
        assert_eq!(c.holder(), taken);
        assert_eq!(
            c.db.query_text("SELECT epoch::text FROM writer_lease WHERE id = 1")
                .unwrap(),
            epoch
        );
        let mut started = load.started.lock().unwrap().clone();
        started.push(through_old);
        *load.started.lock().unwrap() = started;
        check_nothing_lost_or_doubled(&clients[1], &load).await;
        load.stop_working().await;
        let runs = all_runs(&clients[1]).await;
        let due = due_times(&runs, "tick");
        assert!(due.len() >= 3, "{due:?}");
        assert_gap_free(&due, 1000);
    });
}

#[test]
fn the_database_stopped_under_load_gives_unavailable_and_loses_nothing_once_it_is_back() {
    if test_url().is_none() {
        eprintln!("{}", skipped("cluster_faults::the_database_stopped_under_load"));
        return;
    }
    let Some(pg) = crate::support::pgctl::PgCluster::start() else {
        return;
    };
    let c = Cluster::start_on(&pg.url(), 3);
    let rt = runtime();
    let _in = rt.enter();
    let clients: Vec<Client> = c.nodes.iter().map(client).collect();
    // One try each, so a refusal is seen rather than retried.
    let once: Vec<Client> = c
        .nodes
        .iter()
        .map(|n| {
            let opts = ConnectOptions {
                max_attempts: 1,
                ..ConnectOptions::default()
            };
            Client::lazy(&n.url, opts).expect("client")
        })
        .collect();
    rt.block_on(async {
        let mut load = Load::spawn(&clients, &clients);
        load.wait_started(10).await;
        pg.stop_immediate();
        // Every node answers, UNAVAILABLE, well within the call's own deadline.
        for (i, client) in once.iter().enumerate() {
            let req = v1::StartRunRequest {
                namespace: "default".into(),
                workflow_id: "job".into(),
                goal: "while the database is down".into(),
                run_id: format!("down-{i}"),
                ..Default::default()
            };
            let err = tokio::time::timeout(HANG, client.start_run_with(req))
                .await
                .expect("answered, not hung")
                .expect_err("no database, no start");
            assert_eq!(err.code(), Some(tonic::Code::Unavailable), "node {i}: {err}");
        }
        // Down past the nodes' lease, then back: the nodes reconnect by themselves.
        tokio::time::sleep(Duration::from_secs(4)).await;
        pg.start_again();
        let before = load.started().len();
        load.wait_started(before + 15).await;
        load.stop_starting().await;
        check_nothing_lost_or_doubled(&clients[0], &load).await;
        load.stop_working().await;
    });
}
