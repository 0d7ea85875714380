//! A run's steps and attempts over time, from its history: an SVG of bars (no script,
//! no inline style: SVG geometry is attributes, colours are classes), one row per
//! attempt, separating queued, running, waiting (children, unpause), awaiting approval,
//! and how each attempt ended, with why each retry happened listed below it.

use maud::{Markup, html};
use railyard_proto::v1 as pb;
use serde_json::Value;

use crate::layout;

/// One stretch of an attempt.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Span {
    pub start: i64,
    pub end: Option<i64>,
    pub kind: &'static str,
    pub label: String,
}

/// One attempt of one step.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Attempt {
    pub step: String,
    pub attempt: u64,
    pub spans: Vec<Span>,
    /// Why it ended, when it failed or timed out.
    pub failure: Option<String>,
}

fn text(v: &Value, k: &str) -> String {
    v.get(k).and_then(Value::as_str).unwrap_or_default().to_string()
}

/// The attempts the events describe, in the order they were scheduled.
pub(crate) fn attempts(events: &[pb::HistoryEvent]) -> Vec<Attempt> {
    let mut out: Vec<Attempt> = Vec::new();
    for e in events {
        let Ok(v) = serde_json::from_str::<Value>(&e.attributes_json) else {
            continue;
        };
        let step = text(&v, "stepId");
        let attempt = v.get("attempt").and_then(Value::as_u64).unwrap_or(0);
        let t = e.time_unix_ms;
        let next = |kind: &'static str, label: String, out: &mut Vec<Attempt>| {
            if let Some(a) = out
                .iter_mut()
                .rev()
                .find(|a| a.step == step && a.attempt == attempt)
            {
                if let Some(last) = a.spans.last_mut()
                    && last.end.is_none()
                {
                    last.end = Some(t);
                }
                a.spans.push(Span {
                    start: t,
                    end: None,
                    kind,
                    label,
                });
            }
        };
        match e.event_type.as_str() {
            "StepScheduled" => out.push(Attempt {
                step: step.clone(),
                attempt,
                spans: vec![Span {
                    start: t,
                    end: None,
                    kind: "queued",
                    label: format!("queued on {}", text(&v, "taskQueue")),
                }],
                failure: None,
            }),
            "StepStarted" => next("running", format!("running on {}", text(&v, "worker")), &mut out),
            "StepWaiting" => next("waiting", format!("waiting on {}", text(&v, "on")), &mut out),
            "StepResumed" | "StepRejected" => next("running", "running".into(), &mut out),
            "StepAwaitingApproval" => next("approval", "awaiting approval".into(), &mut out),
            "StepCompleted" | "StepApproved" => {
                next("done", String::new(), &mut out);
                close(&mut out, &step, attempt);
            }
            "StepFailed" | "StepTimedOut" => {
                next("failed", String::new(), &mut out);
                close(&mut out, &step, attempt);
                let why = if e.event_type == "StepFailed" {
                    format!("{}: {}", text(&v, "errorType"), text(&v, "message"))
                } else {
                    format!(
                        "timed out ({})",
                        v.get("timeout").map(Value::to_string).unwrap_or_default()
                    )
                };
                let retry = v.get("willRetry").and_then(Value::as_bool).unwrap_or(false);
                if let Some(a) = out
                    .iter_mut()
                    .rev()
                    .find(|a| a.step == step && a.attempt == attempt)
                {
                    a.failure = Some(format!(
                        "{why}{}",
                        if retry { "; retried" } else { "; not retried" }
                    ));
                }
            }
            _ => {}
        }
    }
    out
}

/// Ends an attempt's last span where it is (a zero-length "done"/"failed" marker).
fn close(out: &mut [Attempt], step: &str, attempt: u64) {
    if let Some(a) = out
        .iter_mut()
        .rev()
        .find(|a| a.step == step && a.attempt == attempt)
        && let Some(last) = a.spans.last_mut()
    {
        last.end = Some(last.start);
    }
}

/// What the history says of one step beyond its summary: artifacts of its completion,
/// its refused results with their violations, stuck warnings, approvals and
/// rejections, in order.
pub(crate) fn step_facts(events: &[pb::HistoryEvent]) -> std::collections::HashMap<String, Vec<String>> {
    let mut out: std::collections::HashMap<String, Vec<String>> = std::collections::HashMap::new();
    for e in events {
        let Ok(v) = serde_json::from_str::<Value>(&e.attributes_json) else {
            continue;
        };
        let attempt = v.get("attempt").and_then(Value::as_u64).unwrap_or(0);
        let fact = match e.event_type.as_str() {
            "StepCompleted" => {
                let artifacts: Vec<&str> = v
                    .get("artifacts")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                (!artifacts.is_empty()).then(|| format!("artifacts: {}", artifacts.join(", ")))
            }
            "StepResultRefused" => {
                let violations: Vec<String> = v
                    .get("violations")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .map(|x| format!("{}: {}", text(x, "path"), text(x, "reason")))
                            .collect()
                    })
                    .unwrap_or_default();
                Some(format!(
                    "attempt {attempt}: result refused by the output contract: {}",
                    violations.join("; ")
                ))
            }
            "AgentStuckWarning" | "AgentStuck" => Some(format!(
                "attempt {attempt}: {} ({}): {}",
                if e.event_type == "AgentStuck" {
                    "stuck, ended"
                } else {
                    "stuck warning"
                },
                text(&v, "signal"),
                text(&v, "message")
            )),
            "StepApproved" => Some(format!(
                "attempt {attempt}: approved by {}: {}",
                e.identity,
                text(&v, "note")
            )),
            "StepRejected" => Some(format!(
                "attempt {attempt}: rejected by {}: {}",
                e.identity,
                text(&v, "feedback")
            )),
            _ => None,
        };
        if let Some(fact) = fact {
            out.entry(text(&v, "stepId")).or_default().push(fact);
        }
    }
    out
}

