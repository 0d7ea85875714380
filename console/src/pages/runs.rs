//! `GET /ui/runs`: the runs list, its filters in the URL (`top=1`: top-level runs
//! only, each parent's children a link away), paged with the server's page token,
//! and the start form. The first page refreshes itself every few seconds
//! (htmx polls `?fragment=1`, which answers the table alone). Budget: [`api::RUNS`]
//! (one `ListRuns` page; the start form's workflows come from [`api::START_FORM`]
//! only when asked for with `?start=1`).

use axum::extract::Query;
use axum::http::StatusCode;
use axum::response::Response;
use maud::{Markup, html};
use railyard_proto::v1 as pb;

use crate::api;
use crate::layout::{self, encode, nav_href};
use crate::session::Viewer;

/// Runs on one page.
pub const PAGE_SIZE: u32 = 50;
/// How often the first page refreshes itself.
const REFRESH: &str = "every 3s";

/// The filters, as in the URL.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct Filters {
    #[serde(default)]
    status: String,
    #[serde(default)]
    workflow: String,
    #[serde(default)]
    parent: String,
    /// `1`: top-level runs only (no parent), each with a link to its children.
    #[serde(default)]
    top: String,
    /// A list query (`docs/search-and-queries.md`), ANDed with the other filters.
    #[serde(default, rename = "q")]
    query: String,
    /// Words the goal must hold: the list query's `Goal` field, ANDed with the rest.
    #[serde(default)]
    goal: String,
    /// `1`: only runs whose agents reported an issue.
    #[serde(default)]
    issues: String,
    /// `YYYY-MM-DDTHH:MM` (UTC), as a `datetime-local` input sends it.
    #[serde(default)]
    after: String,
    #[serde(default)]
    before: String,
    #[serde(default)]
    page: String,
    #[serde(default)]
    fragment: String,
    #[serde(default)]
    start: String,
}

impl Filters {
    /// The query string of these filters (without the page token).
    fn query(&self, ns: &str) -> String {
        let mut q = format!("ns={}", encode(ns));
        for (k, v) in [
            ("status", &self.status),
            ("workflow", &self.workflow),
            ("parent", &self.parent),
            ("top", &self.top),
            ("q", &self.query),
            ("goal", &self.goal),
            ("issues", &self.issues),
            ("after", &self.after),
            ("before", &self.before),
        ] {
            if !v.is_empty() {
                q.push_str(&format!("&{k}={}", encode(v)));
            }
        }
        q
    }

    fn request(&self) -> Result<pb::ListRunsRequest, String> {
        let status = match self.status.as_str() {
            "" => pb::RunStatus::Unspecified,
            s => layout::status_from_name(s).ok_or_else(|| {
                format!(
                    "status {:?} is not one of {}",
                    cut_echo(s),
                    layout::STATUSES.join(", ")
                )
            })?,
        };
        Ok(pb::ListRunsRequest {
            namespace: String::new(),
            status: status as i32,
            workflow_id: self.workflow.trim().into(),
            parent_run_id: self.parent.trim().into(),
            started_after_unix_ms: parse_time("after", &self.after)?,
            started_before_unix_ms: parse_time("before", &self.before)?,
            page_size: PAGE_SIZE,
            page_token: self.page.clone(),
            query: with_goal(&self.list_query(), &self.goal)?,
            has_issues: self.issues == "1",
        })
    }
}

impl Filters {
    /// The list query: the one typed, and with `top=1` (unless a parent is named)
    /// `ParentRunId IS NULL` ANDed to it.
    fn list_query(&self) -> String {
        let typed = self.query.trim();
        if self.top != "1" || !self.parent.trim().is_empty() {
            return typed.into();
        }
        let (filter, order) = split_order(typed);
        match filter.trim() {
            "" => format!("{TOP_LEVEL} {order}").trim_end().to_string(),
            q => format!("({q}) AND {TOP_LEVEL} {order}").trim_end().to_string(),
        }
    }
}

/// The clause of `top=1`.
const TOP_LEVEL: &str = "ParentRunId IS NULL";

