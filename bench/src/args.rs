//! The flags of `railyard bench`, derived with clap: the binary flattens them into
//! its `bench` command and hands them to [`crate::run`].

use std::time::Duration;

use clap::Args;

use crate::soak;
use crate::timefmt::parse_duration;

/// Flags of `railyard bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Runs of the one-step workflow for the throughput figure (0 skips it).
    #[arg(long, value_name = "N", default_value_t = 5000)]
    pub runs: u32,
    /// Concurrent workers for the throughput figure (with --processes: StepWorker
    /// loops over --worker-processes, and the three-step closed loop's concurrency).
    #[arg(long, value_name = "N", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..))]
    pub workers: u32,
    /// Runs of the three-step workflow for the latency figure (0 skips it).
    #[arg(long, value_name = "N", default_value_t = 200)]
    pub latency_runs: u32,
    /// Concurrent starters for the throughput figure.
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    pub starters: u32,
    /// gRPC connections the bench clients spread over.
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    pub connections: u32,
    /// Words added to each throughput run's goal, drawn from a vocabulary of 2,000,
    /// as an agent's goal has: each distinct word is a row of the goal-word index
    /// written at the start (at most 64 are indexed).
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=200))]
    pub goal_words: u32,
    /// Give up a phase after this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    pub timeout: u64,
    /// Instead of the run phases: N schedules (10000 when N is omitted) due at the same
    /// minute boundary, on a `railyard server` process; prints the fire lag and the
    /// server's idle CPU and memory.
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "10000",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub schedules: Option<u32>,
    /// Least time between starting to create the schedules and their due boundary.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub schedule_lead: Duration,
    /// Instead of the run phases: N signed webhook deliveries (1000 when N is
    /// omitted) from --senders concurrent senders to a trigger on a `railyard server`
    /// process; checks each was answered 202 and started exactly once, and prints
    /// the rate and p99.
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "1000",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub webhooks: Option<u32>,
    /// Concurrent webhook senders.
    #[arg(long, value_name = "N", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..))]
    pub senders: u32,
    /// Instead of the run phases: one parent run spawning N children (100 when N is
    /// omitted, at most 100) of a no-op workflow and waiting for all, on a `railyard
    /// server` process; prints the time from start to parent completed and the
    /// server's commits per child.
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "100",
          value_parser = clap::value_parser!(u32).range(1..=100))]
    pub fanout: Option<u32>,
    /// Run the in-process server's (with --processes: the server process's) runs on
    /// this PostgreSQL database
    /// (postgres://USER@HOST:PORT/DB; the password from PGPASSWORD, or in the URL)
    /// instead of redb in a temp directory. The bench's runs stay in it: give it a
    /// database on which no server runs (with --processes, each bench's runs are in a
    /// namespace of its own, so a database may be reused).
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// With --store: a PEM file of the root certificates the database's certificate
    /// must chain to.
    #[arg(long, value_name = "FILE", requires = "store")]
    pub store_ca: Option<std::path::PathBuf>,
    /// Concurrent pollers completing the fan-out's child steps.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub fanout_pollers: u32,
    /// Instead of the run phases: N leased agent steps (1000 when N is omitted) on a
    /// `railyard server` process, each heartbeating a transcript that grows by a turn
    /// of 4-20 KB for --turns turns, from --agent-processes client processes; prints
    /// heartbeat p50/p99 over the first and the last 10% of turns, the server's bytes
    /// written per turn, its CPU and peak memory.
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "1000",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub agents: Option<u32>,
    /// Turns of each agent step.
    #[arg(long, value_name = "N", default_value_t = 300, value_parser = clap::value_parser!(u32).range(1..))]
    pub turns: u32,
    /// Client processes the agent steps are spread over.
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub agent_processes: u32,
    /// Instead of the run phases alone: the throughput phase and the durable write
    /// p50 on an idle server, with N leased steps (100 when N is omitted) heartbeating,
    /// and with the same steps also streaming 50 live output chunks a second each;
    /// prints each, the ratio of streaming to heartbeating only, and the CPU of the streams.
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "100",
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub streams: Option<u32>,
    /// The run phases with the server, workers and clients as separate processes: a
    /// `railyard server` process on a temporary directory (or --store), --workers
    /// StepWorker loops in --worker-processes processes, and client processes, all
    /// over loopback with the SDK. Prints one-step runs/s, three-step start-to-completed
    /// p50/p99 at concurrency 1, three-step runs/s at concurrency --workers, the
    /// read and durable write RPC floor, and the server's CPU and memory.
    #[arg(long, conflicts_with_all = ["schedules", "webhooks", "fanout", "agents"])]
    pub processes: bool,
    /// Instead of the run phases: write a store of N closed runs (1000000 when N is
    /// omitted) and --preload-open open runs straight through the redb backend, and
    /// compare, on a `railyard server` process, ListRuns (first page, by status and
    /// by workflow), DescribeRun, StartRun and step completions (p50/p99 over
    /// --latency-runs calls) and the server's memory with a store of the open runs only.
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "1000000",
          conflicts_with_all = ["schedules", "webhooks", "fanout", "agents", "processes"])]
    pub preload: Option<u64>,
    /// With --preload: the open runs in both stores (their steps wait on a queue
    /// nothing polls).
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub preload_open: u32,
    /// With --preload: step completions measured, of runs of a 64-step workflow.
    #[arg(long, value_name = "N", default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub preload_steps: u32,
    /// With --processes: the worker processes the --workers loops are spread over.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub worker_processes: u32,
    /// With --processes and --store: this many `railyard server` nodes on the one
    /// database (the first started leads, the others forward to it), the worker and
    /// client processes spread over them in turn.
    #[arg(long, value_name = "N", default_value_t = 1, requires = "store",
          value_parser = clap::value_parser!(u32).range(1..=8))]
    pub nodes: u32,
    /// The soak under load (`--soak`).
    #[command(flatten)]
    pub soak: soak::SoakArgs,
}
