//! Reading a run: `run describe`, `run history`, `run watch`, and the follow loop that
//! `run watch` and `run start --wait` share.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::anyhow;
use clap::Args;
use railyard_proto::v1::{GetHistoryRequest, HistoryEvent, RunInfo, RunStatus, TokenUsage};
use railyard_sdk::retry::is_transient_stream_break;
use railyard_sdk::{Client, ClientError, RetryPolicy};
use serde_json::json;
use tonic::Code;

use crate::client::global::{GlobalOpts, stream_error};
use crate::client::output::{self, Table, truncate};
use crate::client::timefmt::rfc3339;
use crate::client::view::{event_json, event_line, run_json, status_name};

/// Exit code of `run watch` / `run start --wait` when the run closed without completing.
pub(crate) const EXIT_NOT_COMPLETED: u8 = 3;

/// How long one `GetHistory` long poll waits for new events.
const HISTORY_WAIT_MS: u32 = 30_000;
/// An empty long-poll answer faster than this is followed by a pause of this length.
const MIN_EMPTY_POLL: Duration = Duration::from_millis(200);
/// How a broken event stream is reopened: the shared jittered policy, 30 times in a
/// row at most (progress starts the count again), pauses under 4 s.
pub(crate) const REOPEN: RetryPolicy = RetryPolicy {
    max_attempts: 31,
    initial_backoff: Duration::from_millis(100),
    max_backoff: Duration::from_secs(4),
};

/// Flags of `run describe`.
#[derive(Debug, Args)]
pub(crate) struct DescribeArgs {
    /// The run to show.
    pub run_id: String,
}

/// Flags of `run history`.
#[derive(Debug, Args)]
pub(crate) struct HistoryArgs {
    /// The run whose events to print.
    pub run_id: String,
    /// First event id to print.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub from: u64,
    /// Keep printing new events until the run closes (JSON output becomes JSON lines).
    #[arg(long, short = 'f')]
    pub follow: bool,
}

/// Flags of `run watch`.
#[derive(Debug, Args)]
pub(crate) struct WatchArgs {
    /// The run to follow.
    pub run_id: String,
    /// First event id to print.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub from: u64,
    /// Print the run's live output (what the model writes, tool calls marked `→`,
    /// results `←`) instead of its events, until the run closes. With `--output
    /// json`: one chunk object per line. (`--output` is the output format.)
    #[arg(long)]
    pub stream: bool,
    /// With --stream: the first output offset to print (after a disconnect, the last
    /// offset seen plus one).
    #[arg(long, value_name = "N", default_value_t = 0, requires = "stream")]
    pub from_offset: u64,
}

/// The exit code for a closed run: success only when it COMPLETED.
pub(crate) fn exit_for(run: &RunInfo) -> ExitCode {
    if run.status == RunStatus::Completed as i32 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_NOT_COMPLETED)
    }
}

/// `run describe`.
pub(crate) async fn describe(global: &GlobalOpts, a: DescribeArgs) -> anyhow::Result<()> {
    let client = global.connect().await?;
    let resp = client.describe_run(&global.namespace, &a.run_id).await?;
    let run = resp
        .run
        .ok_or_else(|| anyhow!("the server sent no run for {}", a.run_id))?;
    if global.output.is_json() {
        let definition = serde_json::from_str::<serde_json::Value>(&resp.definition_json)
            .unwrap_or(serde_json::Value::String(resp.definition_json));
        // The definition compact: pretty-printed, a deeply nested one grows a
        // hundredfold.
        output::json_with_compact(&json!({ "run": run_json(&run) }), "definition", &definition)?;
        return Ok(());
    }
    for text in describe_lines(&run) {
        output::line(text)?;
    }
    Ok(())
}

