//! Logging: the `--log-format` values and the subscriber that writes logs to stderr.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

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
/// unset or invalid).
pub(crate) fn init(default_filter: &str, format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // A closed stderr must not end the process: tracing would report the failed
        // write with eprintln!, which panics when stderr is gone.
        .log_internal_errors(false);
    match format {
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => logs.json().flatten_event(true).with_ansi(false).init(),
    }
}
