//! Search attributes in listings, on memory and redb: an equality, an `IN`, a range
//! and a `STARTS_WITH` on an attribute read only the runs under their terms
//! (counted), a change of a run's attributes moves its terms in the save that
//! records it, and the answers equal a brute-force filter. A text attribute and the
//! goal are served by their words.

use railyard_model::RunKey;
use std::sync::Arc;

use railyard_model::attributes::{AttributeValue, parse_set};
use railyard_model::query::{AttributeTypes, Query, ValueType};
use railyard_model::run::{Out, RunState, StartParams};
use railyard_model::workflow::parse_definition;

use crate::memory::MemoryBackend;
use crate::redb_backend::RedbBackend;
use crate::{Backend, RunFilter, Store};

const RUNS: usize = 20_000;

fn decl() -> AttributeTypes {
    [
        ("customer", ValueType::Keyword),
        ("priority", ValueType::Int),
        ("tags", ValueType::KeywordList),
        ("notes", ValueType::Text),
    ]
    .into_iter()
    .map(|(n, t)| (n.to_string(), t))
    .collect()
}

fn filter(text: &str) -> RunFilter {
    RunFilter {
        query: Some(Query::parse(text, &decl()).unwrap()),
        ..RunFilter::default()
    }
}

/// 20,000 runs: customer `c-<i % 500>`, priority `i % 1000`, tags `t-<i % 7>`, notes
/// `note <i>`, goal `Fix bug #<i % 100>`.
fn fill(backend: &dyn Backend) {
    let def = Arc::new(
        parse_definition(
            r#"{"id":"wf","version":"1","name":"W","steps":[{"id":"a","title":"A","prompt":"p"}]}"#,
        )
        .unwrap(),
    );
    let mut seq = 0;
    for chunk in 0..RUNS / 5_000 {
        backend
            .write(&mut |tx| {
                for i in chunk * 5_000..(chunk + 1) * 5_000 {
                    let mut out = Out::new(i as i64, &mut seq);
                    let params = StartParams {
                        namespace: "default".into(),
                        run_id: format!("run-{i:06}"),
                        goal: format!("Fix bug #{}", i % 100),
                        ..Default::default()
                    };
                    let mut run = RunState::start(params, def.clone(), &mut out);
                    let raw = [
                        ("customer".to_string(), format!("c-{}", i % 500)),
                        ("priority".to_string(), (i % 1000).to_string()),
                        ("tags".to_string(), format!("t-{},all", i % 7)),
                        ("notes".to_string(), format!("note {i}")),
                    ]
                    .into_iter()
                    .collect();
                    let set = parse_set(&decl(), &raw, "attributes").unwrap();
                    run.set_attributes(set, "", "me", &mut out).unwrap();
                    tx.save_run(&run, &out.events)?;
                    tx.index_run("default", run.start_ms, &run.run_id, "")?;
                }
                Ok(())
            })
            .unwrap();
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

/// Every matching run id, by a page as large as the namespace, and the rows read.
fn all(store: &Store, text: &str) -> (Vec<String>, u64) {
    let (runs, next, stats) = store
        .list_runs_counted("default", &filter(text), None, RUNS, usize::MAX, &|_| 0)
        .unwrap();
    assert!(next.is_none());
    (runs.into_iter().map(|r| r.run_id).collect(), stats.rows_read)
}

/// Brute force: the query evaluated on every run.
fn brute(every: &[RunState], text: &str) -> Vec<String> {
    let q = Query::parse(text, &decl()).unwrap();
    every
        .iter()
        .filter(|r| q.matches(*r))
        .map(|r| r.run_id.clone())
        .collect()
}

#[test]
fn selective_attribute_queries_read_only_their_runs() {
    for (name, backend, _dir) in backends() {
        fill(&*backend);
        let store = Store::new(backend.clone());
        let (every, _, _) = store
            .list_runs_counted("default", &RunFilter::default(), None, RUNS, usize::MAX, &|_| 0)
            .unwrap();
        // (query, matches, rows read at most)
        let cases: [(&str, usize, u64); 12] = [
            ("customer = 'c-7'", 40, 40),
            ("customer IN ('c-7', 'c-8')", 80, 80),
            ("priority >= 10 AND priority < 13", 60, 60),
            ("priority <= 2", 60, 60),
            ("customer STARTS_WITH 'c-49'", 11 * 40, 11 * 40),
            ("tags = 't-3' AND priority = 3", 3, 20),
            ("customer = 'c-7' AND notes = 'note 7'", 1, 40),
            // A text's `=` is served by its rarest word.
            ("notes = 'NOTE, 7'", 1, 1),
            ("notes = '7' OR notes = '8'", 2, RUNS as u64),
            // The goal is not indexed: alone, it reads every run; beside an
            // indexed condition, that index's runs.
            ("Goal = 'bug 42'", 200, RUNS as u64),
            ("Goal = 'fix' AND customer = 'c-42'", 40, 40),
            // A range over too many values is served by another index, or none.
            ("priority > 5 AND customer = 'c-9'", 40, 40),
        ];
        for (text, n, bound) in cases {
            let (ids, read) = all(&store, text);
            assert_eq!(ids, brute(&every, text), "{name}: {text}");
            assert_eq!(ids.len(), n, "{name}: {text}");
            assert!(
                read <= bound,
                "{name}: {text} read {read} rows, more than {bound}"
            );
        }
        // A page of 10 of one customer's runs reads 10.
        let (runs, next, stats) = store
            .list_runs_counted(
                "default",
                &filter("customer = 'c-7'"),
                None,
                10,
                usize::MAX,
                &|_| 0,
            )
            .unwrap();
        assert_eq!((runs.len(), stats.rows_read), (10, 10), "{name}");
        assert!(next.is_some());
        // Counting one customer's runs reads them alone.
        let c = store
            .count_runs("default", &filter("customer = 'c-7'"), None)
            .unwrap();
        assert_eq!((c.total, c.stats.rows_read), (40, 40), "{name}");

        // A change of a run's attributes moves its terms in the same save.
        let mut run = store.run(&RunKey::new("default", "run-000007")).unwrap().unwrap();
        let mut seq = 1_000_000;
        let mut out = Out::new(100_000, &mut seq);
        let set = vec![
            (
                "customer".to_string(),
                Some(AttributeValue::Keyword("zeta".into())),
            ),
            ("tags".to_string(), None),
        ];
        run.set_attributes(set, "a", "me", &mut out).unwrap();
        backend.write(&mut |tx| tx.save_run(&run, &out.events)).unwrap();
        assert_eq!(all(&store, "customer = 'c-7'").0.len(), 39, "{name}");
        assert_eq!(
            all(&store, "customer = 'zeta'"),
            (vec!["run-000007".to_string()], 1),
            "{name}"
        );
        assert!(
            !all(&store, "tags = 'all'").0.contains(&"run-000007".to_string()),
            "{name}"
        );
        assert_eq!(all(&store, "tags = 'all'").0.len(), RUNS - 1, "{name}");
        // And a text's words move with it.
        let mut out = Out::new(100_001, &mut seq);
        let set = vec![(
            "notes".to_string(),
            Some(AttributeValue::Text("Changed words".into())),
        )];
        run.set_attributes(set, "a", "me", &mut out).unwrap();
        backend.write(&mut |tx| tx.save_run(&run, &out.events)).unwrap();
        assert!(all(&store, "notes = '7'").0.is_empty(), "{name}");
        assert_eq!(
            all(&store, "notes = 'changed'"),
            (vec!["run-000007".to_string()], 1),
            "{name}"
        );
    }
}