/// The human rendering of `run describe`.
pub(crate) fn describe_lines(run: &RunInfo) -> Vec<String> {
    let mut fields = vec![
        ("run", run.run_id.clone()),
        (
            "workflow",
            format_workflow(&run.workflow_id, &run.workflow_version),
        ),
        ("status", status_name(run.status)),
        ("goal", run.goal.clone()),
        ("started", rfc3339(run.start_time_unix_ms)),
        ("closed", rfc3339(run.close_time_unix_ms)),
        ("history", format!("{} events", run.history_length)),
    ];
    if !run.trace_id.is_empty() {
        fields.push(("trace", run.trace_id.clone()));
    }
    if run.priority != 0 {
        fields.push(("priority", run.priority.to_string()));
    }
    if !run.fairness_key.is_empty() {
        fields.push((
            "fairness key",
            format!("{} (weight {})", run.fairness_key, run.fairness_weight),
        ));
    }
    if !run.concurrency_key.is_empty() {
        fields.push(("concurrency key", run.concurrency_key.clone()));
    }
    if !run.flow_wait.is_empty() {
        fields.push(("dispatch", run.flow_wait.clone()));
    }
    if !run.parent_run_id.is_empty() {
        fields.push(("parent", run.parent_run_id.clone()));
    }
    if !run.reset_from.is_empty() {
        fields.push(("reset from", run.reset_from.clone()));
    }
    if !run.reset_to.is_empty() {
        fields.push(("reset to", run.reset_to.clone()));
    }
    if run.paused {
        fields.push((
            "paused",
            "yes (no step is dispatched until `railyard run unpause`)".into(),
        ));
    }
    if let Some(w) = &run.waiting {
        fields.push(("waiting", crate::client::view::waiting_text(w)));
        if w.on == "approval" {
            fields.extend(crate::run::approval::proposal_lines(w));
        } else {
            fields.push(("waits for", w.run_ids.join(", ")));
        }
    }
    if !run.failure.is_empty() {
        fields.push(("failure", run.failure.clone()));
    }
    if let Some(u) = &run.usage {
        fields.push(("tokens", tokens_line(u)));
    }
    if let Some(u) = &run.carried_usage {
        fields.push((
            "carried",
            format!(
                "{} (from {}; not this run's spending)",
                tokens_line(u),
                run.reset_from
            ),
        ));
    }
    let width = fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut lines: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("{k:<width$}  {v}").trim_end().to_string())
        .collect();
    if !run.context.is_empty() {
        lines.push("context".to_string());
        let mut entries: Vec<_> = run.context.iter().collect();
        entries.sort();
        for (k, v) in entries {
            lines.push(format!("  {k} = {}", truncate(v, 80)));
        }
    }
    if !run.steps.is_empty() {
        lines.push("steps".to_string());
        let mut table = Table::new(["  #", "STEP", "STATE", "ATTEMPT", "WORKER", "NOTES"]);
        for (i, s) in run.steps.iter().enumerate() {
            let notes = if s.notes.is_empty() && !s.last_failure.is_empty() {
                format!("last failure: {}", s.last_failure)
            } else {
                s.notes.clone()
            };
            table.row([
                format!("  {}", i + 1),
                s.step_id.clone(),
                if s.carried {
                    format!("{} (carried)", s.state)
                } else {
                    s.state.clone()
                },
                if s.attempt == 0 {
                    "-".to_string()
                } else {
                    s.attempt.to_string()
                },
                dash(&s.worker_identity),
                truncate(&notes, 60),
            ]);
        }
        lines.extend(table.render());
    }
    let used: Vec<_> = run
        .steps
        .iter()
        .filter_map(|s| s.usage.as_ref().map(|u| (s, u)))
        .collect();
    if !used.is_empty() {
        lines.push("tokens by step".to_string());
        let mut table = Table::new(["  STEP", "MODEL", "TOKENS"]);
        for (s, u) in used {
            table.row([format!("  {}", s.step_id), dash(&s.model), tokens_line(u)]);
        }
        lines.extend(table.render());
    }
    lines.extend(result_lines(run));
    lines.extend(super::issues::describe_lines(run));
    if !run.search_attributes.is_empty() {
        lines.push(format!(
            "attributes   {}",
            crate::client::view::attributes_text(&run.search_attributes)
        ));
    }
    if !run.principles.trim().is_empty() {
        // Pinned when the run started; `-o json` has them whole.
        lines.push("principles (pinned at start)".to_string());
        lines.extend(run.principles.lines().take(12).map(|l| format!("  {l}")));
        if run.principles.lines().count() > 12 {
            lines.push("  ...".to_string());
        }
    }
    lines.extend(crate::delivery::describe_lines(run));
    lines
}

