//! `railyard bench --agents`, tiny, in debug: the bench starts its own server
//! process and client processes, and its JSON says every agent run completed, the
//! heartbeats after the first appended, and the server's figures were read.

use std::process::Command;

use crate::support::*;

#[test]
fn a_tiny_agents_bench_completes_every_run_appending_its_heartbeats() {
    let _claim = Sandbox::new();
    let out = Command::new(BIN)
        .args(["bench", "--agents", "3", "--turns", "6", "--agent-processes", "2"])
        .args(["--timeout", "120", "-o", "json"])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let v = json(out);
    assert_eq!(
        (v["agents"].as_u64(), v["completed"].as_u64()),
        (Some(3), Some(3)),
        "{v}"
    );
    assert_eq!(v["client_processes"], 2, "{v}");
    // One whole checkpoint per step, the other turns appended, none refused.
    assert_eq!(v["checkpoints_whole"], 3, "{v}");
    assert_eq!(v["checkpoints_appended"], 15, "{v}");
    assert_eq!(v["appends_refused"], 0, "{v}");
    let delta = v["turn_delta_bytes"].as_f64().unwrap();
    assert!((4096.0..=20480.0).contains(&delta), "{v}");
    assert!(v["wchar_per_turn"].as_f64().unwrap() > 0.0, "{v}");
    for key in ["heartbeat_first_p50_ms", "heartbeat_last_p99_ms"] {
        assert!(v[key].as_f64().unwrap() > 0.0, "{key}: {v}");
    }
    assert!(v["server_memory"]["peak_rss_mib"].as_f64().unwrap() > 0.0, "{v}");
}
