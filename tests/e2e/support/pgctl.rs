//! A PostgreSQL cluster of a test's own, to stop and start under the servers
//! (`pg_ctl stop -m immediate`): the shared test database cannot be stopped. It runs
//! `initdb` and `pg_ctl` as `.ci/postgres.sh` does (as the `postgres` user when the
//! tests run as root, since `initdb` refuses root) and is stopped and removed on drop.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

pub struct PgCluster {
    dir: tempfile::TempDir,
    port: u16,
    as_postgres: bool,
}

impl PgCluster {
    /// A new cluster on a free loopback port, started; `None` (saying why) when
    /// PostgreSQL 15's binaries are not installed.
    pub fn start() -> Option<Self> {
        if !Path::new(PG_BIN).join("initdb").is_file() {
            eprintln!("skipped: no {PG_BIN}/initdb (apt-get install postgresql-15)");
            return None;
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let uid = Command::new("id").arg("-u").output().expect("id -u");
        let as_postgres = String::from_utf8_lossy(&uid.stdout).trim() == "0";
        if as_postgres {
            let status = Command::new("chown")
                .args(["postgres:postgres"])
                .arg(dir.path())
                .status()
                .expect("chown");
            assert!(status.success(), "chown the cluster directory to postgres");
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let cluster = Self {
            dir,
            port,
            as_postgres,
        };
        let data = cluster.data();
        let ok = cluster
            .run("initdb", &["-D", &data, "-A", "trust", "-U", "postgres"])
            .success();
        assert!(ok, "initdb failed");
        cluster.start_again();
        Some(cluster)
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    fn run(&self, tool: &str, args: &[&str]) -> std::process::ExitStatus {
        let tool: PathBuf = Path::new(PG_BIN).join(tool);
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(tool);
            c
        } else {
            Command::new(tool)
        };
        cmd.args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run a PostgreSQL tool")
    }

    /// A URL of the cluster's `postgres` database.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// `pg_ctl start`, waiting until it accepts connections.
    pub fn start_again(&self) {
        let log = self.dir.path().join("server.log").display().to_string();
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200",
            self.port,
            self.dir.path().display()
        );
        let ok = self
            .run(
                "pg_ctl",
                &["-D", &self.data(), "-l", &log, "-o", &opts, "-w", "start"],
            )
            .success();
        assert!(ok, "pg_ctl start failed");
    }

    /// `pg_ctl stop -m immediate`: the server dies without a checkpoint, as in a crash.
    pub fn stop_immediate(&self) {
        let ok = self
            .run("pg_ctl", &["-D", &self.data(), "stop", "-m", "immediate"])
            .success();
        assert!(ok, "pg_ctl stop failed");
    }

    /// `pg_ctl restart -m immediate`: the server dies without a checkpoint and starts
    /// again at once (crash recovery), with the options it was started with.
    pub fn restart_immediate(&self) {
        let log = self.dir.path().join("server.log").display().to_string();
        let ok = self
            .run(
                "pg_ctl",
                &["-D", &self.data(), "-l", &log, "-m", "immediate", "-w", "restart"],
            )
            .success();
        assert!(ok, "pg_ctl restart failed");
    }

    /// The postmaster and every process it started (the backends among them): all
    /// of the database's processes.
    pub fn processes(&self) -> Vec<i32> {
        let pid_file = self.dir.path().join("data/postmaster.pid");
        let postmaster: i32 = std::fs::read_to_string(&pid_file)
            .expect("postmaster.pid")
            .lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .expect("a pid on postmaster.pid's first line");
        let mut pids = vec![postmaster];
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return pids;
        };
        for pid in entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok()) {
            let ppid = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| s.rsplit_once(')').map(|(_, rest)| rest.to_string()))
                .and_then(|rest| rest.split_whitespace().nth(1)?.parse::<i32>().ok());
            if ppid == Some(postmaster) {
                pids.push(pid);
            }
        }
        pids
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let _ = self.run("pg_ctl", &["-D", &self.data(), "stop", "-m", "immediate"]);
    }
}
