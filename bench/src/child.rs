//! The benches' child processes (servers, workers, clients) end with the bench:
//! [`Reaped`] kills its process when dropped (a phase that fails or times out), and
//! [`die_with_parent`] has the kernel kill it if the bench itself dies (SIGKILL, a
//! panic that aborts), so no bench leaves a server or a worker running.

use std::ops::{Deref, DerefMut};
use std::process::{Child, Command};

/// Has the kernel send SIGKILL to `cmd`'s process when the thread that starts it
/// exits (`PR_SET_PDEATHSIG`, Linux only; elsewhere nothing). Start children from a
/// thread that lives as long as they should: the main thread or a runtime worker,
/// never a `spawn_blocking` thread, which the runtime ends when it idles.
pub(crate) fn die_with_parent(cmd: &mut Command) -> &mut Command {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        let parent = nix::unistd::getpid();
        // SAFETY: between fork and exec the closure only makes two system calls
        // (prctl, getppid), which are async-signal-safe, and allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                    .map_err(std::io::Error::from)?;
                // The bench may have died before the signal was armed.
                if nix::unistd::getppid() != parent {
                    return Err(std::io::Error::from(nix::errno::Errno::ESRCH));
                }
                Ok(())
            });
        }
    }
    cmd
}

/// A child process killed (and waited for) when dropped.
#[derive(Debug)]
pub(crate) struct Reaped(pub(crate) Child);

impl Deref for Reaped {
    type Target = Child;

    fn deref(&self) -> &Child {
        &self.0
    }
}

impl DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        // Already exited (and waited for) is fine: kill then fails and wait returns.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// A child started with `die_with_parent` from a thread is killed when that
    /// thread exits, as it would be when the bench dies.
    #[test]
    fn a_child_dies_with_the_thread_that_started_it() {
        let handle = std::thread::spawn(|| die_with_parent(Command::new("sleep").arg("30")).spawn().unwrap());
        let mut child = handle.join().unwrap();
        let pid = child.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // A zombie: killed, not yet waited for.
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, r)| r.trim_start().chars().next());
            if state == Some('Z') {
                break;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("sleep {pid} outlived the thread that started it: {stat:?}");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(child.wait().unwrap().signal(), Some(9));
    }
}
