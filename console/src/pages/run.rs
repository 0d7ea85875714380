//! `GET /ui/runs/{run}`: one run. Its header (status, workflow, goal, context,
//! budgets and usage, delivery, parent), the actions the viewer's role allows, the
//! waterfall, each step's details, the child tree and the event history, paged, with
//! low-value events (usage reports, delivery attempts) collapsed unless `?all=1`.
//! While the run is open its live part refreshes itself (`?fragment=1`: the header,
//! waterfall and steps alone).
//!
//! Budget: [`api::RUN`]: `DescribeRun`, one `GetHistory` page of at most
//! [`WATERFALL_EVENTS`] for the waterfall, one page of [`EVENTS_PAGE`] for the history
//! (the same call when the history page starts at event 1), and `GetSessionTree`.

use axum::extract::{Path, Query};
use axum::http::StatusCode;
use axum::response::Response;
use maud::{Markup, html};
use railyard_proto::v1 as pb;
use serde_json::Value;

use super::actions;
use super::runs::{current_step, status_cell};
use super::waterfall;
use crate::api;
use crate::layout::{self, encode, long_text};
use crate::session::Viewer;

/// Events the waterfall is drawn from (the first ones of the run).
pub const WATERFALL_EVENTS: u32 = 1000;
/// Events on one page of the history.
pub const EVENTS_PAGE: u32 = 100;
/// Event types collapsed by default.
const LOW_VALUE: [&str; 3] = ["StepUsage", "DeliveryAttempted", "AgentStuckWarning"];

#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct Params {
    #[serde(default)]
    from: u64,
    #[serde(default)]
    all: String,
    #[serde(default)]
    fragment: String,
}

/// `GET /ui/runs/{run}`.
pub(crate) async fn page(viewer: Viewer, Path(run_id): Path<String>, Query(p): Query<Params>) -> Response {
    let api = match viewer.api(api::RUN) {
        Ok(api) => api,
        Err(e) => return layout::message_page(&viewer, StatusCode::BAD_REQUEST, "Refused", &e.to_string()),
    };
    let described = match api.describe_run(&run_id).await {
        Ok(d) => d,
        Err(e) => return layout::refused(&viewer, &api, &e),
    };
    let Some(run) = described.run.as_ref() else {
        return layout::message_page(
            &viewer,
            StatusCode::BAD_GATEWAY,
            "No run",
            "the server described no run",
        );
    };
    let first = match api.get_history(&run_id, 1, WATERFALL_EVENTS).await {
        Ok(h) => h,
        Err(e) => return layout::refused(&viewer, &api, &e),
    };
    let live = live_part(&viewer, run, &described.definition_json, &first);
    if !p.fragment.is_empty() {
        return layout::respond(&viewer, &api, StatusCode::OK, live);
    }
    let from = p.from.max(1);
    let events = if from == 1 {
        Ok(pb::GetHistoryResponse {
            events: first.events.iter().take(EVENTS_PAGE as usize).cloned().collect(),
            next_event_id: if first.events.len() > EVENTS_PAGE as usize {
                first.events[EVENTS_PAGE as usize].event_id
            } else {
                first.next_event_id
            },
            status: first.status,
        })
    } else {
        api.get_history(&run_id, from, EVENTS_PAGE).await
    };
    let tree = api.session_tree(&run_id).await;
    let base = format!("/ui/runs/{}?ns={}", encode(&run_id), encode(&viewer.ns));
    let body = html! {
        h1 { "Run " (run.run_id) }
        p { a href={ "/ui/runs/" (encode(&run.run_id)) "/transcript?ns=" (encode(&viewer.ns)) } { "What the agent did (transcript)" } }
        (live)
        @if run.status == pb::RunStatus::Running as i32 {
            (actions::run_actions(&viewer, run))
        } @else if run.delivery_state == pb::DeliveryState::Failed as i32 {
            (actions::redeliver_form(&viewer, run))
        }
        h2 { "Children" }
        @match &tree {
            Ok(t) => @match t.root.as_ref() {
                Some(root) if !root.children.is_empty() => (children(&viewer, root)),
                _ => p.muted { "No child runs." },
            },
            Err(e) => p.refusal { (e.to_string()) },
        }
        h2 #events { "Event history" }
        @match &events {
            Ok(h) => (history(&base, h, run.history_length, !p.all.is_empty())),
            Err(e) => p.refusal { (e.to_string()) },
        }
    };
    let title = format!("Run {}", run.run_id);
    layout::respond(&viewer, &api, StatusCode::OK, layout::page(&viewer, &title, body))
}

