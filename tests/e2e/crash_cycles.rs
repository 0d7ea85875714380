//! The redo log under repeated `kill -9`: twenty times, starts and signals are
//! sent by concurrent clients and the server is killed at a random moment among
//! them; after every restart each acknowledged start is there with one
//! `RunStarted`, each acknowledged signal is in its history exactly once, and a
//! start repeated under its request id makes no second run.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use railyard_proto::v1::{SignalRunRequest, StartRunRequest};
use railyard_sdk::{Client, ConnectOptions};

const WORKFLOW: &str = r#"{"id":"one","version":"1","name":"One","steps":[
    {"id":"only","title":"Only","prompt":"Do {{goal}}"}]}"#;
const CYCLES: usize = 20;
const CLIENTS: usize = 6;
const NS: &str = "default";

fn start(i: usize) -> StartRunRequest {
    StartRunRequest {
        namespace: NS.into(),
        workflow_id: "one".into(),
        goal: format!("goal {i}"),
        request_id: format!("req-{i:05}"),
        run_id: format!("cyc-{i:05}"),
        identity: "crash-cycles".into(),
        ..Default::default()
    }
}

/// What the clients saw acknowledged: run index → whether its signal was too.
type Acked = Arc<Mutex<BTreeMap<usize, bool>>>;

/// Starts runs `from, from + step, ...` and signals each, until a call fails.
async fn load(client: Client, from: usize, step: usize, acked: Acked, killed: Arc<AtomicBool>) {
    let mut i = from;
    while !killed.load(SeqCst) {
        if client.start_run_with(start(i)).await.is_err() {
            return;
        }
        acked.lock().unwrap().insert(i, false);
        let signal = SignalRunRequest {
            namespace: NS.into(),
            run_id: format!("cyc-{i:05}"),
            signal_name: "steer".into(),
            payload_json: format!(r#"{{"n":{i}}}"#),
            identity: "crash-cycles".into(),
            request_id: format!("sig-{i:05}"),
        };
        if client.signal_run(signal).await.is_err() {
            return;
        }
        acked.lock().unwrap().insert(i, true);
        i += step;
    }
}

/// Every acknowledged start and signal is stored exactly once.
async fn check(client: &Client, acked: &BTreeMap<usize, bool>) {
    for (&i, &signalled) in acked {
        let id = format!("cyc-{i:05}");
        let payload = format!(r#"{{"n":{i}}}"#);
        let events = client
            .full_history(NS, &id)
            .await
            .unwrap_or_else(|e| panic!("acknowledged start {i} lost: {e}"));
        let count = |ty: &str| events.iter().filter(|e| e.event_type == ty).count();
        assert_eq!(count("RunStarted"), 1, "run {id}: {events:?}");
        let signals = events
            .iter()
            .filter(|e| e.event_type == "SignalReceived" && attrs(e)["payloadJson"] == payload.as_str())
            .count();
        if signalled {
            assert_eq!(signals, 1, "acknowledged signal of {id}: {events:?}");
        } else {
            assert!(signals <= 1, "signal of {id} stored twice: {events:?}");
        }
        let again = client.start_run_with(start(i)).await.expect("repeat start");
        assert_eq!((again.run_id, again.started), (id, false), "repeat of start {i}");
    }
}

#[test]
fn every_acknowledged_write_is_there_once_after_twenty_sigkills() {
    let sandbox = Sandbox::alone();
    sandbox.workflow("one.json", WORKFLOW);
    let mut server = sandbox.server();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // A fresh seed each run, or the one CRASH_CYCLES_SEED names to repeat a run.
    let mut seed = std::env::var("CRASH_CYCLES_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or_else(|| {
            use std::hash::BuildHasher;
            std::collections::hash_map::RandomState::new().hash_one(0u8)
        })
        | 1;
    eprintln!("crash cycles: seed {seed} (CRASH_CYCLES_SEED repeats it)");
    let mut random = move |n: u64| {
        // xorshift64
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let acked: Acked = Arc::default();
    let mut total = 0;
    for cycle in 0..CYCLES {
        let base = cycle * 100_000 / CYCLES;
        let before = acked.lock().unwrap().len();
        let wait = Duration::from_millis(20 + random(200));
        let pid = Pid::from_raw(server.child.id() as i32);
        rt.block_on(async {
            let opts = ConnectOptions {
                max_attempts: 1,
                ..Default::default()
            };
            let killed = Arc::new(AtomicBool::new(false));
            let mut tasks = tokio::task::JoinSet::new();
            for n in 0..CLIENTS {
                let client = Client::connect_with(&server.url, opts.clone())
                    .await
                    .expect("client");
                tasks.spawn(load(client, base + n, CLIENTS, acked.clone(), killed.clone()));
            }
            tokio::time::sleep(wait).await;
            killed.store(true, SeqCst);
            kill(pid, Signal::SIGKILL).expect("SIGKILL the server");
            while let Some(r) = tasks.join_next().await {
                r.expect("load task");
            }
        });
        server = server.crash_and_restart();
        let now = acked.lock().unwrap().clone();
        total = now.len();
        eprintln!(
            "cycle {cycle}: killed after {wait:?}, {} starts acknowledged",
            total - before
        );
        let cycle_acked: BTreeMap<usize, bool> = now.range(base..).map(|(k, v)| (*k, *v)).collect();
        rt.block_on(async {
            let client = Client::connect(&server.url).await.expect("client");
            check(&client, &cycle_acked).await;
        });
    }
    assert!(
        total >= CYCLES,
        "only {total} starts acknowledged in {CYCLES} cycles"
    );
    // Everything acknowledged in every cycle is still there after the last.
    let all = acked.lock().unwrap().clone();
    rt.block_on(async {
        let client = Client::connect(&server.url).await.expect("client");
        check(&client, &all).await;
    });
    assert!(server.stop().success());
}