const WIDTH: i64 = 1000;
const LABEL: i64 = 170;
const ROW: i64 = 22;

/// The SVG, its legend and the retries' reasons. `now` ends the spans still open.
pub(crate) fn render(attempts: &[Attempt], now: i64, partial: bool) -> Markup {
    if attempts.is_empty() {
        return html! { p.muted { "No step has been scheduled yet." } };
    }
    let t0 = attempts
        .iter()
        .flat_map(|a| a.spans.first())
        .map(|s| s.start)
        .min()
        .unwrap_or(now);
    let t1 = attempts
        .iter()
        .flat_map(|a| a.spans.iter())
        .map(|s| s.end.unwrap_or(now))
        .max()
        .unwrap_or(now)
        .max(t0 + 1);
    let scale = |t: i64| LABEL + (t - t0) * (WIDTH - LABEL - 10) / (t1 - t0);
    let height = ROW * attempts.len() as i64 + 20;
    html! {
        svg.waterfall viewBox={ "0 0 " (WIDTH) " " (height) } role="img" aria-label="steps and attempts over time" {
            @for (i, a) in attempts.iter().enumerate() {
                @let y = ROW * i as i64 + 4;
                text x="4" y=(y + 13) { (layout::cut(&a.step, 22).0) " #" (a.attempt) }
                @for s in &a.spans {
                    @let x = scale(s.start);
                    @let w = (scale(s.end.unwrap_or(now)) - x).max(2);
                    rect class=(s.kind) x=(x) y=(y) width=(w) height=(ROW - 6) {
                        title { (a.step) " attempt " (a.attempt) ": " (s.kind) " " (s.label) " from " (layout::time(s.start)) " for " (layout::duration(s.end.unwrap_or(now) - s.start)) }
                    }
                }
            }
            text x=(LABEL) y=(height - 4) { (layout::time(t0)) }
            text x=(WIDTH - 10) y=(height - 4) text-anchor="end" { "+" (layout::duration(t1 - t0)) }
        }
        p.legend {
            @for k in ["queued", "running", "waiting", "approval", "done", "failed"] {
                span { span class={ "key " (k) } {} (k) }
            }
        }
        @if partial { p.muted { "Drawn from the run's first events only." } }
        @let failures: Vec<&Attempt> = attempts.iter().filter(|a| a.failure.is_some()).collect();
        @if !failures.is_empty() {
            ul {
                @for a in failures {
                    li { (a.step) " attempt " (a.attempt) ": " (a.failure.as_deref().unwrap_or_default()) }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(t: i64, ty: &str, attrs: &str) -> pb::HistoryEvent {
        pb::HistoryEvent {
            event_id: 0,
            time_unix_ms: t,
            event_type: ty.into(),
            identity: String::new(),
            attributes_json: attrs.into(),
        }
    }

    #[test]
    fn a_retry_is_a_second_row_with_the_reason_of_the_first() {
        let events = [
            ev(
                0,
                "StepScheduled",
                r#"{"stepId":"a","attempt":1,"taskQueue":"q"}"#,
            ),
            ev(10, "StepStarted", r#"{"stepId":"a","attempt":1,"worker":"w"}"#),
            ev(
                20,
                "StepFailed",
                r#"{"stepId":"a","attempt":1,"errorType":"tool","message":"boom","willRetry":true}"#,
            ),
            ev(
                30,
                "StepScheduled",
                r#"{"stepId":"a","attempt":2,"taskQueue":"q"}"#,
            ),
            ev(40, "StepStarted", r#"{"stepId":"a","attempt":2,"worker":"w"}"#),
            ev(50, "StepAwaitingApproval", r#"{"stepId":"a","attempt":2}"#),
        ];
        let a = attempts(&events);
        assert_eq!(a.len(), 2);
        assert_eq!(a[0].failure.as_deref(), Some("tool: boom; retried"));
        let kinds: Vec<_> = a[1].spans.iter().map(|s| s.kind).collect();
        assert_eq!(kinds, ["queued", "running", "approval"]);
        assert_eq!(a[1].spans[2].end, None, "still awaiting approval");
        let html = render(&a, 60, false).into_string();
        assert!(html.contains("class=\"approval\""));
    }

    #[test]
    fn a_steps_refusals_warnings_and_artifacts_are_gathered() {
        let events = [
            ev(
                0,
                "StepResultRefused",
                r#"{"stepId":"a","attempt":1,"violations":[{"path":"result.n","reason":"not an integer"}]}"#,
            ),
            ev(
                1,
                "AgentStuckWarning",
                r#"{"stepId":"a","attempt":1,"signal":"repeated_call","message":"same call"}"#,
            ),
            ev(
                2,
                "StepCompleted",
                r#"{"stepId":"a","attempt":1,"artifacts":["out.md"]}"#,
            ),
        ];
        let facts = step_facts(&events);
        assert_eq!(
            facts["a"],
            [
                "attempt 1: result refused by the output contract: result.n: not an integer",
                "attempt 1: stuck warning (repeated_call): same call",
                "artifacts: out.md",
            ]
        );
    }
}
