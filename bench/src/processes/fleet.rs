//! The children of one phase of `railyard bench --processes`: started, cued, heard
//! line by line, stopped and reaped.

use std::io::{BufRead, BufReader, Write};
use std::process::{ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use tokio::sync::mpsc;

use super::role::Report;
use super::{Ctx, shares};
use crate::child::{Reaped, die_with_parent};

/// A line a child wrote, or its end.
pub(super) enum Heard {
    Report(Report),
    /// A line that is no report (a child's bug), as written.
    Garbled(String),
    /// Its stdout closed: it exited, or is about to.
    Closed,
}

/// What a phase past its deadline says: what it waited for, and each child's
/// last line and how long ago it came.
fn timeout_message(
    phase: &str,
    timeout: Duration,
    waiting_for: &str,
    names: &[&str],
    last_heard: &[Option<(String, Instant)>],
    now: Instant,
) -> String {
    let children: Vec<String> = names
        .iter()
        .zip(last_heard)
        .map(|(name, heard)| match heard {
            Some((line, at)) => format!(
                "{name} last said {line} {:.1}s before",
                now.saturating_duration_since(*at).as_secs_f64()
            ),
            None => format!("{name} said nothing"),
        })
        .collect();
    format!(
        "{phase} phase timed out after {}s (--timeout) waiting for {waiting_for}; {}",
        timeout.as_secs(),
        children.join("; ")
    )
}

impl Heard {
    /// The line, shortened for a message.
    fn summary(&self) -> String {
        let text = match self {
            Self::Report(r) => serde_json::to_string(r).unwrap_or_else(|_| format!("{r:?}")),
            Self::Garbled(line) => format!("{line:?}"),
            Self::Closed => return "nothing more (its output closed)".into(),
        };
        match text.char_indices().nth(LAST_HEARD_CHARS) {
            Some((cut, _)) => format!("{}...", &text[..cut]),
            None => text,
        }
    }
}

/// One child of a phase.
pub(super) struct Proc {
    pub(super) name: String,
    pub(super) child: Reaped,
    /// Its cue: a line means go, closing it means stop.
    pub(super) stdin: Option<ChildStdin>,
}

/// The children of one phase; dropping it kills any left.
pub(super) struct Fleet<'a> {
    pub(super) ctx: &'a Ctx,
    pub(super) procs: Vec<Proc>,
    pub(super) tx: mpsc::UnboundedSender<(usize, Heard, Instant)>,
    pub(super) rx: mpsc::UnboundedReceiver<(usize, Heard, Instant)>,
    pub(super) deadline: Instant,
    pub(super) phase: &'static str,
    /// What the phase waits for, said when it times out.
    pub(super) waiting_for: String,
    /// Each child's last line, shortened, and when it was read.
    last_heard: Vec<Option<(String, Instant)>>,
}

/// Most characters of a child's last line kept for the timeout's message.
const LAST_HEARD_CHARS: usize = 120;

