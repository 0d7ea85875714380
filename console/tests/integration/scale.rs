//! Bounded reads at scale: with 100,000 runs stored, a run of
//! 10,000 events and a 4 MiB transcript, the runs list, the run page and the
//! transcript make their stated number of gRPC calls and show one page of rows, and
//! the server's storage reads for each stay within the budgets stated here
//! ([`STORAGE`]), counted by `railyard_store::counting` around the redb backend:
//! snapshots, read calls, rows handed back, checkpoint bytes. Counts, not time.
//!
//! The store is written before the server opens it, straight through the redb
//! backend in large write transactions, with runs made by the model's own
//! transitions (as `railyard bench --preload` writes its store): starting 100,000
//! runs one gRPC call each would spend the test's time on commits, not on what it
//! checks.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use railyard_console::api;
use railyard_model::RunKey;
use railyard_model::run::{Event, HeartbeatNote, Out, Phase, RunState, StartParams};
use railyard_model::token::TokenClaims;
use railyard_model::workflow::{WorkflowDef, parse_definition};
use railyard_store::counting::{CountingBackend, Reads};
use railyard_store::redb_backend::RedbBackend;
use railyard_store::{Backend, CheckpointAt, StorageError, Store};

use crate::support::{Console, ONE};

/// Runs stored.
const RUNS: u64 = 100_000;
/// Events of the long run: its start, scheduling and lease, then notes.
const EVENTS: u64 = 10_000;
/// Runs per write transaction.
const BATCH: u64 = 25_000;
/// The long run's transcript: 64 appended segments of 64 KiB.
const TRANSCRIPT_SEGMENTS: u64 = 64;
const SEGMENT_BYTES: usize = 64 * 1024;

/// A page's storage budget: at most this many snapshots, read calls, rows and
/// checkpoint bytes for one request, whatever the store holds.
struct Budget {
    page: &'static str,
    snapshots: u64,
    calls: u64,
    rows: u64,
    checkpoint_bytes: u64,
}

/// The budgets. The runs list: one snapshot; a listing reads the runs it shows and
/// one past them (51), through the start index or a term's, whose entries the query
/// planner first counts up to its cap of 4,096 to pick the smallest index; a query
/// the index does not serve (`top=1`'s `ParentRunId IS NULL`) reads runs until a page
/// matches (here all do). The run page: `DescribeRun` (the run), a history page of
/// 1,000 events for the waterfall and one of 100 for the list, each read 32 events a
/// snapshot (`HISTORY_CHUNK`: a history of large events is never loaded whole), and
/// the session tree. The transcript: the run, where its checkpoint is, its head and
/// the rows of its segments up to the page's end (the head and 64 segments of five
/// rows each), at most a page (256 KiB) of bytes.
const STORAGE: [Budget; 4] = [
    Budget {
        page: "runs",
        snapshots: 2,
        calls: 3,
        rows: 51 + 4_096 + 10,
        checkpoint_bytes: 0,
    },
    // A goal's word no index serves: the server's per-page row budget.
    Budget {
        page: "runs by goal",
        snapshots: 2,
        calls: 3,
        rows: 10_000 + 10,
        checkpoint_bytes: 0,
    },
    Budget {
        page: "run",
        snapshots: 45,
        calls: 45,
        rows: 1_120,
        checkpoint_bytes: 0,
    },
    Budget {
        page: "transcript",
        snapshots: 2,
        calls: 4,
        // redb stores each 64 KiB segment as 5 rows that fill its pages
        // (store/src/redb_backend/pieces.rs).
        rows: 1 + 5 * TRANSCRIPT_SEGMENTS + 10,
        checkpoint_bytes: 256 * 1024,
    },
];

/// Asserts `reads` are within the budget of `page`.
fn within(page: &str, reads: Reads, url: &str) {
    let b = STORAGE.iter().find(|b| b.page == page).expect("a budget");
    println!("{url}: {reads:?}");
    assert!(
        reads.snapshots <= b.snapshots
            && reads.calls <= b.calls
            && reads.rows <= b.rows
            && reads.checkpoint_bytes <= b.checkpoint_bytes,
        "{url}: {reads:?} is past the {page} page's storage budget"
    );
}

