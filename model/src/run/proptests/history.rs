//! What a run's history alone says about it, for the property test: a replay that
//! checks the history is well-formed and derives the state the run must be in.

use std::collections::BTreeMap;

use crate::Millis;
use crate::run::{Event, EventKind, Phase, RunStatus, TimeoutKind};
use crate::workflow::WorkflowDef;

/// The phase, as far as history tells it.
#[derive(Debug, PartialEq)]
pub(super) enum PhaseKind {
    Scheduled { queue: String },
    Started { lease: u64, worker: String },
    BackingOff { until_ms: Millis },
    Closed,
}

pub(super) fn phase_kind(phase: &Phase) -> PhaseKind {
    match phase {
        Phase::Scheduled { queue, .. } => PhaseKind::Scheduled { queue: queue.clone() },
        Phase::Started(l) => PhaseKind::Started {
            lease: l.seq,
            worker: l.worker.clone(),
        },
        Phase::BackingOff { until_ms } => PhaseKind::BackingOff { until_ms: *until_ms },
        Phase::Closed => PhaseKind::Closed,
        Phase::Waiting(_) => panic!("the generator makes no waiting steps"),
    }
}

/// What the history alone says about the run.
pub(super) struct Derived {
    pub(super) status: RunStatus,
    pub(super) close_ms: Option<Millis>,
    pub(super) current_step: usize,
    /// `None` between a step's end and what follows it: never left so by a transition.
    pub(super) phase: Option<PhaseKind>,
    /// Per step: state, attempt, worker.
    pub(super) steps: Vec<(String, u32, String)>,
    pub(super) lease_counter: u64,
    pub(super) cancel_requested: bool,
    pub(super) context: BTreeMap<String, String>,
    pub(super) signals: Vec<(u64, String, String)>,
}

