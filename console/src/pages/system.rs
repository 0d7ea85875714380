//! The rest of the system, as simple tables: workflows (loaded and rejected files),
//! task queues, and for admins schedules, triggers, namespaces and API keys (never a
//! key's secret, nor a trigger's signature secret or bearer token).
//!
//! Budgets: [`api::SYSTEM`] (one list call) for each table, [`api::QUEUES`] for the
//! queues. A page of a role that may not see it says so without calling the server
//! (and the server would refuse the call anyway).

use std::collections::BTreeSet;

use axum::extract::Query;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use railyard_proto::v1 as pb;

use crate::api::{self, Api};
use crate::layout::{self, encode};
use crate::session::Viewer;

/// A page token, for the tables that page.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct Paging {
    #[serde(default)]
    page: String,
    /// The queues page: a queue to describe besides those recent runs name.
    #[serde(default)]
    queue: String,
}

pub(crate) fn start(viewer: &Viewer, budget: api::Budget, admin_only: bool) -> Result<Api, Box<Response>> {
    if admin_only && !viewer.is_admin() {
        return Err(Box::new(layout::message_page(
            viewer,
            StatusCode::FORBIDDEN,
            "Admins only",
            "This page is for admin keys.",
        )));
    }
    viewer.api(budget).map_err(|e| {
        Box::new(layout::message_page(
            viewer,
            StatusCode::BAD_REQUEST,
            "Refused",
            &e.to_string(),
        ))
    })
}

pub(crate) fn done(viewer: &Viewer, api: &Api, title: &str, body: Markup) -> Response {
    layout::respond(viewer, api, StatusCode::OK, layout::page(viewer, title, body))
}

fn next_link(viewer: &Viewer, path: &str, token: &str) -> Markup {
    html! {
        @if !token.is_empty() {
            nav.pager { a href={ (path) "?ns=" (encode(&viewer.ns)) "&page=" (encode(token)) } { "Next page" } }
        }
    }
}

/// `GET /ui/workflows`.
pub(crate) async fn workflows(viewer: Viewer) -> Response {
    let api = match start(&viewer, api::SYSTEM, false) {
        Ok(api) => api,
        Err(r) => return *r,
    };
    let listed = match api.list_workflows().await {
        Ok(l) => l,
        Err(e) => return layout::refused(&viewer, &api, &e),
    };
    let body = html! {
        h1 { "Workflows" }
        div.scroll { table {
            thead { tr { th { "Id" } th { "Version" } th { "Name" } th { "Steps" } th.hide-narrow { "File" } } }
            tbody { @for w in &listed.workflows { tr {
                td { a href={ "/ui/runs?ns=" (encode(&viewer.ns)) "&workflow=" (encode(&w.id)) } { (w.id) } }
                td { (w.version) } td { (w.name) br; span.muted { (w.description) } }
                td { (w.step_ids.join(", ")) } td.hide-narrow { (w.source_file) }
            } } }
        } }
        @if !listed.invalid.is_empty() {
            h2 { "Rejected files" }
            table { tbody { @for i in &listed.invalid { tr { td { (i.source_file) } td.refusal { (i.error) } } } } }
        }
    };
    done(&viewer, &api, "Workflows", body)
}

