//! List queries (`railyard_model::query`): any text parses or is refused without a
//! panic; a refusal names a column inside the text (or just past its end) and its
//! message is bounded; an accepted query plans and evaluates on a run without a
//! panic, and its plan names only terms a run can be indexed under (status,
//! workflow, a goal's word, or a declared search attribute, a text one's by word).

use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use railyard_model::query::{AttributeTypes, MAX_QUERY_BYTES, Query, ValueType};
use railyard_model::run::{Out, RunState, StartParams};
use railyard_model::workflow::parse_definition;

use crate::corpus;

/// Longest refusal message: the fixed text around at most a few echoed values.
const MAX_MESSAGE: usize = 512;

/// Grammar pieces, corpus lines, their mutations, and arbitrary text.
pub fn strategy(seeds: Arc<Vec<Vec<u8>>>) -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("WorkflowId".to_string()),
        Just("Status".to_string()),
        Just("StartTime".to_string()),
        Just("Tokens".to_string()),
        Just("customer".to_string()),
        Just("notes".to_string()),
        Just("Goal".to_string()),
        Just("'Fix the PR-42, ünïcode'".to_string()),
        Just(" = ".to_string()),
        Just(" != ".to_string()),
        Just(" >= ".to_string()),
        Just(" IN (".to_string()),
        Just(")".to_string()),
        Just("(".to_string()),
        Just(", ".to_string()),
        Just(" AND ".to_string()),
        Just(" OR ".to_string()),
        Just(" IS NOT NULL".to_string()),
        Just(" STARTS_WITH ".to_string()),
        Just(" ORDER BY StartTime DESC".to_string()),
        Just("'FAILED'".to_string()),
        Just("\"2026-11-20T00:00:00Z\"".to_string()),
        Just("12".to_string()),
        Just("-0.5".to_string()),
        Just("'unterminated".to_string()),
        ".{0,4}",
    ];
    prop_oneof![
        4 => prop::collection::vec(piece, 0..24).prop_map(|p| p.concat()),
        2 => corpus::mutated_text(seeds.clone()),
        1 => corpus::seed_text(seeds),
        1 => ".{0,64}",
        1 => (0usize..3).prop_map(|n| ["(".repeat(40), "RunId = 'a' OR ".repeat(80), "x".repeat(MAX_QUERY_BYTES + 1)][n].clone()),
    ]
}

fn a_run() -> RunState {
    let def = parse_definition(
        r#"{"id":"wf","version":"1","name":"W","steps":[{"id":"a","title":"A","prompt":"p"}]}"#,
    )
    .map(Arc::new)
    .expect("the fixed definition parses");
    let mut seq = 0;
    let mut out = Out::new(1_764_000_000_000, &mut seq);
    let params = StartParams {
        namespace: "default".into(),
        run_id: "r1".into(),
        goal: "Fix the PR-42".into(),
        ..Default::default()
    };
    RunState::start(params, def, &mut out)
}

/// The property (see the module docs).
pub fn check(text: &str) -> Result<(), TestCaseError> {
    let attributes: AttributeTypes = [
        ("customer".to_string(), ValueType::Keyword),
        ("priority".to_string(), ValueType::Int),
        ("notes".to_string(), ValueType::Text),
    ]
    .into_iter()
    .collect();
    match Query::parse(text, &attributes) {
        Ok(q) => {
            let run = a_run();
            let _ = q.matches(&run);
            let plan = q.plan();
            for terms in &plan.candidates {
                for t in terms {
                    // A search attribute's term is `@name:<type code>=value`.
                    let declared = t
                        .strip_prefix('@')
                        .and_then(|rest| rest.split_once(':'))
                        .is_some_and(|(name, _)| attributes.contains_key(name));
                    prop_assert!(
                        t.starts_with("Status=") || t.starts_with("WorkflowId=") || declared,
                        "a plan term no run is indexed under: {t:?}"
                    );
                }
            }
        }
        Err(e) => {
            let chars = text.chars().count();
            prop_assert!(
                e.column >= 1 && e.column <= chars + 1,
                "column {} outside a text of {chars} characters",
                e.column
            );
            prop_assert!(
                e.message.len() <= MAX_MESSAGE,
                "a refusal of {} bytes",
                e.message.len()
            );
        }
    }
    Ok(())
}
