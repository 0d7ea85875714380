//! The actions: cancel, terminate, pause, unpause, steer (a `steer` signal), approve,
//! reject with feedback, redeliver a failed delivery, and start a run.
//!
//! Each is a plain HTML form (it works without script), `POST`ed with the session's
//! CSRF token. The first `POST` of a run action answers a confirmation page that says
//! what will happen; its button posts again with `confirmed=1`, which makes the one
//! gRPC call (budget [`api::ACTION`]) with the viewer's key. The outcome page says
//! what the server did, or shows its refusal word for word with the matching status.

use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use railyard_proto::v1 as pb;

use crate::api;
use crate::layout::{self, encode};
use crate::session::Viewer;

/// A run action's form fields.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct ActForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    confirmed: String,
    /// The reason (cancel, terminate, pause), the steer message, the approval's note or
    /// the rejection's feedback.
    #[serde(default)]
    text: String,
    /// The step an approval or rejection is for (empty: whichever awaits it).
    #[serde(default)]
    step: String,
}

/// What each action is called and says before it is done.
fn describe(action: &str) -> Option<(&'static str, &'static str)> {
    Some(match action {
        "cancel" => (
            "Cancel",
            "The run is asked to cancel: its step in flight is told, and the run closes as canceled.",
        ),
        "terminate" => (
            "Terminate",
            "The run closes as terminated at once; a step in flight is abandoned.",
        ),
        "pause" => (
            "Pause",
            "No step is dispatched until it is unpaused; a step in flight suspends at its next turn.",
        ),
        "unpause" => ("Unpause", "The run goes on from where it paused."),
        "steer" => (
            "Steer",
            "The message is sent as a steer signal: the agent reads it as a user message at its next turn.",
        ),
        "approve" => (
            "Approve",
            "The step completes with the result it proposed, and the run moves on.",
        ),
        "reject" => (
            "Reject",
            "The step re-opens on its transcript; its agent reads the feedback and revises its result.",
        ),
        "redeliver" => (
            "Redeliver",
            "Every failed delivery of the run's result is tried again.",
        ),
        _ => return None,
    })
}

/// `POST /ui/runs/{run}/act/{action}`.
pub(crate) async fn act(
    viewer: Viewer,
    Path((run_id, action)): Path<(String, String)>,
    axum::Form(form): axum::Form<ActForm>,
) -> Response {
    if !viewer.csrf_matches(&form.csrf) {
        return layout::csrf_refused(&viewer);
    }
    let Some((verb, explains)) = describe(&action) else {
        return layout::message_page(
            &viewer,
            StatusCode::NOT_FOUND,
            "No such action",
            "the console has no such action",
        );
    };
    if matches!(action.as_str(), "steer" | "reject") && form.text.trim().is_empty() {
        let field = if action == "steer" {
            "the message"
        } else {
            "the feedback"
        };
        return layout::message_page(
            &viewer,
            StatusCode::BAD_REQUEST,
            "Refused",
            &format!("{verb}: {field} is required"),
        );
    }
    let run_url = format!("/ui/runs/{}?ns={}", encode(&run_id), encode(&viewer.ns));
    if form.confirmed != "1" {
        let body = html! {
            h1 { (verb) " run " (run_id) "?" }
            p { (explains) }
            @if !form.text.is_empty() { p { "With: " q { (form.text) } } }
            form method="post" action={ "/ui/runs/" (encode(&run_id)) "/act/" (action) "?ns=" (encode(&viewer.ns)) } {
                (layout::csrf(&viewer))
                input type="hidden" name="confirmed" value="1";
                input type="hidden" name="text" value=(form.text);
                input type="hidden" name="step" value=(form.step);
                button.danger type="submit" autofocus { "Yes, " (verb.to_lowercase()) }
                " "
                a href=(run_url) { "No, back to the run" }
            }
        };
        return viewer.finish((StatusCode::OK, layout::page(&viewer, "Confirm", body)).into_response());
    }
    let api = match viewer.api(api::ACTION) {
        Ok(api) => api,
        Err(e) => return layout::message_page(&viewer, StatusCode::BAD_REQUEST, "Refused", &e.to_string()),
    };
    let text = form.text.trim();
    let outcome = match action.as_str() {
        "cancel" => api
            .cancel(&run_id, text)
            .await
            .map(|()| "The server accepted the cancel request.".to_string()),
        "terminate" => api
            .terminate(&run_id, text)
            .await
            .map(|()| "The server terminated the run.".to_string()),
        "pause" => api.pause(&run_id, text).await.map(|changed| {
            if changed {
                "The server paused the run."
            } else {
                "The run was paused already."
            }
            .to_string()
        }),
        "unpause" => api.unpause(&run_id).await.map(|changed| {
            if changed {
                "The server unpaused the run."
            } else {
                "The run was not paused."
            }
            .to_string()
        }),
        "steer" => api
            .signal(
                &run_id,
                "steer",
                serde_json::Value::String(text.to_string()).to_string(),
            )
            .await
            .map(|()| "The server recorded the steer signal.".to_string()),
        "approve" => api
            .approve(&run_id, &form.step, text)
            .await
            .map(|()| "The server approved the step.".to_string()),
        "reject" => api
            .reject(&run_id, &form.step, text)
            .await
            .map(|()| "The server rejected the step; its agent revises the result.".to_string()),
        "redeliver" => api.redeliver(&run_id).await.map(|targets| {
            format!(
                "The server queued a new delivery round to: {}.",
                targets.join(", ")
            )
        }),
        _ => {
            return layout::message_page(
                &viewer,
                StatusCode::NOT_FOUND,
                "No such action",
                "the console has no such action",
            );
        }
    };
    outcome_page(&viewer, &api, verb, &run_url, outcome)
}

