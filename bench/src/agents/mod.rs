//! `railyard bench --agents N`: N leased agent steps on a `railyard server` process
//! (this binary, on a temporary data directory, fsync on), driven from
//! `--agent-processes` separate client processes (`railyard bench-agent`,
//! [`client`]), each step heartbeating a transcript that grows by a turn of 4-20 KB
//! for `--turns` turns. Prints the heartbeat p50/p99 over the first and the last
//! tenth of the turns, the server's bytes written per turn (`/proc/PID/io`:
//! `write_bytes`, what reached the block layer, and `wchar`, what it passed to
//! `write`), its CPU time (`/proc/PID/stat`) and its peak resident memory.

pub(crate) mod client;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use railyard_proto::DEFAULT_NAMESPACE;
use railyard_sdk::{Client, ConnectOptions};
use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::output::{self, Output};
use crate::schedules::{clock_ticks_per_second, cpu_ticks, spawn_server};
use crate::{BenchArgs, Memory, percentile};

/// The workflow each agent run is.
const WORKFLOW: &str = "bench-agent";

/// `/proc/PID/io` counters, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ProcIo {
    /// Bytes the process caused to be written to storage (the block layer).
    pub(crate) write_bytes: u64,
    /// Bytes it passed to `write` and the like.
    pub(crate) wchar: u64,
}

impl ProcIo {
    /// Reads `/proc/<pid>/io`.
    pub(crate) fn of(pid: u32) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/io"))
            .with_context(|| format!("cannot read /proc/{pid}/io"))?;
        Self::parse(&text).ok_or_else(|| anyhow!("unexpected /proc/{pid}/io: {text:?}"))
    }

    fn parse(text: &str) -> Option<Self> {
        let field = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().parse().ok())
        };
        Some(Self {
            write_bytes: field("write_bytes:")?,
            wchar: field("wchar:")?,
        })
    }
}

/// What the bench measured.
struct Figures {
    agents: u32,
    turns: u32,
    processes: u32,
    first: Vec<Duration>,
    last: Vec<Duration>,
    whole: u64,
    appends: u64,
    refused: u64,
    bytes_sent: u64,
    transcript_bytes: u64,
    io: ProcIo,
    cpu_s: f64,
    elapsed: Duration,
    memory: Option<Memory>,
    completed: u64,
}

/// Runs the agents bench with `agents` steps.
pub(crate) async fn run(output: Output, args: &BenchArgs, agents: u32) -> anyhow::Result<()> {
    let dir = tempfile::Builder::new()
        .prefix("railyard-bench-agents-")
        .tempdir()
        .context("cannot create a temp dir")?;
    let workflows = dir.path().join("workflows");
    std::fs::create_dir_all(&workflows)?;
    let def = json!({
        "id": WORKFLOW, "version": "1", "name": "Agent bench",
        "description": "Written by `railyard bench --agents`: one long agent step.",
        "steps": [{ "id": "agent", "title": "Agent", "prompt": "Bench {{goal}}",
                    "timeoutSeconds": 86_400, "heartbeatTimeoutSeconds": 3_600 }],
    });
    std::fs::write(
        workflows.join("bench-agent.json"),
        serde_json::to_vec_pretty(&def)?,
    )?;
    let server = spawn_server(&dir.path().join("data"), &workflows, &[], &[])?;
    let pid = server.child.id();
    tracing::info!(url = %server.url, pid, "bench server started");
    let figures = measure(&server.url, pid, args, agents).await?;
    drop(server);
    report(output, &figures)
}