/// Longest `goal` filter, in bytes.
const MAX_GOAL_FILTER: usize = 512;

/// The list query `query` with `Goal = "<the words of goal>"` ANDed in front (its
/// `ORDER BY`, if any, kept at the end). The goal's words are its runs of letters and
/// digits, as the server splits a goal, so the literal needs no escaping.
fn with_goal(query: &str, goal: &str) -> Result<String, String> {
    if goal.trim().is_empty() {
        return Ok(query.to_string());
    }
    if goal.len() > MAX_GOAL_FILTER {
        return Err(format!(
            "goal is {} bytes, longer than the limit of {MAX_GOAL_FILTER}",
            goal.len()
        ));
    }
    let words: Vec<&str> = goal
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    if words.is_empty() {
        return Err(format!(
            "goal {:?} holds no word (letters or digits) to look for",
            cut_echo(goal)
        ));
    }
    let goal = format!("Goal = \"{}\"", words.join(" "));
    if query.is_empty() {
        return Ok(goal);
    }
    let (filter, order) = split_order(query);
    Ok(if filter.trim().is_empty() {
        format!("{goal} {order}").trim_end().to_string()
    } else {
        format!("{goal} AND ({filter}) {order}").trim_end().to_string()
    })
}

/// A query's filter and its trailing `ORDER BY ...` (empty if none): the last
/// `ORDER BY` outside quotes, which the language allows only at the end.
fn split_order(query: &str) -> (&str, &str) {
    let lower = query.to_ascii_lowercase();
    let mut from = 0;
    let mut found = None;
    while let Some(at) = lower[from..].find("order") {
        let at = from + at;
        let before_ok = lower[..at].ends_with(|c: char| c.is_whitespace() || c == ')') || at == 0;
        let rest = &lower[at + 5..];
        let by = rest.trim_start();
        let quotes_before = query[..at].matches(['"', '\'']).count();
        if before_ok
            && rest.starts_with(char::is_whitespace)
            && by.starts_with("by")
            && by[2..].starts_with(char::is_whitespace)
            && quotes_before.is_multiple_of(2)
        {
            found = Some(at);
        }
        from = at + 5;
    }
    match found {
        Some(at) => (&query[..at], &query[at..]),
        None => (query, ""),
    }
}

fn cut_echo(s: &str) -> &str {
    layout::cut(s, 64).0
}

/// A `datetime-local` value (UTC) as unix ms; empty is 0 (unbounded).
fn parse_time(field: &str, value: &str) -> Result<i64, String> {
    let value = value.trim();
    if value.is_empty() {
        return Ok(0);
    }
    ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M"]
        .iter()
        .find_map(|f| chrono::NaiveDateTime::parse_from_str(value, f).ok())
        .or_else(|| {
            chrono::NaiveDate::parse_from_str(value, "%Y-%m-%d")
                .ok()
                .and_then(|d| d.and_hms_opt(0, 0, 0))
        })
        .map(|t| t.and_utc().timestamp_millis())
        .ok_or_else(|| {
            format!(
                "{field} {:?} is not a time: use YYYY-MM-DDTHH:MM (UTC)",
                cut_echo(value)
            )
        })
}

