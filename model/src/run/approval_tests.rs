use super::*;
use crate::run::test_fx::{Fx, types};
use crate::workflow::parse_definition;

/// Step a's options: it requires confirmation, with `approval` options.
fn confirmed(approval: &str) -> String {
    format!(r#","requireConfirmation":true{approval}"#)
}

/// Run `r` of two steps, the first confirmed with `approval` options.
fn held_fx(approval: &str) -> Fx {
    Fx::new("r", &confirmed(approval))
}

fn done(notes: &str) -> StepDone {
    StepDone {
        notes: notes.into(),
        artifacts: vec!["draft.md".into()],
        context_updates: BTreeMap::from([("k".into(), "v".into())]),
        result: r#"{"ok":true}"#.into(),
    }
}

impl Fx {
    /// Leases step a and holds its completion `notes` for approval.
    fn hold(&mut self, notes: &str) -> (Vec<Event>, Vec<Effect>) {
        let claims = self.lease();
        let (r, events, effects) =
            self.step(|r, o| r.hold_for_approval(&claims, "w1", done(notes), b"cp".to_vec(), o));
        r.unwrap();
        (events, effects)
    }

    fn wait_id(&self) -> u64 {
        self.run.waiting().map(|w| w.wait_id).unwrap()
    }
}

#[test]
fn a_held_completion_waits_with_no_lease_task_or_deadline_and_keeps_the_transcript() {
    let mut fx = held_fx("");
    let (events, effects) = fx.hold("draft");
    assert_eq!(types(&events), ["StepAwaitingApproval"]);
    assert_eq!(events[0].identity, "w1");
    match &events[0].kind {
        EventKind::StepAwaitingApproval {
            notes,
            artifacts,
            result,
            deadline_ms,
            ..
        } => {
            assert_eq!(notes, "draft");
            assert_eq!(artifacts, &["draft.md"]);
            assert_eq!(result, r#"{"ok":true}"#);
            assert_eq!(*deadline_ms, None);
        }
        k => panic!("{k:?}"),
    }
    assert_eq!(effects, [Effect::SaveCheckpoint(b"cp".to_vec())]);
    assert_eq!(fx.run.steps[0].state, "AWAITING_APPROVAL");
    assert_eq!(fx.run.steps[0].notes, "", "nothing is recorded as done yet");
    assert!(fx.run.context.is_empty(), "context updates are held too");
    assert_eq!(fx.run.lease_deadline(), None);
    assert_eq!(fx.run.current_queue().as_deref(), Some("default"));
    let p = fx.run.awaiting_approval().unwrap();
    assert_eq!((p.done.notes.as_str(), p.proposed_by.as_str()), ("draft", "w1"));
    assert_eq!(fx.run.waiting().unwrap().on.kind(), "approval");
    assert_eq!(fx.run.status, RunStatus::Running);
}

#[test]
fn approving_completes_the_step_with_the_proposal_and_schedules_the_next() {
    let mut fx = held_fx("");
    fx.hold("draft");
    fx.now = 5_000;
    let (r, events, effects) = fx.step(|r, o| r.approve("alice", "a", "looks good".into(), o));
    r.unwrap();
    assert_eq!(types(&events), ["StepApproved", "StepCompleted", "StepScheduled"]);
    assert_eq!(events[0].identity, "alice");
    assert!(
        matches!(&events[0].kind, EventKind::StepApproved { note, attempt: 1, .. } if note == "looks good")
    );
    assert!(matches!(&events[1].kind, EventKind::StepCompleted { notes, .. } if notes == "draft"));
    assert!(effects.iter().any(|e| matches!(e, Effect::EndCheckpoint { .. })));
    assert!(effects.iter().any(|e| matches!(e, Effect::EnqueueTask { .. })));
    assert_eq!(fx.run.steps[0].state, "COMPLETED");
    assert_eq!(fx.run.steps[0].artifacts, ["draft.md"]);
    assert_eq!(fx.run.steps[0].result, r#"{"ok":true}"#);
    assert_eq!(fx.run.context.get("k").map(String::as_str), Some("v"));
    assert_eq!(fx.run.current_step, 1);
    assert!(fx.run.awaiting_approval().is_none());
}

#[test]
fn approving_the_last_step_completes_the_run() {
    let d = Arc::new(
        parse_definition(
            r#"{"id":"wf","version":"1","name":"W","steps":[
              {"id":"a","title":"A","prompt":"p","requireConfirmation":true}]}"#,
        )
        .unwrap(),
    );
    let mut seq = 0;
    let mut out = Out::new(1, &mut seq);
    let run = RunState::start(
        StartParams {
            run_id: "r".into(),
            ..Default::default()
        },
        d,
        &mut out,
    );
    let mut fx = Fx { run, seq, now: 1 };
    fx.hold("final");
    let (r, events, _) = fx.step(|r, o| r.approve("alice", "", String::new(), o));
    r.unwrap();
    assert_eq!(types(&events), ["StepApproved", "StepCompleted", "RunCompleted"]);
    assert_eq!(fx.run.status, RunStatus::Completed);
}

#[test]
fn rejecting_reopens_the_step_under_the_same_attempt_with_the_feedback() {
    let mut fx = held_fx("");
    fx.hold("draft");
    fx.now = 4_000;
    let (r, events, effects) = fx.step(|r, o| r.reject("bob", "a", "cite sources".into(), o));
    r.unwrap();
    assert_eq!(types(&events), ["StepRejected", "StepResumed", "StepScheduled"]);
    assert_eq!(events[0].identity, "bob");
    assert!(
        matches!(&events[1].kind, EventKind::StepResumed { reason, waited_ms: 3_000, .. } if reason == "rejected")
    );
    assert!(matches!(
        &events[2].kind,
        EventKind::StepScheduled {
            attempt: 1,
            step_index: 0,
            ..
        }
    ));
    assert!(
        !effects.iter().any(|e| matches!(e, Effect::EndCheckpoint { .. })),
        "the transcript stays"
    );
    assert_eq!(fx.run.resume_input.len(), 1);
    assert!(
        fx.run.resume_input[0].contains("cite sources"),
        "{:?}",
        fx.run.resume_input
    );
    assert!(fx.run.resume_input[0].contains("bob"));
    assert_eq!(fx.run.steps[0].state, "SCHEDULED");
    assert!(fx.run.context.is_empty(), "a rejected proposal changes nothing");
    // The step runs again and this time its result is approved.
    fx.hold("second draft");
    let (r, events, _) = fx.step(|r, o| r.approve("bob", "a", String::new(), o));
    r.unwrap();
    assert!(
        matches!(&events[1].kind, EventKind::StepCompleted { notes, attempt: 1, .. } if notes == "second draft")
    );
}

#[test]
fn answers_out_of_place_are_refused_and_change_nothing() {
    let mut fx = held_fx("");
    // Scheduled, not awaiting: refused naming the state.
    let before = fx.run.clone();
    let (r, events, _) = fx.step(|r, o| r.approve("alice", "", String::new(), o));
    assert_eq!(
        r.unwrap_err().to_string(),
        "run r is not awaiting approval: its step \"a\" is SCHEDULED; cannot approve its step"
    );
    assert!(events.is_empty());
    assert_eq!(fx.run, before);
    // Leased: refused too.
    let claims = fx.lease();
    let (r, _, _) = fx.step(|r, o| r.reject("alice", "a", "x".into(), o));
    assert!(matches!(r, Err(Refusal::NotAwaitingApproval { ref state, .. }) if state == "STARTED"));
    let (r, _, _) = fx.step(|r, o| r.hold_for_approval(&claims, "w1", done("d"), Vec::new(), o));
    r.unwrap();
    // The wrong step: INVALID_ARGUMENT naming the step that awaits.
    let before = fx.run.clone();
    let (r, events, _) = fx.step(|r, o| r.approve("alice", "b", String::new(), o));
    let err = crate::error::Rejection::from(r.unwrap_err());
    assert!(
        matches!(&err, crate::error::Rejection::InvalidArgument(m) if m.contains("\"b\"") && m.contains("step \"a\" is")),
        "{err:?}"
    );
    assert!(events.is_empty());
    assert_eq!(fx.run, before);
    // A second hold on the same (ended) lease is refused.
    let (r, _, _) = fx.step(|r, o| r.hold_for_approval(&claims, "w1", done("d"), Vec::new(), o));
    assert!(matches!(r, Err(Refusal::StepNotLeased { .. })));
    // Closed: refused as closed.
    let (r, _, _) = fx.step(|r, o| r.terminate("ops", "stop".into(), o));
    r.unwrap();
    let (r, _, _) = fx.step(|r, o| r.approve("alice", "", String::new(), o));
    assert!(matches!(
        r,
        Err(Refusal::RunClosed {
            action: Action::Approve,
            ..
        })
    ));
}

#[test]
fn a_wait_on_children_is_not_an_approval() {
    let mut fx = held_fx("");
    let claims = fx.lease();
    let (r, _, _) =
        fx.step(|r, o| r.suspend_on_children(&claims, "w1", Vec::new(), vec!["c".into()], Vec::new(), o));
    r.unwrap();
    let (r, _, _) = fx.step(|r, o| r.approve("alice", "", String::new(), o));
    assert!(
        matches!(r, Err(Refusal::NotAwaitingApproval { ref state, .. }) if state == "WAITING (waiting on children)"),
        "{r:?}"
    );
}

#[test]
fn the_timeout_policies_fail_approve_or_reject_as_the_server() {
    // fail (the default)
    let mut fx = held_fx(r#","approval":{"timeoutSeconds":60}"#);
    let (events, effects) = fx.hold("d");
    assert!(matches!(
        &events[0].kind,
        EventKind::StepAwaitingApproval {
            deadline_ms: Some(61_000),
            ..
        }
    ));
    let wait_id = fx.wait_id();
    assert!(effects.contains(&Effect::Timer {
        due_ms: 61_000,
        timer: Timer::WaitTimeout {
            namespace: "default".into(),
            run_id: "r".into(),
            wait_id,
        },
    }));
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
    assert_eq!(events[0].identity, "server");
    assert_eq!(fx.run.status, RunStatus::Failed);
    assert!(fx.run.failure.contains("awaiting approval"), "{}", fx.run.failure);

    // approve
    let mut fx = held_fx(r#","approval":{"timeoutSeconds":10,"onTimeout":"approve"}"#);
    fx.hold("d");
    let wait_id = fx.wait_id();
    let (_, events, _) = fx.step(|r, o| r.wait_timer(wait_id, o));
    assert_eq!(types(&events), ["StepApproved", "StepCompleted", "StepScheduled"]);
    assert_eq!(events[0].identity, "server");
    assert_eq!(fx.run.steps[0].state, "COMPLETED");

    // reject, with the step's feedback, then without any (the default text)
    for (options, expected) in [
        (
            r#","approval":{"timeoutSeconds":10,"onTimeout":"reject","feedback":"be brief"}"#,
            "be brief",
        ),
        (
            r#","approval":{"timeoutSeconds":10,"onTimeout":"reject"}"#,
            "Nobody approved",
        ),
    ] {
        let mut fx = held_fx(options);
        fx.hold("d");
        let wait_id = fx.wait_id();
        let (_, events, _) = fx.step(|r, o| r.wait_timer(wait_id, o));
        assert_eq!(types(&events), ["StepRejected", "StepResumed", "StepScheduled"]);
        assert_eq!(events[0].identity, "server");
        assert!(
            matches!(&events[0].kind, EventKind::StepRejected { feedback, .. } if feedback.contains(expected))
        );
        assert!(fx.run.resume_input[0].contains(expected));
    }
}

#[test]
fn a_stale_approval_timer_does_nothing() {
    let mut fx = held_fx(r#","approval":{"timeoutSeconds":10,"onTimeout":"reject"}"#);
    fx.hold("d");
    let wait_id = fx.wait_id();
    let (r, _, _) = fx.step(|r, o| r.approve("alice", "", String::new(), o));
    r.unwrap();
    let before = fx.run.clone();
    let (_, events, effects) = fx.step(|r, o| r.wait_timer(wait_id, o));
    assert!(events.is_empty() && effects.is_empty());
    assert_eq!(fx.run, before);
}

#[test]
fn a_paused_run_may_be_approved_and_its_next_step_waits_for_the_unpause() {
    let mut fx = held_fx("");
    fx.hold("d");
    let (r, events, _) = fx.step(|r, o| r.pause("ops", "night".into(), o));
    assert!(r.unwrap());
    assert_eq!(types(&events), ["RunPaused"], "the held result stays held");
    assert!(fx.run.awaiting_approval().is_some());
    let (r, events, effects) = fx.step(|r, o| r.approve("alice", "", String::new(), o));
    r.unwrap();
    assert_eq!(types(&events), ["StepApproved", "StepCompleted", "StepWaiting"]);
    assert!(!effects.iter().any(|e| matches!(e, Effect::EnqueueTask { .. })));
    assert_eq!(fx.run.waiting().unwrap().on, WaitOn::Unpause);
    let (r, events, _) = fx.step(|r, o| r.unpause("ops", o));
    assert!(r.unwrap());
    assert_eq!(types(&events), ["RunUnpaused", "StepResumed", "StepScheduled"]);
    assert_eq!(fx.run.current_step, 1);

    // A rejection while paused parks the same step, feedback kept for the resume.
    let mut fx = held_fx("");
    fx.hold("d");
    fx.step(|r, o| r.pause("ops", String::new(), o)).0.unwrap();
    fx.step(|r, o| r.reject("alice", "", "again".into(), o))
        .0
        .unwrap();
    assert_eq!(fx.run.waiting().unwrap().on, WaitOn::Unpause);
    fx.step(|r, o| r.unpause("ops", o)).0.unwrap();
    assert!(matches!(fx.run.phase, Phase::Scheduled { .. }));
    assert!(fx.run.resume_input[0].contains("again"));
    assert_eq!(fx.run.resume_input.len(), 2, "{:?}", fx.run.resume_input);
}

#[test]
fn cancel_or_terminate_while_awaiting_approval_closes_the_run() {
    let mut fx = held_fx(r#","approval":{"timeoutSeconds":10}"#);
    fx.hold("d");
    let (r, events, effects) = fx.step(|r, o| r.cancel("ops", "no".into(), o));
    r.unwrap();
    assert_eq!(types(&events), ["CancelRequested", "RunCanceled"]);
    assert!(effects.iter().any(|e| matches!(e, Effect::EndCheckpoint { .. })));
    assert_eq!(fx.run.status, RunStatus::Canceled);
    assert!(fx.run.awaiting_approval().is_none());

    let mut fx = held_fx("");
    fx.hold("d");
    fx.step(|r, o| r.terminate("ops", "no".into(), o)).0.unwrap();
    assert_eq!(fx.run.status, RunStatus::Terminated);
}

#[test]
fn a_completion_after_a_cancel_request_closes_the_run_instead_of_holding() {
    let mut fx = held_fx("");
    let claims = fx.lease();
    fx.step(|r, o| r.cancel("ops", "stop".into(), o)).0.unwrap();
    let (r, events, _) = fx.step(|r, o| r.hold_for_approval(&claims, "w1", done("d"), Vec::new(), o));
    r.unwrap();
    assert_eq!(types(&events), ["RunCanceled"]);
    assert_eq!(fx.run.status, RunStatus::Canceled);
}
