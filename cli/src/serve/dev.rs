//! `railyard dev`: the quickstart. A server and a worker in one process on an embedded
//! database in `./.railyard/`, a run of the bundled `demo` workflow shown live, then
//! (unless `--exit-when-done`) both keep serving until Ctrl-C.
//!
//! Progress comes from two sources merged into one channel, so lines print in the
//! order things happened in this process: the in-process worker's event hook (steps
//! leased, model text, tool calls, notes, results) and a `WatchRun` stream per run (its
//! close, and what other workers did to it).

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow};
use clap::Args;
use railyard_proto::v1::{HistoryEvent, RunInfo, RunStatus};
use railyard_sdk::Client;
use railyard_server::RunningServer;
use railyard_worker::events::WorkerEvent;
use railyard_worker::provider::ScriptSource;
use railyard_worker::{ConfigLayer, EventKind, ProviderConfig, Worker, WorkerConfig};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::StreamExt;

use crate::client::view::status_name;
use crate::run::view::{EXIT_NOT_COMPLETED, REOPEN};
use crate::serve::builtin;
use crate::serve::server::{ServerArgs, ServerSettings, StoreSetting};
use crate::serve::signals::{Drained, Signals};

/// The goal of the demo run when `--goal` is not given.
pub(crate) const DEFAULT_GOAL: &str = "why durable execution matters for long-running AI agents";
/// The queue the in-process worker polls.
const QUEUE: &str = "default";
/// The bundled workflow the quickstart runs.
const DEMO_WORKFLOW: &str = "demo";
/// How long a run's close line waits for the worker's report of the step that closed it.
const CLOSE_SETTLE: Duration = Duration::from_secs(2);

/// Flags of `railyard dev`.
#[derive(Debug, Args)]
pub(crate) struct DevArgs {
    #[command(flatten)]
    pub server: ServerArgs,

    /// Goal of the demo run.
    #[arg(long, value_name = "TEXT", default_value = DEFAULT_GOAL)]
    pub goal: String,

    /// Start the server and the worker but no demo run.
    #[arg(long)]
    pub no_demo: bool,

    /// Stop once the demo run has closed; exit 0 only if it COMPLETED (3 otherwise).
    #[arg(long, conflicts_with = "no_demo")]
    pub exit_when_done: bool,
}

/// Prints one line on stdout. Output is for a person; a closed stdout is not an error
/// worth stopping the server for.
fn say(text: impl std::fmt::Display) {
    let mut out = std::io::stdout().lock();
    // The narration's own line breaks stay; stored fields reach it flattened
    // (`one_line`) or quoted, and anything else unsafe in a line is escaped.
    let text = text.to_string();
    let lines: Vec<_> = text.split('\n').map(crate::client::output::escape).collect();
    let _ = writeln!(out, "{}", lines.join("\n"));
    let _ = out.flush();
}

/// A gRPC URL clients can dial for a listen address (an unspecified IP means loopback here).
fn dial_url(addr: SocketAddr) -> String {
    let ip = if addr.ip().is_unspecified() {
        if addr.is_ipv4() {
            "127.0.0.1".to_string()
        } else {
            "[::1]".to_string()
        }
    } else if addr.is_ipv6() {
        format!("[{}]", addr.ip())
    } else {
        addr.ip().to_string()
    };
    format!("http://{ip}:{}", addr.port())
}

/// What the screen says about the model, so nobody mistakes the script for a model.
fn provider_line(provider: &ProviderConfig) -> String {
    match provider {
        ProviderConfig::Scripted { script } => format!(
            "model:     SCRIPTED provider - offline, NOT a real model: it replays the canned turns in {}.\n           \
             Set ANTHROPIC_API_KEY or OPENAI_API_KEY (or OPENAI_BASE_URL for a local server) to use a real model.",
            script.describe()
        ),
        other => format!(
            "model:     {} (real model calls; set RAILYARD_MODEL to change it)",
            other.describe()
        ),
    }
}

/// What the banner says about who may use the server.
fn auth_line(settings: &ServerSettings) -> String {
    let loopback = settings.listen.ip().is_loopback() && settings.http_listen.ip().is_loopback();
    if loopback {
        "auth:      off - open to every process on this machine (loopback only); `railyard server --auth` for API keys"
            .to_string()
    } else {
        "auth:      OFF on a non-loopback address (--insecure): anyone who can reach it can start runs and so run code on this machine"
            .to_string()
    }
}

