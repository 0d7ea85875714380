//! `GetStepCheckpoint`: a page of the checkpoint of a run's step, for a reader (the
//! web console's transcript): the step in flight's latest, or a finished step's last
//! (kept after the step ends, within the run's bound: `Cx::end_checkpoint`). The bytes are the worker's format, which
//! the server does not read; a page is a byte range, read from the stored segments
//! that hold it, so a reader never makes the server load or send a whole
//! checkpoint (up to `railyard_model::limits::CHECKPOINT`).

use railyard_model::Rejection;
use railyard_model::RunKey;
use railyard_model::echo;
use railyard_model::limits::check_name;
use railyard_store::CheckpointAt;

use super::Core;
use super::caller::Caller;
use crate::error::ApiError;

/// Bytes of a page when the request names no size.
pub const DEFAULT_PAGE_BYTES: usize = 256 * 1024;
/// The most bytes of a page.
pub const MAX_PAGE_BYTES: usize = 1024 * 1024;

/// A page of a step's checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckpointPage {
    /// The step the checkpoint is of (empty: none is kept) and its attempt.
    pub step_id: String,
    pub attempt: u32,
    /// The whole checkpoint's length.
    pub total: u64,
    /// The bytes from the requested offset.
    pub bytes: Vec<u8>,
    /// Where the next page starts (0: this page reached the end).
    pub next_offset: u64,
    /// Stored rows read for it (logged; the tests read it).
    pub rows_read: u32,
}

/// Reads bytes `offset..` (at most `max_bytes`, 0 for the default) of the checkpoint
/// of `run_id`'s step `step_id` (empty: the current step).
pub fn page(
    core: &Core,
    caller: &Caller,
    run_id: &str,
    step_id: &str,
    offset: u64,
    max_bytes: u32,
) -> Result<CheckpointPage, ApiError> {
    check_name("run_id", run_id)?;
    if !step_id.is_empty() {
        check_name("step_id", step_id)?;
    }
    let ns = &caller.namespace;
    let limit = match max_bytes as usize {
        0 => DEFAULT_PAGE_BYTES,
        n => n.min(MAX_PAGE_BYTES),
    };
    // One snapshot: the step named and the bytes read are of the same moment.
    let snap = core.store.snapshot()?;
    let key = RunKey::new(ns, run_id);
    let run = snap.run(&key)?.ok_or_else(|| {
        ApiError::Rejected(Rejection::NotFound(format!(
            "run {run_id:?} not found in namespace {ns:?}"
        )))
    })?;
    caller.check_run_queues(&run)?;
    let steps = &run.definition.steps;
    let index = if step_id.is_empty() {
        run.current_step
    } else {
        steps.iter().position(|s| s.id == step_id).ok_or_else(|| {
            ApiError::Rejected(Rejection::NotFound(format!(
                "run {run_id:?} has no step {} (its definition's steps: {})",
                echo(step_id),
                steps.len()
            )))
        })?
    };
    let Some(step) = steps.get(index) else {
        return Ok(CheckpointPage::default());
    };
    // The step in flight's may be where an older release kept it; a finished step's
    // is in its own place.
    let at = if index == run.current_step {
        snap.checkpoint_in_flight_at(&key, index)?
    } else {
        CheckpointAt::step(index)
    };
    let stored = snap.checkpoint_page(&key, at, offset, limit)?;
    if stored.total == 0 {
        return Ok(CheckpointPage {
            rows_read: stored.rows_read,
            ..CheckpointPage::default()
        });
    }
    let end = offset.saturating_add(stored.bytes.len() as u64);
    tracing::debug!(
        namespace = %ns,
        run_id,
        offset,
        bytes = stored.bytes.len(),
        rows_read = stored.rows_read,
        "checkpoint page read"
    );
    Ok(CheckpointPage {
        step_id: step.id.clone(),
        attempt: run.steps.get(index).map_or(0, |s| s.attempt),
        total: stored.total,
        next_offset: if end < stored.total { end } else { 0 },
        bytes: stored.bytes,
        rows_read: stored.rows_read,
    })
}