/// The steps' structured results, and the results refused in the attempt in flight
/// (`--output json` has them whole).
fn result_lines(run: &RunInfo) -> Vec<String> {
    let shown: Vec<_> = run
        .steps
        .iter()
        .filter(|s| !s.result_json.is_empty() || s.result_refusals > 0)
        .collect();
    if shown.is_empty() {
        return Vec::new();
    }
    let width = shown.iter().map(|s| s.step_id.chars().count()).max().unwrap_or(0);
    let mut lines = vec!["results".to_string()];
    for s in shown {
        let mut value = truncate(&s.result_json, 100);
        if s.result_refusals > 0 {
            let plural = if s.result_refusals == 1 { "" } else { "s" };
            let refused = format!("({} result{plural} refused this attempt)", s.result_refusals);
            value = if value.is_empty() {
                refused
            } else {
                format!("{value} {refused}")
            };
        }
        lines.push(format!("  {:<width$}  {value}", s.step_id));
    }
    lines
}

/// Tokens in one line: the total, its parts, and the estimated cost when priced.
pub(crate) fn tokens_line(u: &TokenUsage) -> String {
    let total = u
        .input_tokens
        .saturating_add(u.output_tokens)
        .saturating_add(u.cache_read_tokens)
        .saturating_add(u.cache_write_tokens);
    let mut line = format!(
        "{total} (input {}, output {}, cache read {}, cache write {})",
        u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens
    );
    if u.cost_usd > 0.0 {
        line.push_str(&format!(", est. ${:.4}", u.cost_usd));
    }
    line
}

fn format_workflow(id: &str, version: &str) -> String {
    if version.is_empty() {
        id.to_string()
    } else {
        format!("{id} (version {version})")
    }
}

fn dash(text: &str) -> String {
    if text.is_empty() {
        "-".to_string()
    } else {
        text.to_string()
    }
}

/// `run history`.
pub(crate) async fn history(global: &GlobalOpts, a: HistoryArgs) -> anyhow::Result<()> {
    let client = global.connect().await?;
    let json = global.output.is_json();
    if a.follow {
        let mut next = a.from.max(1);
        return poll_events(&client, &global.namespace, &a.run_id, &mut next, &mut |e| {
            print_event(e, json)
        })
        .await;
    }
    let mut events = Vec::new();
    let mut from = a.from.max(1);
    loop {
        let page = client
            .get_history(history_request(global, &a.run_id, from, 0))
            .await?;
        let Some(last) = page.events.last().map(|e| e.event_id) else {
            break;
        };
        from = page.next_event_id.max(last + 1);
        for e in &page.events {
            if json {
                events.push(event_json(e));
            } else {
                output::line(event_line(e))?;
            }
        }
        if page.next_event_id == 0 {
            break;
        }
    }
    if json {
        output::json(&serde_json::Value::Array(events))?;
    }
    Ok(())
}

/// `run watch`: prints events as they happen, then the run's final status.
pub(crate) async fn watch(global: &GlobalOpts, a: WatchArgs) -> anyhow::Result<ExitCode> {
    let client = global.connect().await?;
    let json = global.output.is_json();
    let run = follow(&client, global, &a.run_id, a.from, true).await?;
    if json {
        output::json_line(&json!({ "run": run_json(&run) }))?;
    }
    Ok(exit_for(&run))
}

