//! `railyard bench --schedules N`: N schedules due at the same minute boundary, on a
//! real `railyard server` process (this binary, on a temporary data directory, fsync
//! on). Prints the fire lag (due time to each run's `RunStarted`) p50/p99/max, and
//! the server process's CPU and memory while it idles before the next fire.
//!
//! Each schedule is `* * * * *` with a start time at the chosen boundary, so none
//! fires before it, every one is due at it, and the next fire is a minute later:
//! the idle window lies between the two.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use railyard_proto::DEFAULT_NAMESPACE;
use railyard_proto::v1::{
    CreateScheduleRequest, ListRunsRequest, ScheduleAction, SchedulePolicies, ScheduleSpec,
};
use railyard_sdk::{Client, ConnectOptions};
use serde_json::json;
use tokio::task::JoinSet;

use crate::output::{self, Output};
use crate::timefmt::{human_duration, now_unix_ms, rfc3339};
use crate::{BenchArgs, percentile};

/// The workflow every bench schedule starts.
const WORKFLOW: &str = "bench-sched";
/// Concurrent creates.
const CREATORS: u32 = 64;
const MINUTE_MS: i64 = 60_000;

/// A `railyard server` child process; killed when dropped.
pub(crate) struct ServerChild {
    pub(crate) child: Child,
    /// The gRPC URL.
    pub(crate) url: String,
    /// The HTTP listener's address.
    pub(crate) http_addr: String,
}

impl Drop for ServerChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the bench measured.
struct Figures {
    boundary_ms: i64,
    created_in: Duration,
    lags: Vec<Duration>,
    started: usize,
    idle: Option<Idle>,
    rss_before_kib: u64,
}

/// The server's use while idle between fires.
struct Idle {
    window: Duration,
    cpu_percent: f64,
    rss_kib: u64,
    peak_rss_kib: u64,
}

/// Runs the schedule bench with `count` schedules.
pub(crate) async fn run(output: Output, args: &BenchArgs, count: u32) -> anyhow::Result<()> {
    let dir = tempfile::Builder::new()
        .prefix("railyard-bench-schedules-")
        .tempdir()
        .context("cannot create a temp dir")?;
    let workflows = dir.path().join("workflows");
    std::fs::create_dir_all(&workflows)?;
    let def = json!({
        "id": WORKFLOW, "version": "1", "name": "Schedule bench",
        "description": "Written by `railyard bench --schedules`; nothing works its step.",
        "steps": [{ "id": "only", "title": "Only", "prompt": "Bench {{goal}}" }],
    });
    std::fs::write(
        workflows.join("bench-sched.json"),
        serde_json::to_vec_pretty(&def)?,
    )?;
    let server = spawn_server(&dir.path().join("data"), &workflows, &[], &[])?;
    let pid = server.child.id();
    tracing::info!(url = %server.url, pid, "bench server started");
    let figures = measure(&server.url, pid, args, count).await?;
    drop(server);
    report(output, count, &figures)
}

