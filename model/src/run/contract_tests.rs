//! Output contracts in the state machine: refusals recorded (and bounded), results
//! kept in the step's record and handed to later prompts.

use super::*;
use crate::contract::{MAX_RECORDED_REFUSALS, Violation, Violations};
use crate::workflow::{PromptValues, parse_definition, render_values};

const DEF: &str = r#"{"id":"wf","version":"1","name":"W","steps":[
  {"id":"plan","title":"P","prompt":"{{goal}}","retry":{"maximumAttempts":3},
   "output":{"type":"object","required":["n"],"properties":{"n":{"type":"integer"}}}},
  {"id":"build","title":"B","prompt":"n={{steps.plan.result.n}} all={{steps.plan.result}}"}]}"#;

fn start() -> (RunState, u64) {
    let mut seq = 0;
    let mut out = Out::new(1_000, &mut seq);
    let params = StartParams {
        namespace: "default".into(),
        run_id: "r1".into(),
        goal: "g".into(),
        ..Default::default()
    };
    let run = RunState::start(params, Arc::new(parse_definition(DEF).unwrap()), &mut out);
    (run, seq)
}

fn lease(run: &mut RunState, seq: &mut u64) -> TokenClaims {
    let Phase::Scheduled { task_seq, .. } = run.phase.clone() else {
        panic!("not scheduled: {:?}", run.phase)
    };
    let mut out = Out::new(2_000, seq);
    let lease = run.lease(task_seq, "w", &mut out).unwrap();
    TokenClaims {
        namespace: "default".into(),
        run_id: "r1".into(),
        step: run.step_id(),
        attempt: run.attempt(),
        lease: lease.seq,
        kid: "k".into(),
    }
}

fn violations() -> Violations {
    Violations {
        listed: vec![Violation {
            path: "result.n".into(),
            reason: "value is not of type \"integer\"".into(),
        }],
        total: 1,
    }
}

#[test]
fn refusals_are_recorded_up_to_the_cap_and_change_nothing_else() {
    let (mut run, mut seq) = start();
    let claims = lease(&mut run, &mut seq);
    let before = run.clone();
    for i in 0..MAX_RECORDED_REFUSALS {
        let mut out = Out::new(3_000, &mut seq);
        assert!(run.refuse_result(&claims, "w", &violations(), &mut out).unwrap());
        assert!(out.effects.is_empty());
        match &out.events[..] {
            [
                Event {
                    kind:
                        EventKind::StepResultRefused {
                            step_id,
                            attempt: 1,
                            violations,
                            total_violations: 1,
                        },
                    ..
                },
            ] => {
                assert_eq!(step_id, "plan");
                assert_eq!(violations[0].path, "result.n");
            }
            other => panic!("refusal {i}: {other:?}"),
        }
    }
    assert!(run.refusals_exhausted());
    let mut out = Out::new(3_000, &mut seq);
    assert!(!run.refuse_result(&claims, "w", &violations(), &mut out).unwrap());
    assert!(out.events.is_empty(), "past the cap nothing is recorded");
    // Only the count and the history moved: the step is still leased as it was.
    assert_eq!(run.phase, before.phase);
    assert_eq!(run.steps[0].state, "STARTED");
    assert_eq!(run.steps[0].result_refusals, MAX_RECORDED_REFUSALS);
    assert_eq!(
        run.last_event_id,
        before.last_event_id + u64::from(MAX_RECORDED_REFUSALS)
    );

    // A stale lease is refused before anything is counted.
    let stale = TokenClaims {
        lease: claims.lease + 1,
        ..claims.clone()
    };
    let mut out = Out::new(3_000, &mut seq);
    assert!(matches!(
        run.refuse_result(&stale, "w", &violations(), &mut out),
        Err(Refusal::StaleLease { .. })
    ));

    // The next attempt may record its own refusals again.
    let mut out = Out::new(3_000, &mut seq);
    let failure = StepFailure {
        error_type: "boom".into(),
        ..Default::default()
    };
    assert!(run.fail(&claims, "w", failure, &mut out).unwrap());
    let mut out = Out::new(10_000, &mut seq);
    run.backoff_timer(0, 2, &mut out);
    assert_eq!(run.steps[0].result_refusals, 0);
    let claims = lease(&mut run, &mut seq);
    let mut out = Out::new(11_000, &mut seq);
    assert!(run.refuse_result(&claims, "w", &violations(), &mut out).unwrap());
}

#[test]
fn a_result_is_kept_and_later_prompts_render_its_fields() {
    let (mut run, mut seq) = start();
    let claims = lease(&mut run, &mut seq);
    let mut out = Out::new(3_000, &mut seq);
    let done = StepDone {
        notes: "planned".into(),
        result: r#"{"n":3,"s":"x"}"#.into(),
        ..Default::default()
    };
    run.complete_with_result(&claims, "w", done, &mut out).unwrap();
    assert!(matches!(
        &out.events[0].kind,
        EventKind::StepCompleted { result, .. } if result == r#"{"n":3,"s":"x"}"#
    ));
    assert_eq!(run.steps[0].result, r#"{"n":3,"s":"x"}"#);
    assert_eq!(run.earlier_results(), [("plan", r#"{"n":3,"s":"x"}"#)]);
    let results = run.earlier_results();
    let prompt = render_values(
        &run.definition.steps[1].prompt,
        &PromptValues {
            goal: &run.goal,
            context: &run.context,
            results: &results,
        },
    );
    assert_eq!(prompt, r#"n=3 all={"n":3,"s":"x"}"#);
    // The result counts toward what later tasks carry.
    let with = run.task_bytes();
    run.steps[0].result.clear();
    assert!(
        with >= run.task_bytes() + r#"{"n":3,"s":"x"}"#.len() * 2,
        "result and rendered prompt"
    );
}