/// Writes `RUNS` closed runs of `one` and the open run `long` with `EVENTS`
/// events into a new store in `dir`.
fn preload(dir: &std::path::Path) {
    let backend = RedbBackend::open(dir).unwrap();
    let def = Arc::new(parse_definition(ONE).unwrap());
    let now = railyard_model::Millis::from(1_800_000_000_000i64);
    let first = now - i64::try_from(RUNS).unwrap() * 10 - 60_000;
    let ns = "default";
    let mut seq = 1;
    let (mut making, mut writing) = (std::time::Duration::ZERO, std::time::Duration::ZERO);
    let start = |i: u64, id: String, at: i64, seq: &mut u64| {
        let mut out = Out::new(at, seq);
        let params = StartParams {
            namespace: ns.into(),
            run_id: id,
            goal: format!("preloaded run {i}"),
            context: BTreeMap::new(),
            identity: "scale test".into(),
            ..Default::default()
        };
        let mut run = RunState::start(params, def.clone(), &mut out);
        let task_seq = match &run.phase {
            Phase::Scheduled { task_seq, .. } => *task_seq,
            _ => 0,
        };
        let lease = run.lease(task_seq, "w", &mut out).unwrap();
        let claims = TokenClaims {
            namespace: ns.into(),
            run_id: run.run_id.clone(),
            step: "only".into(),
            attempt: 1,
            lease: lease.seq,
            kid: "k".into(),
        };
        (run, out.events, claims)
    };
    for k in (0..RUNS).step_by(BATCH as usize) {
        let t = Instant::now();
        let mut made = Vec::new();
        for i in k..(k + BATCH).min(RUNS) {
            let at = first + i64::try_from(i).unwrap() * 10;
            made.push(closed_run(&def, i, at, &mut seq));
        }
        making += t.elapsed();
        let t = Instant::now();
        backend
            .write(&mut |tx| {
                for (run, events) in &made {
                    tx.save_run(run, events)?;
                    tx.index_run(ns, run.start_ms, &run.run_id, "")?;
                    tx.index_closed(ns, run.close_ms.unwrap_or(run.start_ms), &run.run_id)?;
                }
                Ok::<_, StorageError>(())
            })
            .unwrap();
        writing += t.elapsed();
    }
    println!("runs made in {making:?}, written in {writing:?}");
    // The long run: leased, then notes heartbeated until it has EVENTS events.
    let (mut run, mut events, claims) = start(RUNS, "long".into(), now - 30_000, &mut seq);
    let mut out = Out::new(now - 20_000, &mut seq);
    while events.len() as u64 + out.events.len() as u64 + 1 < EVENTS {
        run.heartbeat(
            &claims,
            "w",
            railyard_model::run::CheckpointUpdate::Keep,
            vec![HeartbeatNote {
                kind: "progress".into(),
                message: "a note".into(),
            }],
            0,
            &mut out,
        )
        .unwrap();
    }
    events.extend(out.events);
    let mut out = Out::new(now - 10_000, &mut seq);
    run.heartbeat(
        &claims,
        "w",
        railyard_model::run::CheckpointUpdate::Keep,
        vec![HeartbeatNote {
            kind: "progress".into(),
            message: "the last note".into(),
        }],
        0,
        &mut out,
    )
    .unwrap();
    events.extend(out.events);
    assert_eq!(events.len() as u64, EVENTS);
    backend
        .write(&mut |tx| {
            tx.save_run(&run, &events)?;
            tx.index_run(ns, run.start_ms, &run.run_id, "")?;
            tx.set_open(&RunKey::new(ns, &run.run_id), true)
        })
        .unwrap();
    // Its step's 4 MiB transcript, in appended segments (as heartbeats leave it).
    backend
        .write(&mut |tx| {
            for k in 0..TRANSCRIPT_SEGMENTS {
                let line = format!(
                    "{}\n",
                    serde_json::json!({ "at": k, "message": { "role": "assistant",
                        "content": [{ "type": "text", "text": "t".repeat(SEGMENT_BYTES - 80) }] } })
                );
                tx.append_checkpoint(
                    &RunKey::new(ns, "long"),
                    CheckpointAt::Step(0),
                    line.as_bytes(),
                    &[0; 32],
                )?;
            }
            Ok(())
        })
        .unwrap();
}

/// Run `i`, closed: one in four completed its step, the others were canceled before
/// a worker leased it (fewer events: the fixture's time goes mostly to rows).
fn closed_run(def: &Arc<WorkflowDef>, i: u64, at: i64, seq: &mut u64) -> (RunState, Vec<Event>) {
    let mut out = Out::new(at, seq);
    let params = StartParams {
        namespace: "default".into(),
        run_id: format!("scale-{i:06}"),
        goal: format!("preloaded run {i}"),
        identity: "scale test".into(),
        ..Default::default()
    };
    let mut run = RunState::start(params, def.clone(), &mut out);
    out.now = at + 5;
    if !i.is_multiple_of(4) {
        run.cancel("scale test", "generated".into(), &mut out).unwrap();
        return (run, out.events);
    }
    let task_seq = match &run.phase {
        Phase::Scheduled { task_seq, .. } => *task_seq,
        _ => 0,
    };
    let lease = run.lease(task_seq, "w", &mut out).unwrap();
    let claims = TokenClaims {
        namespace: "default".into(),
        run_id: run.run_id.clone(),
        step: "only".into(),
        attempt: 1,
        lease: lease.seq,
        kid: "k".into(),
    };
    run.complete(
        &claims,
        "w",
        format!("notes {i}"),
        vec![],
        BTreeMap::new(),
        &mut out,
    )
    .unwrap();
    (run, out.events)
}