/// Starts this binary's `server` on free loopback ports, with `args` more and `env`
/// set, and waits for its listening line.
pub(crate) fn spawn_server(
    data: &std::path::Path,
    workflows: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> anyhow::Result<ServerChild> {
    spawn_server_on(&ServerStore::Redb(data), workflows, args, env)
}

/// Where a bench's server process keeps its runs.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ServerStore<'a> {
    /// redb in this data directory.
    Redb(&'a std::path::Path),
    /// A PostgreSQL database (passed in the environment, so its password is not on a
    /// command line), with the first admin key in `keys_dir`.
    Postgres {
        url: &'a str,
        ca: Option<&'a std::path::Path>,
        keys_dir: &'a std::path::Path,
    },
}

/// [`spawn_server`] on `store`. The server's own settings come from the flags and
/// `env` only (the bench's environment names no store, config file or data
/// directory of the server's), and it dies with the bench.
pub(crate) fn spawn_server_on(
    store: &ServerStore<'_>,
    workflows: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> anyhow::Result<ServerChild> {
    let exe = std::env::current_exe().context("cannot find this binary to start the server")?;
    let mut cmd = Command::new(exe);
    cmd.args([
        "server",
        "--listen",
        "127.0.0.1:0",
        "--http-listen",
        "127.0.0.1:0",
    ])
    .arg("--workflows")
    .arg(workflows);
    for key in [
        "RAILYARD_SERVER_CONFIG",
        "RAILYARD_STORE",
        "RAILYARD_DATA_DIR",
        "RAILYARD_KEYS_DIR",
        "RAILYARD_STORE_CA",
    ] {
        cmd.env_remove(key);
    }
    match store {
        ServerStore::Redb(data) => {
            cmd.arg("--data-dir").arg(data);
        }
        ServerStore::Postgres { url, ca, keys_dir } => {
            cmd.env("RAILYARD_STORE", url).env("RAILYARD_KEYS_DIR", keys_dir);
            if let Some(ca) = ca {
                cmd.env("RAILYARD_STORE_CA", ca);
            }
        }
    }
    let mut child = crate::child::die_with_parent(&mut cmd)
        .args(args)
        .envs(env.iter().copied())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("cannot start railyard server")?;
    let stdout = child.stdout.take();
    let mut server = ServerChild {
        child,
        url: String::new(),
        http_addr: String::new(),
    };
    let mut out = BufReader::new(stdout.ok_or_else(|| anyhow!("no server stdout"))?);
    let mut line = String::new();
    out.read_line(&mut line)
        .context("cannot read the server's first line")?;
    let grpc = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("grpc="))
        .ok_or_else(|| anyhow!("unexpected first line from the server: {line:?}"))?;
    server.url = format!("http://{grpc}");
    server.http_addr = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("http="))
        .ok_or_else(|| anyhow!("unexpected first line from the server: {line:?}"))?
        .to_string();
    // Keep reading so the server never blocks on a full pipe.
    std::thread::spawn(move || {
        let mut sink = String::new();
        while out.read_line(&mut sink).map(|n| n > 0).unwrap_or(false) {
            sink.clear();
        }
    });
    Ok(server)
}

