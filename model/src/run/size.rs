//! What a step task carries, bounded at write time so every task fits one gRPC
//! message.
//!
//! A step task (`StepTask` on the wire) carries the run's goal and context, the
//! step's rendered prompt, the notes, artifacts and results of every earlier step,
//! the step's output contract, the signals
//! still pending, the last failure and the checkpoint. The checkpoint and the last
//! failure have their own request limits (`service::limits::CHECKPOINT`, `MESSAGE`);
//! everything else together must stay within [`MAX_TASK_BYTES`]. A write that would
//! push a run past a limit (a start, a signal, a completion) is refused with
//! `RESOURCE_EXHAUSTED` naming the limit, and changes nothing; before these limits,
//! such a task was leased and then never delivered.

use std::collections::BTreeMap;

use super::{PendingSignal, RunState};
use crate::error::Rejection;
use crate::workflow::{PromptValues, WorkflowDef, rendered_len_values};

/// Most bytes of signals pending on a run (names and payloads), until the worker
/// running its step acknowledges them.
pub const MAX_PENDING_SIGNAL_BYTES: usize = 1 << 20;
/// Most bytes of a run's context (keys and values).
pub const MAX_CONTEXT_BYTES: usize = 1 << 20;
/// Most bytes a step task carries besides its checkpoint and last failure: goal,
/// context, rendered prompt, earlier steps' notes, artifacts and results, pending signals and
/// the definition's text.
pub const MAX_TASK_BYTES: usize = 6 << 20;

/// Most bytes of a run's goal and failure shown in a list summary (`ListRuns`,
/// `GetSessionTree`); `DescribeRun` shows them whole.
pub const SUMMARY_TEXT_BYTES: usize = 1024;

/// What protobuf adds per field or map entry, at most, for the sizes here.
const FIELD_OVERHEAD: usize = 16;

/// A write that would make a run carry more than a limit allows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error(
        "run {run_id} would have {bytes} bytes of signals pending, more than the limit of \
         {MAX_PENDING_SIGNAL_BYTES} (max pending signal bytes); the worker running its step \
         takes them on its next heartbeat"
    )]
    /// The signals pending would pass their limit.
    PendingSignals {
        /// The run.
        run_id: String,
        /// Their bytes.
        bytes: usize,
    },
    #[error(
        "the context of run {run_id} would be {bytes} bytes, more than the limit of \
         {MAX_CONTEXT_BYTES} (max context bytes)"
    )]
    /// The context would pass its limit.
    Context {
        /// The run.
        run_id: String,
        /// Its bytes.
        bytes: usize,
    },
    #[error(
        "step {step} of run {run_id} would carry {bytes} bytes (goal, context, prompt, earlier \
         steps' notes, artifacts and results, pending signals), more than the limit of {MAX_TASK_BYTES} \
         (max task bytes)"
    )]
    /// A step's task would pass its limit.
    Task {
        /// The run.
        run_id: String,
        /// The step.
        step: String,
        /// The task's bytes.
        bytes: usize,
    },
}

impl From<SizeError> for Rejection {
    fn from(e: SizeError) -> Self {
        Rejection::ResourceExhausted(e.to_string())
    }
}

/// Bytes a context takes in a task.
pub fn context_bytes(context: &BTreeMap<String, String>) -> usize {
    context
        .iter()
        .map(|(k, v)| k.len() + v.len() + FIELD_OVERHEAD)
        .sum()
}

/// Bytes one pending signal takes in a task.
pub fn signal_bytes(name: &str, payload_json: &str) -> usize {
    name.len() + payload_json.len() + FIELD_OVERHEAD
}

fn pending_bytes(pending: &[PendingSignal]) -> usize {
    pending
        .iter()
        .map(|s| signal_bytes(&s.name, &s.payload_json))
        .sum()
}

