//! Listing by query on every backend here: answers equal a brute-force filter over
//! the same runs, page by page; a selective query reads a bounded number of rows
//! (counted, [`ListStats::rows_read`]); a database from before the term index gets it
//! at open.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;
use railyard_model::query::{AttributeTypes, Builtin, Field, Query};
use railyard_model::run::{Event, Out, RunState, RunStatus, StartParams};
use railyard_model::workflow::{WorkflowDef, parse_definition};

use crate::listing::ListStats;
use crate::memory::MemoryBackend;
use crate::redb_backend::RedbBackend;
use crate::{Backend, RunFilter, Store};

fn def(wf: &str) -> Arc<WorkflowDef> {
    Arc::new(
        parse_definition(&format!(
            r#"{{"id":"{wf}","version":"1","name":"W","steps":[{{"id":"a","title":"A","prompt":"p"}}]}}"#
        ))
        .unwrap(),
    )
}

/// A run of `def` started at `start_ms`, terminated at once when `close`; with the
/// events that made it (as the writer saves them).
fn made(
    def: &Arc<WorkflowDef>,
    id: &str,
    start_ms: i64,
    close: bool,
    seq: &mut u64,
) -> (RunState, Vec<Event>) {
    let mut out = Out::new(start_ms, seq);
    let params = StartParams {
        namespace: "default".into(),
        run_id: id.into(),
        ..Default::default()
    };
    let mut run = RunState::start(params, def.clone(), &mut out);
    let mut events = out.events;
    if close {
        let mut out = Out::new(start_ms + 10, seq);
        run.terminate("op", "done".into(), &mut out).unwrap();
        events.extend(out.events);
    }
    (run, events)
}

/// Writes the runs the way the writer does: the start (and its index) in one save,
/// a close in another.
fn write(backend: &dyn Backend, runs: &[(RunState, Vec<Event>)]) {
    backend
        .write(&mut |tx| {
            for (run, events) in runs {
                let split = events
                    .iter()
                    .position(|e| matches!(e.kind, railyard_model::run::EventKind::RunTerminated { .. }))
                    .unwrap_or(events.len());
                let mut open = run.clone();
                if split < events.len() {
                    open.status = RunStatus::Running;
                    open.close_ms = None;
                }
                tx.save_run(&open, &events[..split])?;
                tx.index_run("default", run.start_ms, &run.run_id, "")?;
                if split < events.len() {
                    tx.save_run(run, &events[split..])?;
                }
            }
            Ok(())
        })
        .unwrap();
}

fn query(text: &str) -> RunFilter {
    RunFilter {
        query: Some(Query::parse(text, &AttributeTypes::new()).unwrap()),
        ..RunFilter::default()
    }
}

/// Every page of the listing, and the stats of each.
fn all_pages(store: &Store, filter: &RunFilter, page: usize) -> (Vec<String>, Vec<ListStats>) {
    let (mut ids, mut stats, mut after) = (Vec::new(), Vec::new(), None);
    loop {
        let (runs, next, s) = store
            .list_runs_counted("default", filter, after, page, usize::MAX, &|_| 0)
            .unwrap();
        ids.extend(runs.into_iter().map(|r| r.run_id));
        stats.push(s);
        match next {
            Some(n) => after = Some(n),
            None => return (ids, stats),
        }
        assert!(stats.len() < 10_000, "paging does not end");
    }
}

fn backends() -> Vec<(&'static str, Arc<dyn Backend>, Option<tempfile::TempDir>)> {
    let dir = tempfile::tempdir().unwrap();
    let redb = RedbBackend::open(dir.path()).unwrap();
    vec![
        ("memory", Arc::new(MemoryBackend::default()), None),
        ("redb", Arc::new(redb), Some(dir)),
    ]
}