async fn measure(url: &str, pid: u32, args: &BenchArgs, count: u32) -> anyhow::Result<Figures> {
    let opts = ConnectOptions {
        request_timeout: Duration::from_secs(60),
        ..ConnectOptions::default()
    };
    let mut clients = Vec::new();
    for _ in 0..args.connections {
        clients.push(Client::connect_with(url, opts.clone()).await?);
    }
    let loaded = clients[0].list_workflows(DEFAULT_NAMESPACE).await?;
    if !loaded.workflows.iter().any(|w| w.id == WORKFLOW) {
        bail!("the server did not load the bench workflow {WORKFLOW}");
    }

    // The boundary: the first minute boundary at least the lead from now.
    let lead_ms = i64::try_from(args.schedule_lead.as_millis()).unwrap_or(i64::MAX);
    let boundary = (now_unix_ms().saturating_add(lead_ms) / MINUTE_MS + 1) * MINUTE_MS;
    let t0 = Instant::now();
    create_all(&clients, count, boundary).await?;
    let created_in = t0.elapsed();
    let after_create = now_unix_ms();
    if after_create >= boundary - 1_000 {
        bail!(
            "creating {count} schedules took {}, past the boundary {}: give a longer --schedule-lead",
            human_duration(created_in),
            rfc3339(boundary)
        );
    }
    let rss_before_kib = proc_status(pid, "VmRSS:")?;
    tracing::info!(boundary = %rfc3339(boundary), "all schedules created; waiting for the boundary");

    // Wait for every run the boundary's fires start.
    let timeout = Duration::from_secs(args.timeout);
    let next_fire = boundary + MINUTE_MS;
    let waited = Instant::now();
    let runs = loop {
        let runs = run_starts(&clients[0]).await?;
        if runs.len() >= count as usize {
            break runs;
        }
        if waited.elapsed() > timeout || now_unix_ms() >= next_fire {
            bail!(
                "{} of {count} runs started by {} (due {})",
                runs.len(),
                rfc3339(now_unix_ms()),
                rfc3339(boundary)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let mut lags: Vec<Duration> = runs
        .iter()
        .map(|&start| Duration::from_millis(u64::try_from(start - boundary).unwrap_or(0)))
        .collect();
    lags.sort();

    // Idle: from 2 s after the last start to 5 s before the next fire.
    let idle_from = now_unix_ms() + 2_000;
    let idle_to = next_fire - 5_000;
    let idle = if idle_to - idle_from >= 5_000 {
        tokio::time::sleep(Duration::from_millis(2_000)).await;
        let (ticks0, at0) = (cpu_ticks(pid)?, Instant::now());
        let span = u64::try_from(idle_to - now_unix_ms()).unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(span)).await;
        let (ticks1, window) = (cpu_ticks(pid)?, at0.elapsed());
        let cpu_s = (ticks1.saturating_sub(ticks0)) as f64 / clock_ticks_per_second();
        Some(Idle {
            window,
            cpu_percent: 100.0 * cpu_s / window.as_secs_f64().max(1e-9),
            rss_kib: proc_status(pid, "VmRSS:")?,
            peak_rss_kib: proc_status(pid, "VmHWM:")?,
        })
    } else {
        None
    };
    // Nothing fired twice at the boundary, nor before the next one.
    let after = run_starts(&clients[0]).await?.len();
    if after != count as usize {
        bail!("{after} runs after the idle window, expected {count}");
    }
    Ok(Figures {
        boundary_ms: boundary,
        created_in,
        started: runs.len(),
        lags,
        idle,
        rss_before_kib,
    })
}

/// Creates `bench-00000` ... concurrently over the clients.
async fn create_all(clients: &[Client], count: u32, boundary: i64) -> anyhow::Result<()> {
    let next = Arc::new(AtomicU32::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let mut creators = JoinSet::new();
    for i in 0..CREATORS as usize {
        let client = clients[i % clients.len()].clone();
        let (next, errors) = (next.clone(), errors.clone());
        creators.spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= count {
                    return Ok::<(), anyhow::Error>(());
                }
                let req = CreateScheduleRequest {
                    namespace: DEFAULT_NAMESPACE.into(),
                    schedule_id: format!("bench-{n:05}"),
                    spec: Some(ScheduleSpec {
                        cron: vec!["* * * * *".into()],
                        start_time_unix_ms: boundary,
                        ..Default::default()
                    }),
                    action: Some(ScheduleAction {
                        workflow_id: WORKFLOW.into(),
                        goal: "{{scheduleId}} at {{scheduledTime}}".into(),
                        ..Default::default()
                    }),
                    policies: Some(SchedulePolicies::default()),
                    identity: "railyard-bench".into(),
                    ..Default::default()
                };
                if let Err(e) = client.create_schedule(req).await {
                    errors.fetch_add(1, Ordering::Relaxed);
                    return Err(anyhow!("creating schedule bench-{n:05}: {e}"));
                }
            }
        });
    }
    while let Some(done) = creators.join_next().await {
        done.context("a creator task failed")??;
    }
    Ok(())
}

/// The start time (its `RunStarted` event's time) of every run of the bench workflow.
async fn run_starts(client: &Client) -> anyhow::Result<Vec<i64>> {
    let mut starts = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .list_runs(ListRunsRequest {
                namespace: DEFAULT_NAMESPACE.into(),
                workflow_id: WORKFLOW.into(),
                page_size: 1000,
                page_token: page_token.clone(),
                ..Default::default()
            })
            .await?;
        starts.extend(page.runs.iter().map(|r| r.start_time_unix_ms));
        if page.next_page_token.is_empty() {
            return Ok(starts);
        }
        page_token = page.next_page_token;
    }
}

/// User plus system CPU time of a process, in clock ticks (`/proc/PID/stat`).
pub(crate) fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .context("cannot read the server's /proc stat")?;
    // Fields after the command name (which may hold spaces) start at the state, field 3.
    let rest = text.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| -> anyhow::Result<u64> {
        fields
            .get(n - 3)
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| anyhow!("unexpected /proc/{pid}/stat: field {n} missing"))
    };
    Ok(field(14)? + field(15)?)
}

/// A `kB` line of `/proc/PID/status` (`VmRSS:`, `VmHWM:`), in KiB.
fn proc_status(pid: u32, key: &str) -> anyhow::Result<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .context("cannot read the server's /proc status")?;
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow!("no {key} in /proc/{pid}/status"))
}