/// `GET /ui/schedules` (admins).
pub(crate) async fn schedules(viewer: Viewer, Query(p): Query<Paging>) -> Response {
    let api = match start(&viewer, api::SYSTEM, true) {
        Ok(api) => api,
        Err(r) => return *r,
    };
    let listed = match api.list_schedules(p.page).await {
        Ok(l) => l,
        Err(e) => return layout::refused(&viewer, &api, &e),
    };
    let body = html! {
        h1 { "Schedules" }
        div.scroll { table {
            thead { tr { th { "Id" } th { "Workflow" } th { "Spec" } th { "State" } th { "Next fire (UTC)" } th { "Last action" } th.num { "Skipped / missed / overflow" } th { "Act" } } }
            tbody { @for s in &listed.schedules { tr {
                td { a href={ "/ui/schedules/" (encode(&s.schedule_id)) "?ns=" (encode(&viewer.ns)) } { (s.schedule_id) } } td { (s.workflow_id) } td { code { (s.spec_summary) } }
                td { @if s.paused { "paused" @if !s.note.is_empty() { ": " (s.note) } } @else { "active" } }
                td { (layout::time(s.next_fire_time_unix_ms)) }
                td { @if let Some(a) = &s.last_action {
                    a href={ "/ui/runs/" (encode(&a.run_id)) "?ns=" (encode(&viewer.ns)) } { (a.run_id) }
                    " " (layout::status_name(a.status))
                } }
                td.num { (s.skipped_overlap) " / " (s.missed_catchup_window) " / " (s.buffer_overflow) }
                td {
                    @for action in [if s.paused { "unpause" } else { "pause" }, "trigger"] {
                        form.act method="post" action={ "/ui/schedules/" (encode(&s.schedule_id)) "/" (action) "?ns=" (encode(&viewer.ns)) } {
                            (layout::csrf(&viewer))
                            button type="submit" { (schedule_verb(action)) }
                        }
                    }
                }
            } } }
        } }
        (next_link(&viewer, "/ui/schedules", &listed.next_page_token))
    };
    done(&viewer, &api, "Schedules", body)
}

fn schedule_verb(action: &str) -> &'static str {
    match action {
        "pause" => "Pause",
        "unpause" => "Unpause",
        _ => "Trigger now",
    }
}

/// A schedule action's form fields.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct ScheduleForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    confirmed: String,
}

/// `POST /ui/schedules/{schedule}/{action}` (admins): pause, unpause or trigger now,
/// after a confirmation page. Budget: [`api::ACTION`].
pub(crate) async fn schedule_action(
    viewer: Viewer,
    axum::extract::Path((schedule, action)): axum::extract::Path<(String, String)>,
    axum::Form(form): axum::Form<ScheduleForm>,
) -> Response {
    if !viewer.csrf_matches(&form.csrf) {
        return layout::csrf_refused(&viewer);
    }
    if !matches!(action.as_str(), "pause" | "unpause" | "trigger") {
        return layout::message_page(
            &viewer,
            StatusCode::NOT_FOUND,
            "No such action",
            "the console has no such action",
        );
    }
    let verb = schedule_verb(&action);
    let back = layout::nav_href("/ui/schedules", &viewer.ns);
    if form.confirmed != "1" {
        let body = html! {
            h1 { (verb) " schedule " (schedule) "?" }
            form method="post" action={ "/ui/schedules/" (encode(&schedule)) "/" (action) "?ns=" (encode(&viewer.ns)) } {
                (layout::csrf(&viewer))
                input type="hidden" name="confirmed" value="1";
                button.danger type="submit" autofocus { "Yes, " (verb.to_lowercase()) }
                " " a href=(back) { "No, back to the schedules" }
            }
        };
        return viewer.finish((StatusCode::OK, layout::page(&viewer, "Confirm", body)).into_response());
    }
    let api = match start(&viewer, api::ACTION, true) {
        Ok(api) => api,
        Err(r) => return *r,
    };
    match api
        .patch_schedule(&schedule, &action, "from the web console")
        .await
    {
        Ok(()) => {
            let said = match action.as_str() {
                "pause" => "The server paused the schedule.",
                "unpause" => "The server unpaused the schedule.",
                _ => "The server triggered the schedule.",
            };
            let body =
                html! { h1 { (verb) } p.outcome role="status" { (said) } p { a href=(back) { "Back" } } };
            layout::respond(&viewer, &api, StatusCode::OK, layout::page(&viewer, verb, body))
        }
        Err(e) => layout::refused(&viewer, &api, &e),
    }
}

