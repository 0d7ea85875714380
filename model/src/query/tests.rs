use std::sync::Arc;

use super::*;
use crate::run::{Out, RunState, RunStatus, StartParams};
use crate::workflow::parse_definition;

fn attrs() -> AttributeTypes {
    [
        ("customer".to_string(), ValueType::Keyword),
        ("priority".to_string(), ValueType::Int),
        ("urgent".to_string(), ValueType::Bool),
    ]
    .into_iter()
    .collect()
}

fn parse(q: &str) -> Result<Query, QueryError> {
    Query::parse(q, &attrs())
}

/// A started run of workflow `wf` at `start_ms`.
pub(super) fn run(id: &str, wf: &str, start_ms: i64) -> RunState {
    let def = Arc::new(
        parse_definition(&format!(
            r#"{{"id":"{wf}","version":"3","name":"W","steps":[{{"id":"a","title":"A","prompt":"p"}}]}}"#
        ))
        .unwrap(),
    );
    let mut seq = 0;
    let mut out = Out::new(start_ms, &mut seq);
    RunState::start(
        StartParams {
            namespace: "default".into(),
            run_id: id.into(),
            ..Default::default()
        },
        def,
        &mut out,
    )
}

#[test]
fn the_issue_example_parses_and_matches() {
    let q = parse(
        r#"WorkflowId = "review-pr" AND Status = "FAILED" AND StartTime > "2026-11-20T00:00:00Z" ORDER BY StartTime DESC"#,
    )
    .unwrap();
    assert_eq!(q.order, (Builtin::StartTime, Direction::Desc));
    let t = chrono::DateTime::parse_from_rfc3339("2026-11-21T00:00:00Z")
        .unwrap()
        .timestamp_millis();
    let mut r = run("r1", "review-pr", t);
    assert!(!q.matches(&r), "running, not failed");
    r.status = RunStatus::Failed;
    assert!(q.matches(&r));
    r.start_ms = 0;
    assert!(!q.matches(&r), "started before");
}

#[test]
fn operators_and_precedence() {
    let r = run("r1", "wf", 1_000);
    let yes = [
        "",
        "WorkflowId = 'wf'",
        "workflowid = \"wf\"",
        "WorkflowId != 'other'",
        "WorkflowId <> 'other'",
        "WorkflowId IN ('a', 'wf')",
        "WorkflowId NOT IN ('a', 'b')",
        "WorkflowId STARTS_WITH 'w'",
        "RunId = 'r1' and WorkflowVersion = '3'",
        "ParentRunId IS NULL",
        "CloseTime IS NULL AND StartTime IS NOT NULL",
        "FailureType IS NULL",
        "Status = 'Running'",
        "Status = 'RUN_STATUS_RUNNING'",
        "TaskQueue = 'default'",
        "Tokens = 0 AND Tokens <= 0 AND Tokens < 1 AND Cost >= 0 AND Cost < 0.5",
        "StartTime = '1970-01-01T00:00:01Z'",
        "StartTime >= '1970-01-01T00:00:01Z' AND StartTime <= '1970-01-01T01:00:01+01:00'",
        // AND binds tighter than OR.
        "WorkflowId = 'x' AND RunId = 'y' OR RunId = 'r1'",
        "(WorkflowId = 'x' OR RunId = 'r1') AND Status = 'RUNNING'",
        "((((RunId = 'r1'))))",
        "ORDER BY StartTime ASC",
    ];
    for q in yes {
        assert!(parse(q).unwrap_or_else(|e| panic!("{q}: {e}")).matches(&r), "{q}");
    }
    let no = [
        "WorkflowId = 'x'",
        "WorkflowId = 'x' AND (RunId = 'y' OR RunId = 'r1')",
        "ParentRunId IS NOT NULL",
        "ParentRunId = 'p'",
        "ParentRunId != 'p'",
        "CloseTime < '2030-01-01T00:00:00Z'",
        "customer = 'acme'",
        "customer != 'acme'",
        "customer IS NOT NULL",
        "WorkflowId IN ('a')",
        "Status IN ('FAILED', 'TIMED_OUT')",
        "Tokens > 0",
    ];
    for q in no {
        assert!(
            !parse(q).unwrap_or_else(|e| panic!("{q}: {e}")).matches(&r),
            "{q}"
        );
    }
    assert!(parse("customer IS NULL").unwrap().matches(&r));
}

#[test]
fn failure_type_is_the_error_type_of_the_failed_step() {
    let mut r = run("r1", "wf", 1_000);
    r.status = RunStatus::Failed;
    r.steps[0].last_failure = "rate_limit: too many requests".into();
    assert!(parse("FailureType = 'rate_limit'").unwrap().matches(&r));
    r.steps[0].last_failure = "timed out (Heartbeat)".into();
    assert!(parse("FailureType = 'timed out'").unwrap().matches(&r));
}

