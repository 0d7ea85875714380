//! `railyard bench --processes`, tiny, in debug: the bench starts its own server,
//! worker and client processes; its JSON says every run completed and every figure
//! was measured; on PostgreSQL with three server nodes, every run completes with the
//! work spread over the nodes; and a bench killed with SIGKILL leaves none of its
//! processes behind.

use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use railyard_store_postgres::testing::{TestDatabase, skipped, test_url};

use crate::support::*;

#[test]
fn a_tiny_processes_bench_completes_every_run_and_measures_every_figure() {
    let sandbox = Sandbox::new();
    let out = Command::new(BIN)
        .args(["bench", "--processes", "--runs", "30", "--latency-runs", "5"])
        .args(["--workers", "4", "--worker-processes", "2", "--starters", "2"])
        .args(["--connections", "2", "--timeout", "120", "-o", "json"])
        .env("RUST_LOG", "warn")
        // Its temporary directory, which a killed bench cannot remove.
        .env("TMPDIR", sandbox.dir.path())
        .output()
        .unwrap();
    let v = json(out);
    assert_eq!(v["settings"]["worker_processes"], 2, "{v}");
    let one = &v["one_step"];
    assert_eq!(
        (one["started"].as_u64(), one["completed"].as_u64()),
        (Some(30), Some(30)),
        "{v}"
    );
    assert_eq!(one["verified_completed"], 30, "{v}");
    assert_eq!(
        (one["start_errors"].as_u64(), one["worker_errors"].as_u64()),
        (Some(0), Some(0)),
        "{v}"
    );
    let (lat, three) = (&v["latency"], &v["three_step"]);
    assert_eq!(
        (lat["runs"].as_u64(), lat["completed"].as_u64()),
        (Some(5), Some(5)),
        "{v}"
    );
    assert_eq!(lat["concurrency"], 1, "{v}");
    assert_eq!(
        (three["runs"].as_u64(), three["completed"].as_u64()),
        (Some(30), Some(30)),
        "{v}"
    );
    assert_eq!(three["concurrency"], 4, "{v}");
    assert_eq!(
        (lat["errors"].as_u64(), three["errors"].as_u64()),
        (Some(0), Some(0)),
        "{v}"
    );
    assert_eq!(v["three_step_verified_completed"], 35, "{v}");
    assert_eq!(v["floor"]["samples"], 10, "{v}");
    // Each of the floor's starts is a commit of its own (and the first, its run to describe).
    assert_eq!(v["floor"]["commits"], 11, "{v}");
    for figure in [
        &one["runs_per_second"],
        &one["server_cpu_per_run_us"],
        &lat["p50_ms"],
        &lat["p99_ms"],
        &three["runs_per_second"],
        &three["p99_ms"],
        &v["floor"]["read_rpc_p50_ms"],
        &v["floor"]["write_rpc_p50_ms"],
        &v["floor"]["commit_mean_ms"],
        &v["floor"]["write_rpc_per_commit"],
        &v["server_cpu_s"],
        &v["server_memory"]["rss_mib"],
        &v["server_memory"]["peak_rss_mib"],
    ] {
        assert!(figure.as_f64().is_some_and(|f| f > 0.0), "{figure} in {v}");
    }
}

#[test]
fn processes_benches_on_three_postgres_nodes_complete_every_run_twice_on_one_database() {
    let Some(url) = test_url() else {
        eprintln!(
            "{}",
            skipped("processes_benches_on_three_postgres_nodes_complete_every_run_twice_on_one_database")
        );
        return;
    };
    let db = TestDatabase::create(&url).expect("a database of the test's own");
    let sandbox = Sandbox::new();
    // Twice on one database: the second bench meets the first one's leftovers (the
    // floor's runs wait on a queue, its killed leader's lease has not expired) and
    // neither leases nor counts them.
    for round in 1..=2 {
        let out = Command::new(BIN)
            .args(["bench", "--processes", "--store", db.url(), "--nodes", "3"])
            .args(["--runs", "30", "--latency-runs", "5", "--workers", "6"])
            .args(["--worker-processes", "3", "--starters", "2", "--connections", "2"])
            .args(["--timeout", "120", "-o", "json"])
            .env("RUST_LOG", "warn")
            .env("TMPDIR", sandbox.dir.path())
            .output()
            .unwrap();
        let v = json(out);
        assert_eq!(v["settings"]["nodes"], 3, "round {round}: {v}");
        assert_eq!(v["one_step"]["completed"], 30, "round {round}: {v}");
        assert_eq!(v["one_step"]["verified_completed"], 30, "round {round}: {v}");
        assert_eq!(v["three_step"]["completed"], 30, "round {round}: {v}");
        assert_eq!(v["three_step_verified_completed"], 35, "round {round}: {v}");
        assert!(
            v["server_cpu_s"].as_f64().is_some_and(|f| f > 0.0),
            "round {round}: {v}"
        );
    }
}

/// The pids whose parent is `parent`.
fn children_of(parent: u32) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // Field 4, after the name in parentheses: the parent's pid.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(parent) {
            pids.push(pid);
        }
    }
    pids
}

/// Gone, or dead and not yet reaped by whoever inherited it.
fn is_dead(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, r)| r.trim_start().chars().next());
    matches!(state, None | Some('Z' | 'X'))
}

#[test]
fn a_processes_bench_killed_with_sigkill_leaves_no_process_behind() {
    let sandbox = Sandbox::new();
    let mut bench = Command::new(BIN)
        // Enough runs that the bench is still in its first phase when it is killed.
        .args(["bench", "--processes", "--runs", "1000000", "--latency-runs", "5"])
        .args(["--workers", "2", "--worker-processes", "2", "--timeout", "120"])
        .env("RUST_LOG", "warn")
        // Its temporary directory, which a killed bench cannot remove.
        .env("TMPDIR", sandbox.dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The server, two workers and the starter.
    let children = eventually(Duration::from_secs(60), || {
        let pids = children_of(bench.id());
        (pids.len() >= 4).then_some(pids)
    });
    kill(Pid::from_raw(bench.id() as i32), Signal::SIGKILL).unwrap();
    bench.wait().unwrap();
    eventually(Duration::from_secs(30), || {
        children.iter().all(|&pid| is_dead(pid)).then_some(())
    });
}