/// The offline script for the demo when no model is configured: the workflows
/// directory's `demo.script.json`, or the built-in one when the built-in demo is used.
fn demo_script(settings: &ServerSettings) -> Option<ScriptSource> {
    let file = settings.workflows.join("demo.script.json");
    if file.is_file() {
        Some(ScriptSource::Path(file))
    } else {
        settings.built_in_demo.then_some(builtin::DEMO_SCRIPT)
    }
}

/// `railyard dev`.
pub(crate) async fn run(args: DevArgs) -> anyhow::Result<ExitCode> {
    let mut signals = Signals::new()?;
    let settings = args.server.settings()?;
    if settings.auth {
        return Err(anyhow!(
            "railyard dev runs without auth (its worker and demo need none); for a server with API keys run `railyard server --auth`"
        ));
    }
    if let StoreSetting::Postgres(_) = settings.store {
        return Err(anyhow!(
            "railyard dev keeps its runs in redb (--data-dir); to serve a postgres store run `railyard server --store postgres://...`"
        ));
    }
    let data_dir = settings.data_dir.clone();
    let workspace = data_dir.join("workspaces");

    // The worker's configuration first, so a bad one stops us before anything starts.
    let flags = ConfigLayer {
        queues: Some(vec![QUEUE.to_string()]),
        workspace: Some(workspace.clone()),
        ..ConfigLayer::default()
    };
    let default_script = demo_script(&settings);
    let mut config = WorkerConfig::load(None, flags, default_script).context("worker configuration")?;
    let provider = railyard_worker::provider::from_config(&config.provider)
        .context("cannot set up the model provider")?;

    let server = RunningServer::start(settings.config()).await.with_context(|| {
        format!(
            "cannot start the server (data dir {}, workflows {})",
            data_dir.display(),
            settings.workflows.display()
        )
    })?;
    let url = dial_url(server.grpc_addr);
    config.server_url = url.clone();
    let namespace = config.namespace.clone();
    let identity = config.identity.clone();

    say(format!(
        "railyard dev: server listening grpc={} http={} data={} workflows={}",
        server.grpc_addr,
        server.http_addr,
        data_dir.display(),
        settings.workflows_label()
    ));
    if settings.built_in_demo {
        say(format!(
            "workflows: the demo built into this binary ({}): there are no definitions in {} and no --workflows was given",
            builtin::DEMO_WORKFLOW.source().display(),
            settings.workflows.display()
        ));
    }
    say(format!(
        "console:   {}",
        crate::serve::console::url(server.http_addr, settings.tls.is_some())
    ));
    say(auth_line(&settings));
    say(format!(
        "worker:    {} polling queue {QUEUE}, {} slots, workspaces in {}",
        config.identity,
        config.slots,
        workspace.display()
    ));
    say(provider_line(&config.provider));

    let (tx, rx) = mpsc::unbounded_channel::<Msg>();
    let sink_tx = tx.clone();
    let sink: railyard_worker::EventSink = Arc::new(move |e: WorkerEvent| {
        let _ = sink_tx.send(Msg::Worker(e));
    });
    let worker = Worker::new(config).with_provider(provider).with_events(sink);
    let (stop_worker, worker_stop_rx) = oneshot::channel::<()>();
    let worker_task = tokio::spawn(worker.run(async move {
        let _ = worker_stop_rx.await;
    }));

    let client = Client::connect(&url).await?;
    let (demo_done_tx, demo_done_rx) = oneshot::channel::<RunInfo>();
    let printer = Printer {
        client: client.clone(),
        namespace: namespace.clone(),
        identity: identity.clone(),
        tx: tx.clone(),
        workspace: workspace.clone(),
        demo: None,
        demo_done: Some(demo_done_tx),
        watched: HashSet::new(),
        closed: HashMap::new(),
        runs: HashMap::new(),
        pending_close: Vec::new(),
    };
    let printer_task = tokio::spawn(printer.run(rx));

    let mut outcome: Option<RunInfo> = None;
    let mut interrupted = false;
    if args.no_demo {
        say("");
    } else {
        let workflows = client.list_workflows(&namespace).await?;
        if !workflows.workflows.iter().any(|w| w.id == DEMO_WORKFLOW) {
            let why = workflows
                .invalid
                .iter()
                .find(|i| Path::new(&i.source_file).file_name() == Some("demo.json".as_ref()))
                .map(|i| format!(": {}", i.error))
                .unwrap_or_default();
            shutdown(stop_worker, worker_task, server, &mut signals).await;
            return Err(anyhow!(
                "the bundled `demo` workflow is not in {}{why}\nhint: without --workflows, in a directory with no \
                 workflows/, `railyard dev` runs the demo built into this binary; or point --workflows at a \
                 directory holding demo.json, or pass --no-demo",
                settings.workflows.display()
            ));
        }
        let run_id = client
            .start_run(&namespace, DEMO_WORKFLOW, &args.goal, HashMap::new())
            .await
            .context("cannot start the demo run")?;
        say(format!(
            "\nStarted run {run_id} of the `{DEMO_WORKFLOW}` workflow (3 steps), goal: {:?}\n",
            args.goal
        ));
        let _ = tx.send(Msg::Demo(run_id));
        tokio::select! {
            done = demo_done_rx => outcome = done.ok(),
            s = signals.next() => {
                let signal = s?;
                say(format!("\n{signal}: stopping before the demo run finished"));
                interrupted = true;
            }
        }
    }

    if let Some(run) = &outcome {
        print_next_steps(&url, run, args.exit_when_done);
    } else if !interrupted {
        print_next_steps(&url, &RunInfo::default(), args.exit_when_done);
    }
    if !interrupted && !args.exit_when_done {
        let signal = signals.next().await?;
        say(format!("\n{signal}: stopping the worker and the server"));
    }
    shutdown(stop_worker, worker_task, server, &mut signals).await;
    printer_task.abort();

    let completed = outcome.is_some_and(|r| r.status == RunStatus::Completed as i32);
    Ok(if args.exit_when_done && !completed {
        ExitCode::from(EXIT_NOT_COMPLETED)
    } else {
        ExitCode::SUCCESS
    })
}

