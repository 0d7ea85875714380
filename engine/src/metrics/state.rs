//! Gauges of the server's state, read at scrape time: queue backlog and parked polls
//! per (namespace, queue) from matching, leases in flight per namespace from the
//! lease deadlines, open runs per namespace from storage. Nothing is kept up to date
//! on the request path for them.

use std::collections::BTreeMap;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;

use railyard_store::StorageError;

/// Counts of something per namespace, read from storage.
pub type Counts = Box<dyn Fn() -> Result<BTreeMap<String, u64>, StorageError> + Send + Sync>;

/// One queue's gauges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueGauge {
    pub namespace: String,
    pub queue: String,
    /// Ready tasks.
    pub backlog: usize,
    /// Long polls parked on it.
    pub parked: usize,
}

/// Where the state gauges read from (matching, the lease deadlines, storage); each
/// is read at scrape time.
pub struct StateSources {
    /// Backlog and parked polls per queue.
    pub queues: Box<dyn Fn() -> Vec<QueueGauge> + Send + Sync>,
    /// Leases in flight per namespace.
    pub leases: Box<dyn Fn() -> BTreeMap<String, u64> + Send + Sync>,
    /// Open runs per namespace (every namespace, zero included).
    pub open_runs: Counts,
    /// Schedules per namespace.
    pub schedules: Counts,
    /// The storage backend's own numbers (pool, retries, its claim on the database).
    pub storage: super::storage::StatsSource,
}

impl std::fmt::Debug for StateSources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateSources").finish_non_exhaustive()
    }
}

/// Writes one gauge family: `rows` of (labels, value).
fn gauge<'a, const N: usize>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = ([(&'a str, &'a str); N], u64)>,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, value) in rows {
        ConstGauge::new(value).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

impl Collector for StateSources {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let queues = (self.queues)();
        gauge(
            &mut encoder,
            "railyard_queue_backlog",
            "Step tasks ready and waiting for a poll, per queue.",
            queues.iter().map(|q| {
                (
                    [("namespace", q.namespace.as_str()), ("queue", q.queue.as_str())],
                    q.backlog as u64,
                )
            }),
        )?;
        gauge(
            &mut encoder,
            "railyard_parked_polls",
            "Long polls waiting for a task, per queue.",
            queues.iter().map(|q| {
                (
                    [("namespace", q.namespace.as_str()), ("queue", q.queue.as_str())],
                    q.parked as u64,
                )
            }),
        )?;

        let open = match (self.open_runs)() {
            Ok(counts) => Some(counts),
            Err(e) => {
                tracing::warn!(error = %e, "cannot count open runs for /metrics");
                None
            }
        };
        // Every namespace with open runs gets a lease gauge, zero included.
        let mut leases: BTreeMap<String, u64> =
            open.iter().flatten().map(|(ns, _)| (ns.clone(), 0)).collect();
        leases.extend((self.leases)());
        gauge(
            &mut encoder,
            "railyard_active_leases",
            "Step leases in flight (leased and not yet completed, failed or timed out), per namespace.",
            leases.iter().map(|(ns, n)| ([("namespace", ns.as_str())], *n)),
        )?;
        if let Some(open) = &open {
            gauge(
                &mut encoder,
                "railyard_open_runs",
                "Runs not yet closed, per namespace.",
                open.iter().map(|(ns, n)| ([("namespace", ns.as_str())], *n)),
            )?;
        }
        match (self.schedules)() {
            Ok(counts) => gauge(
                &mut encoder,
                "railyard_schedules",
                "Schedules, per namespace.",
                counts.iter().map(|(ns, n)| ([("namespace", ns.as_str())], *n)),
            )?,
            Err(e) => tracing::warn!(error = %e, "cannot count schedules for /metrics"),
        }
        Ok(())
    }
}