/// The kernel's clock tick rate for `/proc` times (`getconf CLK_TCK`; 100 on Linux).
pub(crate) fn clock_ticks_per_second() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|t| t.trim().parse::<f64>().ok())
        .filter(|&t| t > 0.0)
        .unwrap_or(100.0)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1_000.0
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn report(output: Output, count: u32, f: &Figures) -> anyhow::Result<()> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (p50, p99, max) = (
        percentile(&f.lags, 50.0),
        percentile(&f.lags, 99.0),
        percentile(&f.lags, 100.0),
    );
    if output.is_json() {
        output::json(&json!({
            "settings": { "schedules": count, "cron": "* * * * *", "cores": cores, "fsync": true },
            "boundary": rfc3339(f.boundary_ms),
            "create_elapsed_s": f.created_in.as_secs_f64(),
            "creates_per_second": f64::from(count) / f.created_in.as_secs_f64().max(1e-9),
            "runs_started": f.started,
            "fire_lag": { "p50_ms": ms(p50), "p99_ms": ms(p99), "max_ms": ms(max) },
            "server_rss_before_fire_mib": mib(f.rss_before_kib),
            "idle": f.idle.as_ref().map(|i| json!({
                "window_s": i.window.as_secs_f64(), "cpu_percent": i.cpu_percent,
                "rss_mib": mib(i.rss_kib), "peak_rss_mib": mib(i.peak_rss_kib),
            })),
        }))?;
        return Ok(());
    }
    let mut lines = vec![
        "railyard bench --schedules: a railyard server process on a temp data dir, fsync on".to_string(),
        format!(
            "  schedules     {count} x cron \"* * * * *\" from {}",
            rfc3339(f.boundary_ms)
        ),
        format!(
            "  created in    {} ({:.0}/s, {CREATORS} concurrent creates)",
            human_duration(f.created_in),
            f64::from(count) / f.created_in.as_secs_f64().max(1e-9)
        ),
        format!("  cores         {cores}"),
        format!("fire lag (due time to RunStarted), {} runs", f.started),
    ];
    for (label, d) in [("p50", p50), ("p99", p99), ("max", max)] {
        lines.push(format!("  {label:<12}  {}", human_duration(d)));
    }
    lines.push(format!(
        "server memory before the fire  RSS {:.1} MiB",
        mib(f.rss_before_kib)
    ));
    match &f.idle {
        Some(i) => {
            lines.push(format!(
                "server idle between fires ({:.0} s window)",
                i.window.as_secs_f64()
            ));
            lines.push(format!("  cpu           {:.2}% of one core", i.cpu_percent));
            lines.push(format!(
                "  memory        RSS {:.1} MiB (peak {:.1} MiB)",
                mib(i.rss_kib),
                mib(i.peak_rss_kib)
            ));
        }
        None => lines.push("server idle between fires: no window (the fire took most of the minute)".into()),
    }
    for text in lines {
        output::line(text)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// `railyard bench`'s flags, as the binary flattens them.
    #[derive(Debug, Parser)]
    struct Bench {
        #[command(flatten)]
        args: BenchArgs,
    }

    fn bench_args(args: &[&str]) -> BenchArgs {
        Bench::try_parse_from(["bench"].iter().chain(args).copied())
            .unwrap()
            .args
    }

    #[test]
    fn schedules_flag_defaults_to_ten_thousand() {
        assert_eq!(bench_args(&[]).schedules, None);
        assert_eq!(bench_args(&["--schedules"]).schedules, Some(10_000));
        let a = bench_args(&["--schedules", "50", "--schedule-lead", "1m"]);
        assert_eq!(a.schedules, Some(50));
        assert_eq!(a.schedule_lead, Duration::from_secs(60));
    }

    #[test]
    fn reads_a_process_cpu_and_memory() {
        let pid = std::process::id();
        // Spin until the kernel has charged this process a tick: on a loaded machine
        // a fixed spell of wall time may get no CPU at all.
        let busy = Instant::now();
        while cpu_ticks(pid).unwrap() == 0 && busy.elapsed() < Duration::from_secs(60) {
            std::hint::black_box((0..10_000u64).sum::<u64>());
        }
        assert!(cpu_ticks(pid).unwrap() > 0);
        assert!(proc_status(pid, "VmRSS:").unwrap() > 0);
        assert!(proc_status(pid, "VmHWM:").unwrap() >= proc_status(pid, "VmRSS:").unwrap() / 2);
        assert!(proc_status(pid, "NoSuchKey:").is_err());
        assert!(clock_ticks_per_second() > 0.0);
    }
}