/// Stops the worker (running steps get its grace period), then the server. A second
/// signal stops at once.
async fn shutdown(
    stop_worker: oneshot::Sender<()>,
    worker_task: tokio::task::JoinHandle<Result<(), railyard_worker::WorkerError>>,
    server: RunningServer,
    signals: &mut Signals,
) {
    let _ = stop_worker.send(());
    let graceful = async {
        match worker_task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "worker stopped with an error"),
            Err(e) => tracing::error!(error = %e, "worker task failed"),
        }
        server.shutdown().await;
    };
    match signals.drain(graceful).await {
        Ok(Drained::Finished(())) => say("railyard dev: stopped"),
        _ => say("railyard dev: stopped at once"),
    }
}

/// What to try next, printed once the demo run is over (or at once with `--no-demo`).
fn print_next_steps(url: &str, run: &RunInfo, exit_when_done: bool) {
    if !exit_when_done {
        say(next_steps(url, &run.run_id));
    }
}

/// The next-steps text for a dev server at `url` (`run_id` empty: none yet). dev has
/// no auth, and a server refuses a non-loopback listener without it, so a worker on
/// another machine needs a `railyard server --auth` and a worker key.
fn next_steps(url: &str, run_id: &str) -> String {
    let server_flag = if url == railyard_sdk::DEFAULT_SERVER_URL {
        String::new()
    } else {
        format!(" --server {url}")
    };
    let run_id = if run_id.is_empty() { "RUN_ID" } else { run_id };
    let port = url.rsplit(':').next().unwrap_or("7400");
    format!(
        "\nThe server and the worker keep running; Ctrl-C stops both. In another terminal:\n  \
         start another run:  railyard run start {DEMO_WORKFLOW} --goal \"your goal here\"{server_flag}\n  \
         watch a run:        railyard run watch {run_id}{server_flag}\n  \
         list runs:          railyard run list{server_flag}\n  \
         add a worker:       railyard worker{server_flag} --queue {QUEUE}\n\
         Workers on other machines need API keys, which dev does not check; run a server with auth:\n  \
         railyard server --auth --listen 0.0.0.0:{port} --data-dir DIR\n  \
         RAILYARD_API_KEY=$(cat DIR/admin.key) railyard key create --role worker --queue {QUEUE}\n  \
         RAILYARD_API_KEY=<the key printed> railyard worker --server http://HOST:{port} --queue {QUEUE}"
    )
}