const PREDICATES: [&str; 12] = [
    "Status = 'RUNNING'",
    "Status = 'TERMINATED'",
    "Status IN ('RUNNING', 'TERMINATED')",
    "WorkflowId = 'w0'",
    "WorkflowId = 'w1'",
    "WorkflowId IN ('w1', 'w2')",
    "WorkflowId != 'w2'",
    "StartTime >= '1970-01-01T00:00:03Z'",
    "StartTime < '1970-01-01T00:00:05Z'",
    "CloseTime IS NULL",
    "RunId STARTS_WITH 'r1'",
    "StartTime = '1970-01-01T00:00:04Z'",
];

fn a_query() -> impl Strategy<Value = String> {
    let leaf = (0..PREDICATES.len()).prop_map(|i| PREDICATES[i].to_string());
    leaf.prop_recursive(2, 8, 3, |inner| {
        (proptest::collection::vec(inner, 1..4), any::<bool>()).prop_map(|(qs, and)| {
            let parts: Vec<String> = qs.iter().map(|q| format!("({q})")).collect();
            parts.join(if and { " AND " } else { " OR " })
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn a_listing_by_query_equals_a_brute_force_filter(
        q in a_query(),
        shape in proptest::collection::vec((0..3usize, 0..8i64, any::<bool>()), 0..40),
        page in 1..7usize,
    ) {
        let defs: Vec<_> = ["w0", "w1", "w2"].iter().map(|w| def(w)).collect();
        let mut seq = 0;
        let runs: Vec<_> = shape
            .iter()
            .enumerate()
            .map(|(i, (w, t, close))| made(&defs[*w], &format!("r{i}"), t * 1_000, *close, &mut seq))
            .collect();
        let filter = query(&q);
        let parsed = filter.query.clone().unwrap();
        let mut expected: Vec<&RunState> = runs.iter().map(|(r, _)| r).filter(|r| parsed.matches(*r)).collect();
        expected.sort_by(|a, b| (b.start_ms, &b.run_id).cmp(&(a.start_ms, &a.run_id)));
        let expected: Vec<String> = expected.into_iter().map(|r| r.run_id.clone()).collect();
        for (name, backend, _dir) in backends() {
            write(&*backend, &runs);
            let store = Store::new(backend);
            let (got, _) = all_pages(&store, &filter, page);
            prop_assert_eq!(&got, &expected, "{} on {}", q, name);
            let count = store.count_runs("default", &filter, None).unwrap();
            prop_assert_eq!(count.total, expected.len() as u64, "count of {} on {}", q, name);
        }
    }
}

/// 100,000 runs of 100 workflows, one in 1,000 terminated.
fn many(backend: &dyn Backend) {
    let defs: Vec<_> = (0..100).map(|w| def(&format!("wf-{w}"))).collect();
    let mut seq = 0;
    for chunk in 0..10 {
        let runs: Vec<_> = (chunk * 10_000..(chunk + 1) * 10_000)
            .map(|i| {
                made(
                    &defs[i % 100],
                    &format!("run-{i:06}"),
                    i as i64,
                    i % 1_000 == 7,
                    &mut seq,
                )
            })
            .collect();
        write(backend, &runs);
    }
}

#[test]
fn a_selective_query_over_100000_runs_reads_a_bounded_number_of_rows() {
    for (name, backend, _dir) in backends() {
        many(&*backend);
        let store = Store::new(backend);
        let page = |f: &RunFilter, n: usize| {
            store
                .list_runs_counted("default", f, None, n, usize::MAX, &|_| 0)
                .unwrap()
        };
        // 100 terminated runs: a page of 50 reads 50.
        let (runs, next, stats) = page(&query("Status = 'TERMINATED'"), 50);
        assert_eq!((runs.len(), stats.rows_read), (50, 50), "{name}: {stats:?}");
        assert!(next.is_some());
        assert_eq!(stats.index, "Status=TERMINATED");
        // The old filter fields use the same index.
        let old = RunFilter {
            status: Some(RunStatus::Terminated),
            ..RunFilter::default()
        };
        assert_eq!(page(&old, 50).2.rows_read, 50, "{name}");
        // Both terms: the smaller (terminated: 100, against 1,000 of wf-7) serves it,
        // and every run it reads is one of the 100.
        let (runs, _, stats) = page(&query("WorkflowId = 'wf-7' AND Status = 'TERMINATED'"), 1_000);
        assert_eq!(runs.len(), 100, "{name}");
        assert_eq!(
            (stats.index.as_str(), stats.rows_read),
            ("Status=TERMINATED", 100),
            "{name}"
        );
        // Two terms merged, within a start range: runs 3 and 4 started before 50 ms.
        let (runs, _, stats) = page(
            &query("WorkflowId IN ('wf-3', 'wf-4') AND StartTime < '1970-01-01T00:00:00.050Z'"),
            20,
        );
        let ids: Vec<_> = runs.iter().map(|r| r.run_id.as_str()).collect();
        assert_eq!(ids, ["run-000004", "run-000003"], "{name}");
        assert_eq!(stats.rows_read, 2, "{name}: {stats:?}");
        // A page of 20 from the two: at most 20 read from each.
        let (runs, _, stats) = page(&query("WorkflowId IN ('wf-3', 'wf-4')"), 20);
        assert_eq!(runs.len(), 20, "{name}");
        assert!(stats.rows_read <= 40, "{name}: {stats:?}");
        // A page of one workflow's runs reads the page.
        let (runs, _, stats) = page(&query("WorkflowId = 'wf-3'"), 20);
        assert_eq!((runs.len(), stats.rows_read), (20, 20), "{name}");
        assert!(runs.iter().all(|r| r.workflow_id == "wf-3"));
        // A condition no index serves reads every run (the counter counts).
        let (runs, _, stats) = page(&query("RunId = 'run-000042'"), 20);
        assert_eq!((runs.len(), stats.rows_read), (1, 100_000), "{name}");
        // Counting by status reads no run.
        let c = store
            .count_runs(
                "default",
                &RunFilter::default(),
                Some(&Field::Builtin(Builtin::Status)),
            )
            .unwrap();
        assert_eq!(c.total, 100_000, "{name}");
        assert_eq!(c.stats.rows_read, 0);
        let groups: BTreeMap<_, _> = c.groups.into_iter().collect();
        assert_eq!(groups[&Some("TERMINATED".to_string())], 100);
        assert_eq!(groups[&Some("RUNNING".to_string())], 99_900);
        // Counting one workflow by status reads that workflow's runs only.
        let c = store
            .count_runs(
                "default",
                &query("WorkflowId = 'wf-7'"),
                Some(&Field::Builtin(Builtin::Status)),
            )
            .unwrap();
        assert_eq!((c.total, c.stats.rows_read), (1_000, 1_000), "{name}");
        assert_eq!(
            c.groups,
            vec![(Some("RUNNING".into()), 900), (Some("TERMINATED".into()), 100)]
        );
    }
}

#[test]
fn a_goal_condition_is_answered_from_the_runs_read_not_from_an_index() {
    let dir = tempfile::tempdir().unwrap();
    let d = def("wf");
    let mut seq = 0;
    let backend = RedbBackend::open(dir.path()).unwrap();
    let mut runs = vec![
        made(&d, "a", 1, false, &mut seq),
        made(&d, "b", 2, true, &mut seq),
    ];
    runs[0].0.goal = "Review PR #7".into();
    runs[1].0.goal = "Triage the PR".into();
    write(&backend, &runs);
    let store = Store::new(Arc::new(backend));
    let (ids, stats) = all_pages(&store, &query("Goal = 'pr'"), 10);
    assert_eq!(ids, ["b", "a"]);
    assert_eq!(stats[0].index, "start");
    assert_eq!(all_pages(&store, &query("Goal = '7'"), 10).0, ["a"]);
}

#[test]
fn a_page_reads_at_most_its_row_budget_and_goes_on_from_the_last_row_read() {
    let d = def("wf");
    let mut seq = 0;
    let backend: Arc<dyn Backend> = Arc::new(crate::memory::MemoryBackend::default());
    let mut runs: Vec<_> = (0..100)
        .map(|i| made(&d, &format!("r{i:03}"), 1_000 + i64::from(i), false, &mut seq))
        .collect();
    // Only the three oldest hold the word.
    for (i, (run, _)) in runs.iter_mut().enumerate() {
        run.goal = if i < 3 {
            "fix the flaky test".into()
        } else {
            "review".into()
        };
    }
    write(&*backend, &runs);
    let store = Store::new(backend);
    let filter = query("Goal = 'flaky'");
    let bounds = crate::listing::Bounds {
        limit: 10,
        max_bytes: usize::MAX,
        max_rows: 30,
    };
    let (mut found, mut after, mut pages) = (Vec::new(), None, 0);
    loop {
        let (page, next, stats) = store
            .list_runs_bounded("default", &filter, after, bounds, &|_| 0)
            .unwrap();
        assert!(stats.rows_read <= 30, "{stats:?}");
        found.extend(page.into_iter().map(|r| r.run_id));
        pages += 1;
        match next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    assert_eq!(found, ["r002", "r001", "r000"]);
    // 97 runs without the word before them, 30 rows a page: the first three pages
    // come back empty, each with a cursor to go on.
    assert_eq!(pages, 4);
    // Unbounded, the same query reads every run in one page.
    let (ids, stats) = all_pages(&store, &filter, 10);
    assert_eq!(ids, ["r002", "r001", "r000"]);
    assert_eq!(stats.len(), 1);
}

#[test]
fn a_redb_file_from_before_the_term_index_gets_it_at_open() {
    use redb::ReadableDatabase;
    let dir = tempfile::tempdir().unwrap();
    let d = def("wf");
    let mut seq = 0;
    {
        let backend = RedbBackend::open(dir.path()).unwrap();
        write(
            &backend,
            &[
                made(&d, "a", 1, true, &mut seq),
                made(&d, "b", 2, false, &mut seq),
            ],
        );
        // What the release before wrote: no term table, no meta entry.
        let tx = backend.db().begin_write().unwrap();
        tx.delete_table(crate::redb_backend::RUN_TERMS).unwrap();
        tx.open_table(crate::redb_backend::META_TABLE)
            .unwrap()
            .remove("term_index")
            .unwrap();
        tx.commit().unwrap();
        let read = backend.db().begin_read().unwrap();
        assert!(read.open_table(crate::redb_backend::RUN_TERMS).is_err());
    }
    let store = Store::new(Arc::new(RedbBackend::open(dir.path()).unwrap()));
    let (ids, stats) = all_pages(&store, &query("Status = 'TERMINATED'"), 10);
    assert_eq!(ids, ["a"]);
    assert_eq!(stats[0].index, "Status=TERMINATED");
    let (ids, _) = all_pages(&store, &query("WorkflowId = 'wf'"), 10);
    assert_eq!(ids, ["b", "a"]);
}

#[test]
fn pages_cut_by_bytes_follow_their_cursors_across_merged_terms() {
    let defs: Vec<_> = ["w0", "w1", "w2"].iter().map(|w| def(w)).collect();
    let mut seq = 0;
    let runs: Vec<_> = (0..9)
        .map(|i| {
            made(
                &defs[i % 3],
                &format!("r{i}"),
                i as i64 * 10,
                i % 2 == 0,
                &mut seq,
            )
        })
        .collect();
    for (name, backend, _dir) in backends() {
        write(&*backend, &runs);
        let store = Store::new(backend);
        let filter = query("WorkflowId IN ('w0', 'w1')");
        let (mut seen, mut after) = (Vec::new(), None);
        loop {
            // No budget at all: one run a page, and a cursor while more follow.
            let (page, next, _) = store
                .list_runs_counted("default", &filter, after, 100, 0, &|_| 1 << 30)
                .unwrap();
            assert_eq!(page.len(), 1, "{name}");
            seen.extend(page.into_iter().map(|r| r.run_id));
            match next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        assert_eq!(seen, ["r7", "r6", "r4", "r3", "r1", "r0"], "{name}");
    }
}