/// `GET /ui/runs`.
pub(crate) async fn page(viewer: Viewer, Query(filters): Query<Filters>) -> Response {
    let budget = if filters.start.is_empty() {
        api::RUNS
    } else {
        api::Budget {
            page: "runs with the start form",
            calls: api::RUNS.calls + api::START_FORM.calls,
        }
    };
    let api = match viewer.api(budget) {
        Ok(api) => api,
        Err(e) => return layout::message_page(&viewer, StatusCode::BAD_REQUEST, "Refused", &e.to_string()),
    };
    let request = match filters.request() {
        Ok(r) => r,
        Err(e) => return layout::message_page(&viewer, StatusCode::BAD_REQUEST, "Bad filter", &e),
    };
    let listed = match api.list_runs(request).await {
        Ok(listed) => listed,
        Err(e) => return layout::refused(&viewer, &api, &e),
    };
    let table = table(&viewer, &filters, &listed);
    if !filters.fragment.is_empty() {
        return layout::respond(&viewer, &api, StatusCode::OK, table);
    }
    let start = if filters.start.is_empty() {
        None
    } else {
        Some(api.list_workflows().await)
    };
    let body = html! {
        h1 { "Runs" }
        (filter_form(&viewer, &filters))
        @match &start {
            None => p { a href={ "/ui/runs?" (filters.query(&viewer.ns)) "&start=1" } { "Start a run" } },
            Some(Ok(workflows)) => (start_form(&viewer, workflows)),
            Some(Err(e)) => p.refusal role="alert" { (e.to_string()) },
        }
        (table)
    };
    layout::respond(&viewer, &api, StatusCode::OK, layout::page(&viewer, "Runs", body))
}

fn filter_form(viewer: &Viewer, f: &Filters) -> Markup {
    html! {
        form.filters method="get" action="/ui/runs" {
            input type="hidden" name="ns" value=(viewer.ns);
            label { "Status"
                select name="status" {
                    option value="" selected[f.status.is_empty()] { "any" }
                    @for s in layout::STATUSES {
                        option value=(s) selected[f.status == s] { (s) }
                    }
                }
            }
            label { "Workflow" input type="text" name="workflow" value=(f.workflow) size="14"; }
            label { "Parent run" input type="text" name="parent" value=(f.parent) size="14"; }
            label { "Top-level only" input type="checkbox" name="top" value="1" checked[f.top == "1"]; }
            label { "With issues" input type="checkbox" name="issues" value="1" checked[f.issues == "1"]; }
            label { "Goal has words" input type="text" name="goal" value=(f.goal) size="18" placeholder="flaky test"; }
            label { "Query" input type="text" name="q" value=(f.query) size="32" placeholder="Status = \"FAILED\" AND StartTime > \"2026-11-20T00:00:00Z\""; }
            label { "Started after (UTC)" input type="datetime-local" name="after" value=(f.after); }
            label { "Started before (UTC)" input type="datetime-local" name="before" value=(f.before); }
            button type="submit" { "Filter" }
            a href=(nav_href("/ui/runs", &viewer.ns)) { "Clear" }
        }
    }
}

fn start_form(viewer: &Viewer, workflows: &pb::ListWorkflowsResponse) -> Markup {
    html! {
        section aria-labelledby="start-h" {
            h2 #start-h { "Start a run" }
            @if workflows.workflows.is_empty() {
                p.muted { "No workflow is loaded in this namespace." }
            } @else {
                form method="post" action={ "/ui/runs/start?ns=" (encode(&viewer.ns)) } {
                    (layout::csrf(viewer))
                    label for="workflow" { "Workflow" }
                    select #workflow name="workflow" {
                        @for w in &workflows.workflows {
                            option value=(w.id) { (w.id) " " (w.version) }
                        }
                    }
                    label for="goal" { "Goal" }
                    textarea #goal name="goal" required {}
                    label for="context" { "Context (one key=value a line)" }
                    textarea #context name="context" {}
                    p { button type="submit" { "Start" } }
                }
            }
        }
    }
}

/// The table (and pager); on the first page it polls itself.
fn table(viewer: &Viewer, f: &Filters, listed: &pb::ListRunsResponse) -> Markup {
    let query = f.query(&viewer.ns);
    let now = layout::now_ms();
    html! {
        @if f.page.is_empty() {
            div #runs hx-get={ "/ui/runs?" (query) "&fragment=1" } hx-trigger=(REFRESH) hx-swap="outerHTML" {
                (rows(viewer, listed, now))
                (pager(&query, listed))
            }
        } @else {
            div #runs {
                (rows(viewer, listed, now))
                (pager(&query, listed))
            }
        }
    }
}