/// What the printer hears about.
enum Msg {
    /// From the in-process worker's event hook.
    Worker(WorkerEvent),
    /// This run is the demo: watch it and report its close.
    Demo(String),
    /// An event of a watched run that the in-process worker did not cause.
    History(String, HistoryEvent),
    /// A watched run closed (or could no longer be followed: `None`).
    Closed(String, Option<Box<RunInfo>>),
}

/// What the printer knows of a run's steps.
#[derive(Default)]
struct RunState {
    /// Step ids by index as leased here, with their titles and the step count.
    steps: HashMap<String, (u32, u32, String)>,
    /// A step leased by this worker and not yet reported.
    open_step: Option<String>,
    /// The open step's tokens so far and their estimated cost.
    usage: Option<(railyard_worker::usage::Usage, f64)>,
}

struct Printer {
    client: Client,
    namespace: String,
    /// The in-process worker's identity.
    identity: String,
    tx: mpsc::UnboundedSender<Msg>,
    workspace: PathBuf,
    demo: Option<String>,
    demo_done: Option<oneshot::Sender<RunInfo>>,
    watched: HashSet<String>,
    closed: HashMap<String, RunInfo>,
    runs: HashMap<String, RunState>,
    /// Closes waiting for the worker's report of the step that closed the run.
    pending_close: Vec<(String, Option<RunInfo>, tokio::time::Instant)>,
}