#[tokio::test]
async fn the_runs_list_and_a_run_page_stay_within_their_budgets_at_100k_runs() {
    let data = tempfile::tempdir().unwrap();
    let took = Instant::now();
    preload(data.path());
    // Printed for the record (run with --nocapture); nothing is asserted on time.
    println!(
        "{RUNS} runs and a run of {EVENTS} events written in {:?}",
        took.elapsed()
    );
    let counting = Arc::new(CountingBackend::new(Arc::new(
        RedbBackend::open(data.path()).unwrap(),
    )));
    let console = Console::start_with(data, false, Some(Store::new(counting.clone()))).await;
    let mut b = console.browser();
    // The server's loops read at its start (the retention sweep, timers), beside the
    // first request: one request first, uncounted.
    assert_eq!(b.get("/ui/runs").await.status, 200);
    // Each page's storage reads, counted from just before it is asked for.
    let mut get = async |url: &str, page: &str| {
        counting.take();
        let got = b.get(url).await;
        within(page, counting.take(), url);
        got
    };

    let runs = get("/ui/runs", "runs").await;
    assert_eq!(runs.status, 200);
    assert_eq!(runs.calls(), api::RUNS.calls);
    assert_eq!(runs.body.matches("<tr>").count(), 1 + 50, "one page of rows");
    assert!(runs.body.contains("long"), "the newest run first");
    // A page deep into the list costs the same.
    let i = runs.body.find("\">Next page</a>").expect("a next page link");
    let href = runs.body[runs.body[..i].rfind("href=\"").unwrap() + 6..i].replace("&amp;", "&");
    let deeper = get(&href, "runs").await;
    assert_eq!(deeper.status, 200, "{href}");
    assert_eq!(deeper.calls(), api::RUNS.calls);
    assert_eq!(deeper.body.matches("<tr>").count(), 1 + 50);
    // Filtered by status: the index of the status term, still one page.
    let done = get("/ui/runs?status=completed", "runs").await;
    assert_eq!(done.calls(), api::RUNS.calls);
    assert_eq!(done.body.matches("<tr>").count(), 1 + 50);

    // Top-level runs only: a query the index does not serve, still one page.
    let top = get("/ui/runs?top=1", "runs").await;
    assert_eq!(top.calls(), api::RUNS.calls);
    assert_eq!(top.body.matches("<tr>").count(), 1 + 50);

    // A word no goal holds: no index serves it, so a page reads the server's row
    // budget, shows none, and links on to the older runs.
    let goal = get("/ui/runs?goal=zzqx", "runs by goal").await;
    assert_eq!(goal.status, 200);
    assert!(goal.body.contains("older runs follow"), "{}", goal.body);
    assert!(goal.body.contains("\">Next page</a>"));

    let run = get("/ui/runs/long", "run").await;
    assert_eq!(run.status, 200, "{}", run.body);
    assert!(run.calls() <= api::RUN.calls, "{} calls", run.calls());
    assert!(
        run.body.matches("class=\"event\"").count() <= 100,
        "one page of events"
    );
    assert!(run.body.contains("Next events"));
    let last = get(&format!("/ui/runs/long?from={}", EVENTS - 50), "run").await;
    assert_eq!(last.status, 200);
    assert!(last.calls() <= api::RUN.calls);
    assert!(last.body.contains(&format!("#{EVENTS} ")), "the last event");
    assert!(last.body.contains("the last note"));

    // The 4 MiB transcript: its first page, and its last, each a page of bytes.
    let first = get("/ui/runs/long/transcript", "transcript").await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.calls(), api::TRANSCRIPT.calls);
    let whole = TRANSCRIPT_SEGMENTS * SEGMENT_BYTES as u64;
    assert!(first.body.contains(" bytes in all"));
    let end = get(
        &format!("/ui/runs/long/transcript?at={}", whole - 100_000),
        "transcript",
    )
    .await;
    assert_eq!(end.status, 200);
}
