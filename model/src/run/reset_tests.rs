//! Reset and rerun in the model: what the new run carries, where it starts, what the
//! old run records, and the refusals.

use super::reset::plan;
use super::test_fx::{Fx, types};
use super::*;

fn done(notes: &str, k: &str) -> StepDone {
    StepDone {
        notes: notes.into(),
        artifacts: vec![format!("{notes}.md")],
        context_updates: [(k.to_string(), notes.to_string())].into(),
        result: r#"{"ok":true}"#.into(),
    }
}

/// Run `old`: step a completed (with usage), step b failed for good.
fn failed_at_b() -> (Fx, Vec<Event>) {
    let mut fx = Fx::new("old", "");
    let mut history = Vec::new();
    let claims = fx.lease();
    let (r, ev, _) = fx.step(|r, o| r.complete_with_result(&claims, "w1", done("a-notes", "ka"), o));
    r.unwrap();
    history.extend(ev);
    fx.run.steps[0].usage = Usage {
        input: 100,
        output: 10,
        ..Default::default()
    };
    let claims = fx.lease();
    let f = StepFailure {
        error_type: "fatal".into(),
        message: "broken tool".into(),
        non_retryable: true,
        checkpoint: Vec::new(),
    };
    let (r, ev, _) = fx.step(|r, o| r.fail(&claims, "w1", f, o));
    r.unwrap();
    history.extend(ev);
    assert_eq!(fx.run.status, RunStatus::Failed);
    (fx, history)
}

fn request(kind: ResetKind, to_step: Option<&str>) -> ResetRequest {
    ResetRequest {
        kind,
        to_step: to_step.map(str::to_string),
        goal: None,
        context: BTreeMap::new(),
        reason: "fix".into(),
    }
}

fn new_run(p: ResetPlan, def: Arc<WorkflowDef>) -> (RunState, Vec<Event>) {
    let mut seq = 100;
    let mut out = Out::new(5_000, &mut seq);
    let params = StartParams {
        namespace: "default".into(),
        run_id: "new".into(),
        identity: "client".into(),
        ..Default::default()
    };
    let run = RunState::start_reset(params, def, p, &mut out);
    (run, out.events)
}

#[test]
fn a_reset_carries_the_steps_before_its_step_and_starts_there() {
    let (fx, history) = failed_at_b();
    let mut req = request(ResetKind::Reset, Some("b"));
    req.goal = Some("new goal".into());
    req.context = [("extra".to_string(), "1".to_string())].into();
    let p = plan(&fx.run, &history, req).unwrap();
    let (run, events) = new_run(p, fx.run.definition.clone());
    assert_eq!(
        types(&events),
        ["RunStarted", "RunResetFrom", "StepCarried", "StepScheduled"]
    );
    assert_eq!(run.reset_from, "old");
    assert_eq!(run.goal, "new goal");
    assert_eq!(run.current_step, 1);
    assert!(matches!(run.phase, Phase::Scheduled { .. }));
    let a = &run.steps[0];
    assert_eq!(
        (a.state.as_str(), a.notes.as_str(), a.carried),
        ("COMPLETED", "a-notes", true)
    );
    assert_eq!(a.artifacts, ["a-notes.md"]);
    assert_eq!(a.result, r#"{"ok":true}"#);
    assert_eq!(run.context.get("ka").map(String::as_str), Some("a-notes"));
    assert_eq!(run.context.get("extra").map(String::as_str), Some("1"));
    assert_eq!(run.steps[1].state, "SCHEDULED");
    assert!(!run.steps[1].carried);
    // Carried usage is not this run's spending.
    assert!(run.usage.is_zero());
    assert_eq!(run.carried_usage().total(), 110);
    assert_eq!(run.earlier_results(), [("a", r#"{"ok":true}"#)]);
}

#[test]
fn without_a_step_a_reset_starts_at_the_first_failed_step() {
    let (fx, history) = failed_at_b();
    let p = plan(&fx.run, &history, request(ResetKind::Reset, None)).unwrap();
    assert_eq!((p.start_index, p.step_id.as_str()), (1, "b"));
    assert_eq!(p.carried.len(), 1);
}

#[test]
fn a_reset_of_an_open_run_terminates_it_and_links_it() {
    let mut fx = Fx::new("old", "");
    let history = Vec::new();
    let p = plan(&fx.run, &history, request(ResetKind::Reset, Some("a"))).unwrap();
    assert!(p.carried.is_empty());
    let (r, events, effects) = fx.step(|r, o| r.reset_to("client", "new", &p, o));
    r.unwrap();
    assert_eq!(types(&events), ["RunResetTo", "RunTerminated"]);
    assert_eq!(fx.run.status, RunStatus::Terminated);
    assert_eq!(fx.run.reset_to, "new");
    assert!(effects.iter().any(|e| matches!(e, Effect::RemoveTask { .. })));
    let EventKind::RunTerminated { reason } = &events[1].kind else {
        panic!("{events:?}")
    };
    assert_eq!(reason, "fix");
}

#[test]
fn a_rerun_starts_from_the_first_step_and_leaves_the_old_run_open() {
    let mut fx = Fx::new("old", "");
    let p = plan(&fx.run, &[], request(ResetKind::Rerun, None)).unwrap();
    assert_eq!(p.start_index, 0);
    let (r, events, _) = fx.step(|r, o| r.reset_to("client", "new", &p, o));
    r.unwrap();
    assert_eq!(types(&events), ["RunResetTo"]);
    assert!(fx.run.status.is_open());
    let (run, events) = new_run(p, fx.run.definition.clone());
    assert_eq!(types(&events), ["RunStarted", "RunResetFrom", "StepScheduled"]);
    assert_eq!(run.current_step, 0);
}

#[test]
fn a_reset_of_a_reset_carries_what_was_carried() {
    let (fx, history) = failed_at_b();
    let p = plan(&fx.run, &history, request(ResetKind::Reset, Some("b"))).unwrap();
    let (second, second_history) = new_run(p, fx.run.definition.clone());
    let p = plan(&second, &second_history, request(ResetKind::Reset, Some("b"))).unwrap();
    assert_eq!(p.carried[0].notes, "a-notes");
    assert_eq!(
        p.carried[0].context_updates.get("ka").map(String::as_str),
        Some("a-notes")
    );
    assert_eq!(p.carried[0].usage.total(), 110);
}

#[test]
fn refusals_name_the_step() {
    let (fx, history) = failed_at_b();
    let e = plan(&fx.run, &history, request(ResetKind::Reset, Some("zzz"))).unwrap_err();
    assert!(
        matches!(&e, crate::Rejection::InvalidArgument(m) if m.starts_with("to_step:") && m.contains("zzz") && m.contains("a, b")),
        "{e:?}"
    );
    // A step before the one named did not complete.
    let fx = Fx::new("open", "");
    let e = plan(&fx.run, &[], request(ResetKind::Reset, Some("b"))).unwrap_err();
    assert!(
        matches!(&e, crate::Rejection::FailedPrecondition(m) if m.contains("\"a\"")),
        "{e:?}"
    );
    // An open run with no failed step names no default.
    let e = plan(&fx.run, &[], request(ResetKind::Reset, None)).unwrap_err();
    assert!(
        matches!(&e, crate::Rejection::InvalidArgument(m) if m.contains("no failed step")),
        "{e:?}"
    );
}
