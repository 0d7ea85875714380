//! `GET /ui/approvals`: every step awaiting approval in the namespace, oldest first,
//! with its proposal and the approve and reject forms.
//!
//! Budget: [`api::APPROVALS`]: up to [`api::APPROVAL_SCAN_PAGES`] pages of open runs
//! (`ListRuns`, status running, [`SCAN_PAGE`] a page), then a `DescribeRun` of each of
//! the [`api::APPROVALS_SHOWN`] that waited longest, for its proposal (list summaries
//! leave proposals out). Past the scan, the page says it looked no further.

use axum::http::StatusCode;
use axum::response::Response;
use maud::html;
use railyard_proto::v1 as pb;

use super::actions::{approval_forms, proposal};
use crate::api;
use crate::layout::{self, encode};
use crate::session::Viewer;

/// Open runs on one scanned page.
pub const SCAN_PAGE: u32 = 200;

/// `GET /ui/approvals`.
pub(crate) async fn page(viewer: Viewer) -> Response {
    let api = match viewer.api(api::APPROVALS) {
        Ok(api) => api,
        Err(e) => return layout::message_page(&viewer, StatusCode::BAD_REQUEST, "Refused", &e.to_string()),
    };
    let mut waiting: Vec<pb::RunInfo> = Vec::new();
    let mut token = String::new();
    let mut scanned_all = false;
    for _ in 0..api::APPROVAL_SCAN_PAGES {
        let listed = match api
            .list_runs(pb::ListRunsRequest {
                status: pb::RunStatus::Running as i32,
                page_size: SCAN_PAGE,
                page_token: token.clone(),
                ..Default::default()
            })
            .await
        {
            Ok(l) => l,
            Err(e) => return layout::refused(&viewer, &api, &e),
        };
        waiting.extend(
            listed
                .runs
                .into_iter()
                .filter(|r| r.waiting.as_ref().is_some_and(|w| w.on == "approval")),
        );
        if listed.next_page_token.is_empty() {
            scanned_all = true;
            break;
        }
        token = listed.next_page_token;
    }
    waiting.sort_by_key(|r| r.waiting.as_ref().map_or(0, |w| w.since_unix_ms));
    let total = waiting.len();
    let mut shown = Vec::new();
    for run in waiting.into_iter().take(api::APPROVALS_SHOWN as usize) {
        match api.describe_run(&run.run_id).await {
            Ok(d) => shown.extend(d.run),
            // Closed or purged since the list: nothing to approve.
            Err(e) if e.code() == Some(tonic::Code::NotFound) => {}
            Err(e) => return layout::refused(&viewer, &api, &e),
        }
    }
    let body = html! {
        h1 { "Approvals" }
        @if !scanned_all {
            p.muted { "Only the first " (api::APPROVAL_SCAN_PAGES * SCAN_PAGE) " open runs were looked at." }
        }
        @if total > shown.len() {
            p.muted { "Showing the " (shown.len()) " that waited longest of " (total) "." }
        }
        @if shown.is_empty() {
            p.muted { "No step awaits approval." }
        }
        @for run in &shown {
            @let step = run.steps.get(run.current_step as usize).map(|s| s.step_id.as_str()).unwrap_or_default();
            section.approval {
                h2 {
                    a href={ "/ui/runs/" (encode(&run.run_id)) "?ns=" (encode(&viewer.ns)) } { (run.run_id) }
                    " step " (step) " " span.muted { (run.workflow_id) }
                }
                p { (layout::cut(&run.goal, 400).0) }
                @if let Some(w) = &run.waiting {
                    @if w.on == "approval" {
                        (proposal(w))
                        (approval_forms(&viewer, &run.run_id, step))
                    }
                }
            }
        }
    };
    layout::respond(
        &viewer,
        &api,
        StatusCode::OK,
        layout::page(&viewer, "Approvals", body),
    )
}