async fn measure(url: &str, pid: u32, args: &BenchArgs, agents: u32) -> anyhow::Result<Figures> {
    let opts = ConnectOptions {
        request_timeout: Duration::from_secs(60),
        ..ConnectOptions::default()
    };
    let client = Client::connect_with(url, opts).await?;
    // Start every run first, so the figures cover the heartbeats.
    let mut set = JoinSet::new();
    for i in 0..agents {
        let client = client.clone();
        set.spawn(async move {
            client
                .start_run(
                    DEFAULT_NAMESPACE,
                    WORKFLOW,
                    &format!("agent {i}"),
                    Default::default(),
                )
                .await
        });
        if set.len() >= 64
            && let Some(r) = set.join_next().await
        {
            r??;
        }
    }
    while let Some(r) = set.join_next().await {
        r??;
    }

    let processes = args.agent_processes.min(agents);
    let exe = std::env::current_exe().context("cannot find this binary to start the clients")?;
    let (io0, cpu0, t0) = (ProcIo::of(pid)?, cpu_ticks(pid)?, Instant::now());
    let mut children = Vec::new();
    for p in 0..processes {
        let share = agents / processes + u32::from(p < agents % processes);
        let child = crate::child::die_with_parent(&mut Command::new(&exe))
            .args([crate::AGENT_COMMAND, "--server", url])
            .args(["--agents", &share.to_string(), "--turns", &args.turns.to_string()])
            .args(["--seed", &p.to_string(), "--timeout", &args.timeout.to_string()])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("cannot start a bench-agent client")?;
        children.push(child);
    }
    let mut lines = Vec::new();
    for mut child in children {
        // Each client's one line comes at its end; reading to the end waits for it.
        let waited = tokio::task::spawn_blocking(move || -> anyhow::Result<String> {
            let mut out = String::new();
            if let Some(mut stdout) = child.stdout.take() {
                stdout.read_to_string(&mut out)?;
            }
            let status = child.wait()?;
            if !status.success() {
                bail!("a bench-agent client failed ({status})");
            }
            Ok(out)
        })
        .await??;
        lines.push(waited);
    }
    let elapsed = t0.elapsed();
    let (io1, cpu1) = (ProcIo::of(pid)?, cpu_ticks(pid)?);
    let memory = Memory::of(&pid.to_string());

    let mut f = Figures {
        agents,
        turns: args.turns,
        processes,
        first: Vec::new(),
        last: Vec::new(),
        whole: 0,
        appends: 0,
        refused: 0,
        bytes_sent: 0,
        transcript_bytes: 0,
        io: ProcIo {
            write_bytes: io1.write_bytes.saturating_sub(io0.write_bytes),
            wchar: io1.wchar.saturating_sub(io0.wchar),
        },
        cpu_s: cpu1.saturating_sub(cpu0) as f64 / clock_ticks_per_second(),
        elapsed,
        memory,
        completed: 0,
    };
    for out in &lines {
        let v: Value = out
            .lines()
            .last()
            .and_then(|l| serde_json::from_str(l).ok())
            .ok_or_else(|| anyhow!("a bench-agent client printed no figures: {out:?}"))?;
        let durations = |key: &str| -> Vec<Duration> {
            v[key]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_u64)
                        .map(Duration::from_micros)
                        .collect()
                })
                .unwrap_or_default()
        };
        f.first.extend(durations("first_us"));
        f.last.extend(durations("last_us"));
        let n = |key: &str| v[key].as_u64().unwrap_or(0);
        f.whole += n("whole");
        f.appends += n("appends");
        f.refused += n("refused");
        f.bytes_sent += n("bytes_sent");
        f.transcript_bytes += n("transcript_bytes");
    }
    f.first.sort();
    f.last.sort();
    f.completed = completed_runs(&client).await?;
    if f.completed < u64::from(agents) {
        bail!("{} of {agents} agent runs completed", f.completed);
    }
    Ok(f)
}

/// Completed runs of the bench workflow.
async fn completed_runs(client: &Client) -> anyhow::Result<u64> {
    let mut n = 0;
    let mut page_token = String::new();
    loop {
        let page = client
            .list_runs(railyard_proto::v1::ListRunsRequest {
                namespace: DEFAULT_NAMESPACE.into(),
                workflow_id: WORKFLOW.into(),
                status: railyard_proto::v1::RunStatus::Completed as i32,
                page_size: 1000,
                page_token,
                ..Default::default()
            })
            .await?;
        n += page.runs.len() as u64;
        if page.next_page_token.is_empty() {
            return Ok(n);
        }
        page_token = page.next_page_token;
    }
}

