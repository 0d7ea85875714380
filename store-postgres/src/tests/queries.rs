//! Listing by query on PostgreSQL: the same answers as the reference backend, a
//! selective query reading only the runs under its index term, and the migration
//! that fills `run_terms` from runs stored before it (and the words of their goals,
//! from before those were indexed).

use railyard_model::RunKey;
use std::sync::Arc;

use railyard_model::query::{AttributeTypes, Query};
use railyard_model::run::{Out, RunState, StartParams};
use railyard_model::workflow::parse_definition;
use railyard_store::memory::MemoryBackend;
use railyard_store::{Backend, RunFilter, Store};

use super::schema;

/// 60 runs of three workflows, every fifth terminated; written as the writer does
/// (a start, then a close in a save of its own).
fn write_runs(backend: &dyn Backend) {
    let mut seq = 0;
    for i in 0..60i64 {
        let wf = format!("w{}", i % 3);
        let def = Arc::new(
            parse_definition(&format!(
                r#"{{"id":"{wf}","version":"1","name":"W","steps":[{{"id":"a","title":"A","prompt":"p"}}]}}"#
            ))
            .unwrap(),
        );
        let mut out = Out::new(1_000 + i, &mut seq);
        let params = StartParams {
            namespace: "default".into(),
            run_id: format!("r{i:02}"),
            goal: format!("Review {} PR-{i}", ["the", "a", "Our"][(i % 4) as usize % 3]),
            ..Default::default()
        };
        let mut run = RunState::start(params, def, &mut out);
        let started = (run.clone(), out.events);
        let mut closed = None;
        if i % 5 == 0 {
            let mut out = Out::new(5_000, &mut seq);
            run.terminate("op", "done".into(), &mut out).unwrap();
            closed = Some((run, out.events));
        }
        backend
            .write(&mut |tx| {
                tx.save_run(&started.0, &started.1)?;
                tx.index_run("default", started.0.start_ms, &started.0.run_id, "")?;
                if let Some((run, events)) = &closed {
                    tx.save_run(run, events)?;
                }
                Ok(())
            })
            .unwrap();
    }
}

const QUERIES: [&str; 8] = [
    "Status = 'TERMINATED'",
    "Goal = 'our'",
    "Goal = 'pr 7' OR Goal = 'PR-12'",
    "Goal = 'review the' AND Status = 'RUNNING'",
    "WorkflowId = 'w1' AND Status = 'RUNNING'",
    "WorkflowId IN ('w0', 'w2') AND StartTime > '1970-01-01T00:00:01.030Z'",
    "Status = 'TERMINATED' OR WorkflowId = 'w2'",
    "",
];

fn ids(store: &Store, q: &str) -> (Vec<String>, u64) {
    let filter = RunFilter {
        query: Some(Query::parse(q, &AttributeTypes::new()).unwrap()),
        ..RunFilter::default()
    };
    let (runs, _, stats) = store
        .list_runs_counted("default", &filter, None, 1_000, usize::MAX, &|_| 0)
        .unwrap();
    (runs.into_iter().map(|r| r.run_id).collect(), stats.rows_read)
}

#[test]
fn a_listing_by_query_answers_as_the_reference_and_reads_its_index_only() {
    let Some(s) = schema("a_listing_by_query_answers_as_the_reference_and_reads_its_index_only") else {
        return;
    };
    let pg = Store::new(Arc::new(s.open().unwrap()));
    let memory = Store::new(Arc::new(MemoryBackend::default()));
    write_runs(pg.backend());
    write_runs(memory.backend());
    for q in QUERIES {
        assert_eq!(ids(&pg, q).0, ids(&memory, q).0, "{q}");
    }
    // 12 terminated runs of 60: 12 read.
    assert_eq!(
        ids(&pg, "Status = 'TERMINATED'"),
        (ids(&memory, "Status = 'TERMINATED'").0, 12)
    );

    // A goal's word is checked on the runs read (the goal is not indexed).
    assert_eq!(ids(&pg, "Goal = 'pr 7'").0, vec!["r07".to_string()]);

    // Runs stored before the table get their terms from the migrations: status and
    // workflow from the one that makes the table, attributes' when a database from
    // before those opens.
    s.execute("DROP TABLE run_terms").unwrap();
    s.execute(crate::schema::RUN_TERMS).unwrap();
    drop(pg);
    // Back to the version before the words: the later migrations run again too, so
    // what they made goes first.
    s.execute("DROP TABLE step_checkpoint_segments").unwrap();
    s.execute("DROP TABLE step_checkpoints").unwrap();
    s.execute("DROP TABLE workflows").unwrap();
    s.execute(&format!(
        "UPDATE railyard_schema SET version = {}",
        crate::schema::RUN_WORDS_VERSION - 1
    ))
    .unwrap();
    let pg = Store::new(Arc::new(s.open().unwrap()));
    for q in QUERIES {
        assert_eq!(ids(&pg, q).0, ids(&memory, q).0, "after the migration: {q}");
    }
    // Purging a run removes its terms.
    let run = pg.run(&RunKey::new("default", "r00")).unwrap().unwrap();
    pg.backend().write(&mut |tx| tx.purge_run(&run)).unwrap();
    let rows = s
        .query_text("SELECT count(*)::text FROM run_terms WHERE run_id = 'r00'")
        .unwrap();
    assert_eq!(rows.as_deref(), Some("0"));
}