/// The header, waterfall and steps; polls itself while the run is open.
fn live_part(viewer: &Viewer, run: &pb::RunInfo, definition: &str, first: &pb::GetHistoryResponse) -> Markup {
    let open = run.status == pb::RunStatus::Running as i32;
    let url = format!(
        "/ui/runs/{}?ns={}&fragment=1",
        encode(&run.run_id),
        encode(&viewer.ns)
    );
    let now = layout::now_ms();
    let attempts = waterfall::attempts(&first.events);
    let partial = first.next_event_id != 0 && first.events.len() >= WATERFALL_EVENTS as usize;
    let inner = html! {
        (header(viewer, run, definition, now))
        h2 { "Waterfall" }
        (waterfall::render(&attempts, now, partial))
        h2 { "Steps" }
        (steps(viewer, run, &waterfall::step_facts(&first.events)))
    };
    html! {
        @if open {
            div #live hx-get=(url) hx-trigger="every 3s" hx-swap="outerHTML" { (inner) }
        } @else {
            div #live { (inner) }
        }
    }
}

fn header(viewer: &Viewer, run: &pb::RunInfo, definition: &str, now: i64) -> Markup {
    let def: Value = serde_json::from_str(definition).unwrap_or(Value::Null);
    let max_tokens = def.get("maxTokens").and_then(Value::as_u64);
    let max_cost = def.get("maxCostUsd").and_then(Value::as_f64);
    let mut context: Vec<(&String, &String)> = run.context.iter().collect();
    context.sort();
    html! {
        dl.facts {
            dt { "Status" } dd { (status_cell(run)) }
            dt { "Workflow" } dd { (run.workflow_id) " " span.muted { (run.workflow_version) } }
            dt { "Current step" } dd { (current_step(run)) }
            dt { "Goal" } dd { (long_text(&run.goal)) }
            dt { "Started (UTC)" } dd { (layout::time(run.start_time_unix_ms)) }
            @if run.close_time_unix_ms > 0 { dt { "Closed (UTC)" } dd { (layout::time(run.close_time_unix_ms)) } }
            dt { "Duration" } dd { (layout::run_duration(run, now)) }
            dt { "Tokens" } dd {
                (layout::tokens(run.usage.as_ref()))
                @if let Some(m) = max_tokens { " of " (m) }
            }
            dt { "Cost" } dd {
                (layout::cost(run.usage.as_ref()))
                @if let Some(m) = max_cost { " of $" (m) }
            }
            @if !run.failure.is_empty() { dt { "Failure" } dd { (long_text(&run.failure)) } }
            @if !run.parent_run_id.is_empty() {
                dt { "Parent" } dd {
                    a href={ "/ui/runs/" (encode(&run.parent_run_id)) "?ns=" (encode(&viewer.ns)) } { (run.parent_run_id) }
                    @if !run.parent_step_id.is_empty() { " step " (run.parent_step_id) }
                }
            }
            @if let Some(w) = &run.waiting {
                dt { "Waiting" } dd {
                    "on " (w.on) " since " (layout::time(w.since_unix_ms))
                    @if w.deadline_unix_ms > 0 { ", until " (layout::time(w.deadline_unix_ms)) }
                    @if !w.run_ids.is_empty() { " (" (w.done_run_ids.len()) " of " (w.run_ids.len()) " children closed)" }
                }
            }
            dt { "Delivery" } dd {
                (delivery_name(run.delivery_state))
                @for d in &run.deliveries {
                    br;
                    (d.target) " " (layout::link(&d.url)) " " (delivery_name(d.state)) ", " (d.attempts) " attempts"
                    @if !d.last_error.is_empty() { ": " (d.last_error) }
                }
            }
            @if !run.trace_id.is_empty() { dt { "Trace" } dd { code { (run.trace_id) } } }
        }
        @if !context.is_empty() {
            details {
                summary { "Context (" (context.len()) ")" }
                table { tbody { @for (k, v) in context { tr { th { (k) } td { (long_text(v)) } } } } }
            }
        }
    }
}

