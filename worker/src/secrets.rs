//! Keeping the worker's own credentials away from the commands `bash` runs.
//!
//! `bash` gets an allowlisted environment (see [`crate::tools::ToolLimits::bash_env`]), but
//! a command can still look at its parent, the worker: `/proc/$PPID/environ` shows the
//! environment the worker was started with, whatever the worker later changes in its
//! own `environ` (`std::env::remove_var` changes nothing there), because the kernel reads
//! it from the original block of memory at the top of the stack. [`protect_process`]
//! closes that in two ways, once the configuration has been read:
//!
//! 1. the worker becomes non-dumpable (`prctl(PR_SET_DUMPABLE, 0)`), so a process of the
//!    same user without `CAP_SYS_PTRACE` (a worker not run as root) can no longer read
//!    any of the worker's `/proc/<pid>/environ` or `/proc/<pid>/mem`;
//! 2. every entry of that original block the worker no longer needs is overwritten with
//!    NUL bytes (through `/proc/self/mem`, no unsafe code), so even a command running as
//!    root reads nothing of it: the worker's API keys, `GITHUB_TOKEN`, cloud keys, its
//!    own `RAILYARD_*` settings, anything. Kept: what `bash` passes on (`PATH`, `LANG`,
//!    `LC_ALL`, `TERM`, `TZ` and the `bash_env` list, never a worker credential) and
//!    [`WORKER_RUNTIME`]. The values were read into the configuration before.
//!
//! 3. the command line (`/proc/<pid>/cmdline`, readable by every local user whatever
//!    the dumpable flag) is wiped the same way of each secret given to
//!    [`protect_process`] (the worker's `--api-key`): an argument that is the secret, or
//!    the value of one `--name=secret`, becomes NUL bytes.
//!
//! What stays readable as root: the kept variables. A key file (`--api-key-file`)
//! stays readable to every process of its user: `bash` commands included.
//!
//! Neither makes `bash` a sandbox: run workers as a dedicated user, in a container, with
//! only the files and variables a step may see.

use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom, Write};

use crate::tools::{BASH_DEFAULT_ENV, WORKER_SECRETS};

/// What [`protect_process`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Protection {
    /// The process is no longer dumpable.
    pub non_dumpable: bool,
    /// The names whose entries in the original environment block were wiped.
    pub wiped: Vec<String>,
    /// Arguments of the command line wiped (secrets, or their `--name=` values).
    pub wiped_args: usize,
}

/// Variables the worker itself may still read after it started, kept in its environment.
pub const WORKER_RUNTIME: [&str; 5] = [
    "TMPDIR",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "RUST_LOG",
    "RUST_BACKTRACE",
];

/// Makes the worker non-dumpable and wipes from the environment block
/// `/proc/<pid>/environ` reads every variable but `bash`'s allowlist (with `bash_env`)
/// and [`WORKER_RUNTIME`]; the worker's credentials are wiped even when listed.
/// Afterwards `std::env::var` no longer finds the wiped ones either. Each of `secrets`
/// (empty ones ignored) is wiped from the command line ([`wipe_args`]). Call it after
/// the configuration is loaded. Failures are logged and reported, never fatal: a
/// worker on a system without `/proc` still runs.
pub fn protect_process(bash_env: &[String], secrets: &[&str]) -> Protection {
    let mut done = Protection::default();
    #[cfg(target_os = "linux")]
    match nix::sys::prctl::set_dumpable(false) {
        Ok(()) => done.non_dumpable = true,
        Err(e) => {
            tracing::warn!(error = %e, "cannot make the worker non-dumpable; commands of the same user may read its /proc entries")
        }
    }
    let keep = |name: &str| {
        !WORKER_SECRETS.contains(&name)
            && (BASH_DEFAULT_ENV.contains(&name)
                || WORKER_RUNTIME.contains(&name)
                || bash_env.iter().any(|n| n == name))
    };
    match wipe_environ(&|name| !keep(name)) {
        Ok(wiped) => done.wiped = wiped,
        Err(e) => tracing::warn!(error = %e,
            "cannot wipe the worker's environment; bash commands may read it from /proc/$PPID/environ"),
    }
    match wipe_args(secrets) {
        Ok(n) => done.wiped_args = n,
        Err(e) => tracing::warn!(error = %e,
            "cannot wipe the worker's command line; bash commands may read its key from /proc/$PPID/cmdline"),
    }
    done
}

/// Overwrites with NUL bytes, in the original argument block `/proc/<pid>/cmdline`
/// reads, every argument that is one of `secrets` and the value of every `--name=value`
/// argument whose value is one; answers how many were wiped.
fn wipe_args(secrets: &[&str]) -> std::io::Result<usize> {
    let secrets: Vec<&[u8]> = secrets
        .iter()
        .filter(|s| !s.is_empty())
        .map(|s| s.as_bytes())
        .collect();
    if secrets.is_empty() {
        return Ok(0);
    }
    let block = std::fs::read("/proc/self/cmdline")?;
    let mut targets = Vec::new();
    let mut offset = 0usize;
    for arg in block.split(|b| *b == 0) {
        if secrets.contains(&arg) {
            targets.push((offset, arg.len()));
        } else if arg.starts_with(b"--")
            && let Some(eq) = arg.iter().position(|b| *b == b'=')
            && secrets.contains(&&arg[eq + 1..])
        {
            targets.push((offset + eq + 1, arg.len() - eq - 1));
        }
        offset += arg.len() + 1;
    }
    if targets.is_empty() {
        return Ok(0);
    }
    let start = stat_field(48, "arg_start")?;
    let mut mem = OpenOptions::new().write(true).open("/proc/self/mem")?;
    for (at, len) in &targets {
        mem.seek(SeekFrom::Start(start + *at as u64))?;
        mem.write_all(&vec![0u8; *len])?;
    }
    Ok(targets.len())
}

/// Overwrites every `NAME=value` entry of the original environment block whose name
/// `wipe` picks with NUL bytes; returns the names wiped.
fn wipe_environ(wipe: &dyn Fn(&str) -> bool) -> std::io::Result<Vec<String>> {
    let block = std::fs::read("/proc/self/environ")?;
    let mut targets = Vec::new();
    let mut offset = 0usize;
    for entry in block.split(|b| *b == 0) {
        let name = entry.split(|b| *b == b'=').next().unwrap_or_default();
        let name = String::from_utf8_lossy(name);
        if entry.contains(&b'=') && wipe(&name) {
            targets.push((offset, entry.len(), name.into_owned()));
        }
        offset += entry.len() + 1;
    }
    if targets.is_empty() {
        return Ok(Vec::new());
    }
    let start = stat_field(50, "env_start")?;
    let mut mem = OpenOptions::new().write(true).open("/proc/self/mem")?;
    let mut wiped = Vec::new();
    for (at, len, name) in targets {
        mem.seek(SeekFrom::Start(start + at as u64))?;
        mem.write_all(&vec![0u8; len])?;
        if !wiped.contains(&name) {
            wiped.push(name);
        }
    }
    Ok(wiped)
}

/// An address field of `/proc/self/stat` (48: `arg_start`, 50: `env_start`, the
/// original argument and environment blocks), counted after the command name, which
/// may hold spaces.
fn stat_field(field: usize, name: &str) -> std::io::Result<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let after_comm = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or_default();
    // Fields from 3 (state) on.
    after_comm
        .split_whitespace()
        .nth(field - 3)
        .and_then(|f| f.parse().ok())
        .filter(|addr| *addr != 0)
        .ok_or_else(|| std::io::Error::other(format!("no {name} in /proc/self/stat")))
}