fn report(output: Output, f: &Figures) -> anyhow::Result<()> {
    let turns = u64::from(f.agents) * u64::from(f.turns);
    let per_turn = |b: u64| b as f64 / turns.max(1) as f64;
    let delta = per_turn(f.transcript_bytes);
    let ms = |d: Duration| d.as_secs_f64() * 1_000.0;
    let (f50, f99) = (percentile(&f.first, 50.0), percentile(&f.first, 99.0));
    let (l50, l99) = (percentile(&f.last, 50.0), percentile(&f.last, 99.0));
    if output.is_json() {
        output::json(&json!({
            "agents": f.agents, "turns": f.turns, "client_processes": f.processes,
            "completed": f.completed,
            "heartbeat_first_p50_ms": ms(f50), "heartbeat_first_p99_ms": ms(f99),
            "heartbeat_last_p50_ms": ms(l50), "heartbeat_last_p99_ms": ms(l99),
            "turn_delta_bytes": delta,
            "write_bytes_per_turn": per_turn(f.io.write_bytes),
            "wchar_per_turn": per_turn(f.io.wchar),
            "checkpoints_whole": f.whole, "checkpoints_appended": f.appends,
            "appends_refused": f.refused, "checkpoint_bytes_sent": f.bytes_sent,
            "elapsed_ms": ms(f.elapsed), "server_cpu_s": f.cpu_s,
            "server_memory": f.memory.map(|m| m.json()),
        }))?;
        return Ok(());
    }
    output::line(format!(
        "agents     {} leased steps x {} turns, from {} client processes: {} runs COMPLETED in {:.1} s",
        f.agents,
        f.turns,
        f.processes,
        f.completed,
        f.elapsed.as_secs_f64()
    ))?;
    output::line(format!(
        "heartbeat  first 10% of turns p50 {:.2} ms p99 {:.2} ms; last 10% p50 {:.2} ms p99 {:.2} ms",
        ms(f50),
        ms(f99),
        ms(l50),
        ms(l99)
    ))?;
    let ratio = |b: u64| per_turn(b) / delta.max(1.0);
    output::line(format!(
        "written    per turn: write_bytes {:.0} B ({:.2}x the turn's {:.0} B), wchar {:.0} B ({:.2}x)",
        per_turn(f.io.write_bytes),
        ratio(f.io.write_bytes),
        delta,
        per_turn(f.io.wchar),
        ratio(f.io.wchar)
    ))?;
    output::line(format!(
        "sent       {} checkpoints whole, {} appended ({} refused and resent whole), {:.1} MiB",
        f.whole,
        f.appends,
        f.refused,
        f.bytes_sent as f64 / (1024.0 * 1024.0)
    ))?;
    let cores = f.cpu_s / f.elapsed.as_secs_f64().max(1e-9);
    output::line(format!("server     CPU {:.1} s ({:.2} cores)", f.cpu_s, cores))?;
    if let Some(m) = f.memory {
        output::line(format!("memory     server {}", m.line()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_proc_io() {
        let text = "rchar: 10\nwchar: 2048\nsyscr: 1\nsyscw: 2\nread_bytes: 0\nwrite_bytes: 4096\ncancelled_write_bytes: 0\n";
        assert_eq!(
            ProcIo::parse(text),
            Some(ProcIo {
                write_bytes: 4096,
                wchar: 2048
            })
        );
        assert_eq!(ProcIo::parse("rchar: 1\n"), None);
        if cfg!(target_os = "linux") {
            let own = ProcIo::of(std::process::id()).unwrap();
            assert!(own.wchar > 0 || own.write_bytes == 0, "{own:?}");
        }
    }

    #[test]
    fn turns_are_json_lines_of_four_to_twenty_kilobytes() {
        for turn in 0..200 {
            let b = client::turn_bytes(7, 3, turn);
            assert!((4096..=20 * 1024).contains(&b.len()), "{}", b.len());
            assert!(b.ends_with(b"\"}\n"));
            assert!(serde_json::from_slice::<Value>(&b).is_ok());
            assert_eq!(b, client::turn_bytes(7, 3, turn), "the same on every run");
        }
    }
}
