//! `run watch --stream`: a run's live output (`History.WatchOutput`) instead of its
//! events. Text is printed as it arrives, tool calls and results marked on lines of
//! their own; `--output json` prints one chunk object per line (the fields of the
//! HTTP stream's `data`), then `{"run": {...}}`. A broken stream is reopened after the
//! last offset seen, so nothing is printed twice or missed.

use std::io::Write;
use std::process::ExitCode;

use anyhow::anyhow;
use railyard_proto::v1::{OutputChunk, OutputKind, RunStatus, watch_output_response::Message};
use railyard_sdk::Client;
use serde_json::json;

use super::view::{REOPEN, closing_line, exit_for, is_transient};
use crate::client::global::{GlobalOpts, stream_error};
use crate::client::output;
use crate::client::view::run_json;

/// Longest tool result excerpt printed in human mode.
const RESULT_EXCERPT: usize = 200;

/// A chunk's JSON view (the same fields as the SSE route's `data`).
pub(crate) fn chunk_json(c: &OutputChunk) -> serde_json::Value {
    let kind = OutputKind::try_from(c.kind).unwrap_or(OutputKind::Unspecified);
    let mut v = json!({
        "offset": c.offset,
        "kind": kind_name(kind),
        "step_id": c.step_id,
        "attempt": c.attempt,
        "time_unix_ms": c.time_unix_ms,
    });
    let fields = match kind {
        OutputKind::Text
        | OutputKind::Thinking
        | OutputKind::ToolInput
        | OutputKind::Error
        | OutputKind::TurnEnd => {
            json!({ "text": c.text })
        }
        OutputKind::ToolCallStart => json!({ "name": c.name, "call_id": c.call_id }),
        OutputKind::ToolResult => json!({ "name": c.name, "text": c.text, "is_error": c.is_error }),
        OutputKind::Usage => json!({ "input_tokens": c.input_tokens, "output_tokens": c.output_tokens }),
        OutputKind::Dropped => {
            json!({ "dropped_chunks": c.dropped_chunks, "dropped_bytes": c.dropped_bytes })
        }
        OutputKind::SegmentStart | OutputKind::Unspecified => json!({}),
    };
    if let (Some(v), serde_json::Value::Object(f)) = (v.as_object_mut(), fields) {
        v.extend(f);
    }
    v
}

fn kind_name(k: OutputKind) -> &'static str {
    match k {
        OutputKind::Text => "text",
        OutputKind::Thinking => "thinking",
        OutputKind::ToolCallStart => "tool_call_start",
        OutputKind::ToolInput => "tool_input",
        OutputKind::ToolResult => "tool_result",
        OutputKind::Usage => "usage",
        OutputKind::TurnEnd => "turn_end",
        OutputKind::Error => "error",
        OutputKind::SegmentStart => "segment_start",
        OutputKind::Dropped => "dropped",
        OutputKind::Unspecified => "unknown",
    }
}

