//! The worker's OpenTelemetry spans, as `tracing` spans: one per step attempt
//! (joined to the run's trace through the step's `traceparent`), and under it one
//! per model call, with the OpenTelemetry GenAI semantic-convention attributes, and
//! one per tool call. The binary exports them when an OTLP endpoint is configured
//! (`tracing-opentelemetry`); otherwise they are ordinary spans of the logs.

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::{Array, Value};
use railyard_model::trace::TraceContext;
use railyard_proto::v1::StepTask;
use tracing::Span;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::provider::{ModelTurn, ProviderError, StopReason};

/// The span of one step attempt, a child of the server's span of the attempt (the
/// task's `traceparent`; none from an older server: a span of the worker's own).
/// Its fields are those every log line of the step shows, so it has no more.
pub(crate) fn step_span(task: &StepTask, queue: &str) -> Span {
    let span = tracing::info_span!("step", run_id = %task.run_id, step = %task.step_id,
        attempt = task.attempt, queue = %queue);
    if let Ok(parent) = TraceContext::parse(&task.traceparent) {
        let sc = SpanContext::new(
            TraceId::from_bytes(parent.trace_id),
            SpanId::from_bytes(parent.parent_span_id),
            TraceFlags::new(parent.flags),
            true,
            TraceState::default(),
        );
        // Fails only when no OpenTelemetry layer is installed: nothing to join then.
        let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(sc));
    }
    span
}

/// The span of one tool call.
pub(crate) fn tool_span(name: &str) -> Span {
    tracing::info_span!("tool",
        otel.name = %format_args!("execute_tool {name}"),
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = %name,
        otel.status_code = Empty)
}

/// The span of one model call: `chat <model>`, with the GenAI attributes.
pub(crate) struct ModelCall {
    span: Span,
}

impl ModelCall {
    /// A call to `provider`'s `model`.
    pub(crate) fn start(provider: &str, model: &str) -> Self {
        let system = gen_ai_system(provider);
        let span = tracing::info_span!("model",
            otel.name = %format_args!("chat {model}"),
            otel.kind = "client",
            otel.status_code = Empty,
            gen_ai.operation.name = "chat",
            gen_ai.system = %system,
            gen_ai.provider.name = %system,
            gen_ai.request.model = %model,
            gen_ai.usage.input_tokens = Empty,
            gen_ai.usage.output_tokens = Empty,
            error.type = Empty);
        Self { span }
    }

    /// The span, to run the call in.
    pub(crate) fn span(&self) -> Span {
        self.span.clone()
    }

    /// Records what the call came to.
    pub(crate) fn done(&self, turn: &Result<ModelTurn, ProviderError>) {
        match turn {
            Ok(t) => {
                self.span.record("gen_ai.usage.input_tokens", t.usage.input);
                self.span.record("gen_ai.usage.output_tokens", t.usage.output);
                // A string array, which `tracing` fields cannot carry.
                self.span.set_attribute(
                    "gen_ai.response.finish_reasons",
                    Value::Array(Array::String(vec![finish_reason(&t.stop_reason).into()])),
                );
            }
            Err(e) => {
                self.span.record("otel.status_code", "error");
                self.span.record("error.type", error_type(e));
            }
        }
    }
}

/// Marks a tool call's span as failed.
pub(crate) fn tool_failed(span: &Span) {
    span.record("otel.status_code", "error");
}

/// `gen_ai.provider.name` of a provider, as the conventions name them.
fn gen_ai_system(provider: &str) -> &str {
    match provider {
        "anthropic" => "anthropic",
        "openai" => "openai",
        other => other,
    }
}

/// `gen_ai.response.finish_reasons`: the reason as the provider's API names it.
fn finish_reason(r: &StopReason) -> String {
    match r {
        StopReason::EndTurn => "end_turn".into(),
        StopReason::ToolUse => "tool_use".into(),
        StopReason::MaxTokens => "max_tokens".into(),
        StopReason::Other(s) => s.clone(),
    }
}

/// `error.type` of a failed model call: the kind of failure, never its text.
fn error_type(e: &ProviderError) -> &'static str {
    match e {
        ProviderError::Auth { .. } => "auth",
        ProviderError::UnknownModel { .. } => "unknown_model",
        ProviderError::Http { .. } => "http",
        ProviderError::Transport { .. } => "transport",
        ProviderError::RateLimited { .. } => "rate_limited",
        ProviderError::ResponseTooLarge { .. } => "response_too_large",
        ProviderError::StreamEventTooLarge { .. } => "stream_event_too_large",
        ProviderError::BadResponse(_) => "bad_response",
        ProviderError::Script(_) => "script",
        ProviderError::Config(_) => "config",
    }
}
