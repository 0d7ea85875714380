//! Counters for `/metrics` (Prometheus text format).

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Server-wide counters. Updated with relaxed atomics: they are figures, not state.
#[derive(Default)]
pub struct Metrics {
    pub runs_started: AtomicU64,
    pub steps_completed: AtomicU64,
    pub commits: AtomicU64,
    pub commands_committed: AtomicU64,
    pub commit_micros: AtomicU64,
    pub polls: AtomicU64,
    pub polls_empty: AtomicU64,
    /// Writer commands by (name, accepted and committed): see [`Self::record_command`].
    pub commands: std::sync::Mutex<std::collections::BTreeMap<(&'static str, bool), u64>>,
}

impl Metrics {
    /// Counts one committed batch of `size` commands.
    pub fn record_commit(&self, size: usize, took: Duration) {
        self.commits.fetch_add(1, Relaxed);
        self.commands_committed.fetch_add(size as u64, Relaxed);
        self.commit_micros.fetch_add(took.as_micros() as u64, Relaxed);
    }

    /// Counts one writer command by name; `ok` when it was accepted and committed.
    pub fn record_command(&self, name: &'static str, ok: bool) {
        let mut counts = self.commands.lock().unwrap_or_else(|p| p.into_inner());
        *counts.entry((name, ok)).or_default() += 1;
    }

    /// The Prometheus text exposition of every counter.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let rows = [
            ("railyard_runs_started_total", "Runs started.", &self.runs_started),
            (
                "railyard_steps_completed_total",
                "Step attempts completed.",
                &self.steps_completed,
            ),
            (
                "railyard_commits_total",
                "Durable write transactions committed.",
                &self.commits,
            ),
            (
                "railyard_commands_committed_total",
                "Commands applied in committed transactions.",
                &self.commands_committed,
            ),
            (
                "railyard_commit_seconds_total",
                "Time spent applying and committing batches.",
                &self.commit_micros,
            ),
            ("railyard_polls_total", "Step task polls answered.", &self.polls),
            (
                "railyard_polls_empty_total",
                "Step task polls that ended with no task.",
                &self.polls_empty,
            ),
        ];
        for (name, help, counter) in rows {
            let value = counter.load(Relaxed);
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            if name == "railyard_commit_seconds_total" {
                let _ = writeln!(out, "{name} {}", value as f64 / 1e6);
            } else {
                let _ = writeln!(out, "{name} {value}");
            }
        }
        out
    }
}