fn print_event(event: &HistoryEvent, json: bool) -> std::io::Result<()> {
    if json {
        output::json_line(&event_json(event))
    } else {
        output::line(event_line(event))
    }
}

fn history_request(global: &GlobalOpts, run_id: &str, from: u64, wait_ms: u32) -> GetHistoryRequest {
    GetHistoryRequest {
        namespace: global.namespace.clone(),
        run_id: run_id.to_string(),
        from_event_id: from,
        page_size: 0,
        wait_timeout_ms: wait_ms,
    }
}

/// Follows a run over `WatchRun` from event `from` until it closes, printing each
/// event when `print` is set (JSON lines under `--output json`; the closing status
/// line in human mode). Reopens the stream from the last event seen if it breaks,
/// and falls back to long-polling `GetHistory` on a server without `WatchRun`.
/// Returns the closed run.
pub(crate) async fn follow(
    client: &Client,
    global: &GlobalOpts,
    run_id: &str,
    from: u64,
    print: bool,
) -> anyhow::Result<RunInfo> {
    let json = global.output.is_json();
    let ns = &global.namespace;
    let mut next = from.max(1);
    let mut on_event = |e: &HistoryEvent| if print { print_event(e, json) } else { Ok(()) };
    let mut pauses = REOPEN.delays();
    loop {
        let before = next;
        let streamed = stream_events(client, ns, run_id, &mut next, &mut on_event).await;
        if next > before {
            pauses = REOPEN.delays();
        }
        match streamed {
            Ok(()) => {}
            Err(Failure::Print(e)) => return Err(e.into()),
            Err(Failure::Client(e)) if e.code() == Some(Code::Unimplemented) => {
                tracing::debug!("server has no WatchRun; long-polling GetHistory instead");
                poll_events(client, ns, run_id, &mut next, &mut on_event).await?;
            }
            Err(Failure::Client(e)) if is_transient(&e) => match pauses.next() {
                Some(pause) => {
                    tracing::warn!(error = %e, retry_in = ?pause, "event stream broke; reopening");
                    tokio::time::sleep(pause).await;
                    continue;
                }
                None => return Err(e.into()),
            },
            Err(Failure::Client(e)) => return Err(e.into()),
        }
        let resp = client.describe_run(ns, run_id).await?;
        let run = resp
            .run
            .ok_or_else(|| anyhow!("the server sent no run for {run_id}"))?;
        if !RunStatus::try_from(run.status).is_ok_and(RunStatus::is_open) {
            if print && !json {
                output::line(closing_line(&run))?;
            }
            return Ok(run);
        }
        // The stream ended while the run is still open (e.g. the server shut down).
        let Some(pause) = pauses.next() else {
            return Err(anyhow!(
                "the event stream of run {run_id} keeps ending while the run is open"
            ));
        };
        tokio::time::sleep(pause).await;
    }
}

/// The last line `run watch` prints: `run R closed: COMPLETED` (with the failure, if any).
pub(crate) fn closing_line(run: &RunInfo) -> String {
    let mut text = format!("run {} closed: {}", run.run_id, status_name(run.status));
    if !run.failure.is_empty() {
        text.push_str(": ");
        text.push_str(&truncate(&run.failure, 200));
    }
    text
}

/// Why following events stopped.
enum Failure {
    /// The server or the connection failed.
    Client(ClientError),
    /// Writing to stdout failed.
    Print(std::io::Error),
}

async fn stream_events(
    client: &Client,
    ns: &str,
    run_id: &str,
    next: &mut u64,
    on_event: &mut impl FnMut(&HistoryEvent) -> std::io::Result<()>,
) -> Result<(), Failure> {
    let mut stream = client
        .watch_run(ns, run_id, *next)
        .await
        .map_err(Failure::Client)?;
    while let Some(event) = stream
        .message()
        .await
        .map_err(|s| Failure::Client(stream_error(client.url(), s)))?
    {
        if event.event_id < *next {
            continue;
        }
        *next = event.event_id + 1;
        on_event(&event).map_err(Failure::Print)?;
    }
    Ok(())
}