fn delivery_name(state: i32) -> &'static str {
    match pb::DeliveryState::try_from(state).unwrap_or(pb::DeliveryState::None) {
        pb::DeliveryState::None => "none",
        pb::DeliveryState::Pending => "pending",
        pb::DeliveryState::Succeeded => "succeeded",
        pb::DeliveryState::Failed => "failed",
    }
}

/// Each step: its facts, and for a step that ran, a link to its transcript (the
/// step in flight's latest checkpoint, or a finished step's last, which the server
/// keeps within its per-run bound).
fn steps(
    viewer: &Viewer,
    run: &pb::RunInfo,
    facts: &std::collections::HashMap<String, Vec<String>>,
) -> Markup {
    html! {
        @for step in &run.steps {
            details open[step.state != "COMPLETED" && step.state != "PENDING"] {
                summary {
                    strong { (step.step_id) } " " (step.title) " — " (step.state.to_lowercase())
                    @if step.attempt > 0 { ", attempt " (step.attempt) }
                }
                dl.facts {
                    dt { "Queue" } dd { (step.task_queue) }
                    @if !step.worker_identity.is_empty() { dt { "Worker" } dd { (step.worker_identity) } }
                    @if !step.model.is_empty() { dt { "Model" } dd { (step.model) } }
                    dt { "Tokens" } dd { (layout::tokens(step.usage.as_ref())) " (" (layout::cost(step.usage.as_ref())) ")" }
                    @if step.result_refusals > 0 { dt { "Refused results" } dd { (step.result_refusals) " (output contract)" } }
                    @if !step.last_failure.is_empty() { dt { "Last failure" } dd { (long_text(&step.last_failure)) } }
                }
                @if let Some(facts) = facts.get(&step.step_id) {
                    ul { @for f in facts { li { (long_text(f)) } } }
                }
                @if !step.notes.is_empty() { h3 { "Notes" } pre { (long_text(&step.notes)) } }
                @if !step.result_json.is_empty() { h3 { "Result" } pre { (long_text(&step.result_json)) } }
                @if step.attempt > 0 {
                    p {
                        a href={ "/ui/runs/" (encode(&run.run_id)) "/transcript?ns=" (encode(&viewer.ns)) "&step=" (encode(&step.step_id)) } {
                            "Transcript of step " (step.step_id)
                        }
                    }
                }
            }
        }
    }
}

fn children(viewer: &Viewer, node: &pb::SessionNode) -> Markup {
    html! {
        ul {
            @for child in &node.children {
                li {
                    @if let Some(run) = &child.run {
                        a href={ "/ui/runs/" (encode(&run.run_id)) "?ns=" (encode(&viewer.ns)) } { (run.run_id) }
                        " " (status_cell(run)) " " span.muted { (run.workflow_id) }
                    }
                    @if !child.children.is_empty() { (children(viewer, child)) }
                }
            }
        }
    }
}

fn history(base: &str, h: &pb::GetHistoryResponse, length: u64, all: bool) -> Markup {
    let hidden = if all {
        0
    } else {
        h.events
            .iter()
            .filter(|e| LOW_VALUE.contains(&e.event_type.as_str()))
            .count()
    };
    html! {
        @if hidden > 0 {
            p.muted { (hidden) " low-value events (usage reports, delivery attempts, stuck warnings) are collapsed. "
                a href={ (base) "&all=1#events" } { "Show them" } }
        }
        @for e in &h.events {
            @if all || !LOW_VALUE.contains(&e.event_type.as_str()) {
                details.event {
                    summary { "#" (e.event_id) " " (layout::time(e.time_unix_ms)) " " strong { (e.event_type) } " " span.muted { (e.identity) } }
                    pre { (long_text(&pretty(&e.attributes_json))) }
                }
            }
        }
        nav.pager aria-label="event pages" {
            a href={ (base) "#events" } { "First events" }
            @if h.next_event_id > 0 && h.next_event_id <= length {
                a href={ (base) "&from=" (h.next_event_id) @if all { "&all=1" } "#events" } { "Next events" }
            }
        }
    }
}

fn pretty(json: &str) -> String {
    serde_json::from_str::<Value>(json)
        .and_then(|v| serde_json::to_string_pretty(&v))
        .unwrap_or_else(|_| json.to_string())
}