fn outcome_page(
    viewer: &Viewer,
    api: &api::Api,
    verb: &str,
    back: &str,
    outcome: Result<String, railyard_sdk::ClientError>,
) -> Response {
    let (status, body) = match &outcome {
        Ok(said) => (
            StatusCode::OK,
            html! { h1 { (verb) } p.outcome role="status" { (said) } p { a href=(back) { "Back" } } },
        ),
        Err(e) => (
            layout::status_of(e),
            html! { h1 { (verb) ": refused" } p.refusal role="alert" { (e.to_string()) } p { a href=(back) { "Back" } } },
        ),
    };
    layout::respond(viewer, api, status, layout::page(viewer, verb, body))
}

/// The forms of an open run, as the viewer's role allows (every role that reaches
/// the page may act on runs; the server decides again on each call).
pub(crate) fn run_actions(viewer: &Viewer, run: &pb::RunInfo) -> Markup {
    let action = |name: &str| {
        format!(
            "/ui/runs/{}/act/{name}?ns={}",
            encode(&run.run_id),
            encode(&viewer.ns)
        )
    };
    let awaiting = run.waiting.as_ref().is_some_and(|w| w.on == "approval");
    let step = run
        .steps
        .get(run.current_step as usize)
        .map(|s| s.step_id.as_str())
        .unwrap_or_default();
    html! {
        section aria-labelledby="act-h" {
            h2 #act-h { "Act" }
            @if awaiting {
                @if let Some(w) = &run.waiting {
                    h3 { "Awaiting approval: step " (step) }
                    (proposal(w))
                }
                (approval_forms(viewer, &run.run_id, step))
            }
            form.act method="post" action=(action("steer")) {
                (layout::csrf(viewer))
                label { "Steer " input type="text" name="text" required placeholder="a message for the agent"; }
                button type="submit" { "Send" }
            }
            div {
                @if run.paused {
                    form.act method="post" action=(action("unpause")) { (layout::csrf(viewer)) button type="submit" { "Unpause" } }
                } @else {
                    form.act method="post" action=(action("pause")) { (layout::csrf(viewer)) button type="submit" { "Pause" } }
                }
                form.act method="post" action=(action("cancel")) { (layout::csrf(viewer)) button type="submit" { "Cancel" } }
                form.act method="post" action=(action("terminate")) { (layout::csrf(viewer)) button.danger type="submit" { "Terminate" } }
            }
        }
    }
}

