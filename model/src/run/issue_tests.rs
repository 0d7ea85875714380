//! `report_issue` in the state machine: recorded and counted, bounded per attempt,
//! the count starting again with the next attempt, the run's kept list bounded.

use super::issue::{MAX_KEPT_ISSUES, MAX_RECORDED_ISSUES};
use super::test_fx::Fx;
use super::*;

fn report(summary: &str) -> IssueReport {
    IssueReport::check("error", summary.into(), "details".into()).unwrap()
}

#[test]
fn issues_are_recorded_counted_and_bounded_per_attempt() {
    let mut fx = Fx::new(
        "r1",
        r#","retry":{"maximumAttempts":5,"initialIntervalSeconds":1}"#,
    );
    let claims = fx.lease();
    let (recorded, events, effects) = fx.step(|r, o| r.report_issue(&claims, "w1", report("broken"), o));
    assert_eq!(recorded, Ok(true));
    assert!(effects.is_empty());
    match &events[..] {
        [
            Event {
                kind:
                    EventKind::IssueReported {
                        step_id,
                        attempt: 1,
                        severity: Severity::Error,
                        summary,
                        ..
                    },
                ..
            },
        ] => assert_eq!((step_id.as_str(), summary.as_str()), ("a", "broken")),
        other => panic!("{other:?}"),
    }
    for _ in 1..MAX_RECORDED_ISSUES {
        assert_eq!(
            fx.step(|r, o| r.report_issue(&claims, "w1", report("x"), o)).0,
            Ok(true)
        );
    }
    // Past the bound: answered, nothing recorded or changed.
    let before = fx.run.clone();
    let (recorded, events, _) = fx.step(|r, o| r.report_issue(&claims, "w1", report("more"), o));
    assert_eq!(recorded, Ok(false));
    assert!(events.is_empty());
    assert_eq!(fx.run, before);
    assert_eq!(fx.run.steps[0].issues, MAX_RECORDED_ISSUES);
    assert_eq!(fx.run.issue_count(), MAX_RECORDED_ISSUES);
    assert_eq!(fx.run.issues.len(), MAX_RECORDED_ISSUES as usize);

    // The next attempt may report again; the step's count goes on, the kept list stops.
    let (will_retry, _, _) = fx.step(|r, o| {
        r.fail(
            &claims,
            "w1",
            StepFailure {
                error_type: "flaky".into(),
                ..Default::default()
            },
            o,
        )
    });
    assert_eq!(will_retry, Ok(true));
    fx.now += 10_000;
    fx.step(|r, o| r.backoff_timer(0, 2, o));
    let claims = fx.lease();
    for _ in 0..MAX_RECORDED_ISSUES {
        assert_eq!(
            fx.step(|r, o| r.report_issue(&claims, "w1", report("y"), o)).0,
            Ok(true)
        );
    }
    assert_eq!(fx.run.steps[0].issues, 2 * MAX_RECORDED_ISSUES);
    assert_eq!(
        fx.run.issues.len(),
        MAX_KEPT_ISSUES.min(2 * MAX_RECORDED_ISSUES as usize)
    );
}

#[test]
fn a_report_on_a_stale_lease_is_refused() {
    let mut fx = Fx::new("r1", "");
    let mut claims = fx.lease();
    claims.lease += 1;
    let (answer, events, _) = fx.step(|r, o| r.report_issue(&claims, "w1", report("x"), o));
    assert!(matches!(answer, Err(Refusal::StaleLease { .. })), "{answer:?}");
    assert!(events.is_empty());
}

#[test]
fn reports_are_checked_field_by_field() {
    let bad = |sev: &str, summary: &str, details: &str| {
        IssueReport::check(sev, summary.into(), details.into())
            .unwrap_err()
            .to_string()
    };
    assert!(bad("fatal", "s", "").starts_with("severity:"));
    assert!(bad("info", " ", "").starts_with("summary:"));
    assert!(bad("info", &"s".repeat(257), "").starts_with("summary:"));
    assert!(bad("info", "s", &"d".repeat(4097)).starts_with("details:"));
    let ok = IssueReport::check("critical", "s".repeat(256), "d".repeat(4096)).unwrap();
    assert_eq!(ok.severity, Severity::Critical);
}
