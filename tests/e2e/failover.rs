//! Railyard nodes on a database that itself fails, under load: every connection of
//! the database's killed at once, the database restarted at once without a
//! checkpoint (`pg_ctl restart -m immediate`), and the primary of a high-availability
//! cluster lost (Patroni and its PostgreSQL SIGKILLed; Patroni promotes the
//! synchronous standby). Every acknowledged start and completion is there exactly
//! once afterwards. The HA tests (`patroni_*`) run on the cluster `.ci/patroni.sh`
//! starts (`RAILYARD_TEST_PATRONI`, `RAILYARD_TEST_PATRONI_NODES`) and are skipped,
//! saying so, without it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use railyard_proto::v1;
use railyard_sdk::Client;
use railyard_store_postgres::testing::{skipped, test_url};

use crate::cluster::*;

/// The HA cluster's URL: both hosts, `target_session_attrs=read-write`.
const PATRONI_VAR: &str = "RAILYARD_TEST_PATRONI";
/// Its nodes: `REST port:node directory` (with `patroni.yml` and `data/`), comma separated.
const PATRONI_NODES_VAR: &str = "RAILYARD_TEST_PATRONI_NODES";

/// One Patroni node of the test cluster.
struct PatroniNode {
    rest: String,
    dir: PathBuf,
}

impl PatroniNode {
    fn all() -> Vec<Self> {
        let nodes = std::env::var(PATRONI_NODES_VAR).unwrap_or_default();
        nodes
            .split(',')
            .filter_map(|n| n.split_once(':'))
            .map(|(rest, dir)| Self {
                rest: format!("127.0.0.1:{rest}"),
                dir: PathBuf::from(dir),
            })
            .collect()
    }

    /// Whether Patroni says this node is the primary (`GET /primary` is 200 there only).
    fn is_primary(&self) -> bool {
        http_get(&self.rest, "/primary").is_some_and(|(status, _)| status == 200)
    }

    /// SIGKILLs the node's Patroni, then its postmaster and every process the
    /// postmaster started: the machine is gone, and nothing restarts its database.
    fn kill(&self) {
        let config = self.dir.join("patroni.yml").display().to_string();
        let pid_file = self.dir.join("data/postmaster.pid");
        let postmaster: i32 = std::fs::read_to_string(&pid_file)
            .expect("postmaster.pid")
            .lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .expect("a pid on postmaster.pid's first line");
        for pid in processes(|cmdline, _| cmdline.contains("patroni") && cmdline.contains(&config)) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let children = processes(|_, ppid| ppid == postmaster);
        let _ = kill(Pid::from_raw(postmaster), Signal::SIGKILL);
        for pid in children {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// The pids of the processes whose command line and parent match `keep`.
fn processes(keep: impl Fn(&str, i32) -> bool) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let dir = Path::new("/proc").join(pid.to_string());
            let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            let ppid = std::fs::read_to_string(dir.join("stat"))
                .ok()
                .and_then(|s| s.rsplit_once(')').map(|(_, rest)| rest.to_string()))
                .and_then(|rest| rest.split_whitespace().nth(1)?.parse().ok())
                .unwrap_or(0);
            keep(&cmdline, ppid)
        })
        .collect()
}

/// Starts runs (ids `probe-<tag>-<n>`) through `client` until one is acknowledged:
/// how long that took.
async fn first_write_accepted(client: &Client, tag: &str) -> Duration {
    let began = Instant::now();
    for n in 0.. {
        let req = v1::StartRunRequest {
            namespace: "default".into(),
            workflow_id: "job".into(),
            goal: "the first write after the fault".into(),
            run_id: format!("probe-{tag}-{n}"),
            ..Default::default()
        };
        if client.start_run_with(req).await.is_ok() {
            return began.elapsed();
        }
        assert!(
            began.elapsed() < HANG,
            "no write was accepted within {HANG:?} of the fault"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    unreachable!("the loop returns or fails")
}

#[test]
fn every_connection_of_the_database_killed_under_load_loses_and_doubles_nothing() {
    let Some(c) = Cluster::start("failover::every_connection_killed", 2) else {
        return;
    };
    let rt = runtime();
    let _in = rt.enter();
    let clients: Vec<Client> = c.nodes.iter().map(client).collect();
    rt.block_on(async {
        let mut load = Load::spawn(&clients, &clients);
        load.wait_started(10).await;
        for _ in 0..5 {
            c.db.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE datname = current_database() AND pid <> pg_backend_pid()",
            )
            .expect("terminate every connection");
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let before = load.started().len();
        load.wait_started(before + 15).await;
        load.stop_starting().await;
        check_nothing_lost_or_doubled(&clients[0], &load).await;
        load.stop_working().await;
    });
}

#[test]
fn the_database_restarted_without_a_checkpoint_under_load_loses_and_doubles_nothing() {
    if test_url().is_none() {
        eprintln!("{}", skipped("failover::the_database_restarted"));
        return;
    }
    let Some(pg) = crate::support::pgctl::PgCluster::start() else {
        return;
    };
    let c = Cluster::start_on(&pg.url(), 2);
    let rt = runtime();
    let _in = rt.enter();
    let clients: Vec<Client> = c.nodes.iter().map(client).collect();
    rt.block_on(async {
        let mut load = Load::spawn(&clients, &clients);
        load.wait_started(10).await;
        for round in 0..3 {
            pg.restart_immediate();
            let recovered = first_write_accepted(&clients[1], &format!("restart{round}")).await;
            eprintln!(
                "restart: the first write was accepted {} ms after pg_ctl restart -m immediate returned",
                recovered.as_millis()
            );
            let before = load.started().len();
            load.wait_started(before + 5).await;
        }
        load.stop_starting().await;
        check_nothing_lost_or_doubled(&clients[0], &load).await;
        load.stop_working().await;
    });
}

#[test]
fn patroni_primary_lost_under_load_fails_over_to_the_standby_and_loses_nothing() {
    let Some(url) = std::env::var(PATRONI_VAR).ok().filter(|u| !u.is_empty()) else {
        eprintln!("skipped failover::patroni_primary_lost: {PATRONI_VAR} is not set (source .ci/patroni.sh)");
        return;
    };
    let nodes = PatroniNode::all();
    let primary = nodes.iter().position(PatroniNode::is_primary).expect("a primary");
    let c = Cluster::start_on(&url, 2);
    let rt = runtime();
    let _in = rt.enter();
    let clients: Vec<Client> = c.nodes.iter().map(client).collect();
    rt.block_on(async {
        let mut load = Load::spawn(&clients, &clients);
        load.wait_started(20).await;
        nodes[primary].kill();
        let recovered = first_write_accepted(&clients[1], "failover").await;
        eprintln!(
            "failover: the first write was accepted {} ms after the primary was killed",
            recovered.as_millis()
        );
        let promoted = nodes
            .iter()
            .enumerate()
            .any(|(i, n)| i != primary && n.is_primary());
        assert!(promoted, "Patroni promoted the standby");
        let before = load.started().len();
        load.wait_started(before + 15).await;
        load.stop_starting().await;
        check_nothing_lost_or_doubled(&clients[1], &load).await;
        load.stop_working().await;
    });
}
