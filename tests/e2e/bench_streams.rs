//! `railyard bench --streams`, tiny, in debug: the in-process bench leases its steps,
//! measures the idle server, the baseline (the steps heartbeating) and the steps
//! streaming, and its JSON says output was sent and every side completed runs.

use std::process::Command;

use crate::support::*;

#[test]
fn a_tiny_streams_bench_measures_the_baseline_and_the_streaming_side() {
    let _claim = Sandbox::new();
    let out = Command::new(BIN)
        .args([
            "bench",
            "--streams",
            "3",
            "--runs",
            "30",
            "--workers",
            "4",
            "--starters",
            "2",
        ])
        .args(["--timeout", "120", "-o", "json"])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let v = json(out);
    assert_eq!(v["streams"], 3, "{v}");
    assert!(v["chunks_sent"].as_u64().unwrap() > 0, "{v}");
    for side in ["idle", "heartbeating_only", "with_streams"] {
        assert!(v[side]["runs_per_second"].as_f64().unwrap() > 0.0, "{side}: {v}");
        assert!(v[side]["write_p50_ms"].as_f64().unwrap() > 0.0, "{side}: {v}");
    }
    assert!(v["runs_per_second_ratio"].as_f64().unwrap() > 0.0, "{v}");
}