impl Printer {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Msg>) {
        loop {
            let next_deadline = self.pending_close.iter().map(|p| p.2).min();
            let msg = match next_deadline {
                Some(deadline) => match tokio::time::timeout_at(deadline, rx.recv()).await {
                    Ok(m) => m,
                    Err(_) => {
                        self.flush_closes(true);
                        continue;
                    }
                },
                None => rx.recv().await,
            };
            let Some(msg) = msg else { return };
            match msg {
                Msg::Worker(e) => self.worker_event(e),
                Msg::Demo(run_id) => {
                    self.watch(&run_id);
                    if let Some(run) = self.closed.get(&run_id).cloned() {
                        self.signal_demo_done(run);
                    }
                    self.demo = Some(run_id);
                }
                Msg::History(run_id, e) => self.history_event(&run_id, &e),
                Msg::Closed(run_id, info) => {
                    let open = self.runs.get(&run_id).is_some_and(|r| r.open_step.is_some());
                    let deadline = tokio::time::Instant::now() + CLOSE_SETTLE;
                    self.pending_close.push((run_id, info.map(|i| *i), deadline));
                    if !open {
                        self.flush_closes(false);
                    }
                }
            }
            self.flush_closes(false);
        }
    }

    /// Starts following `run_id` (once) in the background.
    fn watch(&mut self, run_id: &str) {
        if !self.watched.insert(run_id.to_string()) {
            return;
        }
        let (client, ns, tx, id) = (
            self.client.clone(),
            self.namespace.clone(),
            self.tx.clone(),
            run_id.to_string(),
        );
        tokio::spawn(follow(client, ns, self.identity.clone(), id, tx));
    }

    fn worker_event(&mut self, e: WorkerEvent) {
        let run_id = e.step.run_id.clone();
        let step_id = e.step.step_id.clone();
        if !self.watched.contains(&run_id) {
            self.watch(&run_id);
        }
        let state = self.runs.entry(run_id.clone()).or_default();
        match e.kind {
            EventKind::StepLeased {
                title,
                step_index,
                step_count,
                resumed,
            } => {
                state.open_step = Some(step_id.clone());
                state
                    .steps
                    .insert(step_id.clone(), (step_index, step_count, title.clone()));
                let resumed = if resumed {
                    ", resuming from its checkpoint"
                } else {
                    ""
                };
                say(format!(
                    "[{}/{}] {title}  (step {step_id}, attempt {}{resumed}, run {run_id})",
                    step_index + 1,
                    step_count,
                    e.step.attempt
                ));
            }
            EventKind::ModelText { text } => say(format!("      model: {}", one_line(&text, 160))),
            EventKind::ToolCall { name, summary } => {
                // These two show up as their own lines (note, completed).
                if name != "complete_step" && name != "signal_coordinator" {
                    say(format!("      tool:  {name} {summary}"));
                }
            }
            EventKind::ToolError { name, message } => say(format!(
                "      tool {name} returned an error: {}",
                one_line(&message, 160)
            )),
            EventKind::Note { kind, message } => say(format!(
                "      note to coordinator ({kind}): {}",
                one_line(&message, 200)
            )),
            EventKind::Steered { message } => say(format!("      steered: {}", one_line(&message, 200))),
            EventKind::StepCompleted { notes, artifacts } => {
                state.open_step = None;
                say(format!("      completed: {}", one_line(&notes, 300)));
                if !artifacts.is_empty() {
                    say(format!("      artifacts: {}", artifacts.join(", ")));
                }
                if let Some((usage, cost)) = state.usage.take() {
                    say(format!(
                        "      tokens: {}",
                        crate::run::view::tokens_line(&usage.to_proto(cost))
                    ));
                }
            }
            EventKind::Usage { usage, cost_usd } => state.usage = Some((usage, cost_usd)),
            EventKind::Stuck {
                signal,
                message,
                fatal,
            } => {
                let what = if fatal {
                    "STUCK, failing the step"
                } else {
                    "stuck? warned the model"
                };
                say(format!("      {what} ({signal}): {}", one_line(&message, 200)));
            }
            EventKind::StepFailed {
                error_type,
                message,
                will_retry,
            } => {
                state.open_step = None;
                let next = match will_retry {
                    Some(true) => "; another attempt is scheduled",
                    Some(false) => "; no more attempts",
                    None => "",
                };
                say(format!(
                    "      FAILED ({error_type}): {}{next}",
                    one_line(&message, 300)
                ));
            }
            EventKind::StepCanceled => {
                state.open_step = None;
                say("      canceled: cancellation was requested");
            }
            EventKind::LeaseLost { message } => {
                state.open_step = None;
                say(format!(
                    "      lease lost ({}); the server retries the step",
                    one_line(&message, 200)
                ));
            }
        }
    }

    /// Events the in-process worker did not report itself: timeouts, and steps that
    /// another worker took.
    fn history_event(&mut self, run_id: &str, e: &HistoryEvent) {
        let attrs: serde_json::Value = serde_json::from_str(&e.attributes_json).unwrap_or_default();
        let field = |k: &str| attrs.get(k).and_then(|v| v.as_str()).unwrap_or("").to_string();
        match e.event_type.as_str() {
            "StepTimedOut" => say(format!(
                "      step {} attempt {} timed out ({}) in run {run_id}; {}",
                field("stepId"),
                attrs.get("attempt").and_then(|v| v.as_u64()).unwrap_or(0),
                attrs
                    .get("timeout")
                    .map(|t| t.to_string().trim_matches('"').to_string())
                    .unwrap_or_default(),
                if attrs.get("willRetry").and_then(|v| v.as_bool()) == Some(true) {
                    "another attempt is scheduled"
                } else {
                    "no more attempts"
                }
            )),
            "StepStarted" => say(format!(
                "      step {} attempt {} of run {run_id} leased by worker {}",
                field("stepId"),
                attrs.get("attempt").and_then(|v| v.as_u64()).unwrap_or(0),
                field("worker")
            )),
            "StepCompleted" => say(format!(
                "      step {} of run {run_id} completed by {}: {}",
                field("stepId"),
                e.identity,
                one_line(&field("notes"), 200)
            )),
            "CancelRequested" => say(format!("      cancellation requested for run {run_id}")),
            _ => {}
        }
    }

    /// Prints closes whose step report has arrived (or, with `force`, whose wait is over).
    fn flush_closes(&mut self, force: bool) {
        let now = tokio::time::Instant::now();
        let pending = std::mem::take(&mut self.pending_close);
        for (run_id, info, deadline) in pending {
            let open = self.runs.get(&run_id).is_some_and(|r| r.open_step.is_some());
            if open && !(force && deadline <= now) {
                self.pending_close.push((run_id, info, deadline));
                continue;
            }
            self.print_close(&run_id, info);
        }
    }

    fn print_close(&mut self, run_id: &str, info: Option<RunInfo>) {
        let Some(run) = info else {
            say(format!(
                "run {run_id}: lost track of it; see `railyard run describe {run_id}`"
            ));
            return;
        };
        let status = status_name(run.status);
        let took = if run.close_time_unix_ms >= run.start_time_unix_ms && run.close_time_unix_ms > 0 {
            format!(
                " in {:.1}s",
                (run.close_time_unix_ms - run.start_time_unix_ms) as f64 / 1000.0
            )
        } else {
            String::new()
        };
        say(format!("\nRun {run_id} {status}{took}."));
        if !run.failure.is_empty() {
            say(format!("  reason: {}", one_line(&run.failure, 400)));
        }
        let dir = self.workspace.join(run_id);
        match list_dir(&dir) {
            Some(files) if !files.is_empty() => say(format!(
                "Artifacts are in {}/ : {}",
                dir.display(),
                files.join(", ")
            )),
            Some(_) => say(format!("Its workspace {}/ is empty.", dir.display())),
            None => say(format!(
                "Its workspace would be {}/ (no step ran in this process).",
                dir.display()
            )),
        }
        self.closed.insert(run_id.to_string(), run.clone());
        if self.demo.as_deref() == Some(run_id) {
            self.signal_demo_done(run);
        }
    }

    fn signal_demo_done(&mut self, run: RunInfo) {
        if let Some(done) = self.demo_done.take() {
            let _ = done.send(run);
        }
    }
}

