//! The transcript as the step's latest checkpoint holds it, rendered as a
//! conversation: the prompt, each model turn's text, each tool call with its
//! arguments and result, steer messages and the refusals fed back to the model.
//!
//! The checkpoint is the worker's record (`docs/workers.md`), read here a page at a
//! time through `GetStepCheckpoint` (at most [`crate::api::CHECKPOINT_PAGE_BYTES`]): format
//! version 2 is JSON Lines (a header, then `{"at":N,"message":...}` lines, each
//! cutting the transcript to N messages and adding one, and counters lines), so a page
//! shows its whole lines and the next page starts at the first line it did not
//! finish. A line longer than a page is shown cut, and the next page skips to its end.
//! Version 1 (one JSON document, from older workers) is shown when it fits a page.
//! Everything is escaped by `maud`; long texts and tool results are cut with their
//! size said.

use std::collections::HashMap;

use maud::{Markup, html};
use railyard_proto::v1 as pb;
use serde_json::Value;

use crate::layout::{self, long_text};

/// The most of a tool call's input or result shown.
pub const RESULT_SHOWN: usize = 4096;

/// Where the page after this one starts: its offset, and whether it begins inside a
/// line (to skip to that line's end).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Next {
    pub at: u64,
    pub skip: bool,
}

/// A rendered page of the checkpoint and where the next one starts.
pub(crate) struct Rendered {
    pub markup: Markup,
    pub next: Option<Next>,
}

/// Renders the page `resp` answered for bytes from `offset` (`skip`: it starts inside
/// a line the previous page could not finish).
pub(crate) fn render(resp: &pb::GetStepCheckpointResponse, offset: u64, skip: bool) -> Rendered {
    if resp.step_id.is_empty() || resp.total_bytes == 0 {
        return Rendered {
            markup: html! { p.muted { "No checkpoint is kept for this run: a run keeps only its step in flight's, cleared when the step completes or the run closes. The live output below has the rest." } },
            next: None,
        };
    }
    let data = resp.data.as_slice();
    let at_end = resp.next_offset == 0;
    if offset == 0 && !is_v2(data) {
        return version1(resp);
    }
    // The whole lines of this page, from `start`.
    let start = if skip {
        match data.iter().position(|b| *b == b'\n') {
            Some(i) => i + 1,
            None => {
                return Rendered {
                    markup: html! { p.muted { "… the long line goes on past byte " (offset + data.len() as u64) "." } },
                    next: Some(Next {
                        at: offset + data.len() as u64,
                        skip: true,
                    }),
                };
            }
        }
    } else {
        0
    };
    let rest = &data[start..];
    let (lines, next) = if at_end {
        (rest, None)
    } else {
        match rest.iter().rposition(|b| *b == b'\n') {
            Some(i) => (
                &rest[..=i],
                Some(Next {
                    at: offset + (start + i + 1) as u64,
                    skip: false,
                }),
            ),
            None => {
                // One line longer than a page: show its start, skip to its end.
                let start_text = String::from_utf8_lossy(&rest[..rest.len().min(RESULT_SHOWN)]);
                let (shown, _) = layout::cut(&start_text, RESULT_SHOWN);
                return Rendered {
                    markup: html! {
                        p.muted { "A line of more than " (rest.len()) " bytes starts at byte " (offset + start as u64) "; its start, unparsed:" }
                        pre { (shown) }
                    },
                    next: Some(Next {
                        at: offset + data.len() as u64,
                        skip: true,
                    }),
                };
            }
        }
    };
    let mut tools = HashMap::new();
    let mut expected = None;
    let mut line_at = offset + start as u64;
    let mut parts = Vec::new();
    for line in lines.split(|b| *b == b'\n') {
        if !line.trim_ascii().is_empty() {
            parts.push(v2_line(line, line_at, &mut tools, &mut expected));
        }
        line_at += line.len() as u64 + 1;
    }
    let markup = html! { @for p in parts { (p) } };
    Rendered { markup, next }
}

fn is_v2(data: &[u8]) -> bool {
    let first = data.split(|b| *b == b'\n').next().unwrap_or_default();
    serde_json::from_slice::<Value>(first)
        .ok()
        .and_then(|v| v.get("version").and_then(Value::as_u64))
        == Some(2)
}

/// One line of a version-2 stream.
fn v2_line(
    line: &[u8],
    at_byte: u64,
    tools: &mut HashMap<String, String>,
    expected: &mut Option<u64>,
) -> Markup {
    let Ok(v) = serde_json::from_slice::<Value>(line) else {
        return html! { p.muted { "The line at byte " (at_byte) " is not JSON (" (line.len()) " bytes)." } };
    };
    if v.get("version").is_some() {
        return html! {};
    }
    if let Some(m) = v.get("message") {
        let at = v.get("at").and_then(Value::as_u64);
        let revises = matches!((at, *expected), (Some(a), Some(e)) if a < e);
        *expected = at.map(|a| a + 1);
        return message(at, revises, m, tools);
    }
    match v.get("turns").and_then(Value::as_u64) {
        Some(turns) => html! { p.muted.counters { "— " (turns) " model turns so far" } },
        None => html! {},
    }
}

