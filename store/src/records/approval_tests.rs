//! Approvals in storage: a run row holding a proposal, the approval events, the
//! definition's `approval` options, and rows written before approvals.

use std::collections::BTreeMap;

use super::tests::{DEFS, busy_run, db};
use super::*;
use railyard_model::run::{Event, EventKind, Proposal, StepDone, WaitOn, Waiting};
use railyard_model::workflow::{ApprovalTimeoutPolicy, parse_definition};

#[test]
fn a_run_awaiting_approval_and_the_approval_events_round_trip() {
    let d = db();
    let (mut run, _) = busy_run();
    run.steps[0].state = "AWAITING_APPROVAL".into();
    run.phase = Phase::Waiting(Waiting {
        on: WaitOn::Approval(Box::new(Proposal {
            done: StepDone {
                notes: "draft ready".into(),
                artifacts: vec!["out.md".into()],
                context_updates: BTreeMap::from([("k".into(), "v2".into())]),
                result: r#"{"ok":true}"#.into(),
            },
            proposed_by: "w1".into(),
        })),
        since_ms: 5,
        deadline_ms: Some(90),
        wait_id: 4,
    });
    let tx = d.db.begin_write().unwrap();
    let mut table = tx.open_table(DEFS).unwrap();
    d.defs.store(&run.definition, &mut table).unwrap();
    let row = encode_run(&run, &d.defs).unwrap();
    assert_eq!(decode_run(&row, &d.defs, &table).unwrap(), run);
    // An empty proposal too (a completion with nothing in it).
    let mut bare = run.clone();
    bare.phase = Phase::Waiting(Waiting {
        on: WaitOn::Approval(Box::new(Proposal {
            done: StepDone::default(),
            proposed_by: String::new(),
        })),
        since_ms: 1,
        deadline_ms: None,
        wait_id: 2,
    });
    let row = encode_run(&bare, &d.defs).unwrap();
    assert_eq!(decode_run(&row, &d.defs, &table).unwrap(), bare);

    let kinds = [
        EventKind::StepAwaitingApproval {
            step_id: "a".into(),
            attempt: 2,
            notes: "n".into(),
            artifacts: vec!["x".into()],
            context_updates: BTreeMap::from([("a".into(), "b".into())]),
            result: r#"{"n":1}"#.into(),
            deadline_ms: Some(7),
        },
        EventKind::StepAwaitingApproval {
            step_id: "a".into(),
            attempt: 1,
            notes: String::new(),
            artifacts: vec![],
            context_updates: BTreeMap::new(),
            result: String::new(),
            deadline_ms: None,
        },
        EventKind::StepApproved {
            step_id: "a".into(),
            attempt: 2,
            note: "ship it".into(),
        },
        EventKind::StepRejected {
            step_id: "a".into(),
            attempt: 2,
            feedback: "too long".into(),
        },
    ];
    for (i, kind) in kinds.into_iter().enumerate() {
        let ev = Event {
            id: i as u64 + 1,
            time_ms: 1,
            identity: "alice".into(),
            kind,
        };
        let row = encode_event(&ev, &d.defs).unwrap();
        assert_eq!(decode_event(&row, &d.defs, &table).unwrap(), ev);
    }
}

#[test]
fn approval_options_round_trip_in_a_stored_definition_and_older_rows_have_none() {
    let text = r#"{"id":"wf","version":"1","name":"W","steps":[
      {"id":"a","title":"A","prompt":"p","requireConfirmation":true,
       "approval":{"timeoutSeconds":60,"onTimeout":"reject","feedback":"look again"}},
      {"id":"b","title":"B","prompt":"p","requireConfirmation":true,
       "approval":{"timeoutSeconds":5,"onTimeout":"approve"}}]}"#;
    let def = Arc::new(parse_definition(text).unwrap());
    let d = db();
    let tx = d.db.begin_write().unwrap();
    let mut table = tx.open_table(DEFS).unwrap();
    let key = d.defs.store(&def, &mut table).unwrap();
    let back = Definitions::default().resolve(&key, &table).unwrap();
    assert_eq!(*back, *def);
    let a = back.steps[0].approval.clone().unwrap();
    assert_eq!(
        (a.timeout_seconds, a.on_timeout, a.feedback.as_str()),
        (Some(60), ApprovalTimeoutPolicy::Reject, "look again")
    );
    assert_eq!(back.steps[1].approval_timeout_ms(), Some(5_000));

    // A definition without approval options stores no such field (its hash holds).
    let (plain, _) = busy_run();
    let key = d.defs.store(&plain.definition, &mut table).unwrap();
    let back = Definitions::default().resolve(&key, &table).unwrap();
    assert!(back.steps.iter().all(|s| s.approval.is_none()));
}

#[test]
fn a_waiting_row_from_before_approvals_still_reads() {
    // What the previous release wrote for a step parked by a pause.
    let d = db();
    let (run, _) = busy_run();
    let tx = d.db.begin_write().unwrap();
    let mut table = tx.open_table(DEFS).unwrap();
    d.defs.store(&run.definition, &mut table).unwrap();
    let mut row: serde_json::Value = serde_json::from_slice(&encode_run(&run, &d.defs).unwrap()).unwrap();
    row["phase"] = serde_json::json!({"kind":"waiting","on":{"kind":"unpause"},"since_ms":3,"wait_id":9});
    let back = decode_run(&serde_json::to_vec(&row).unwrap(), &d.defs, &table).unwrap();
    assert!(matches!(
        back.phase,
        Phase::Waiting(Waiting {
            on: WaitOn::Unpause,
            wait_id: 9,
            ..
        })
    ));
    // An approval row missing its proposal reads as an empty one, not an error.
    row["phase"] = serde_json::json!({"kind":"waiting","on":{"kind":"approval"},"since_ms":3,"wait_id":9});
    let back = decode_run(&serde_json::to_vec(&row).unwrap(), &d.defs, &table).unwrap();
    assert!(
        back.awaiting_approval()
            .is_some_and(|p| p.done == StepDone::default())
    );
}
