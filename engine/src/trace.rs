//! OpenTelemetry spans of step attempts: one span per attempt, from its lease to
//! its end (completion, failure, timeout, a wait, the run's cancellation), in the
//! run's trace ([`railyard_model::trace`]).
//!
//! The span is recorded when the attempt ends, after the commit that ends it, with
//! the lease's start as its start time: nothing is held in memory while a step runs,
//! and a restart in between loses nothing but the attempts it interrupted. Its span
//! id is derived from the run and the lease ([`TraceContext::attempt_span_id`]), so
//! the worker (sent it as the step's `traceparent`) and child runs (started under
//! it) name it as their parent before it is recorded. The binary's OpenTelemetry ID
//! generator asks [`forced_ids`] for the ids to use; without it the span gets fresh
//! ids and its children point at a span that is not exported.
//!
//! Spans go to the global tracer provider (`opentelemetry::global`), which the
//! binary installs when an OTLP endpoint is configured; until then [`enabled`] is
//! false and nothing here does any work. Recording a span never blocks: the
//! exporter's batch queue drops spans when it is full.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{Span, SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue, global};
use railyard_model::Millis;
use railyard_model::run::Lease;
use railyard_model::trace::TraceContext;

/// Whether step-attempt spans are recorded (see [`enable`]).
static ENABLED: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// The trace and span ids the next span built on this thread must have.
    static FORCED: Cell<Option<([u8; 16], [u8; 8])>> = const { Cell::new(None) };
}

/// Records step-attempt spans from now on, to the global tracer provider. The binary
/// calls it once it has installed one.
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// Whether step-attempt spans are recorded.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The trace id and span id the span being built on this thread must have, if the
/// server is building one of its step-attempt spans: the binary's ID generator
/// returns these instead of random ones.
pub fn forced_ids() -> Option<([u8; 16], [u8; 8])> {
    FORCED.with(Cell::get)
}

/// The `traceparent` the worker's spans of this attempt take as their parent: the
/// server's span of the attempt.
pub fn attempt_traceparent(trace: &TraceContext, namespace: &str, run_id: &str, lease_seq: u64) -> String {
    trace.traceparent_for(TraceContext::attempt_span_id(namespace, run_id, lease_seq))
}

/// A step attempt that has ended, to record as a span.
#[derive(Debug, Clone)]
pub struct EndedAttempt {
    pub ns: String,
    pub run_id: String,
    pub workflow_id: String,
    pub trace: TraceContext,
    pub lease: Lease,
    pub step_id: String,
    pub attempt: u32,
    /// The event that ended it (`StepCompleted`, `StepFailed`, `StepTimedOut`,
    /// `StepWaiting`, `RunCanceled`, ...); empty when none names it.
    pub ended_by: &'static str,
    pub ended_ms: Millis,
}

/// Whether an event of this type ends a step attempt and says how.
pub fn ends_attempt(type_name: &str) -> bool {
    matches!(
        type_name,
        "StepCompleted"
            | "StepFailed"
            | "StepTimedOut"
            | "StepWaiting"
            | "StepAwaitingApproval"
            | "RunCanceled"
            | "RunTerminated"
            | "RunFailed"
            | "RunPaused"
    )
}

fn time(ms: Millis) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// Records the span of an ended attempt.
pub fn record(a: &EndedAttempt) {
    if !enabled() {
        return;
    }
    let span_id = TraceContext::attempt_span_id(&a.ns, &a.run_id, a.lease.seq);
    let tracer = global::tracer("railyard-server");
    let parent = if a.trace.has_parent() {
        let sc = opentelemetry::trace::SpanContext::new(
            opentelemetry::trace::TraceId::from_bytes(a.trace.trace_id),
            opentelemetry::trace::SpanId::from_bytes(a.trace.parent_span_id),
            opentelemetry::trace::TraceFlags::new(a.trace.flags),
            true,
            Default::default(),
        );
        Context::new().with_remote_span_context(sc)
    } else {
        Context::new()
    };
    let failed = matches!(a.ended_by, "StepFailed" | "StepTimedOut" | "RunFailed");
    let builder = tracer
        .span_builder(format!("step {}", a.step_id))
        .with_kind(SpanKind::Server)
        .with_start_time(time(a.lease.started_ms))
        .with_attributes(vec![
            KeyValue::new("railyard.namespace", a.ns.clone()),
            KeyValue::new("railyard.run_id", a.run_id.clone()),
            KeyValue::new("railyard.workflow_id", a.workflow_id.clone()),
            KeyValue::new("railyard.step_id", a.step_id.clone()),
            KeyValue::new("railyard.attempt", i64::from(a.attempt)),
            KeyValue::new("railyard.lease", i64::try_from(a.lease.seq).unwrap_or(i64::MAX)),
            KeyValue::new("railyard.worker", a.lease.worker.clone()),
            KeyValue::new("railyard.ended_by", a.ended_by),
        ]);
    FORCED.with(|f| f.set(Some((a.trace.trace_id, span_id))));
    let mut span = tracer.build_with_context(builder, &parent);
    FORCED.with(|f| f.set(None));
    if failed {
        span.set_status(Status::error(a.ended_by));
    }
    span.end_with_timestamp(time(a.ended_ms.max(a.lease.started_ms)));
}
