//! The storage backend's own numbers, read at scrape time from
//! `railyard_store::Backend::stats` (plain numbers: the store knows nothing of
//! Prometheus). An embedded database (redb) has none, and none of these families is
//! written then.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use railyard_store::BackendStats;

/// Reads the backend's numbers.
pub type StatsSource = Box<dyn Fn() -> BackendStats + Send + Sync>;

/// The collector over a [`StatsSource`].
pub struct StorageStats(pub StatsSource);

impl std::fmt::Debug for StorageStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StorageStats").finish_non_exhaustive()
    }
}

/// One metric without labels.
fn single(
    encoder: &mut DescriptorEncoder,
    (name, help, kind): (&str, &str, MetricType),
    value: u64,
) -> Result<(), std::fmt::Error> {
    let metric = encoder.encode_descriptor(name, help, None, kind)?;
    match kind {
        MetricType::Counter => ConstCounter::new(value).encode(metric),
        _ => ConstGauge::new(value).encode(metric),
    }
}

/// One family of one kind, its rows (labels, value).
fn family<'a, const N: usize>(
    encoder: &mut DescriptorEncoder,
    (name, help, kind): (&str, &str, MetricType),
    rows: impl IntoIterator<Item = ([(&'a str, &'a str); N], u64)>,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, kind)?;
    for (labels, value) in rows {
        let metric = family.encode_family(&labels)?;
        match kind {
            MetricType::Counter => ConstCounter::new(value).encode(metric)?,
            _ => ConstGauge::new(value).encode(metric)?,
        }
    }
    Ok(())
}

impl Collector for StorageStats {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stats = (self.0)();
        if let Some(pool) = &stats.pool {
            for (name, help, value) in [
                (
                    "railyard_db_pool_max",
                    "Most database connections the pool may open.",
                    pool.max,
                ),
                ("railyard_db_pool_open", "Database connections open.", pool.open),
                (
                    "railyard_db_pool_in_use",
                    "Database connections in use.",
                    pool.in_use,
                ),
                (
                    "railyard_db_pool_waiting",
                    "Callers waiting for a database connection.",
                    pool.waiting,
                ),
            ] {
                single(&mut encoder, (name, help, MetricType::Gauge), value)?;
            }
        }
        if !stats.retries.is_empty() {
            family(
                &mut encoder,
                (
                    "railyard_db_write_retries",
                    "Write transactions run again because the database asked, by cause \
                     (serialization: SQLSTATE 40001, deadlock: 40P01).",
                    MetricType::Counter,
                ),
                stats.retries.iter().map(|(cause, n)| ([("cause", *cause)], *n)),
            )?;
        }
        if let Some(claim) = &stats.claim {
            let node = [("node", claim.node.as_str())];
            family(
                &mut encoder,
                (
                    "railyard_db_lease_renewals",
                    "Renewals of this server's writer lease (each write transaction's, and the idle timer's).",
                    MetricType::Counter,
                ),
                [(node, claim.renewals)],
            )?;
            family(
                &mut encoder,
                (
                    "railyard_db_claim_conflicts",
                    "Renewals of the writer lease that found another node holding it (the fence failed).",
                    MetricType::Counter,
                ),
                [(node, claim.conflicts)],
            )?;
            family(
                &mut encoder,
                (
                    "railyard_db_lease_held",
                    "1 while this server holds the database's writer lease, 0 once it lost it.",
                    MetricType::Gauge,
                ),
                [(node, u64::from(claim.held))],
            )?;
            family(
                &mut encoder,
                (
                    "railyard_db_lease_epoch",
                    "The epoch of this server's claim on the database.",
                    MetricType::Gauge,
                ),
                [(node, u64::try_from(claim.epoch).unwrap_or(0))],
            )?;
        }
        Ok(())
    }
}