/// Replays a history, checking that it is well-formed: numbered from 1 without gaps,
/// each attempt scheduled, started and ended in order, retries as the policy allows,
/// nothing after the run closes.
pub(super) fn replay(def: &WorkflowDef, history: &[Event]) -> Derived {
    let mut d = Derived {
        status: RunStatus::Running,
        close_ms: None,
        current_step: 0,
        phase: None,
        steps: vec![("PENDING".into(), 0, String::new()); def.steps.len()],
        lease_counter: 0,
        cancel_requested: false,
        context: BTreeMap::new(),
        signals: Vec::new(),
    };
    // The last step lifecycle event and when the attempt in flight started.
    let mut last: Option<&EventKind> = None;
    let mut started_ms = 0;
    let mut run_queue = String::new();
    for (i, e) in history.iter().enumerate() {
        assert_eq!(e.id, i as u64 + 1, "event ids are 1..=n");
        let delivery = matches!(
            e.kind,
            EventKind::DeliveryAttempted { .. }
                | EventKind::DeliverySucceeded { .. }
                | EventKind::DeliveryFailed { .. }
        );
        if delivery {
            // Result delivery is recorded after the run closed, and changes nothing of it.
            assert!(
                !d.status.is_open(),
                "event {}: a delivery before the run closed",
                e.id
            );
            continue;
        }
        assert!(d.status.is_open(), "event {} after the run closed", e.id);
        assert!(i == 0 || history[i - 1].time_ms <= e.time_ms, "time runs forward");
        let step = d.current_step;
        let attempt = d.steps.get(step).map_or(0, |s| s.1);
        let policy = def.steps.get(step).map(|s| s.retry_policy());
        let same_attempt = |step_id: &str, a: u32| {
            assert_eq!(
                (step_id, a),
                (def.steps[step].id.as_str(), attempt),
                "event {} names the attempt in flight",
                e.id
            );
        };
        match &e.kind {
            EventKind::RunStarted {
                context, task_queue, ..
            } => {
                assert_eq!(i, 0, "RunStarted comes first and once");
                d.context = context.clone();
                run_queue = task_queue.clone();
            }
            _ if i == 0 => panic!("history starts with {:?}", e.kind),
            EventKind::StepWaiting { .. }
            | EventKind::StepResumed { .. }
            | EventKind::ChildRunStarted { .. }
            | EventKind::ChildRunCompleted { .. }
            | EventKind::RunPaused { .. }
            | EventKind::RunUnpaused { .. }
            | EventKind::StepAwaitingApproval { .. }
            | EventKind::StepApproved { .. }
            | EventKind::StepRejected { .. }
            | EventKind::RunResetFrom { .. }
            | EventKind::StepCarried { .. }
            | EventKind::RunResetTo { .. }
            | EventKind::SearchAttributesChanged { .. }
            | EventKind::BatchApplied { .. } => {
                panic!(
                    "event {}: the generator makes no waits, children, pauses, approvals, resets, attribute changes or batches",
                    e.id
                )
            }
            EventKind::StepScheduled {
                step_id,
                step_index,
                attempt: a,
                task_queue,
            } => {
                assert!(
                    !d.cancel_requested,
                    "event {}: a step scheduled after cancel was requested",
                    e.id
                );
                let expected = match last {
                    None => (0, 1),
                    Some(EventKind::StepCompleted { .. }) => (step + 1, 1),
                    Some(EventKind::StepFailed { will_retry: true, .. }) => (step, attempt + 1),
                    Some(EventKind::StepTimedOut {
                        will_retry: true,
                        timeout,
                        ..
                    }) => (step, attempt + u32::from(*timeout != TimeoutKind::Undelivered)),
                    other => panic!("event {}: StepScheduled after {other:?}", e.id),
                };
                assert_eq!(
                    (*step_index, *a),
                    expected,
                    "event {}: step and attempt scheduled",
                    e.id
                );
                assert_eq!(step_id, &def.steps[*step_index].id);
                assert_eq!(task_queue, def.steps[*step_index].queue(def, &run_queue));
                d.current_step = *step_index;
                let rec = &mut d.steps[*step_index];
                (rec.0, rec.1) = ("SCHEDULED".into(), *a);
                d.phase = Some(PhaseKind::Scheduled {
                    queue: task_queue.clone(),
                });
            }
            EventKind::StepStarted {
                step_id,
                attempt: a,
                worker,
                lease,
            } => {
                assert!(
                    matches!(last, Some(EventKind::StepScheduled { .. })),
                    "event {}: started unscheduled",
                    e.id
                );
                same_attempt(step_id, *a);
                assert!(
                    !d.cancel_requested,
                    "event {}: a step leased after cancel was requested",
                    e.id
                );
                assert_eq!(
                    *lease,
                    d.lease_counter + 1,
                    "event {}: leases numbered in order",
                    e.id
                );
                d.lease_counter = *lease;
                started_ms = e.time_ms;
                (d.steps[step].0, d.steps[step].2) = ("STARTED".into(), worker.clone());
                d.phase = Some(PhaseKind::Started {
                    lease: *lease,
                    worker: worker.clone(),
                });
            }
            EventKind::StepCompleted {
                step_id,
                attempt: a,
                context_updates,
                ..
            } => {
                assert!(
                    matches!(last, Some(EventKind::StepStarted { .. })),
                    "event {}: ended unstarted",
                    e.id
                );
                same_attempt(step_id, *a);
                d.context.extend(context_updates.clone());
                d.steps[step].0 = "COMPLETED".into();
                d.phase = None;
            }
            EventKind::StepFailed {
                step_id,
                attempt: a,
                error_type,
                will_retry,
                next_attempt_at_ms,
                ..
            } => {
                assert!(
                    matches!(last, Some(EventKind::StepStarted { .. })),
                    "event {}: ended unstarted",
                    e.id
                );
                same_attempt(step_id, *a);
                let policy = policy.expect("a step");
                if *will_retry {
                    assert!(
                        !d.cancel_requested && policy.allows_retry(*a, error_type),
                        "event {}: retry",
                        e.id
                    );
                }
                retry_or_fail(
                    &mut d,
                    e,
                    *will_retry,
                    *next_attempt_at_ms,
                    policy.backoff_ms(a + 1),
                );
            }
            EventKind::StepTimedOut {
                step_id,
                attempt: a,
                timeout,
                will_retry,
                next_attempt_at_ms,
            } => {
                assert!(
                    matches!(last, Some(EventKind::StepStarted { .. })),
                    "event {}: ended unstarted",
                    e.id
                );
                same_attempt(step_id, *a);
                let s = &def.steps[step];
                let policy = policy.expect("a step");
                match timeout {
                    TimeoutKind::Undelivered => {
                        assert_eq!(*will_retry, !d.cancel_requested, "event {}: undelivered", e.id);
                        assert_eq!(*next_attempt_at_ms, will_retry.then_some(e.time_ms));
                        if !will_retry {
                            d.steps[step].0 = "FAILED".into();
                        }
                        d.phase = None;
                        last = Some(&e.kind);
                        continue;
                    }
                    TimeoutKind::Wait => panic!("event {}: the generator makes no waits", e.id),
                    TimeoutKind::StartToClose => {
                        assert!(e.time_ms >= started_ms + s.timeout_ms(), "early timeout")
                    }
                    TimeoutKind::Heartbeat => {
                        let hb = s.heartbeat_timeout_ms().expect("a heartbeat timeout");
                        assert!(e.time_ms >= started_ms + hb, "early heartbeat timeout");
                    }
                }
                let retries = !d.cancel_requested && policy.allows_retry(*a, "timeout");
                assert_eq!(*will_retry, retries, "event {}: retry after a timeout", e.id);
                retry_or_fail(
                    &mut d,
                    e,
                    *will_retry,
                    *next_attempt_at_ms,
                    policy.backoff_ms(a + 1),
                );
            }
            EventKind::SignalReceived { name, payload_json } => {
                d.signals.push((e.id, name.clone(), payload_json.clone()));
            }
            EventKind::CoordinatorNote {
                step_id, attempt: a, ..
            }
            | EventKind::IssueReported {
                step_id, attempt: a, ..
            }
            | EventKind::StepUsage {
                step_id, attempt: a, ..
            }
            | EventKind::AgentStuck {
                step_id, attempt: a, ..
            } => {
                assert!(
                    matches!(last, Some(EventKind::StepStarted { .. })),
                    "event {}: note while not leased",
                    e.id
                );
                same_attempt(step_id, *a);
            }
            EventKind::StepResultRefused {
                step_id, attempt: a, ..
            } => {
                assert!(
                    matches!(last, Some(EventKind::StepStarted { .. })),
                    "event {}: a result refused while not leased",
                    e.id
                );
                same_attempt(step_id, *a);
            }
            EventKind::CancelRequested { .. } => {
                assert!(!d.cancel_requested, "event {}: cancel requested twice", e.id);
                d.cancel_requested = true;
            }
            EventKind::RunCompleted { context } => {
                assert!(
                    matches!(last, Some(EventKind::StepCompleted { .. })) && step + 1 == def.steps.len(),
                    "event {}: completed before the last step did",
                    e.id
                );
                assert_eq!(context, &d.context);
                d.current_step = def.steps.len();
                close(&mut d, e, RunStatus::Completed);
            }
            EventKind::RunFailed { .. } => {
                assert!(
                    matches!(
                        last,
                        Some(
                            EventKind::StepFailed {
                                will_retry: false,
                                ..
                            } | EventKind::StepTimedOut {
                                will_retry: false,
                                ..
                            }
                        )
                    ),
                    "event {}: run failed after {last:?}",
                    e.id
                );
                close(&mut d, e, RunStatus::Failed);
            }
            EventKind::RunCanceled { .. } => {
                assert!(d.cancel_requested, "event {}: canceled unrequested", e.id);
                assert!(
                    !matches!(last, Some(EventKind::StepStarted { .. })),
                    "canceled under a live lease"
                );
                close(&mut d, e, RunStatus::Canceled);
            }
            EventKind::RunTerminated { .. } => close(&mut d, e, RunStatus::Terminated),
            EventKind::DeliveryAttempted { .. }
            | EventKind::DeliverySucceeded { .. }
            | EventKind::DeliveryFailed { .. } => unreachable!("handled above"),
        }
        if matches!(
            e.kind,
            EventKind::StepScheduled { .. }
                | EventKind::StepStarted { .. }
                | EventKind::StepCompleted { .. }
                | EventKind::StepFailed { .. }
                | EventKind::StepTimedOut { .. }
        ) {
            last = Some(&e.kind);
        }
    }
    d
}

fn retry_or_fail(d: &mut Derived, e: &Event, will_retry: bool, next: Option<Millis>, backoff_ms: Millis) {
    let step = d.current_step;
    if will_retry {
        assert_eq!(
            next,
            Some(e.time_ms + backoff_ms),
            "event {}: next attempt time",
            e.id
        );
        d.steps[step].0 = "BACKING_OFF".into();
        d.phase = Some(PhaseKind::BackingOff {
            until_ms: e.time_ms + backoff_ms,
        });
    } else {
        assert_eq!(next, None, "event {}: no next attempt", e.id);
        d.steps[step].0 = "FAILED".into();
        d.phase = None;
    }
}

fn close(d: &mut Derived, e: &Event, status: RunStatus) {
    d.status = status;
    d.close_ms = Some(e.time_ms);
    d.phase = Some(PhaseKind::Closed);
}