/// `GET /ui/triggers` (admins).
pub(crate) async fn triggers(viewer: Viewer, Query(p): Query<Paging>) -> Response {
    let api = match start(&viewer, api::SYSTEM, true) {
        Ok(api) => api,
        Err(r) => return *r,
    };
    let listed = match api.list_triggers(p.page).await {
        Ok(l) => l,
        Err(e) => return layout::refused(&viewer, &api, &e),
    };
    let body = html! {
        h1 { "Triggers" }
        div.scroll { table {
            thead { tr { th { "Id" } th { "Hook path" } th { "Workflow" } th { "Mode" } th { "Goal template" } th { "Callback" } th { "From config" } th { "Recent deliveries (newest first)" } th { "Refused lately (newest first)" } } }
            tbody { @for t in &listed.triggers {
                @let spec = t.spec.clone().unwrap_or_default();
                tr {
                    td { (t.trigger_id) br; span.muted { (spec.description) } } td { code { (t.hook_path) } }
                    td { (spec.workflow_id) }
                    td { (pb::TriggerMode::try_from(spec.mode).map(|m| m.as_str_name()).unwrap_or("unknown")) }
                    td { code { (layout::cut(&spec.goal, 400).0) } }
                    td { @if !spec.callback_url.is_empty() { (layout::link(&spec.callback_url)) } }
                    td { @if t.from_config { "yes" } @else { "no" } }
                    td { (deliveries(&viewer, &t.recent_deliveries)) }
                    td { (refusals(&t.recent_refusals)) }
                }
            } }
        } }
        (next_link(&viewer, "/ui/triggers", &listed.next_page_token))
    };
    done(&viewer, &api, "Triggers", body)
}

/// Deliveries shown per trigger (of the 20 the server keeps).
const DELIVERIES_SHOWN: usize = 5;

/// A trigger's latest deliveries: when, the run it started (or queued), the outcome
/// and the delivery id.
fn deliveries(viewer: &Viewer, recent: &[pb::TriggerDelivery]) -> Markup {
    html! {
        @if recent.is_empty() { span.muted { "none yet" } }
        @else {
            ul.deliveries { @for d in recent.iter().rev().take(DELIVERIES_SHOWN) { li {
                (layout::time(d.received_time_unix_ms)) " "
                a href={ "/ui/runs/" (encode(&d.run_id)) "?ns=" (encode(&viewer.ns)) } { (d.run_id) }
                " " (d.outcome)
                @if !d.delivery_id.is_empty() { " " span.muted { "(" (layout::cut(&d.delivery_id, 80).0) ")" } }
            } } }
            @if recent.len() > DELIVERIES_SHOWN { span.muted { (recent.len() - DELIVERIES_SHOWN) " older kept" } }
        }
    }
}

/// A trigger's latest refused (and duplicate) deliveries, as its server remembers
/// them (in memory, since it started): when, what kind, the delivery id and the
/// server's words, escaped.
fn refusals(recent: &[pb::TriggerRefusal]) -> Markup {
    html! {
        @if recent.is_empty() { span.muted { "none" } }
        @else {
            ul.deliveries { @for r in recent.iter().rev().take(DELIVERIES_SHOWN) { li {
                (layout::time(r.received_time_unix_ms)) " " strong { (r.kind) }
                @if !r.delivery_id.is_empty() { " " span.muted { "(" (layout::cut(&r.delivery_id, 80).0) ")" } }
                ": " (layout::cut(&r.reason, 300).0)
            } } }
            @if recent.len() > DELIVERIES_SHOWN { span.muted { (recent.len() - DELIVERIES_SHOWN) " older kept" } }
        }
    }
}