/// Model text as printed: newlines and tabs kept, every other control character
/// (terminal escapes included) written as an escape.
fn printable(text: &str) -> String {
    text.split('\n')
        .map(|line| {
            line.split('\t')
                .map(|p| output::escape(p).into_owned())
                .collect::<Vec<_>>()
                .join("\t")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The human printer: keeps what it printed last so that a tool call's input closes
/// its line, and text after a marker starts on a fresh one.
#[derive(Default)]
struct Human {
    /// The last line printed is unfinished.
    open: bool,
    /// In a tool call's input.
    in_tool: bool,
    /// In the model's thinking.
    thinking: bool,
}

impl Human {
    fn print(&mut self, c: &OutputChunk) -> std::io::Result<()> {
        let mut out = std::io::stdout().lock();
        let kind = OutputKind::try_from(c.kind).unwrap_or(OutputKind::Unspecified);
        if self.in_tool && kind != OutputKind::ToolInput {
            writeln!(out, ")")?;
            self.in_tool = false;
            self.open = false;
        }
        if self.thinking && kind != OutputKind::Thinking {
            writeln!(out, "]")?;
            self.thinking = false;
            self.open = false;
        }
        let fresh = |out: &mut std::io::StdoutLock<'_>, open: &mut bool| -> std::io::Result<()> {
            if *open {
                writeln!(out)?;
                *open = false;
            }
            Ok(())
        };
        match kind {
            OutputKind::SegmentStart => {
                fresh(&mut out, &mut self.open)?;
                writeln!(
                    out,
                    "── step {} · attempt {} ──",
                    output::escape(&c.step_id),
                    c.attempt
                )?;
            }
            OutputKind::Text => {
                write!(out, "{}", printable(&c.text))?;
                self.open = !c.text.ends_with('\n');
            }
            OutputKind::Thinking => {
                if !self.thinking {
                    fresh(&mut out, &mut self.open)?;
                    write!(out, "[thinking: ")?;
                    self.thinking = true;
                }
                write!(out, "{}", printable(&c.text))?;
                self.open = true;
            }
            OutputKind::ToolCallStart => {
                fresh(&mut out, &mut self.open)?;
                write!(out, "→ {}(", output::escape(&c.name))?;
                self.in_tool = true;
                self.open = true;
            }
            OutputKind::ToolInput => {
                write!(out, "{}", output::escape(&c.text))?;
            }
            OutputKind::ToolResult => {
                fresh(&mut out, &mut self.open)?;
                let mark = if c.is_error { " (error)" } else { "" };
                writeln!(
                    out,
                    "← {}{mark}: {}",
                    output::escape(&c.name),
                    output::escape(&output::truncate(&c.text, RESULT_EXCERPT))
                )?;
            }
            OutputKind::TurnEnd => fresh(&mut out, &mut self.open)?,
            OutputKind::Error => {
                fresh(&mut out, &mut self.open)?;
                writeln!(out, "! model call failed: {}", output::escape(&c.text))?;
            }
            OutputKind::Dropped => {
                fresh(&mut out, &mut self.open)?;
                writeln!(
                    out,
                    "[{} chunks ({} bytes) of this attempt dropped past the output cap]",
                    c.dropped_chunks, c.dropped_bytes
                )?;
            }
            OutputKind::Usage | OutputKind::Unspecified => {}
        }
        out.flush()
    }

    fn finish(&mut self) -> std::io::Result<()> {
        let mut out = std::io::stdout().lock();
        if self.in_tool {
            write!(out, ")")?;
        }
        if self.thinking {
            write!(out, "]")?;
        }
        if self.open || self.in_tool || self.thinking {
            writeln!(out)?;
        }
        *self = Self::default();
        out.flush()
    }
}

/// `run watch RUN --stream`: prints the run's output from `from_offset` until the run
/// closes, then (human mode) its closing line; exits like `run watch`.
pub(crate) async fn watch_output(
    global: &GlobalOpts,
    client: &Client,
    run_id: &str,
    from_offset: u64,
) -> anyhow::Result<ExitCode> {
    let json = global.output.is_json();
    let ns = &global.namespace;
    let mut next = from_offset.max(1);
    let mut human = Human::default();
    let mut pauses = REOPEN.delays();
    loop {
        let before = next;
        let ended = match client.watch_output(ns, run_id, next).await {
            Ok(mut stream) => loop {
                match stream.message().await {
                    Ok(Some(m)) => match m.message {
                        Some(Message::Chunk(c)) => {
                            if c.offset < next {
                                continue;
                            }
                            next = c.offset + 1;
                            if json {
                                output::json_line(&chunk_json(&c))?;
                            } else {
                                human.print(&c)?;
                            }
                        }
                        Some(Message::Lagged(l)) => {
                            tracing::info!(
                                next_offset = l.next_offset,
                                "fell behind the live output; catching up from storage"
                            );
                            if json {
                                output::json_line(&json!({ "lagged": { "next_offset": l.next_offset } }))?;
                            }
                        }
                        None => {}
                    },
                    Ok(None) => break Ok(()),
                    Err(status) => break Err(stream_error(client.url(), status)),
                }
            },
            Err(e) => Err(e),
        };
        if next > before {
            pauses = REOPEN.delays();
        }
        match ended {
            Ok(()) => {}
            Err(e) if is_transient(&e) => match pauses.next() {
                Some(pause) => {
                    tracing::warn!(error = %e, retry_in = ?pause, "output stream broke; reopening after offset {}", next - 1);
                    tokio::time::sleep(pause).await;
                    continue;
                }
                None => return Err(e.into()),
            },
            Err(e) => return Err(e.into()),
        }
        let run = client
            .describe_run(ns, run_id)
            .await?
            .run
            .ok_or_else(|| anyhow!("the server sent no run for {run_id}"))?;
        if !RunStatus::try_from(run.status).is_ok_and(RunStatus::is_open) {
            if json {
                output::json_line(&json!({ "run": run_json(&run) }))?;
            } else {
                human.finish()?;
                output::line(closing_line(&run))?;
            }
            return Ok(exit_for(&run));
        }
        let Some(pause) = pauses.next() else {
            return Err(anyhow!(
                "the output stream of run {run_id} keeps ending while the run is open"
            ));
        };
        tokio::time::sleep(pause).await;
    }
}
