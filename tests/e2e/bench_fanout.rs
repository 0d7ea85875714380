//! `railyard bench --fanout`, tiny, in debug: the bench starts its own server
//! process, and its JSON says the parent completed and every child closed.

use std::process::Command;

use crate::support::*;

#[test]
fn a_tiny_fanout_bench_completes_the_parent_and_every_child() {
    let _claim = Sandbox::new();
    let out = Command::new(BIN)
        .args([
            "bench",
            "--fanout",
            "5",
            "--fanout-pollers",
            "2",
            "--timeout",
            "120",
            "-o",
            "json",
        ])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let v = json(out);
    assert_eq!(v["children"], 5);
    assert_eq!(v["parent_status"], "COMPLETED");
    assert_eq!(v["children_closed"], 5);
    assert!(v["elapsed_ms"].as_f64().unwrap() > 0.0, "{v}");
    // Each child's start, lease-and-complete and close are durable commits.
    assert!(v["commits"].as_u64().unwrap() >= 5, "{v}");
    assert!(v["commits_per_child"].as_f64().unwrap() >= 1.0, "{v}");
    // The server process's memory, from its /proc status.
    let memory = &v["server_memory"];
    let (rss, peak) = (memory["rss_mib"].as_f64(), memory["peak_rss_mib"].as_f64());
    assert!(rss.is_some_and(|r| r > 0.0), "{v}");
    assert!(peak >= rss, "{v}");
}