/// `GET /ui/queues`: the queues the latest runs' steps name (and `?queue=`).
pub(crate) async fn queues(viewer: Viewer, Query(p): Query<Paging>) -> Response {
    let api = match start(&viewer, api::QUEUES, false) {
        Ok(api) => api,
        Err(r) => return *r,
    };
    let recent = match api
        .list_runs(pb::ListRunsRequest {
            page_size: 100,
            ..Default::default()
        })
        .await
    {
        Ok(l) => l,
        Err(e) => return layout::refused(&viewer, &api, &e),
    };
    let mut names: BTreeSet<String> = recent
        .runs
        .iter()
        .flat_map(|r| r.steps.iter().map(|s| s.task_queue.clone()))
        .filter(|q| !q.is_empty())
        .collect();
    if !p.queue.trim().is_empty() {
        names.insert(p.queue.trim().to_string());
    }
    let mut rows = Vec::new();
    for name in names.into_iter().take(api::QUEUES_SHOWN as usize) {
        let described = api.describe_queue(&name).await;
        rows.push((name, described));
    }
    let now = layout::now_ms();
    let body = html! {
        h1 { "Task queues" }
        form.filters method="get" action="/ui/queues" {
            input type="hidden" name="ns" value=(viewer.ns);
            label { "Queue" input type="text" name="queue" value=(p.queue); }
            button type="submit" { "Describe" }
        }
        div.scroll { table {
            thead { tr { th { "Queue" } th.num { "Backlog" } th.num { "Dispatched" } th { "Pollers (last poll)" } } }
            tbody { @for (name, d) in &rows { tr {
                td { (name) }
                @match d {
                    Ok(d) => {
                        td.num { (d.backlog) } td.num { (d.dispatched_total) }
                        td { @for poller in &d.pollers {
                            (poller.identity) " (" (layout::duration(now - poller.last_access_unix_ms)) " ago)" br;
                        } @if d.pollers.is_empty() { span.muted { "none in the last five minutes" } } }
                    }
                    Err(e) => td colspan="3" .refusal { (e.to_string()) },
                }
            } } }
        } }
    };
    done(&viewer, &api, "Task queues", body)
}

/// `GET /ui/namespaces` (admins).
pub(crate) async fn namespaces(viewer: Viewer) -> Response {
    let api = match start(&viewer, api::SYSTEM, true) {
        Ok(api) => api,
        Err(r) => return *r,
    };
    let listed = match api.list_namespaces().await {
        Ok(l) => l,
        Err(e) => return layout::refused(&viewer, &api, &e),
    };
    let body = html! {
        h1 { "Namespaces" }
        div.scroll { table {
            thead { tr { th { "Name" } th { "Description" } th.num { "Retention" } th { "Limits (open runs, starts/s, pending signals)" } th { "Subscriptions" } } }
            tbody { @for n in &listed { tr {
                td { a href={ "/ui/runs?ns=" (encode(&n.name)) } { (n.name) } }
                td { (n.description) }
                td.num { @if n.retention_seconds == 0 { "for good" } @else { (layout::duration(n.retention_seconds.saturating_mul(1000))) } }
                td { @if let Some(l) = &n.limits { (l.max_open_runs) ", " (l.max_starts_per_second) ", " (l.max_pending_signals) } }
                td { @for s in &n.subscriptions { (s.id) " " (layout::link(&s.url)) br; } }
            } } }
        } }
    };
    done(&viewer, &api, "Namespaces", body)
}

/// `GET /ui/keys` (admins): names, roles, expiry; never a secret.
pub(crate) async fn keys(viewer: Viewer, Query(p): Query<Paging>) -> Response {
    let api = match start(&viewer, api::SYSTEM, true) {
        Ok(api) => api,
        Err(r) => return *r,
    };
    let listed = match api.list_keys(p.page).await {
        Ok(l) => l,
        Err(e) => return layout::refused(&viewer, &api, &e),
    };
    let body = html! {
        h1 { "API keys" }
        div.scroll { table {
            thead { tr { th { "Key id" } th { "Namespace" } th { "Role" } th { "Queues" } th { "Created (UTC)" } th { "Expires (UTC)" } th { "Description" } } }
            tbody { @for k in &listed.keys { tr {
                td { code { (k.key_id) } } td { (k.namespace) }
                td { (pb::ApiKeyRole::try_from(k.role).map(|r| r.as_str_name()).unwrap_or("unknown").trim_start_matches("API_KEY_ROLE_").to_lowercase()) }
                td { (k.task_queues.join(", ")) }
                td { (layout::time(k.create_time_unix_ms)) " by " (k.created_by) }
                td { @if k.expire_time_unix_ms == 0 { "never" } @else { (layout::time(k.expire_time_unix_ms)) } }
                td { (k.description) }
            } } }
        } }
        (next_link(&viewer, "/ui/keys", &listed.next_page_token))
    };
    done(&viewer, &api, "API keys", body)
}
