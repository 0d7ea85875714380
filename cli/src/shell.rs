//! `railyard completion SHELL` and `railyard man`: shell completions and man pages
//! generated from the clap definitions, so they never drift from `--help`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use clap_complete::Shell;

/// Flags of `railyard completion`.
#[derive(Debug, Args)]
pub(crate) struct CompletionArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Flags of `railyard man`.
#[derive(Debug, Args)]
pub(crate) struct ManArgs {
    /// Write one page per command (railyard.1, railyard-run.1, railyard-run-start.1 ...)
    /// into this directory instead of printing railyard(1) on stdout.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// Prints the completion script of `command` for `args.shell` on stdout.
pub(crate) fn completion(mut command: clap::Command, args: &CompletionArgs) -> anyhow::Result<()> {
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut command, "railyard", &mut out);
    write_stdout(&out)
}

/// Prints railyard(1) on stdout, or writes every command's page into `args.dir`.
pub(crate) fn man(command: clap::Command, args: &ManArgs) -> anyhow::Result<()> {
    match &args.dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
            clap_mangen::generate_to(command, dir)
                .with_context(|| format!("cannot write the man pages into {}", dir.display()))
        }
        None => {
            let mut out = Vec::new();
            clap_mangen::Man::new(command).render(&mut out)?;
            write_stdout(&out)
        }
    }
}

fn write_stdout(bytes: &[u8]) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(bytes)?;
    stdout.flush()?;
    Ok(())
}
