//! Ending everything a `bash` command started, including what left its process group.
//!
//! Killing the command's process group misses a process that called `setsid`
//! (`setsid sleep 803 &`, `setsid -f ...`, a daemon's double fork): it is in a session
//! and group of its own. So the worker makes itself a child subreaper
//! (`prctl(PR_SET_CHILD_SUBREAPER)`, [`adopt_orphans`]): a process whose parent dies
//! is re-parented to the worker instead of to init, and stays in the worker's tree.
//! Each command runs with `RAILYARD_BASH_CALL=<id>` in its environment, which its
//! descendants inherit; when the command ends (or times out, or the step ends),
//! [`sweep`] kills, until none is left:
//!
//! - every process below the command's shell while the shell still runs;
//! - every process the worker adopted whose environment names this call, and
//!   everything below it;
//! - in a worker process ([`set_strict`], set by `railyard worker` and `railyard dev`,
//!   which start no other processes), every adopted process that names no call at all
//!   (a command that also emptied its environment), and the zombies of adopted
//!   processes that ended by themselves.
//!
//! Linux only (`/proc`); elsewhere only the process group is killed.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The variable naming a command's call in its (and its descendants') environment.
pub(crate) const CALL_VAR: &str = "RAILYARD_BASH_CALL";

/// Rounds of look-and-kill before giving up on a command that forks faster than it dies.
const MAX_ROUNDS: usize = 64;

static STRICT: AtomicBool = AtomicBool::new(false);
static NEXT_CALL: AtomicU64 = AtomicU64::new(1);
/// The shells the tools started and have not reaped yet: children of the worker that
/// are not adopted.
static SHELLS: Mutex<Option<HashSet<u32>>> = Mutex::new(None);
/// Held while a shell is started and registered, and while a sweep looks and kills:
/// between fork and exec a new shell still has the worker's environment (no call),
/// so a strict sweep of another call seeing it then would take it for an orphan.
static SPAWNING: Mutex<()> = Mutex::new(());

/// Starts a shell with `spawn` and registers it, with no sweep looking meanwhile.
pub(crate) fn spawn_shell<T>(
    spawn: impl FnOnce() -> std::io::Result<T>,
    pid: impl Fn(&T) -> Option<u32>,
) -> std::io::Result<T> {
    let _quiet = SPAWNING.lock().unwrap_or_else(|p| p.into_inner());
    let child = spawn()?;
    if let Some(pid) = pid(&child) {
        register_shell(pid);
    }
    Ok(child)
}

/// Makes the worker a child subreaper, so that what a command orphans stays in its
/// tree for [`sweep`] to find. Answers whether it is one.
pub fn adopt_orphans() -> bool {
    #[cfg(target_os = "linux")]
    {
        match nix::sys::prctl::set_child_subreaper(true) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(error = %e, "cannot become a child subreaper; a command's setsid'd processes may outlive it");
                false
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    false
}

/// Says that this process starts no child processes but the tools' shells, so an
/// adopted process naming no call is a command's, and is killed by the next sweep.
pub fn set_strict(strict: bool) {
    STRICT.store(strict, Ordering::Relaxed);
}

/// A new call id, unique in this process.
pub(crate) fn new_call() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        NEXT_CALL.fetch_add(1, Ordering::Relaxed)
    )
}

fn register_shell(pid: u32) {
    SHELLS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_default()
        .insert(pid);
}

pub(crate) fn forget_shell(pid: u32) {
    if let Some(s) = SHELLS.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
        s.remove(&pid);
    }
}

fn is_shell(pid: u32) -> bool {
    SHELLS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .is_some_and(|s| s.contains(&pid))
}

/// One process, from `/proc/<pid>/stat`.
#[derive(Debug, Clone, Copy)]
struct Proc {
    ppid: u32,
    zombie: bool,
}

fn processes() -> HashMap<u32, Proc> {
    let mut all = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return all;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) S ppid ...": the name may hold anything, so count after its last ')'.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next().unwrap_or_default();
        let Some(ppid) = fields.next().and_then(|p| p.parse().ok()) else {
            continue;
        };
        all.insert(
            pid,
            Proc {
                ppid,
                zombie: state == "Z" || state == "X",
            },
        );
    }
    all
}

/// The call a process's environment names: `Some("")` when it names none, `None` when
/// it cannot be read (it ended, or is not ours to read).
fn call_of(pid: u32) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let prefix = format!("{CALL_VAR}=");
    Some(
        env.split(|b| *b == 0)
            .find_map(|e| e.strip_prefix(prefix.as_bytes()))
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .unwrap_or_default(),
    )
}

/// Every process below `roots` (the roots included).
fn with_descendants(all: &HashMap<u32, Proc>, roots: &[u32]) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for (pid, p) in all {
        children.entry(p.ppid).or_default().push(*pid);
    }
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut stack: Vec<u32> = roots.to_vec();
    while let Some(pid) = stack.pop() {
        if !seen.insert(pid) {
            continue;
        }
        out.push(pid);
        stack.extend(children.get(&pid).into_iter().flatten().copied());
    }
    out
}

/// Kills what call `call` left behind (see the module doc); `shell` is the command's
/// shell while it may still run. Answers how many processes were killed. Blocking
/// (reads `/proc`); cheap when nothing is left.
pub(crate) fn sweep(call: &str, shell: Option<u32>) -> usize {
    if !cfg!(target_os = "linux") {
        return 0;
    }
    let me = std::process::id();
    let strict = STRICT.load(Ordering::Relaxed);
    let mut killed = 0;
    let mut ours: HashSet<u32> = HashSet::new();
    for _ in 0..MAX_ROUNDS {
        let _quiet = SPAWNING.lock().unwrap_or_else(|p| p.into_inner());
        let all = processes();
        let mut roots: Vec<u32> = Vec::new();
        if let Some(shell) = shell
            && all.get(&shell).is_some_and(|p| p.ppid == me && !p.zombie)
        {
            // Below the shell (not the shell: tokio reaps it).
            roots.extend(all.iter().filter(|(_, p)| p.ppid == shell).map(|(pid, _)| *pid));
        }
        let mut zombies = Vec::new();
        for (pid, p) in &all {
            if p.ppid != me || Some(*pid) == shell || is_shell(*pid) {
                continue;
            }
            if p.zombie {
                zombies.push(*pid);
                continue;
            }
            match call_of(*pid) {
                Some(c) if c == call => roots.push(*pid),
                Some(c) if c.is_empty() && strict => roots.push(*pid),
                _ => {}
            }
        }
        for z in zombies {
            // Killed by an earlier round and re-parented here, or (strict) any adopted one.
            if strict || ours.contains(&z) {
                reap(z);
            }
        }
        if roots.is_empty() {
            break;
        }
        let targets = with_descendants(&all, &roots);
        for pid in &targets {
            if let Ok(p) = i32::try_from(*pid) {
                let _ =
                    nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), nix::sys::signal::Signal::SIGKILL);
                killed += 1;
            }
            ours.insert(*pid);
        }
        // The adopted ones are the worker's children: wait for them, so no zombie stays.
        for pid in targets {
            if all.get(&pid).is_some_and(|p| p.ppid == me) {
                reap(pid);
            }
        }
    }
    if killed > 0 {
        tracing::info!(call, killed, "killed what a bash command left running");
    }
    killed
}

/// Waits for an adopted child that was killed or has ended.
fn reap(pid: u32) {
    if let Ok(p) = i32::try_from(pid) {
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(p), None);
    }
}
