//! The server's metrics, served on `/metrics` in the OpenMetrics text format
//! (`prometheus-client`).
//!
//! - Counters and histograms are bumped where things happen: a relaxed atomic add
//!   or a histogram observe, nothing more, on the request and commit paths.
//! - RPC latency per gRPC method and status code is the transport's: the server
//!   hands its collector in ([`Metrics::with_state`]'s `extra`).
//! - Gauges of the server's state (backlog, parked polls, leases, open runs) are read
//!   at scrape time by the collector of [`state`], so keeping them costs nothing.

pub mod state;
pub mod storage;

use std::ops::Deref;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

pub use state::StateSources;

/// The `Content-Type` of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A counter bumped with `fetch_add(n, Relaxed)` (it dereferences to its atomic) and
/// exported through the registry.
#[derive(Debug, Default)]
pub struct Count(Counter);

impl Deref for Count {
    type Target = AtomicU64;

    fn deref(&self) -> &AtomicU64 {
        self.0.inner()
    }
}

/// Labels of `railyard_commands_total`: the command's name and `ok` or `error`.
type CommandLabels = [(&'static str, &'static str); 2];

/// Labels of `railyard_schedule_fires_total`: namespace, schedule and reason.
type ScheduleLabels = [(&'static str, String); 3];

/// Labels of `railyard_tokens_total`: workflow, model and kind of token.
type TokenLabels = [(&'static str, String); 3];

/// Labels of `railyard_token_cost_usd_total`: workflow and model.
type CostLabels = [(&'static str, String); 2];

/// Distinct (workflow, model) pairs exported; a model past it is counted as `other`,
/// so a worker reporting ever new model names cannot grow the metrics without bound.
const MAX_TOKEN_SERIES: usize = 1024;

/// The kinds `railyard_tokens_total` counts.
const TOKEN_KINDS: [&str; 4] = ["input", "output", "cache_read", "cache_write"];

/// The reasons `railyard_schedule_fires_total` counts a fire under.
const FIRE_REASONS: [&str; 5] = [
    "taken",
    "skipped_overlap",
    "missed_catchup_window",
    "buffer_overflow",
    "start_failed",
];

/// Every metric of one server.
pub struct Metrics {
    /// Runs started (`railyard_runs_started_total`).
    pub runs_started: Count,
    /// Step attempts completed (`railyard_steps_completed_total`).
    pub steps_completed: Count,
    /// Durable write transactions committed (`railyard_commits_total`).
    pub commits: Count,
    /// Commands applied in committed transactions (`railyard_commands_committed_total`).
    pub commands_committed: Count,
    /// Step task polls answered (`railyard_polls_total`).
    pub polls: Count,
    /// Step task polls that ended with no task (`railyard_polls_empty_total`).
    pub polls_empty: Count,
    commit_duration: Histogram,
    commit_batch: Histogram,
    commands: Family<CommandLabels, Counter>,
    schedule_fires: Family<ScheduleLabels, Counter>,
    runs_purged: Family<[(&'static str, String); 1], Counter>,
    tokens: Family<TokenLabels, Counter>,
    token_cost: Family<CostLabels, Counter<f64, AtomicU64>>,
    token_series: std::sync::Mutex<std::collections::HashSet<(String, String)>>,
    trigger_polls: Family<ScheduleLabels, Counter>,
    trigger_poll_items: Family<[(&'static str, String); 2], Counter>,
    trigger_poll_errors: Family<[(&'static str, String); 2], Counter>,
    registry: Registry,
}

impl Default for Metrics {
    /// Metrics without the state gauges (for a writer or handlers under test).
    fn default() -> Self {
        Self::build(None, Vec::new())
    }
}

impl Metrics {
    /// Metrics whose gauges read `state` at every scrape, rendered with the
    /// collectors in `extra` (the server's gRPC latency table).
    pub fn with_state(state: StateSources, extra: Vec<Box<dyn Collector>>) -> Self {
        Self::build(Some(state), extra)
    }

    fn build(state: Option<StateSources>, extra: Vec<Box<dyn Collector>>) -> Self {
        let m = Self {
            runs_started: Count::default(),
            steps_completed: Count::default(),
            commits: Count::default(),
            commands_committed: Count::default(),
            polls: Count::default(),
            polls_empty: Count::default(),
            // 100 µs to ~3.3 s: an fsync on fast storage up to a badly stalled disk.
            commit_duration: Histogram::new(exponential_buckets(0.0001, 2.0, 16)),
            // 1 to 1024 commands: the writer takes at most 1024 per batch.
            commit_batch: Histogram::new(exponential_buckets(1.0, 2.0, 11)),
            commands: Family::default(),
            schedule_fires: Family::default(),
            runs_purged: Family::default(),
            tokens: Family::default(),
            token_cost: Family::default(),
            token_series: Default::default(),
            trigger_polls: Family::default(),
            trigger_poll_items: Family::default(),
            trigger_poll_errors: Family::default(),
            registry: Registry::default(),
        };
        let mut registry = Registry::default();
        // The registry ends each help text with a period.
        let counters = [
            ("railyard_runs_started", "Runs started", &m.runs_started),
            (
                "railyard_steps_completed",
                "Step attempts completed",
                &m.steps_completed,
            ),
            (
                "railyard_commits",
                "Durable write transactions committed",
                &m.commits,
            ),
            (
                "railyard_commands_committed",
                "Commands applied in committed transactions",
                &m.commands_committed,
            ),
            ("railyard_polls", "Step task polls answered", &m.polls),
            (
                "railyard_polls_empty",
                "Step task polls that ended with no task",
                &m.polls_empty,
            ),
        ];
        for (name, help, count) in counters {
            // A clone shares the atomic: the registry reads what the server bumps.
            registry.register(name, help, count.0.clone());
        }
        registry.register(
            "railyard_commands",
            "Writer commands applied, by command and outcome (ok or error)",
            m.commands.clone(),
        );
        registry.register(
            "railyard_schedule_fires",
            "Fires of each schedule, by what became of them: taken (a run started), \
             skipped_overlap, missed_catchup_window, buffer_overflow, start_failed",
            m.schedule_fires.clone(),
        );
        registry.register(
            "railyard_runs_purged",
            "Closed runs purged past their namespace's retention, by namespace",
            m.runs_purged.clone(),
        );
        registry.register(
            "railyard_tokens",
            "Model tokens the workers reported, by workflow, model and kind \
             (input, output, cache_read, cache_write)",
            m.tokens.clone(),
        );
        registry.register(
            "railyard_token_cost_usd",
            "Estimated cost of the reported tokens in US dollars (the workers' price tables), \
             by workflow and model",
            m.token_cost.clone(),
        );
        registry.register(
            "railyard_trigger_polls",
            "Polls of each polled trigger, by outcome (ok, not_modified, error, rate_limited)",
            m.trigger_polls.clone(),
        );
        registry.register(
            "railyard_trigger_poll_items",
            "Items a polled trigger found with an event not seen before, by trigger",
            m.trigger_poll_items.clone(),
        );
        registry.register(
            "railyard_trigger_poll_errors",
            "Polls of each polled trigger that failed or were rate limited",
            m.trigger_poll_errors.clone(),
        );
        registry.register_with_unit(
            "railyard_commit_duration",
            "Time to apply and durably commit one batch of commands",
            Unit::Seconds,
            m.commit_duration.clone(),
        );
        registry.register(
            "railyard_commit_batch_commands",
            "Commands in one committed batch",
            m.commit_batch.clone(),
        );
        for collector in extra {
            registry.register_collector(collector);
        }
        if let Some(mut state) = state {
            let storage = std::mem::replace(&mut state.storage, Box::new(Default::default));
            registry.register_collector(Box::new(storage::StorageStats(storage)));
            registry.register_collector(Box::new(state));
        }
        Self { registry, ..m }
    }

    /// Counts one committed batch of `size` commands that took `took` to apply and commit.
    pub fn record_commit(&self, size: usize, took: Duration) {
        self.commits.0.inc();
        self.commands_committed.0.inc_by(size as u64);
        self.commit_duration.observe(took.as_secs_f64());
        self.commit_batch.observe(size as f64);
    }

    /// Counts one writer command by name (`"start"`, `"complete"` ...) and outcome.
    pub fn record_command(&self, name: &'static str, ok: bool) {
        let outcome = if ok { "ok" } else { "error" };
        self.commands
            .get_or_create(&[("command", name), ("outcome", outcome)])
            .inc();
    }

    /// Counts what a schedule's counters gained from `before` to `after`. Every
    /// reason of a schedule is exported once it has any, zero included, so an alert
    /// can watch `taken` stop growing.
    pub fn record_schedule(
        &self,
        ns: &str,
        schedule_id: &str,
        before: &railyard_model::schedule::state::Counters,
        after: &railyard_model::schedule::state::Counters,
    ) {
        let pairs = [
            (before.taken, after.taken),
            (before.skipped_overlap, after.skipped_overlap),
            (before.missed_catchup_window, after.missed_catchup_window),
            (before.buffer_overflow, after.buffer_overflow),
            (before.start_failed, after.start_failed),
        ];
        for (reason, (b, a)) in FIRE_REASONS.into_iter().zip(pairs) {
            let labels = [
                ("namespace", ns.to_string()),
                ("schedule", schedule_id.to_string()),
                ("reason", reason.to_string()),
            ];
            self.schedule_fires
                .get_or_create(&labels)
                .inc_by(a.saturating_sub(b));
        }
    }

    /// Counts `n` runs of `ns` purged by the retention purge.
    pub fn record_purged(&self, ns: &str, n: u64) {
        self.runs_purged
            .get_or_create(&[("namespace", ns.to_string())])
            .inc_by(n);
    }

    /// Counts tokens a heartbeat added to a run of `workflow` on `model`: a few atomic
    /// adds (and, the first time a pair is seen, one set insert).
    pub fn record_tokens(&self, workflow: &str, model: &str, added: &railyard_model::run::Usage) {
        let model = {
            let mut seen = self.token_series.lock().unwrap_or_else(|p| p.into_inner());
            let key = (workflow.to_string(), model.to_string());
            if seen.contains(&key) || seen.len() < MAX_TOKEN_SERIES {
                seen.insert(key);
                model
            } else {
                "other"
            }
        };
        let counts = [added.input, added.output, added.cache_read, added.cache_write];
        for (kind, n) in TOKEN_KINDS.into_iter().zip(counts) {
            if n > 0 {
                let labels = [
                    ("workflow", workflow.to_string()),
                    ("model", model.to_string()),
                    ("kind", kind.to_string()),
                ];
                self.tokens.get_or_create(&labels).inc_by(n);
            }
        }
        if added.cost_usd > 0.0 {
            let labels = [("workflow", workflow.to_string()), ("model", model.to_string())];
            self.token_cost.get_or_create(&labels).inc_by(added.cost_usd);
        }
    }

    /// Counts one poll of a polled trigger: its outcome (`ok`, `not_modified`,
    /// `error`, `rate_limited`) and the items with a new event it found.
    pub fn record_trigger_poll(&self, ns: &str, trigger: &str, outcome: &'static str, items: u64) {
        let labels = [
            ("namespace", ns.to_string()),
            ("trigger", trigger.to_string()),
            ("outcome", outcome.to_string()),
        ];
        self.trigger_polls.get_or_create(&labels).inc();
        let two = [("namespace", ns.to_string()), ("trigger", trigger.to_string())];
        self.trigger_poll_items.get_or_create(&two).inc_by(items);
        let errors = self.trigger_poll_errors.get_or_create(&two);
        if matches!(outcome, "error" | "rate_limited") {
            errors.inc();
        }
    }

    /// Drops a deleted schedule's series.
    pub fn forget_schedule(&self, ns: &str, schedule_id: &str) {
        for reason in FIRE_REASONS {
            self.schedule_fires.remove(&[
                ("namespace", ns.to_string()),
                ("schedule", schedule_id.to_string()),
                ("reason", reason.to_string()),
            ]);
        }
    }

    /// The OpenMetrics text exposition of every metric ([`CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        render(&self.registry)
    }
}

/// The OpenMetrics text exposition of `registry` ([`CONTENT_TYPE`]).
pub fn render(registry: &Registry) -> String {
    let mut out = String::new();
    if let Err(e) = text::encode(&mut out, registry) {
        // Writing to a String cannot fail; a collector that did has logged why.
        tracing::error!(error = %e, "cannot encode metrics");
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering::Relaxed;

    use super::*;

    #[test]
    fn counters_keep_their_names_and_commands_count_by_name_and_outcome() {
        let m = Metrics::default();
        m.runs_started.fetch_add(2, Relaxed);
        m.polls.fetch_add(1, Relaxed);
        m.record_commit(3, Duration::from_millis(2));
        m.record_command("start", true);
        m.record_command("start", true);
        m.record_command("complete", false);
        let text = m.render();
        let lines: Vec<&str> = text.lines().collect();
        for want in [
            "railyard_runs_started_total 2",
            "railyard_steps_completed_total 0",
            "railyard_polls_total 1",
            "railyard_polls_empty_total 0",
            "railyard_commits_total 1",
            "railyard_commands_committed_total 3",
            r#"railyard_commands_total{command="start",outcome="ok"} 2"#,
            r#"railyard_commands_total{command="complete",outcome="error"} 1"#,
            "railyard_commit_duration_seconds_count 1",
            "railyard_commit_batch_commands_sum 3.0",
            "# EOF",
        ] {
            assert!(lines.contains(&want), "{want:?} not in:\n{text}");
        }
    }

    #[test]
    fn tokens_count_by_workflow_model_and_kind() {
        let m = Metrics::default();
        let u = railyard_model::run::Usage {
            input: 100,
            output: 20,
            cache_read: 0,
            cache_write: 5,
            cost_usd: 0.25,
        };
        m.record_tokens("demo", "claude-x", &u);
        m.record_tokens("demo", "claude-x", &u);
        let text = m.render();
        for want in [
            r#"railyard_tokens_total{workflow="demo",model="claude-x",kind="input"} 200"#,
            r#"railyard_tokens_total{workflow="demo",model="claude-x",kind="output"} 40"#,
            r#"railyard_tokens_total{workflow="demo",model="claude-x",kind="cache_write"} 10"#,
            r#"railyard_token_cost_usd_total{workflow="demo",model="claude-x"} 0.5"#,
        ] {
            assert!(text.lines().any(|l| l == want), "{want:?} not in:\n{text}");
        }
        // Past the series limit, new models are counted as "other".
        // One pair is taken by "demo" above.
        for i in 0..MAX_TOKEN_SERIES - 1 {
            m.record_tokens("w", &format!("m{i}"), &u);
        }
        m.record_tokens("w", "one-too-many", &u);
        let text = m.render();
        assert!(!text.contains("one-too-many"));
        assert!(text.contains(r#"model="other",kind="input"} 100"#), "{text}");
    }
}