/// Entries of a directory, sorted, directories marked with `/`; `None` if unreadable.
fn list_dir(dir: &Path) -> Option<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                format!("{name}/")
            } else {
                name
            }
        })
        .collect();
    names.sort();
    Some(names)
}

/// Follows a run's events until it closes; forwards what another worker or the server
/// did, then the run's final state.
async fn follow(
    client: Client,
    namespace: String,
    identity: String,
    run_id: String,
    tx: mpsc::UnboundedSender<Msg>,
) {
    let mut next = 1u64;
    let mut pauses = REOPEN.delays();
    loop {
        let stream = client.watch_run(&namespace, &run_id, next).await;
        let mut stream = match stream {
            Ok(s) => s,
            Err(e) => {
                let Some(pause) = pauses.next() else {
                    tracing::warn!(run_id = %run_id, error = %e, "cannot follow the run");
                    let _ = tx.send(Msg::Closed(run_id, None));
                    return;
                };
                tokio::time::sleep(pause).await;
                continue;
            }
        };
        let mut broken = false;
        while let Some(item) = stream.next().await {
            match item {
                Ok(event) => {
                    next = event.event_id + 1;
                    pauses = REOPEN.delays();
                    // The in-process worker reports its own steps; show only the others'.
                    let ours = event.identity == identity;
                    let forward = match event.event_type.as_str() {
                        "StepTimedOut" | "CancelRequested" => true,
                        "StepStarted" | "StepCompleted" => !ours,
                        _ => false,
                    };
                    if forward {
                        let _ = tx.send(Msg::History(run_id.clone(), event));
                    }
                }
                Err(status) => {
                    tracing::debug!(run_id = %run_id, error = %status, "watch stream broke; reopening");
                    broken = true;
                    break;
                }
            }
        }
        if !broken {
            break;
        }
        let Some(pause) = pauses.next() else {
            let _ = tx.send(Msg::Closed(run_id, None));
            return;
        };
        tokio::time::sleep(pause).await;
    }
    let info = client
        .describe_run(&namespace, &run_id)
        .await
        .ok()
        .and_then(|d| d.run)
        .map(Box::new);
    let _ = tx.send(Msg::Closed(run_id, info));
}

/// Newlines flattened, at most `max` chars.
fn one_line(s: &str, max: usize) -> String {
    railyard_text::one_line(s, max, "...")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The advice for remote workers is one a server accepts: with auth and a key, not
    /// a bare `--listen 0.0.0.0`, which is refused without `--auth`.
    #[test]
    fn next_steps_say_how_to_take_remote_workers_with_auth() {
        let text = next_steps("http://127.0.0.1:7500", "r1");
        assert!(
            text.contains("railyard run watch r1 --server http://127.0.0.1:7500"),
            "{text}"
        );
        assert!(
            text.contains("railyard server --auth --listen 0.0.0.0:7500 --data-dir DIR"),
            "{text}"
        );
        assert!(
            text.contains("key create --role worker --queue default"),
            "{text}"
        );
        assert!(
            text.contains("RAILYARD_API_KEY=<the key printed> railyard worker"),
            "{text}"
        );
        assert!(!text.contains("start dev with --listen"), "{text}");
    }
}