/// A version-1 checkpoint: one JSON document, shown when this page holds it whole.
fn version1(resp: &pb::GetStepCheckpointResponse) -> Rendered {
    let whole = resp.next_offset == 0;
    let parsed = whole
        .then(|| serde_json::from_slice::<Value>(&resp.data).ok())
        .flatten();
    let markup = match parsed {
        Some(doc) => {
            let mut tools = HashMap::new();
            let messages = doc
                .get("messages")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            html! {
                @for (i, m) in messages.iter().enumerate() {
                    (message(Some(i as u64), false, m, &mut tools))
                }
                @if let Some(turns) = doc.get("turns").and_then(Value::as_u64) {
                    p.muted.counters { "— " (turns) " model turns so far" }
                }
            }
        }
        None => html! {
            p.muted { "The checkpoint (" (resp.total_bytes) " bytes) is not in a format this console pages (it reads the worker's format version 2, and version 1 when it fits one page)." }
        },
    };
    Rendered { markup, next: None }
}

/// A tool call's input. An object's arguments are listed by name, a string as
/// text with its line breaks (a file written shows as the file), anything else
/// as JSON; at most [`RESULT_SHOWN`] bytes in all, the rest said by its size.
fn tool_input(input: Option<&Value>) -> Markup {
    let as_json = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_default();
    let Some(Value::Object(args)) = input else {
        let json = input.map(as_json).unwrap_or_default();
        return cut_pre(&json, RESULT_SHOWN);
    };
    let mut budget = RESULT_SHOWN;
    let mut shown = Vec::with_capacity(args.len());
    for (name, value) in args {
        let text = match value {
            Value::String(s) => s.clone(),
            other => as_json(other),
        };
        shown.push((name, cut_pre(&text, budget)));
        budget = budget.saturating_sub(text.len());
    }
    html! {
        dl.tool-input {
            @for (name, text) in shown {
                dt { (name) }
                dd { (text) }
            }
        }
    }
}

/// `text` in a `pre`, cut to `max` bytes with the rest said by its size.
fn cut_pre(text: &str, max: usize) -> Markup {
    let (shown, left) = layout::cut(text, max);
    html! {
        pre.tool-input { (shown) }
        @if left > 0 { p.muted { "… cut: " (left) " more bytes (" (text.len()) " in all)" } }
    }
}

/// One message of the transcript, each of its blocks a turn.
fn message(at: Option<u64>, revises: bool, m: &Value, tools: &mut HashMap<String, String>) -> Markup {
    let role = m.get("role").and_then(Value::as_str).unwrap_or("?");
    let blocks = m
        .get("content")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let index = html! {
        span.muted { " #" (at.map_or_else(|| "?".to_string(), |a| a.to_string())) @if revises { " (rewritten: the transcript was cut back to here)" } }
    };
    html! {
        @for b in &blocks {
            @let kind = b.get("type").and_then(Value::as_str).unwrap_or("");
            @let text = |k: &str| b.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            @match (role, kind) {
                ("user", "text") => {
                    @let t = text("text");
                    @let label = if at == Some(0) { "Prompt" } else if t.starts_with("[steer]") { "Steer" } else { "To the model" };
                    div.turn.user { strong { (label) } (index) div.text { (long_text(&t)) } }
                },
                ("assistant", "text") => div.turn.model { strong { "Model" } (index) div.text { (long_text(&text("text"))) } },
                (_, "tool_use") => {
                    @let (id, name) = (text("id"), text("name"));
                    @let _ = tools.insert(id.clone(), name.clone());
                    div.turn.tool { "Tool call " (layout::tool_name(&name)) " " span.muted { (id) } (index)
                        (tool_input(b.get("input")))
                    }
                },
                (_, "tool_result") => {
                    @let id = text("tool_use_id");
                    @let name = tools.get(&id).cloned().unwrap_or_else(|| id.clone());
                    @let content = text("content");
                    @let error = b.get("is_error").and_then(Value::as_bool).unwrap_or(false);
                    @let images = b.get("images").and_then(Value::as_array).map_or(0, Vec::len);
                    @let (shown, left) = layout::cut(&content, RESULT_SHOWN);
                    div.turn.tool {
                        @if error { "Refused or failed, fed back: " } @else { "Result of " }
                        (layout::tool_name(&name)) (index)
                        pre { (shown) }
                        @if images > 0 { p.muted { "With " (images) " image(s), passed to the model (not shown here)." } }
                        @if left > 0 { p.muted { "… cut: " (left) " more bytes (" (content.len()) " in all)" } }
                    }
                },
                _ => div.turn { span.muted { "A " (kind) " block" } (index) },
            }
        }
    }
}
