//! Logging: the `--log-format` values and the subscriber that writes logs to stderr.

use std::io::IsTerminal;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// The format of the logs on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// Lines for people.
    Text,
    /// One JSON object per line, for log collectors: `timestamp`, `level`, `target`,
    /// `message` and the event's fields, and the spans it happened in.
    Json,
}

/// Logs to stderr in `format`, filtered by `RUST_LOG` (`default_filter` when it is
/// unset or invalid); with `traces`, the worker's spans of steps, model calls and
/// tool calls (and the log lines in them, as span events) also go to that
/// OpenTelemetry tracer (`crate::telemetry`).
pub(crate) fn init(
    default_filter: &str,
    format: LogFormat,
    traces: Option<opentelemetry_sdk::trace::SdkTracer>,
) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let traces = traces.map(|tracer| {
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_filter(tracing_subscriber::filter::filter_fn(exported))
    });
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        // A closed stderr must not end the process: tracing would report the failed
        // write with eprintln!, which panics when stderr is gone.
        .log_internal_errors(false);
    // `RUST_LOG` filters the logs only: traces have their own filter.
    let registry = tracing_subscriber::registry().with(traces);
    match format {
        LogFormat::Text => registry
            .with(
                logs.with_ansi(std::io::stderr().is_terminal())
                    .with_filter(filter),
            )
            .init(),
        LogFormat::Json => registry
            .with(
                logs.json()
                    .flatten_event(true)
                    .with_ansi(false)
                    .with_filter(filter),
            )
            .init(),
    }
}

/// What becomes OpenTelemetry spans, whatever `RUST_LOG` says: the worker's spans
/// of a step attempt, a model call and a tool call (`railyard_worker::trace`), and
/// the events of level info and up in them; not the spans of every request and
/// command, which would each make a trace of their own.
fn exported(meta: &tracing::Metadata<'_>) -> bool {
    if meta.is_event() {
        return *meta.level() <= tracing::Level::INFO;
    }
    meta.target().starts_with("railyard_worker") && matches!(meta.name(), "step" | "model" | "tool")
}