/// Approve (with a note) and reject (with feedback) forms for `step` of `run_id`.
pub(crate) fn approval_forms(viewer: &Viewer, run_id: &str, step: &str) -> Markup {
    let action = |name: &str| format!("/ui/runs/{}/act/{name}?ns={}", encode(run_id), encode(&viewer.ns));
    html! {
        form.act method="post" action=(action("approve")) {
            (layout::csrf(viewer))
            input type="hidden" name="step" value=(step);
            label { "Note " input type="text" name="text"; }
            button type="submit" { "Approve" }
        }
        form.act method="post" action=(action("reject")) {
            (layout::csrf(viewer))
            input type="hidden" name="step" value=(step);
            label { "Feedback " input type="text" name="text" required; }
            button type="submit" { "Reject" }
        }
    }
}

/// The held result of a step awaiting approval.
pub(crate) fn proposal(w: &pb::WaitInfo) -> Markup {
    html! {
        dl.facts {
            @if !w.proposed_by.is_empty() { dt { "Proposed by" } dd { (w.proposed_by) } }
            dt { "Since" } dd { (layout::time(w.since_unix_ms)) }
            @if !w.proposed_artifacts.is_empty() { dt { "Artifacts" } dd { (w.proposed_artifacts.join(", ")) } }
        }
        @if !w.proposed_notes.is_empty() { pre { (layout::long_text(&w.proposed_notes)) } }
        @if !w.proposed_result_json.is_empty() { pre { (layout::long_text(&w.proposed_result_json)) } }
    }
}

/// The redeliver form of a closed run whose delivery failed.
pub(crate) fn redeliver_form(viewer: &Viewer, run: &pb::RunInfo) -> Markup {
    html! {
        form.act method="post" action={ "/ui/runs/" (encode(&run.run_id)) "/act/redeliver?ns=" (encode(&viewer.ns)) } {
            (layout::csrf(viewer))
            button type="submit" { "Redeliver the result" }
        }
    }
}

/// The start form's fields.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct StartForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    workflow: String,
    #[serde(default)]
    goal: String,
    /// One `key=value` a line.
    #[serde(default)]
    context: String,
}

/// `POST /ui/runs/start`: starts a run (the form on the runs page is the confirmation:
/// it names the workflow and the goal).
pub(crate) async fn start(viewer: Viewer, axum::Form(form): axum::Form<StartForm>) -> Response {
    if !viewer.csrf_matches(&form.csrf) {
        return layout::csrf_refused(&viewer);
    }
    let mut context = std::collections::HashMap::new();
    for (i, line) in form.context.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            return layout::message_page(
                &viewer,
                StatusCode::BAD_REQUEST,
                "Refused",
                &format!("context line {}: write key=value", i + 1),
            );
        };
        context.insert(k.trim().to_string(), v.trim().to_string());
    }
    let api = match viewer.api(api::ACTION) {
        Ok(api) => api,
        Err(e) => return layout::message_page(&viewer, StatusCode::BAD_REQUEST, "Refused", &e.to_string()),
    };
    let started = api
        .start_run(pb::StartRunRequest {
            workflow_id: form.workflow.trim().to_string(),
            goal: form.goal.clone(),
            context,
            ..Default::default()
        })
        .await;
    match started {
        Ok(r) => {
            let url = format!("/ui/runs/{}?ns={}", encode(&r.run_id), encode(&viewer.ns));
            let body = html! {
                h1 { "Started" }
                p.outcome role="status" { "The server started run " a href=(url) { (r.run_id) } "." }
            };
            layout::respond(
                &viewer,
                &api,
                StatusCode::OK,
                layout::page(&viewer, "Started", body),
            )
        }
        Err(e) => outcome_page(
            &viewer,
            &api,
            "Start",
            &layout::nav_href("/ui/runs", &viewer.ns),
            Err(e),
        ),
    }
}
