//! Several nodes on one PostgreSQL database, under faults: the leader SIGKILLed under
//! load (nothing acknowledged lost or doubled; runs redelivered and finished through
//! the new leader), and the leader stopped (SIGSTOP) past its lease and continued
//! (it writes nothing more and follows), and the database stopped and started again
//! under load (calls answer `UNAVAILABLE` meanwhile; the nodes reconnect by
//! themselves), and the database hung (every process of it SIGSTOPped: `/healthz`
//! says `503` and writes `UNAVAILABLE` within the bounds docs/postgres.md gives, and
//! nothing is lost once it goes on). Counts checked exactly; the deadlines only bound
//! hangs.

use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use railyard_proto::v1;
use railyard_sdk::{Client, ConnectOptions};
use railyard_store_postgres::testing::{skipped, test_url};

use crate::cluster::*;

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

/// How long a node's `/healthz` may take to say `503` once the database hangs.
const UNHEALTHY_WITHIN: Duration = Duration::from_secs(15);
/// How long one `/healthz` may take, the database hung or not.
const HEALTH_ANSWERS_WITHIN: Duration = Duration::from_secs(6);
/// How long a write may take to answer `UNAVAILABLE` once the database hangs.
const UNAVAILABLE_WITHIN: Duration = Duration::from_secs(12);

/// SIGSTOPs processes, and SIGCONTs them when dropped (a failed test included), so
/// a hung database never outlives its test.
struct Stopped(Vec<i32>);

impl Stopped {
    fn all(pids: Vec<i32>) -> Self {
        for &pid in &pids {
            let _ = kill(Pid::from_raw(pid), Signal::SIGSTOP);
        }
        Self(pids)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        for &pid in &self.0 {
            let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
        }
    }
}

/// What a client of `node` that tries once, with `deadline`, is answered for a
/// start while the database hangs, and how long that took.
async fn start_once(
    node: &crate::support::ServerProcess,
    deadline: Duration,
    id: &str,
) -> (tonic::Code, Duration) {
    let opts = ConnectOptions {
        max_attempts: 1,
        request_timeout: deadline,
        ..ConnectOptions::default()
    };
    let client = Client::lazy(&node.url, opts).expect("client");
    let req = v1::StartRunRequest {
        namespace: "default".into(),
        workflow_id: "job".into(),
        goal: "while the database hangs".into(),
        run_id: id.into(),
        ..Default::default()
    };
    let began = Instant::now();
    let err = tokio::time::timeout(HANG, client.start_run_with(req))
        .await
        .expect("answered, not hung")
        .expect_err("a hung database, no start");
    let code = err.code().unwrap_or(tonic::Code::Unknown);
    (code, began.elapsed())
}

#[test]
fn a_hung_database_gives_unavailable_within_the_bounds_and_loses_nothing_once_it_goes_on() {
    if test_url().is_none() {
        eprintln!("{}", skipped("cluster_faults::a_hung_database"));
        return;
    }
    let Some(pg) = crate::support::pgctl::PgCluster::start() else {
        return;
    };
    let c = Cluster::start_on(&pg.url(), 2);
    let rt = runtime();
    let _in = rt.enter();
    let clients: Vec<Client> = c.nodes.iter().map(client).collect();
    rt.block_on(async {
        let mut load = Load::spawn(&clients, &clients);
        load.wait_started(10).await;
        // The postmaster and every backend: the database accepts connections (the
        // kernel does) and answers nothing.
        let hung = Stopped::all(pg.processes());
        // Each node's /healthz says so within a few seconds and never hangs: the
        // leader's answers within its 2 s bound, a follower's once its next
        // question to the database went unanswered.
        for (i, node) in c.nodes.iter().enumerate() {
            let deadline = Instant::now() + UNHEALTHY_WITHIN;
            loop {
                let asked = Instant::now();
                let (status, body) = http_get(&node.http_addr, "/healthz").expect("healthz answers");
                assert!(
                    asked.elapsed() < HEALTH_ANSWERS_WITHIN,
                    "node {i}: /healthz took {:?}",
                    asked.elapsed()
                );
                if status == 503 {
                    eprintln!("hung: node {i} /healthz 503: {body}");
                    break;
                }
                assert!(Instant::now() < deadline, "node {i} still healthy: {body}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        // A write through either node answers UNAVAILABLE well before a long
        // deadline; one with a short deadline is answered by it.
        for (i, node) in c.nodes.iter().enumerate() {
            let (code, took) = start_once(node, Duration::from_secs(60), &format!("hung-{i}")).await;
            eprintln!(
                "hung: a start through node {i}: {code:?} in {} ms",
                took.as_millis()
            );
            assert_eq!(code, tonic::Code::Unavailable, "node {i}");
            assert!(took < UNAVAILABLE_WITHIN, "node {i}: {took:?}");
        }
        let (code, took) = start_once(&c.nodes[0], Duration::from_secs(2), "hung-short").await;
        eprintln!(
            "hung: a start with a 2 s deadline: {code:?} in {} ms",
            took.as_millis()
        );
        assert!(took < Duration::from_secs(4), "{took:?}");
        drop(hung);
        let before = load.started().len();
        load.wait_started(before + 15).await;
        load.stop_starting().await;
        check_nothing_lost_or_doubled(&clients[0], &load).await;
        load.stop_working().await;
    });
}