/// What the task of step `index` carries, without its checkpoint and last failure.
fn task_bytes<'a>(
    def: &WorkflowDef,
    index: usize,
    goal: &str,
    context: &BTreeMap<String, String>,
    earlier: impl Iterator<Item = (&'a str, &'a [String], &'a str)>,
    pending: &[PendingSignal],
) -> usize {
    let prior: Vec<_> = earlier.collect();
    let Some(step) = def.steps.get(index) else {
        return 0;
    };
    let definition = def.id.len()
        + def.name.len()
        + def.description.len()
        + step.id.len()
        + step.title.len()
        + step
            .allowed_tools
            .iter()
            .map(|t| t.len() + FIELD_OVERHEAD)
            .sum::<usize>()
        // The output contract travels with the task; the schema's bound stands in
        // for its size, so it is not serialized on every check.
        + step
            .output
            .as_ref()
            .map_or(0, |_| crate::contract::MAX_OUTPUT_SCHEMA_BYTES)
        + step
            .required_artifacts
            .patterns()
            .iter()
            .map(|p| p.len() + FIELD_OVERHEAD)
            .sum::<usize>();
    let earlier: usize = def
        .steps
        .iter()
        .zip(&prior)
        .map(|(d, (notes, artifacts, result))| {
            d.id.len()
                + d.title.len()
                + notes.len()
                + artifacts.iter().map(|a| a.len() + FIELD_OVERHEAD).sum::<usize>()
                + result.len()
                + 5 * FIELD_OVERHEAD
        })
        .sum();
    let results: Vec<(&str, &str)> = def
        .steps
        .iter()
        .zip(&prior)
        .map(|(d, (_, _, result))| (d.id.as_str(), *result))
        .collect();
    let values = PromptValues {
        goal,
        context,
        results: &results,
    };
    definition
        + goal.len()
        + context_bytes(context)
        + rendered_len_values(&step.prompt, &values)
        + earlier
        + pending_bytes(pending)
        + 32 * FIELD_OVERHEAD
}

/// Checks that a new run's first task fits: its context, and what step 0 carries.
pub fn check_start(
    run_id: &str,
    def: &WorkflowDef,
    goal: &str,
    context: &BTreeMap<String, String>,
) -> Result<(), SizeError> {
    let bytes = context_bytes(context);
    if bytes > MAX_CONTEXT_BYTES {
        return Err(SizeError::Context {
            run_id: run_id.to_string(),
            bytes,
        });
    }
    let bytes = task_bytes(def, 0, goal, context, std::iter::empty(), &[]);
    if bytes > MAX_TASK_BYTES {
        return Err(SizeError::Task {
            run_id: run_id.to_string(),
            step: def.steps.first().map(|s| s.id.clone()).unwrap_or_default(),
            bytes,
        });
    }
    Ok(())
}

impl RunState {
    /// What the run's list summary takes on the wire, at most: its names, its goal and
    /// failure cut to [`SUMMARY_TEXT_BYTES`], and per step its id, title, state, queue
    /// and worker (no notes, context or failures).
    pub fn summary_bytes(&self) -> usize {
        let steps: usize = self
            .definition
            .steps
            .iter()
            .zip(&self.steps)
            .map(|(d, s)| {
                d.id.len()
                    + d.title.len()
                    + s.state.len()
                    + s.worker.len()
                    + d.queue(&self.definition, &self.task_queue).len()
                    + 8 * FIELD_OVERHEAD
            })
            .sum();
        self.namespace.len()
            + self.run_id.len()
            + self.workflow_id.len()
            + self.definition.version.len()
            + self.parent_run_id.len()
            + 2 * (SUMMARY_TEXT_BYTES + 3)
            + steps
            + 16 * FIELD_OVERHEAD
    }

    /// Bytes of the signals pending on the run.
    pub fn pending_signal_bytes(&self) -> usize {
        pending_bytes(&self.pending_signals)
    }

    /// What the current step's task carries, without checkpoint and last failure;
    /// 0 for a closed run.
    pub fn task_bytes(&self) -> usize {
        if !self.status.is_open() {
            return 0;
        }
        let earlier = self
            .steps
            .iter()
            .take(self.current_step)
            .map(|s| (s.notes.as_str(), s.artifacts.as_slice(), s.result.as_str()));
        task_bytes(
            &self.definition,
            self.current_step,
            &self.goal,
            &self.context,
            earlier,
            &self.pending_signals,
        )
    }

    /// Checks the run, as a transition left it, against every limit here. Called
    /// after a transition that may grow it and before it is saved: an error refuses
    /// the transition, and nothing is written.
    pub fn check_size(&self) -> Result<(), SizeError> {
        let run_id = || self.run_id.clone();
        let bytes = self.pending_signal_bytes();
        if bytes > MAX_PENDING_SIGNAL_BYTES {
            return Err(SizeError::PendingSignals {
                run_id: run_id(),
                bytes,
            });
        }
        let bytes = context_bytes(&self.context);
        if bytes > MAX_CONTEXT_BYTES {
            return Err(SizeError::Context {
                run_id: run_id(),
                bytes,
            });
        }
        let bytes = self.task_bytes();
        if bytes > MAX_TASK_BYTES {
            return Err(SizeError::Task {
                run_id: run_id(),
                step: self
                    .definition
                    .steps
                    .get(self.current_step)
                    .map(|s| s.id.clone())
                    .unwrap_or_default(),
                bytes,
            });
        }
        Ok(())
    }
}
