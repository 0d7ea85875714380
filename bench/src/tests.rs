//! Tests of `railyard bench`: percentiles, the bench workflows it writes, and memory.

use super::*;

#[test]
fn percentiles_use_nearest_rank() {
    let samples: Vec<_> = (1..=100).map(Duration::from_millis).collect();
    assert_eq!(percentile(&samples, 50.0), Duration::from_millis(50));
    assert_eq!(percentile(&samples, 99.0), Duration::from_millis(99));
    assert_eq!(percentile(&samples, 100.0), Duration::from_millis(100));
    assert_eq!(percentile(&samples[..1], 99.0), Duration::from_millis(1));
    assert_eq!(percentile(&[], 50.0), Duration::ZERO);
}

#[test]
fn writes_two_bench_workflows() {
    let dir = tempfile::tempdir().unwrap();
    write_workflows(dir.path()).unwrap();
    let three: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("bench-3.json")).unwrap()).unwrap();
    assert_eq!(three["id"], "bench-3");
    assert_eq!(three["steps"].as_array().map(Vec::len), Some(3));
    assert_eq!(three["steps"][0]["prompt"], "Bench: {{goal}}");
    let one: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("bench-1.json")).unwrap()).unwrap();
    assert_eq!(one["steps"].as_array().map(Vec::len), Some(1));
}

#[test]
fn memory_is_read_from_proc_status() {
    let status = "Name:\trailyard\nVmHWM:\t   58368 kB\nVmRSS:\t   42240 kB\nThreads:\t9\n";
    let m = Memory::parse(status).unwrap();
    assert_eq!(
        m,
        Memory {
            rss_kib: 42_240,
            peak_kib: 58_368
        }
    );
    assert_eq!(m.line(), "RSS 41.2 MiB (peak 57.0 MiB)");
    assert_eq!(m.json()["peak_rss_mib"], 57.0);
    assert_eq!(Memory::parse("VmRSS:\t1 kB\n"), None);
    if cfg!(target_os = "linux") {
        let own = Memory::of("self").unwrap();
        assert!(own.rss_kib > 0 && own.peak_kib >= own.rss_kib, "{own:?}");
    }
}

#[test]
fn a_goal_has_the_words_asked_for_and_they_are_indexed_as_distinct_words() {
    assert_eq!(bench_goal(7, 0), "run 7");
    let goal = bench_goal(7, 40);
    assert_eq!(goal.split(' ').count(), 42);
    let indexed = railyard_model::attributes::text_words(&goal);
    // Most of the 40 words are distinct; "run" and "7" are words too.
    assert!(indexed.len() > 30, "{indexed:?}");
    assert_ne!(bench_goal(8, 40), goal);
}