/// Long-polls `GetHistory` from `next` until the run is closed and every event was seen.
async fn poll_events(
    client: &Client,
    ns: &str,
    run_id: &str,
    next: &mut u64,
    on_event: &mut impl FnMut(&HistoryEvent) -> std::io::Result<()>,
) -> anyhow::Result<()> {
    loop {
        let req = GetHistoryRequest {
            namespace: ns.to_string(),
            run_id: run_id.to_string(),
            from_event_id: *next,
            page_size: 0,
            wait_timeout_ms: HISTORY_WAIT_MS,
        };
        let asked = std::time::Instant::now();
        let page = client.get_history(req).await?;
        for event in &page.events {
            if event.event_id < *next {
                continue;
            }
            *next = event.event_id + 1;
            on_event(event)?;
        }
        let open = RunStatus::try_from(page.status).is_ok_and(RunStatus::is_open);
        // Done when the server says so, or when a closed run has nothing more to give.
        if page.next_event_id == 0 || (page.events.is_empty() && !open) {
            return Ok(());
        }
        *next = (*next).max(page.next_event_id);
        if page.events.is_empty() && asked.elapsed() < MIN_EMPTY_POLL {
            // The server answered an empty page without waiting: do not spin.
            tokio::time::sleep(MIN_EMPTY_POLL).await;
        }
    }
}

