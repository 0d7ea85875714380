//! Search attributes on PostgreSQL: attribute queries (equality, `IN`, ranges,
//! `STARTS_WITH`) answer as the reference backend, a selective one reads only its
//! runs, and a change of a run's attributes moves its terms.

use railyard_model::RunKey;
use std::sync::Arc;

use railyard_model::attributes::{AttributeValue, parse_set};
use railyard_model::query::{AttributeTypes, Query, ValueType};
use railyard_model::run::{Out, RunState, StartParams};
use railyard_model::workflow::parse_definition;
use railyard_store::memory::MemoryBackend;
use railyard_store::{Backend, RunFilter, Store};

use super::schema;

fn decl() -> AttributeTypes {
    [
        ("customer", ValueType::Keyword),
        ("priority", ValueType::Int),
        ("score", ValueType::Double),
        ("tags", ValueType::KeywordList),
    ]
    .into_iter()
    .map(|(n, t)| (n.to_string(), t))
    .collect()
}

/// 300 runs: customer `c-<i % 30>`, priority `i % 10`, score `i / 100`, tags.
fn write_runs(backend: &dyn Backend) {
    let def = Arc::new(
        parse_definition(
            r#"{"id":"w","version":"1","name":"W","steps":[{"id":"a","title":"A","prompt":"p"}]}"#,
        )
        .unwrap(),
    );
    let mut seq = 0;
    backend
        .write(&mut |tx| {
            for i in 0..300i64 {
                let mut out = Out::new(1_000 + i, &mut seq);
                let params = StartParams {
                    namespace: "default".into(),
                    run_id: format!("r{i:03}"),
                    ..Default::default()
                };
                let mut run = RunState::start(params, def.clone(), &mut out);
                let raw = [
                    ("customer".to_string(), format!("c-{}", i % 30)),
                    ("priority".to_string(), (i % 10 - 5).to_string()),
                    ("score".to_string(), format!("{}", i as f64 / 100.0)),
                    ("tags".to_string(), format!("t{},all", i % 4)),
                ]
                .into_iter()
                .collect();
                run.set_attributes(
                    parse_set(&decl(), &raw, "attributes").unwrap(),
                    "",
                    "me",
                    &mut out,
                )
                .unwrap();
                tx.save_run(&run, &out.events)?;
                tx.index_run("default", run.start_ms, &run.run_id, "")?;
            }
            Ok(())
        })
        .unwrap();
}

fn ids(store: &Store, q: &str) -> (Vec<String>, u64) {
    let filter = RunFilter {
        query: Some(Query::parse(q, &decl()).unwrap()),
        ..RunFilter::default()
    };
    let (runs, _, stats) = store
        .list_runs_counted("default", &filter, None, 1_000, usize::MAX, &|_| 0)
        .unwrap();
    (runs.into_iter().map(|r| r.run_id).collect(), stats.rows_read)
}

#[test]
fn attribute_queries_answer_as_the_reference_and_read_their_runs_only() {
    let Some(s) = schema("attribute_queries_answer_as_the_reference_and_read_their_runs_only") else {
        return;
    };
    let pg = Store::new(Arc::new(s.open().unwrap()));
    let memory = Store::new(Arc::new(MemoryBackend::default()));
    write_runs(pg.backend());
    write_runs(memory.backend());
    // (query, rows read at most)
    for (q, bound) in [
        ("customer = 'c-7'", 10),
        ("customer IN ('c-7', 'c-8')", 20),
        ("priority < -3", 60),
        ("priority >= 3 AND priority <= 4", 60),
        ("score > 2.5", 49),
        ("customer STARTS_WITH 'c-2'", 110),
        ("tags = 't1' AND customer = 'c-1'", 10),
        ("tags IN ('t0', 't3') AND priority = 0", 30),
    ] {
        let (got, read) = ids(&pg, q);
        assert_eq!(got, ids(&memory, q).0, "{q}");
        assert!(!got.is_empty(), "{q}");
        assert!(read <= bound, "{q}: read {read} rows, more than {bound}");
    }
    // A change moves the run's terms in its save.
    let mut run = pg.run(&RunKey::new("default", "r007")).unwrap().unwrap();
    let mut seq = 10_000;
    let mut out = Out::new(9_000, &mut seq);
    let set = vec![(
        "customer".to_string(),
        Some(AttributeValue::Keyword("zeta".into())),
    )];
    run.set_attributes(set, "a", "me", &mut out).unwrap();
    pg.backend()
        .write(&mut |tx| tx.save_run(&run, &out.events))
        .unwrap();
    assert_eq!(ids(&pg, "customer = 'zeta'"), (vec!["r007".to_string()], 1));
    assert_eq!(ids(&pg, "customer = 'c-7'").0.len(), 9);
    // Purging a run removes its attribute terms too.
    pg.backend().write(&mut |tx| tx.purge_run(&run)).unwrap();
    let rows = s
        .query_text("SELECT count(*)::text FROM run_terms WHERE run_id = 'r007'")
        .unwrap();
    assert_eq!(rows.as_deref(), Some("0"));
}
