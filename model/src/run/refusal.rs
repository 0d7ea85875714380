//! Why the state machine refuses a transition. A refusal changes nothing; it carries
//! the facts its message needs, and [`From<Refusal> for Rejection`] is the one place
//! it becomes an API error (every refusal is `FAILED_PRECONDITION`, except an
//! approval naming the wrong step, `INVALID_ARGUMENT`).

use crate::error::Rejection;

use super::RunStatus;

/// What a caller asked of a closed run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// A worker's heartbeat, completion or failure.
    AcceptReport,
    /// A signal.
    Signal,
    /// A cancellation.
    Cancel,
    /// A termination.
    Terminate,
    /// A pause.
    Pause,
    /// An unpause.
    Unpause,
    /// An approval of a held result.
    Approve,
    /// A rejection of a held result.
    Reject,
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::AcceptReport => "accept a step report",
            Self::Signal => "signal it",
            Self::Cancel => "cancel it",
            Self::Terminate => "terminate it",
            Self::Pause => "pause it",
            Self::Unpause => "unpause it",
            Self::Approve => "approve its step",
            Self::Reject => "reject its step",
        })
    }
}

/// One lease of one step attempt, as a token claims it or as the run holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRef {
    /// The lease's number.
    pub lease: u64,
    /// The step's id.
    pub step: String,
    /// The attempt, from 1.
    pub attempt: u32,
}

/// A transition the run's state does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The run is closed.
    #[error("run {run_id} is {}; cannot {action}", status.name())]
    RunClosed {
        /// The run.
        run_id: String,
        /// How it closed.
        status: RunStatus,
        /// What was asked.
        action: Action,
    },
    /// A queued task the run has moved past (or a closed run's task).
    #[error("task {task_seq} is no longer ready")]
    TaskNotReady {
        /// The task's number.
        task_seq: u64,
    },
    /// A report on a lease while no step of the run is leased.
    #[error(
        "lease {} of step {:?} attempt {} is no longer current: the step is not leased now",
        claimed.lease, claimed.step, claimed.attempt
    )]
    StepNotLeased {
        /// The lease the caller claims.
        claimed: LeaseRef,
    },
    /// A report on a lease other than the current one.
    #[error(
        "lease {} of step {:?} attempt {} is no longer current (current: lease {} of step {:?} attempt {})",
        claimed.lease, claimed.step, claimed.attempt, current.lease, current.step, current.attempt
    )]
    StaleLease {
        /// The lease the caller claims.
        claimed: LeaseRef,
        /// The run's current lease.
        current: LeaseRef,
    },
    /// An approval or rejection while no step of the run awaits one.
    #[error("run {run_id} is not awaiting approval: its step {step:?} is {state}; cannot {action}")]
    NotAwaitingApproval {
        /// The run.
        run_id: String,
        /// Its current step.
        step: String,
        /// That step's state.
        state: String,
        /// What was asked.
        action: Action,
    },
    /// An approval or rejection naming a step other than the one awaiting it.
    #[error("step_id: {given} is not the step awaiting approval in run {run_id} (step {awaiting:?} is)")]
    NotTheStepAwaiting {
        /// The run.
        run_id: String,
        /// The step id given, quoted and cut short.
        given: String,
        /// The step awaiting approval.
        awaiting: String,
    },
}

impl From<Refusal> for Rejection {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::RunClosed { .. }
            | Refusal::TaskNotReady { .. }
            | Refusal::StepNotLeased { .. }
            | Refusal::StaleLease { .. }
            | Refusal::NotAwaitingApproval { .. } => Rejection::FailedPrecondition(r.to_string()),
            Refusal::NotTheStepAwaiting { .. } => Rejection::InvalidArgument(r.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(lease: u64, step: &str, attempt: u32) -> LeaseRef {
        LeaseRef {
            lease,
            step: step.into(),
            attempt,
        }
    }

    /// The messages clients have seen so far, word for word.
    #[test]
    fn messages_are_failed_preconditions_worded_as_before() {
        let cases = [
            (
                Refusal::RunClosed {
                    run_id: "r1".into(),
                    status: RunStatus::Completed,
                    action: Action::Signal,
                },
                "run r1 is COMPLETED; cannot signal it",
            ),
            (Refusal::TaskNotReady { task_seq: 7 }, "task 7 is no longer ready"),
            (
                Refusal::StepNotLeased {
                    claimed: lease(2, "a", 1),
                },
                "lease 2 of step \"a\" attempt 1 is no longer current: the step is not leased now",
            ),
            (
                Refusal::StaleLease {
                    claimed: lease(2, "a", 1),
                    current: lease(3, "b", 2),
                },
                "lease 2 of step \"a\" attempt 1 is no longer current (current: lease 3 of step \"b\" attempt 2)",
            ),
        ];
        for (refusal, message) in cases {
            match Rejection::from(refusal) {
                Rejection::FailedPrecondition(m) => assert_eq!(m, message),
                other => panic!("{other:?}"),
            }
        }
    }
}