fn pager(query: &str, listed: &pb::ListRunsResponse) -> Markup {
    html! {
        nav.pager aria-label="pages" {
            a href={ "/ui/runs?" (query) } { "First page" }
            @if !listed.next_page_token.is_empty() {
                a href={ "/ui/runs?" (query) "&page=" (encode(&listed.next_page_token)) } { "Next page" }
            }
        }
    }
}

fn rows(viewer: &Viewer, listed: &pb::ListRunsResponse, now: i64) -> Markup {
    html! {
        @if listed.runs.is_empty() && !listed.next_page_token.is_empty() {
            p.muted { "No runs match among those read so far (the server reads at most 10,000 a page); older runs follow: next page." }
        } @else if listed.runs.is_empty() {
            p.muted { "No runs match." }
        } @else {
            div.scroll {
                table {
                    thead { tr {
                        th { "Run" } th { "Status" } th { "Workflow" } th { "Current step" }
                        th.hide-narrow { "Goal" } th { "Started (UTC)" } th.num { "Duration" }
                        th.num { "Tokens" } th.num { "Cost" }
                    } }
                    tbody {
                        @for run in &listed.runs {
                            tr {
                                td {
                                    a href={ "/ui/runs/" (encode(&run.run_id)) "?ns=" (encode(&viewer.ns)) } { (run.run_id) }
                                    (children_link(viewer, run))
                                }
                                td { (status_cell(run)) }
                                td { (run.workflow_id) " " span.muted { (run.workflow_version) } }
                                td { (current_step(run)) }
                                td.hide-narrow { (layout::cut(&run.goal, 160).0) }
                                td { (layout::time(run.start_time_unix_ms)) }
                                td.num { (layout::run_duration(run, now)) }
                                td.num { (layout::tokens(run.usage.as_ref())) }
                                td.num { (layout::cost(run.usage.as_ref())) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A parent's number of children, linked to the list filtered to them.
fn children_link(viewer: &Viewer, run: &pb::RunInfo) -> Markup {
    let n = run.children_started;
    html! {
        @if n > 0 {
            " " a.children href={ "/ui/runs?ns=" (encode(&viewer.ns)) "&parent=" (encode(&run.run_id)) } {
                (n) @if n == 1 { " child" } @else { " children" }
            }
        }
    }
}

/// The status, with "paused" beside a paused run.
pub(crate) fn status_cell(run: &pb::RunInfo) -> Markup {
    let name = layout::status_name(run.status);
    html! {
        span class={ "status status-" (name) } { (name) }
        @if run.paused { " " span.muted { "(paused)" } }
    }
}

/// The step in flight and what it waits on.
pub(crate) fn current_step(run: &pb::RunInfo) -> Markup {
    let step = run.steps.get(run.current_step as usize);
    html! {
        @if let Some(step) = step {
            (step.step_id) " " span.muted { (step.state.to_lowercase()) }
            @if let Some(w) = &run.waiting {
                " " span.muted { "waits on " (w.on) }
            }
        } @else {
            span.muted { "—" }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_goal_filter_is_anded_in_front_of_the_query_and_its_order_kept_last() {
        assert_eq!(with_goal("", "  ").unwrap(), "");
        assert_eq!(
            with_goal("", "Flaky \"test\"!").unwrap(),
            r#"Goal = "Flaky test""#
        );
        assert_eq!(
            with_goal("Status = 'FAILED' OR Tokens > 5", "pr").unwrap(),
            r#"Goal = "pr" AND (Status = 'FAILED' OR Tokens > 5)"#
        );
        assert_eq!(
            with_goal("WorkflowId = 'order by' ORDER BY StartTime DESC", "pr").unwrap(),
            r#"Goal = "pr" AND (WorkflowId = 'order by' ) ORDER BY StartTime DESC"#
        );
        assert_eq!(
            with_goal("order by StartTime", "pr").unwrap(),
            r#"Goal = "pr" order by StartTime"#
        );
        assert!(with_goal("", "?!").unwrap_err().contains("holds no word"));
        assert!(
            with_goal("", &"a".repeat(600))
                .unwrap_err()
                .contains("limit of 512")
        );
    }
}
