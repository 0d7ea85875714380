//! The hub's flusher is woken early only when there is output to write.

use std::sync::Arc;

use futures::FutureExt;
use railyard_model::token::TokenClaims;
use railyard_store::Store;
use railyard_store::output::OutputHead;

use super::{OutputHub, OutputSettings, RunOut};
use crate::clock::ManualClock;

fn hub(dir: &std::path::Path) -> OutputHub {
    let store = Store::open(dir).expect("a store");
    OutputHub::new(
        store,
        Arc::new(ManualClock::new(1_000)),
        OutputSettings::default(),
    )
}

fn claims(run: &str) -> TokenClaims {
    TokenClaims {
        namespace: "default".into(),
        run_id: run.into(),
        step: "agent".into(),
        attempt: 1,
        lease: 1,
        kid: "k".into(),
    }
}

/// Whether the flusher was woken (a stored permit is taken at once).
fn woken(hub: &OutputHub) -> bool {
    hub.wake.notified().now_or_never().is_some()
}

#[test]
fn a_step_that_ends_without_output_does_not_wake_the_flusher() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let hub = hub(dir.path());
    hub.attempt_ended(&claims("quiet"));
    assert!(!woken(&hub), "a step without output costs no flush");
}

#[test]
fn a_step_that_ends_with_output_pending_wakes_the_flusher() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let hub = hub(dir.path());
    let c = claims("loud");
    let mut run = RunOut {
        head: OutputHead {
            next_offset: 1,
            step: c.step.clone(),
            attempt: c.attempt,
            ..OutputHead::default()
        },
        lease: 1,
        checked: None,
        pending: Vec::new(),
        dirty: false,
    };
    super::push(&mut run, 1_000, railyard_model::output::ChunkBody::SegmentStart);
    hub.state().runs.insert(c.run_key(), run);
    hub.attempt_ended(&c);
    assert!(woken(&hub), "pending output is flushed soon after its step ends");
    // Once flushed, nothing is pending: the attempt's end wakes no one again.
    hub.state().runs.values_mut().for_each(|r| r.dirty = false);
    hub.attempt_ended(&c);
    assert!(!woken(&hub));
}