#[test]
fn errors_name_the_column_and_what_was_expected() {
    let cases: [(&str, usize, &str); 16] = [
        (
            "WorkflowId = ",
            14,
            "expected a keyword (a string) value for WorkflowId, found the end",
        ),
        (
            "WorkflowId == 'a'",
            13,
            "expected a keyword (a string) value for WorkflowId, found `=`",
        ),
        ("Nope = 'a'", 1, "unknown field \"Nope\""),
        (
            "WorkflowId = 'a' AND",
            21,
            "expected a field name or `(`, found the end",
        ),
        ("(WorkflowId = 'a'", 18, "expected `)`, AND or OR, found the end"),
        (
            "WorkflowId = 'a')",
            17,
            "expected AND, OR, ORDER BY or the end of the query, found `)`",
        ),
        (
            "StartTime > 'yesterday'",
            13,
            "\"yesterday\" is not an RFC 3339 time",
        ),
        ("Tokens = 'many'", 10, "expected an int value for Tokens"),
        ("Tokens = 1.5", 10, "1.5 is not an integer"),
        ("Status = 'DONE'", 10, "unknown status \"DONE\""),
        ("Status > 'FAILED'", 8, "Status takes =, != and IN only"),
        (
            "Tokens STARTS_WITH '1'",
            8,
            "STARTS_WITH needs a keyword or text field",
        ),
        ("WorkflowId = 'a", 14, "string is not closed"),
        ("WorkflowId # 'a'", 12, "unexpected character '#'"),
        (
            "WorkflowId IN ('a' 'b')",
            20,
            "expected `,` or `)` in the IN list",
        ),
        ("ORDER BY customer", 10, "ORDER BY takes a built-in field"),
    ];
    for (q, column, text) in cases {
        let e = parse(q).expect_err(q);
        assert_eq!(e.column, column, "{q}: {e}");
        assert!(e.message.contains(text), "{q}: {e}");
        assert!(e.to_string().starts_with(&format!("column {column}: ")));
    }
    let e = parse("AND = 'x'").unwrap_err();
    assert!(e.message.contains("keyword AND"), "{e}");
    let e = parse("WorkflowId IS 'x'").unwrap_err();
    assert_eq!(
        (e.column, e.message.as_str()),
        (15, "expected NULL, found string \"x\"")
    );
}

#[test]
fn bounds_are_enforced() {
    let long = format!("WorkflowId = '{}'", "x".repeat(MAX_QUERY_BYTES));
    assert!(
        parse(&long)
            .unwrap_err()
            .message
            .contains("longer than the limit")
    );

    let deep = format!(
        "{}RunId = 'a'{}",
        "(".repeat(MAX_DEPTH + 1),
        ")".repeat(MAX_DEPTH + 1)
    );
    let e = parse(&deep).unwrap_err();
    assert!(e.message.contains("nest deeper"), "{e}");
    assert_eq!(e.column, MAX_DEPTH + 1);
    let ok = format!("{}RunId = 'a'{}", "(".repeat(MAX_DEPTH), ")".repeat(MAX_DEPTH));
    parse(&ok).unwrap();

    let values: Vec<String> = (0..=MAX_IN_VALUES).map(|i| format!("'{i}'")).collect();
    let e = parse(&format!("RunId IN ({})", values.join(","))).unwrap_err();
    assert!(e.message.contains("at most"), "{e}");
    parse(&format!("RunId IN ({})", values[..MAX_IN_VALUES].join(","))).unwrap();

    let many = vec!["RunId = 'a'"; MAX_PREDICATES + 1].join(" OR ");
    assert!(parse(&many).unwrap_err().message.contains("conditions"));
}

#[test]
fn attributes_are_typed_by_their_declaration() {
    parse("customer = 'acme' AND priority >= 2 AND urgent = true").unwrap();
    let e = parse("priority = 'high'").unwrap_err();
    assert!(e.message.contains("expected an int value for priority"), "{e}");
    let e = parse("urgent > true").unwrap_err();
    assert!(e.message.contains("takes = and != only"), "{e}");
}

#[test]
fn the_plan_names_index_terms_and_the_start_range() {
    let q = parse(
        "Status = 'FAILED' AND WorkflowId IN ('b', 'a') AND StartTime > '1970-01-01T00:00:01Z' \
         AND StartTime <= '1970-01-01T00:00:05Z' AND (RunId = 'x' OR Status = 'RUNNING')",
    )
    .unwrap();
    let p = q.plan();
    assert_eq!(
        p.candidates,
        vec![
            vec![status_term("FAILED")],
            vec![workflow_term("a"), workflow_term("b")],
        ]
    );
    assert_eq!((p.start_from, p.start_to), (Some(1_001), Some(5_000)));
    // Nothing under an OR at the top serves as an index.
    let p = parse("Status = 'FAILED' OR WorkflowId = 'a'").unwrap().plan();
    assert!(p.candidates.is_empty());
}

#[test]
fn index_terms_follow_start_and_close() {
    let mut seq = 0;
    let mut r = run("r1", "wf", 1_000);
    assert_eq!(index_terms(&r), vec![status_term("RUNNING"), workflow_term("wf")]);
    let mut out = Out::new(2_000, &mut seq);
    r.terminate("me", "why".into(), &mut out).unwrap();
    let (removed, added) = index_delta(&r, &out.events);
    assert_eq!(removed, vec![status_term("RUNNING")]);
    assert_eq!(added, vec![status_term("TERMINATED")]);
    assert_eq!(index_delta(&r, &[]), (vec![], vec![]));
}

#[test]
fn a_goal_is_matched_by_word_on_the_runs_read_and_never_indexed() {
    let mut r = run("r1", "wf", 1_000);
    r.goal = "Review PR #7, then the PR's tests".into();
    assert_eq!(index_terms(&r), [status_term("RUNNING"), workflow_term("wf")]);
    let q = parse("Goal = 'pr TESTS' AND Goal != 'nothing'").unwrap();
    assert!(q.matches(&r));
    assert!(q.plan().candidates.is_empty());
    assert!(!parse("Goal = 'review pr 8'").unwrap().matches(&r));
    assert!(parse("Goal < 'a'").is_err(), "a text takes = and != only");
}
