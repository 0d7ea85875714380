//! `railyard bench --preload`, tiny, in debug: the bench writes a store of closed
//! and open runs, serves it and a baseline from server processes, and its JSON has
//! every call's figures on both, the lists' first pages, and the server's memory.

use std::process::Command;

use crate::support::*;

#[test]
fn a_tiny_preload_bench_measures_every_call_on_both_stores() {
    let sandbox = Sandbox::new();
    let out = Command::new(BIN)
        .args(["bench", "--preload", "2000", "--preload-open", "50"])
        .args(["--preload-steps", "70", "--latency-runs", "3", "-o", "json"])
        .env("RUST_LOG", "warn")
        .env("TMPDIR", sandbox.dir.path())
        .output()
        .unwrap();
    let v = json(out);
    let (base, loaded) = (&v["baseline"], &v["preloaded"]);
    assert_eq!(
        (base["closed_runs"].as_u64(), base["open_runs"].as_u64()),
        (Some(0), Some(50)),
        "{v}"
    );
    assert_eq!(
        (loaded["closed_runs"].as_u64(), loaded["open_runs"].as_u64()),
        (Some(2000), Some(50)),
        "{v}"
    );
    // RUNNING: the 50 preloaded open runs and the 20 of bench-3 the bench started
    // on both stores; bench-3: those 20.
    assert_eq!(base["listed_by_status"], 70, "{v}");
    assert_eq!(loaded["listed_by_status"], 70, "{v}");
    assert_eq!(
        (
            base["listed_by_workflow"].as_u64(),
            loaded["listed_by_workflow"].as_u64()
        ),
        (Some(20), Some(20)),
        "{v}"
    );
    for side in [base, loaded] {
        for call in ["list_by_status", "list_by_workflow", "describe", "start"] {
            assert_eq!(side["calls"][call]["samples"], 3, "{call}: {v}");
        }
        assert_eq!(side["calls"]["complete"]["samples"], 70, "{v}");
        for call in [
            "list_by_status",
            "list_by_workflow",
            "describe",
            "start",
            "complete",
        ] {
            assert!(
                side["calls"][call]["p50_ms"].as_f64().is_some_and(|f| f > 0.0),
                "{call}: {v}"
            );
        }
        assert!(
            side["server_rss_mib_after"].as_f64().is_some_and(|f| f > 0.0),
            "{v}"
        );
    }
    assert!(v["p50_ratio"]["start"].as_f64().is_some_and(|f| f > 0.0), "{v}");
}
