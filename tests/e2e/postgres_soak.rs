//! `railyard bench --soak --hold-transaction` on PostgreSQL, in a tiny configuration
//! (a few seconds) so that it cannot rot: counts only, never a timing. Skipped,
//! saying so, without `RAILYARD_TEST_POSTGRES`.

use std::process::Command;

use railyard_store_postgres::testing::{TestDatabase, skipped, test_url};

use crate::support::*;

#[test]
fn a_short_soak_holding_a_transaction_reports_each_interval_and_completes_every_run() {
    let Some(url) = test_url() else {
        eprintln!("{}", skipped("postgres_soak::a_short_soak_holding_a_transaction"));
        return;
    };
    let db = TestDatabase::create(&url).expect("a database of the test's own");
    let out = Command::new(BIN)
        .args(["bench", "--store", db.url(), "--soak", "3s", "--hold-transaction"])
        .args(["--report-every", "1s", "--backlog", "20"])
        .args(["--workers", "2", "--starters", "2", "--connections", "2"])
        .args(["--timeout", "120", "-o", "json"])
        .env("RUST_LOG", "warn")
        .output()
        .expect("run railyard bench --soak");
    let v = json(out);
    let intervals = v["intervals"].as_array().expect("intervals");
    assert_eq!(intervals.len(), 3, "one report a second for three seconds: {v}");
    let started = v["started"].as_u64().unwrap_or(0);
    assert!(started > 0, "{v}");
    assert_eq!(v["completed"], started, "every run started was completed: {v}");
    assert_eq!(v["verified_completed"], started, "{v}");
    assert_eq!(v["start_errors"], 0, "{v}");
    assert_eq!(v["worker_errors"], 0, "{v}");
    assert!(v["settings"]["held_txid"].as_i64().is_some(), "{v}");
    for i in intervals {
        // The held transaction still holds its snapshot at every report.
        assert!(i["held_xmin_age"].as_i64().is_some(), "{i}");
        let tables = i["tables"].as_array().expect("tables");
        assert!(tables.iter().any(|t| t["table"] == "tasks"), "{i}");
    }
    // The runs are in the database, every one completed.
    let runs: u64 = db
        .query_text("SELECT count(*) FROM runs")
        .unwrap()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert_eq!(runs, started);
    // The held transaction ended with the bench (its session goes a moment after).
    eventually(std::time::Duration::from_secs(30), || {
        let held: u64 = db
            .query_text(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE application_name = 'railyard-soak-hold' AND datname = current_database()",
            )
            .ok()
            .flatten()
            .and_then(|n| n.parse().ok())?;
        (held == 0).then_some(())
    });
}
