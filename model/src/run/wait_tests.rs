use super::wait::*;
use super::*;
use crate::run::test_fx::{Fx, types};
use serde_json::json;

impl Fx {
    /// Leases the step, starts children `ids` and waits on them.
    fn suspend(&mut self, ids: &[&str]) -> (TokenClaims, Vec<Event>, Vec<Effect>) {
        let claims = self.lease();
        let started: Vec<ChildStarted> = ids
            .iter()
            .map(|id| ChildStarted {
                run_id: id.to_string(),
                workflow_id: "wf".into(),
                parent_close_policy: ParentClosePolicy::Cancel,
            })
            .collect();
        let run_ids = ids.iter().map(|s| s.to_string()).collect();
        let (r, events, effects) = self.step(|r, o| {
            r.children_started(&claims, "w1", &started, o)?;
            r.suspend_on_children(&claims, "w1", b"cp".to_vec(), run_ids, Vec::new(), o)
        });
        r.unwrap();
        (claims, events, effects)
    }
}

fn outcome(id: &str, status: RunStatus, notes: &str) -> ChildOutcome {
    ChildOutcome {
        run_id: id.into(),
        status,
        notes: notes.into(),
        artifacts: vec![format!("{id}.md")],
        result: String::new(),
    }
}

#[test]
fn a_waiting_step_holds_no_lease_and_resumes_under_the_same_attempt_when_its_children_close() {
    let mut fx = Fx::new("p", "");
    let (claims, events, effects) = fx.suspend(&["c1", "c2"]);
    assert_eq!(
        types(&events),
        ["ChildRunStarted", "ChildRunStarted", "StepWaiting"]
    );
    assert_eq!(effects, [Effect::SaveCheckpoint(b"cp".to_vec())]);
    assert_eq!(fx.run.children_started, 2);
    assert_eq!(fx.run.lease_deadline(), None);
    assert_eq!(fx.run.steps[0].state, "WAITING");
    let w = fx.run.waiting().unwrap();
    assert_eq!(
        (w.since_ms, w.deadline_ms, w.on.kind()),
        (1_000, None, "children")
    );
    // The old lease can report nothing more.
    let (r, _, _) = fx.step(|r, o| r.complete(&claims, "w1", "n".into(), vec![], BTreeMap::new(), o));
    assert!(matches!(r, Err(Refusal::StepNotLeased { .. })));

    fx.now = 5_000;
    let (_, events, effects) = fx.step(|r, o| r.child_closed(outcome("c2", RunStatus::Failed, "boom"), o));
    assert_eq!(types(&events), ["ChildRunCompleted"]);
    assert!(effects.is_empty());
    assert!(fx.run.waiting().is_some());
    let (_, events, effects) = fx.step(|r, o| r.child_closed(outcome("c1", RunStatus::Completed, "fine"), o));
    assert_eq!(
        types(&events),
        ["ChildRunCompleted", "StepResumed", "StepScheduled"]
    );
    assert!(matches!(&effects[..], [Effect::EnqueueTask { .. }]));
    assert!(
        matches!(&events[1].kind, EventKind::StepResumed { attempt: 1, waited_ms: 4_000, reason, .. } if reason == "children")
    );
    assert!(
        matches!(&events[2].kind, EventKind::StepScheduled { attempt: 1, .. }),
        "a resume is not a new attempt"
    );
    let input = &fx.run.resume_input;
    assert_eq!(input.len(), 1);
    assert!(
        input[0].contains(r#""childRunId":"c2""#) && input[0].contains(r#""outcome":"FAILED""#),
        "{input:?}"
    );
    assert!(
        input[0].contains(r#""notes":"fine""#) && input[0].contains("c1.md"),
        "{input:?}"
    );

    // The next worker leases the same attempt; its checkpoint heartbeat clears the input.
    let claims = fx.lease();
    assert_eq!(claims.attempt, 1);
    let (r, _, _) = fx.step(|r, o| r.heartbeat(&claims, "w2", b"cp2".to_vec(), vec![], 0, o));
    r.unwrap();
    assert!(fx.run.resume_input.is_empty());
    let (r, events, _) = fx.step(|r, o| r.complete(&claims, "w2", "n".into(), vec![], BTreeMap::new(), o));
    r.unwrap();
    assert_eq!(types(&events), ["StepCompleted", "StepScheduled"]);
}

#[test]
fn a_stale_lease_cannot_suspend_or_start_children_and_changes_nothing() {
    let mut fx = Fx::new("p", "");
    let claims = fx.lease();
    let stale = TokenClaims {
        lease: claims.lease + 1,
        ..claims.clone()
    };
    let before = fx.run.clone();
    let started = [ChildStarted {
        run_id: "c".into(),
        workflow_id: "wf".into(),
        parent_close_policy: ParentClosePolicy::Abandon,
    }];
    let (r, events, effects) = fx.step(|r, o| r.children_started(&stale, "w", &started, o));
    assert!(matches!(r, Err(Refusal::StaleLease { .. })));
    let (r2, events2, effects2) =
        fx.step(|r, o| r.suspend_on_children(&stale, "w", vec![1], vec!["c".into()], vec![], o));
    assert!(matches!(r2, Err(Refusal::StaleLease { .. })));
    assert!(events.is_empty() && effects.is_empty() && events2.is_empty() && effects2.is_empty());
    assert_eq!(fx.run, before);
}

#[test]
fn waiting_on_children_that_already_closed_resumes_at_once() {
    let mut fx = Fx::new("p", "");
    let claims = fx.lease();
    let done = vec![outcome("c1", RunStatus::Canceled, "")];
    let (r, events, _) =
        fx.step(|r, o| r.suspend_on_children(&claims, "w1", vec![], vec!["c1".into()], done, o));
    r.unwrap();
    assert_eq!(types(&events), ["StepWaiting", "StepResumed", "StepScheduled"]);
    assert!(fx.run.resume_input[0].contains("CANCELED"));
}

#[test]
fn a_wait_timeout_arms_a_timer_and_fails_the_step_by_default() {
    let mut fx = Fx::new("p", r#","wait":{"timeoutSeconds":60}"#);
    let (_, _, effects) = fx.suspend(&["c1"]);
    let wait_id = fx.run.waiting().unwrap().wait_id;
    assert!(effects.iter().any(|e| matches!(e,
        Effect::Timer { due_ms: 61_000, timer: Timer::WaitTimeout { wait_id: w, run_id, .. } } if *w == wait_id && run_id == "p")));
    // A stale timer does nothing.
    let (_, events, _) = fx.step(|r, o| r.wait_timer(wait_id + 1, o));
    assert!(events.is_empty());
    fx.now = 61_000;
    let (_, events, _) = fx.step(|r, o| r.wait_timer(wait_id, o));
    assert_eq!(types(&events), ["StepTimedOut", "RunFailed"]);
    assert!(matches!(
        &events[0].kind,
        EventKind::StepTimedOut {
            timeout: TimeoutKind::Wait,
            will_retry: false,
            ..
        }
    ));
    assert_eq!(fx.run.status, RunStatus::Failed);
    // A child closing after its parent closed records nothing.
    let (_, events, _) = fx.step(|r, o| r.child_closed(outcome("c1", RunStatus::Completed, ""), o));
    assert!(events.is_empty());
}

#[test]
fn a_wait_timeout_with_the_resume_policy_resumes_with_what_arrived() {
    let mut fx = Fx::new("p", r#","wait":{"timeoutSeconds":5,"onTimeout":"resume"}"#);
    fx.suspend(&["c1", "c2"]);
    fx.step(|r, o| r.child_closed(outcome("c1", RunStatus::Completed, "one"), o));
    let wait_id = fx.run.waiting().unwrap().wait_id;
    let (_, events, _) = fx.step(|r, o| r.wait_timer(wait_id, o));
    assert_eq!(types(&events), ["StepResumed", "StepScheduled"]);
    let input = &fx.run.resume_input[0];
    assert!(
        input.contains("timed out") && input.contains(r#""stillRunning":["c2"]"#),
        "{input}"
    );
    // The timer of the ended wait is stale now.
    let (_, events, _) = fx.step(|r, o| r.wait_timer(wait_id, o));
    assert!(events.is_empty());
}

#[test]
fn canceling_a_waiting_run_closes_it_at_once() {
    let mut fx = Fx::new("p", "");
    fx.suspend(&["c1"]);
    let (r, events, _) = fx.step(|r, o| r.cancel("me", "stop".into(), o));
    r.unwrap();
    assert_eq!(types(&events), ["CancelRequested", "RunCanceled"]);
}

#[test]
fn suspending_after_a_cancel_request_cancels_the_run() {
    let mut fx = Fx::new("p", "");
    let claims = fx.lease();
    fx.step(|r, o| r.cancel("me", "stop".into(), o)).0.unwrap();
    let (r, events, _) =
        fx.step(|r, o| r.suspend_on_children(&claims, "w1", vec![], vec!["c".into()], vec![], o));
    r.unwrap();
    assert_eq!(types(&events), ["RunCanceled"]);
    assert_eq!(fx.run.status, RunStatus::Canceled);
}

#[test]
fn child_outcomes_quote_the_last_notes_or_the_failure() {
    let mut fx = Fx::new("p", "");
    assert_eq!(ChildOutcome::of(&fx.run), None, "an open run has no outcome");
    let claims = fx.lease();
    fx.step(|r, o| {
        r.complete(
            &claims,
            "w",
            "first".into(),
            vec!["a.md".into()],
            BTreeMap::new(),
            o,
        )
    })
    .0
    .unwrap();
    let claims = fx.lease();
    fx.step(|r, o| {
        r.complete(
            &claims,
            "w",
            "last".into(),
            vec!["b.md".into()],
            BTreeMap::new(),
            o,
        )
    })
    .0
    .unwrap();
    let o = ChildOutcome::of(&fx.run).unwrap();
    assert_eq!((o.notes.as_str(), o.artifacts.len()), ("last", 2));
    assert_eq!(
        o.to_json(),
        json!({"childRunId":"p","outcome":"COMPLETED","notes":"last","artifacts":["a.md","b.md"],"result":null})
    );
    assert_eq!(
        ParentClosePolicy::parse("abandon"),
        Some(ParentClosePolicy::Abandon)
    );
    assert_eq!(ParentClosePolicy::parse(""), Some(ParentClosePolicy::Cancel));
    assert_eq!(ParentClosePolicy::parse("kill"), None);
}

fn done(notes: &str, result: &str) -> StepDone {
    StepDone {
        notes: notes.into(),
        artifacts: vec![],
        context_updates: BTreeMap::new(),
        result: result.into(),
    }
}

#[test]
fn a_childs_result_reaches_its_parent_cut_when_long_and_every_resume_message_stays_bounded() {
    // The last step's result, as compact JSON, beside its notes.
    let mut fx = Fx::new("p", "");
    for (notes, result) in [("first", r#"{"n":1}"#), ("last", r#"{"verdict":"ok","n":2}"#)] {
        let claims = fx.lease();
        let (r, _, _) = fx.step(|r, o| r.complete_with_result(&claims, "w", done(notes, result), o));
        r.unwrap();
    }
    let o = ChildOutcome::of(&fx.run).unwrap();
    assert_eq!(o.result, r#"{"verdict":"ok","n":2}"#);
    assert_eq!(o.to_json()["result"], json!({"verdict":"ok","n":2}));

    // The parent hears it in `ChildRunCompleted` and in its resume message.
    let mut parent = Fx::new("p", "");
    let _ = parent.suspend(&["p"]);
    let (_, events, _) = parent.step(|r, o2| r.child_closed(o.clone(), o2));
    assert!(
        matches!(&events[0].kind, EventKind::ChildRunCompleted { result, .. } if result == &o.result),
        "{events:?}"
    );
    let attrs = super::wire::event_attributes_json(&events[0].kind);
    assert!(attrs.contains(r#""result":{"n":2,"verdict":"ok"}"#), "{attrs}");
    let body = parent.run.resume_input[0].split_once('\n').unwrap().1;
    let body: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(body["children"][0]["result"], json!({"verdict":"ok","n":2}));

    // A failed child has none; a long result is kept and quoted as the start of its text.
    let mut failed = outcome("f", RunStatus::Failed, "boom");
    assert_eq!(failed.to_json()["result"], json!(null));
    let long = format!(r#"{{"text":"{}"}}"#, "x".repeat(MAX_CHILD_RESULT_QUOTED));
    failed.result = long.clone();
    let quoted = failed.to_json()["result"].as_str().unwrap().to_string();
    assert!(
        quoted.starts_with(r#"{"text":"xxx"#) && quoted.ends_with('…'),
        "{quoted:.40}"
    );
    assert!(quoted.len() <= MAX_CHILD_RESULT_QUOTED + 3);
    let mut fx = Fx::new("p", "");
    let claims = fx.lease();
    fx.step(|r, o| r.complete_with_result(&claims, "w", done("n", &long), o))
        .0
        .unwrap();
    let claims = fx.lease();
    fx.step(|r, o| r.complete_with_result(&claims, "w", done("n", &long), o))
        .0
        .unwrap();
    let kept = ChildOutcome::of(&fx.run).unwrap();
    assert!(
        kept.result.len() <= MAX_CHILD_RESULT_QUOTED + 3,
        "the parent keeps no more than it quotes"
    );

    // However many children and however much they wrote, the message fits its bound
    // and quotes every child.
    let many: Vec<ChildOutcome> = (0..200)
        .map(|i| ChildOutcome {
            run_id: format!("c{i:03}"),
            status: RunStatus::Completed,
            notes: "\u{1}".repeat(MAX_CHILD_NOTES_QUOTED),
            artifacts: (0..64).map(|j| format!("{}/{j}", "d".repeat(1000))).collect(),
            result: format!(r#"{{"q":"{}"}}"#, "\\\"".repeat(MAX_CHILD_RESULT_QUOTED / 2)),
        })
        .collect();
    let ids: Vec<String> = many.iter().map(|c| c.run_id.clone()).collect();
    let on = WaitOn::Children {
        run_ids: ids,
        done: many,
    };
    let message = resume_message(&on, "children");
    assert!(message.len() <= MAX_RESUME_MESSAGE_BYTES, "{}", message.len());
    let body: serde_json::Value = serde_json::from_str(message.split_once('\n').unwrap().1).unwrap();
    assert_eq!(body["children"].as_array().unwrap().len(), 200);
    assert_eq!(body["children"][199]["childRunId"], "c199");
}

#[test]
fn a_pause_parks_a_queued_step_and_an_unpause_schedules_it_again_on_the_same_attempt() {
    let mut fx = Fx::new("p", "");
    let (r, events, effects) = fx.step(|r, o| r.pause("ops", "night".into(), o));
    assert!(r.unwrap());
    assert_eq!(types(&events), ["RunPaused", "StepWaiting"]);
    assert!(matches!(&effects[..], [Effect::RemoveTask { .. }]));
    assert_eq!(fx.run.waiting().unwrap().on, WaitOn::Unpause);
    let (r, events, _) = fx.step(|r, o| r.pause("ops", "again".into(), o));
    assert!(!r.unwrap() && events.is_empty(), "pausing twice changes nothing");
    let (r, events, _) = fx.step(|r, o| r.unpause("ops", o));
    assert!(r.unwrap());
    assert_eq!(types(&events), ["RunUnpaused", "StepResumed", "StepScheduled"]);
    assert!(matches!(
        &events[2].kind,
        EventKind::StepScheduled { attempt: 1, .. }
    ));
    let (r, events, _) = fx.step(|r, o| r.unpause("ops", o));
    assert!(!r.unwrap() && events.is_empty());
}

#[test]
fn a_step_in_flight_suspends_when_paused_and_children_closing_meanwhile_wait_for_the_unpause() {
    let mut fx = Fx::new("p", "");
    let claims = fx.lease();
    fx.step(|r, o| r.pause("ops", String::new(), o)).0.unwrap();
    let (hb, _, _) = fx.step(|r, o| r.heartbeat(&claims, "w1", vec![], vec![], 0, o));
    hb.unwrap();
    assert!(fx.run.paused);
    // Only the lease holder may suspend it; then it parks, keeping the checkpoint.
    let stale = TokenClaims {
        lease: claims.lease + 9,
        ..claims.clone()
    };
    let paused = |cp: &[u8]| StepFailure {
        error_type: PAUSED_ERROR_TYPE.into(),
        checkpoint: cp.to_vec(),
        ..Default::default()
    };
    let (r, _, _) = fx.step(|r, o| r.fail(&stale, "w1", paused(b"x"), o));
    assert!(matches!(r, Err(Refusal::StaleLease { .. })));
    let (r, events, effects) = fx.step(|r, o| r.fail(&claims, "w1", paused(b"cp"), o));
    assert!(!r.unwrap());
    assert_eq!(types(&events), ["StepWaiting"]);
    assert_eq!(effects, [Effect::SaveCheckpoint(b"cp".to_vec())]);
    assert_eq!(fx.run.lease_deadline(), None);

    // A paused run whose waiting step's children close parks instead of resuming.
    let mut fx = Fx::new("p", "");
    fx.suspend(&["c1"]);
    fx.step(|r, o| r.pause("ops", String::new(), o)).0.unwrap();
    let (_, events, _) = fx.step(|r, o| r.child_closed(outcome("c1", RunStatus::Completed, "ok"), o));
    assert_eq!(
        types(&events),
        ["ChildRunCompleted", "StepResumed", "StepWaiting"]
    );
    assert_eq!(fx.run.waiting().unwrap().on, WaitOn::Unpause);
    let (_, events, _) = fx.step(|r, o| r.unpause("ops", o));
    assert_eq!(types(&events), ["RunUnpaused", "StepResumed", "StepScheduled"]);
    assert_eq!(
        fx.run.resume_input.len(),
        2,
        "the children's outcomes and the unpause note"
    );
    assert!(fx.run.resume_input[0].contains(r#""notes":"ok""#));
}

#[test]
fn a_closed_run_cannot_be_paused() {
    let mut fx = Fx::new("p", "");
    fx.step(|r, o| r.terminate("ops", "x".into(), o)).0.unwrap();
    let (r, events, _) = fx.step(|r, o| r.pause("ops", String::new(), o));
    assert!(matches!(
        r,
        Err(Refusal::RunClosed {
            action: Action::Pause,
            ..
        })
    ));
    assert!(events.is_empty());
}