/// A broken stream worth reopening (the one definition lives in `railyard_proto::retry`).
pub(crate) fn is_transient(e: &ClientError) -> bool {
    match e {
        ClientError::Unavailable { .. } => true,
        ClientError::Other { code, message } => is_transient_stream_break(*code, message),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use railyard_proto::v1::StepSummary;

    #[test]
    fn describe_renders_fields_context_and_steps() {
        let run = RunInfo {
            run_id: "r1".into(),
            workflow_id: "demo".into(),
            workflow_version: "2".into(),
            status: RunStatus::Running as i32,
            goal: "write a haiku".into(),
            context: [("topic".to_string(), "rust".to_string())].into(),
            start_time_unix_ms: 1_714_564_800_000,
            history_length: 5,
            steps: vec![
                StepSummary {
                    step_id: "plan".into(),
                    state: "COMPLETED".into(),
                    attempt: 1,
                    notes: "made a plan\nwith details".into(),
                    worker_identity: "w1".into(),
                    ..Default::default()
                },
                StepSummary {
                    step_id: "write".into(),
                    state: "BACKING_OFF".into(),
                    attempt: 2,
                    last_failure: "tool error".into(),
                    ..Default::default()
                },
                StepSummary {
                    step_id: "review".into(),
                    state: "PENDING".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let lines = describe_lines(&run);
        let expected = [
            "run       r1",
            "workflow  demo (version 2)",
            "status    RUNNING",
            "goal      write a haiku",
            "started   2024-05-01T12:00:00Z",
            "closed    -",
            "history   5 events",
            "context",
            "  topic = rust",
            "steps",
            "  #  STEP    STATE        ATTEMPT  WORKER  NOTES",
            "  1  plan    COMPLETED    1        w1      made a plan…",
            "  2  write   BACKING_OFF  2        -       last failure: tool error",
            "  3  review  PENDING      -        -",
        ];
        assert_eq!(lines, expected);
    }

    #[test]
    fn describe_shows_results_and_refusals() {
        let run = RunInfo {
            run_id: "r1".into(),
            steps: vec![
                StepSummary {
                    step_id: "plan".into(),
                    state: "COMPLETED".into(),
                    attempt: 1,
                    result_json: r#"{"count":3,"title":"Rocket"}"#.into(),
                    ..Default::default()
                },
                StepSummary {
                    step_id: "build-it".into(),
                    state: "STARTED".into(),
                    attempt: 1,
                    result_refusals: 2,
                    ..Default::default()
                },
                StepSummary {
                    step_id: "ship".into(),
                    state: "PENDING".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let lines = describe_lines(&run);
        let at = lines
            .iter()
            .position(|l| l == "results")
            .expect("a results section");
        assert_eq!(
            &lines[at..],
            [
                "results",
                r#"  plan      {"count":3,"title":"Rocket"}"#,
                "  build-it  (2 results refused this attempt)",
            ]
        );
        let json = crate::client::view::step_json(&run.steps[0]);
        assert_eq!(json["result"]["title"], "Rocket");
        assert_eq!(
            crate::client::view::step_json(&run.steps[2])["result"],
            serde_json::Value::Null
        );
    }

    #[test]
    fn closing_lines_and_exit_codes() {
        let mut run = RunInfo {
            run_id: "r9".into(),
            status: RunStatus::Completed as i32,
            ..Default::default()
        };
        assert_eq!(closing_line(&run), "run r9 closed: COMPLETED");
        assert_eq!(exit_for(&run), ExitCode::SUCCESS);
        run.status = RunStatus::Failed as i32;
        run.failure = "step write: out of retries".into();
        assert_eq!(
            closing_line(&run),
            "run r9 closed: FAILED: step write: out of retries"
        );
        assert_eq!(exit_for(&run), ExitCode::from(EXIT_NOT_COMPLETED));
    }

    #[test]
    fn reopening_pauses_are_bounded_and_run_out() {
        let pauses: Vec<_> = REOPEN.delays().collect();
        assert_eq!(pauses.len(), 30);
        assert!(pauses.iter().all(|p| *p < Duration::from_secs(4)), "{pauses:?}");
        assert!(pauses[0] >= Duration::from_millis(100), "{pauses:?}");
    }

    #[test]
    fn stream_breaks_are_transient_and_refusals_are_not() {
        let other = |code, message: &str| ClientError::Other {
            code,
            message: message.into(),
        };
        assert!(is_transient(&other(Code::Cancelled, "h2 reset")));
        assert!(is_transient(&other(Code::Internal, "h2 protocol error")));
        assert!(!is_transient(&ClientError::NotFound("run".into())));
        assert!(!is_transient(&ClientError::Unauthenticated("key".into())));
    }

    #[test]
    fn describe_shows_tokens_in_total_and_per_step() {
        let usage = |input, output, cost_usd| TokenUsage {
            input_tokens: input,
            output_tokens: output,
            cache_read_tokens: 100,
            cache_write_tokens: 0,
            cost_usd,
        };
        let run = RunInfo {
            run_id: "r1".into(),
            workflow_id: "demo".into(),
            usage: Some(usage(1500, 300, 0.0123)),
            steps: vec![
                StepSummary {
                    step_id: "plan".into(),
                    state: "COMPLETED".into(),
                    usage: Some(usage(1000, 200, 0.008)),
                    model: "claude-x".into(),
                    ..Default::default()
                },
                StepSummary {
                    step_id: "write".into(),
                    state: "PENDING".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let lines = describe_lines(&run);
        assert!(
            lines.contains(
                &"tokens    1900 (input 1500, output 300, cache read 100, cache write 0), est. $0.0123"
                    .to_string()
            ),
            "{lines:#?}"
        );
        let at = lines.iter().position(|l| l == "tokens by step").unwrap();
        assert_eq!(
            lines[at + 2],
            "  plan  claude-x  1300 (input 1000, output 200, cache read 100, cache write 0), est. $0.0080"
        );
        assert_eq!(lines.len(), at + 3, "only steps that used tokens: {lines:#?}");
        let json = crate::client::view::run_json(&run);
        assert_eq!(json["usage"]["total_tokens"], 1900);
        assert_eq!(json["steps"][0]["usage"]["input_tokens"], 1000);
        assert_eq!(json["steps"][1]["usage"]["total_tokens"], 0);
    }
}