impl<'a> Fleet<'a> {
    pub(super) fn new(ctx: &'a Ctx, phase: &'static str) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Self {
            ctx,
            procs: Vec::new(),
            tx,
            rx,
            deadline: Instant::now() + ctx.timeout,
            phase,
            waiting_for: "its children's reports".into(),
            last_heard: Vec::new(),
        }
    }

    /// Starts `bench-process ROLE ARGS... --server URL`, the nodes taken in turn;
    /// its lines go to [`Self::hear`].
    pub(super) fn spawn(&mut self, name: String, role_args: &[String]) -> anyhow::Result<usize> {
        let url = &self.ctx.urls[self.procs.len() % self.ctx.urls.len()];
        let mut cmd = Command::new(&self.ctx.exe);
        die_with_parent(&mut cmd)
            .arg(crate::PROCESS_COMMAND)
            .args(role_args)
            .args(["--server", url, "--namespace", &self.ctx.namespace])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = Reaped(
            cmd.spawn()
                .with_context(|| format!("cannot start the {name} process"))?,
        );
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow!("no stdout of {name}"))?;
        let stdin = child.stdin.take();
        let id = self.procs.len();
        let tx = self.tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let heard = match serde_json::from_str(&line) {
                    Ok(report) => Heard::Report(report),
                    Err(_) => Heard::Garbled(line),
                };
                if tx.send((id, heard, Instant::now())).is_err() {
                    return;
                }
            }
            let _ = tx.send((id, Heard::Closed, Instant::now()));
        });
        self.procs.push(Proc { name, child, stdin });
        self.last_heard.push(None);
        Ok(id)
    }

    /// The next line any child wrote, with when it was read. Past the phase's
    /// deadline, an error saying what the phase waited for and what each child
    /// last said.
    pub(super) async fn hear(&mut self) -> anyhow::Result<(usize, Heard, Instant)> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, self.rx.recv()).await {
            Ok(Some(heard)) => {
                if let Some(slot) = self.last_heard.get_mut(heard.0) {
                    *slot = Some((heard.1.summary(), heard.2));
                }
                Ok(heard)
            }
            Ok(None) => bail!("{}: every child's output closed", self.phase),
            Err(_) => bail!("{}", self.timed_out(Instant::now())),
        }
    }

    /// The message of a phase past its deadline.
    fn timed_out(&self, now: Instant) -> String {
        let names: Vec<&str> = self.procs.iter().map(|p| p.name.as_str()).collect();
        timeout_message(
            self.phase,
            self.ctx.timeout,
            &self.waiting_for,
            &names,
            &self.last_heard,
            now,
        )
    }

    /// Waits for every child to report [`Report::Ready`].
    pub(super) async fn ready(&mut self) -> anyhow::Result<()> {
        let mut waiting = self.procs.len();
        while waiting > 0 {
            self.waiting_for = format!("{waiting} processes to say they are ready");
            match self.hear().await? {
                (_, Heard::Report(Report::Ready), _) => waiting -= 1,
                (id, heard, _) => return Err(self.unexpected(id, heard).await),
            }
        }
        Ok(())
    }

    pub(super) fn go(&mut self, id: usize) -> anyhow::Result<()> {
        let p = &mut self.procs[id];
        let stdin = p
            .stdin
            .as_mut()
            .ok_or_else(|| anyhow!("{} was stopped", p.name))?;
        writeln!(stdin, "go")
            .and_then(|()| stdin.flush())
            .with_context(|| format!("cannot cue {}", p.name))
    }

    /// Waits for child `id` to exit after its output closed; an error unless it succeeded.
    pub(super) async fn reap(&mut self, id: usize) -> anyhow::Result<()> {
        loop {
            let p = &mut self.procs[id];
            if let Some(status) = p.child.try_wait()? {
                if !status.success() {
                    bail!("{}: the {} process failed ({status})", self.phase, p.name);
                }
                return Ok(());
            }
            if Instant::now() > self.deadline {
                bail!("{}: the {} process did not exit", self.phase, p.name);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The error for a line or an end a phase did not expect.
    pub(super) async fn unexpected(&mut self, id: usize, heard: Heard) -> anyhow::Error {
        let name = self.procs[id].name.clone();
        match heard {
            Heard::Closed => match self.reap(id).await {
                Err(e) => e,
                Ok(()) => anyhow!("{}: the {name} process exited early", self.phase),
            },
            Heard::Garbled(line) => anyhow!("{}: the {name} process wrote {line:?}", self.phase),
            Heard::Report(r) => anyhow!("{}: unexpected report from the {name} process: {r:?}", self.phase),
        }
    }

    /// Waits for child `id`'s one report and its exit.
    pub(super) async fn result(&mut self, id: usize) -> anyhow::Result<Report> {
        self.waiting_for = format!("the {} process's report", self.procs[id].name);
        loop {
            match self.hear().await? {
                (from, Heard::Report(r), _) if from == id => {
                    self.reap_after_close(id).await?;
                    return Ok(r);
                }
                // A worker's run reports come with any phase's.
                (_, Heard::Report(Report::Completed { .. }), _) => {}
                (from, heard, _) => return Err(self.unexpected(from, heard).await),
            }
        }
    }

    pub(super) async fn reap_after_close(&mut self, id: usize) -> anyhow::Result<()> {
        self.waiting_for = format!("the {} process to exit", self.procs[id].name);
        loop {
            match self.hear().await? {
                (from, Heard::Closed, _) if from == id => return self.reap(id).await,
                (_, Heard::Report(Report::Completed { .. }), _) => {}
                (from, heard, _) => return Err(self.unexpected(from, heard).await),
            }
        }
    }

    /// Stops the worker processes `ids` (closing their stdin) and sums what they
    /// report: steps completed, failed calls.
    pub(super) async fn stop_workers(&mut self, ids: &[usize]) -> anyhow::Result<(u64, u64)> {
        for &id in ids {
            self.procs[id].stdin = None;
        }
        let (mut steps, mut errors, mut left) = (0, 0, ids.len());
        while left > 0 {
            self.waiting_for = format!("{left} worker processes to stop");
            match self.hear().await? {
                (_, Heard::Report(Report::Worker { steps: s, errors: e }), _) => {
                    steps += s;
                    errors += e;
                }
                (_, Heard::Report(Report::Completed { .. }), _) => {}
                (id, Heard::Closed, _) if ids.contains(&id) => {
                    self.reap(id).await?;
                    left -= 1;
                }
                (id, heard, _) => return Err(self.unexpected(id, heard).await),
            }
        }
        Ok((steps, errors))
    }

    /// Starts worker processes with `loops` StepWorker loops in all.
    pub(super) fn workers(
        &mut self,
        loops: u32,
        processes: u32,
        report_runs: bool,
    ) -> anyhow::Result<Vec<usize>> {
        let mut ids = Vec::new();
        for (i, share) in shares(loops, processes).into_iter().enumerate() {
            let mut a = vec!["worker".to_string(), "--loops".into(), share.to_string()];
            if report_runs {
                a.push("--report-runs".into());
            }
            ids.push(self.spawn(format!("worker {}", i + 1), &a)?);
        }
        Ok(ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_names_what_it_waited_for_and_what_each_child_last_said() {
        let now = Instant::now();
        let earlier = now.checked_sub(Duration::from_millis(2500)).unwrap_or(now);
        let line = Heard::Report(Report::Completed { runs: 999 }).summary();
        let message = timeout_message(
            "one-step throughput",
            Duration::from_secs(600),
            "1000 runs to complete, 999 reported",
            &["worker 1", "starter"],
            &[Some((line, earlier)), None],
            now,
        );
        assert_eq!(
            message,
            "one-step throughput phase timed out after 600s (--timeout) waiting for 1000 runs \
             to complete, 999 reported; worker 1 last said {\"report\":\"completed\",\"runs\":999} \
             2.5s before; starter said nothing"
        );
    }

    #[test]
    fn a_long_line_is_shortened() {
        let heard = Heard::Garbled("x".repeat(500));
        let summary = heard.summary();
        assert!(summary.ends_with("..."), "{summary}");
        assert_eq!(summary.chars().count(), LAST_HEARD_CHARS + 3);
    }
}
