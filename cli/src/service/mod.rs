//! `railyard service install|uninstall`: write (or remove) a systemd unit or a launchd
//! plist that runs `railyard server` or `railyard worker` from this binary, restarted on
//! failure. It never starts or stops anything: it prints the command that does.
//!
//! [`mod@unit`] renders the file for each service manager; this file has the flags, the
//! checks (the configuration file is made absolute and must be a regular file) and the
//! writing. Tests: `tests.rs` beside it (rendering, quoting) and
//! `tests/e2e/service.rs` (the binary, into a temporary directory).

mod unit;

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Args, Subcommand, ValueEnum};

pub(crate) use unit::{Platform, Spec};

/// `railyard service ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum ServiceCommand {
    /// Write a systemd unit (Linux) or a launchd plist (macOS) that runs `railyard
    /// server` or `railyard worker` with this binary, restarted on failure; print it
    /// and the command that starts it. Nothing is started.
    Install(InstallArgs),
    /// Remove what `service install` wrote; print the command that stops a running
    /// service. Nothing is stopped.
    Uninstall(UninstallArgs),
}

/// Which long-running command the service runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Role {
    /// `railyard server`.
    Server,
    /// `railyard worker`.
    Worker,
}

impl Role {
    /// The subcommand the service runs.
    pub(crate) fn command(self) -> &'static str {
        match self {
            Self::Server => "server",
            Self::Worker => "worker",
        }
    }
}

/// Where and for whom the unit goes: shared by install and uninstall.
#[derive(Debug, Args)]
pub(crate) struct Target {
    /// `server` or `worker`.
    #[arg(value_enum)]
    pub role: Role,
    /// A service of the current user (`systemctl --user`, ~/Library/LaunchAgents)
    /// rather than of the system (/etc/systemd/system, /Library/LaunchDaemons).
    #[arg(long)]
    pub user: bool,
    /// The service manager: systemd or launchd (default: launchd on macOS, systemd
    /// elsewhere).
    #[arg(long, value_enum)]
    pub platform: Option<Platform>,
    /// Put the file in DIR instead of the service manager's directory (for tests,
    /// or to copy it elsewhere).
    #[arg(long, value_name = "DIR")]
    pub unit_dir: Option<PathBuf>,
    /// Print what would be done, change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Flags of `railyard service install`.
#[derive(Debug, Args)]
pub(crate) struct InstallArgs {
    #[command(flatten)]
    pub target: Target,
    /// The configuration file the service runs with (`--config FILE`); made
    /// absolute, and it must be a regular file.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Run as this user (a system service only; default: root for systemd and
    /// launchd).
    #[arg(long, value_name = "USER")]
    pub run_as: Option<String>,
    /// Replace a unit that exists already.
    #[arg(long)]
    pub force: bool,
}

/// Flags of `railyard service uninstall`.
#[derive(Debug, Args)]
pub(crate) struct UninstallArgs {
    #[command(flatten)]
    pub target: Target,
}

/// Runs a `service` subcommand, printing on stdout.
pub(crate) fn run(command: ServiceCommand) -> anyhow::Result<()> {
    let mut out = Vec::new();
    match command {
        ServiceCommand::Install(a) => install(&a, &Env::current()?, &mut out)?,
        ServiceCommand::Uninstall(a) => uninstall(&a, &Env::current()?, &mut out)?,
    }
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&out)?;
    stdout.flush()?;
    Ok(())
}

/// What the unit depends on from the process: read once, so tests can give their own.
#[derive(Debug, Clone)]
pub(crate) struct Env {
    /// This binary, absolute.
    pub binary: PathBuf,
    /// The current directory: the service's working directory.
    pub cwd: PathBuf,
    /// `$HOME`, for user units.
    pub home: Option<PathBuf>,
    /// `$XDG_CONFIG_HOME`, for systemd user units.
    pub xdg_config_home: Option<PathBuf>,
}

impl Env {
    fn current() -> anyhow::Result<Self> {
        let binary = std::env::current_exe().context("cannot find the path of this binary")?;
        let cwd = std::env::current_dir().context("cannot read the current directory")?;
        let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        Ok(Self {
            binary,
            cwd,
            home: var("HOME"),
            xdg_config_home: var("XDG_CONFIG_HOME"),
        })
    }
}

/// The platform a `--platform` left unset stands for.
fn platform(target: &Target) -> Platform {
    target.platform.unwrap_or(if cfg!(target_os = "macos") {
        Platform::Launchd
    } else {
        Platform::Systemd
    })
}

/// The directory the unit file goes into.
fn unit_dir(target: &Target, platform: Platform, env: &Env) -> anyhow::Result<PathBuf> {
    if let Some(dir) = &target.unit_dir {
        return Ok(std::path::absolute(dir)?);
    }
    let home = || {
        env.home
            .clone()
            .context("HOME is not set: pass --unit-dir to say where the user unit goes")
    };
    Ok(match (platform, target.user) {
        (Platform::Systemd, false) => PathBuf::from("/etc/systemd/system"),
        (Platform::Systemd, true) => match &env.xdg_config_home {
            Some(c) => c.join("systemd/user"),
            None => home()?.join(".config/systemd/user"),
        },
        (Platform::Launchd, false) => PathBuf::from("/Library/LaunchDaemons"),
        (Platform::Launchd, true) => home()?.join("Library/LaunchAgents"),
    })
}

/// The configuration file, absolute, checked to be a regular file.
fn config_file(path: &Path, cwd: &Path) -> anyhow::Result<PathBuf> {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        cwd.join(path)
    };
    let meta = std::fs::metadata(&absolute)
        .with_context(|| format!("--config {}: cannot read it", absolute.display()))?;
    if !meta.is_file() {
        bail!(
            "--config {}: not a regular file ({})",
            absolute.display(),
            railyard_files::kind_of(&meta)
        );
    }
    Ok(absolute)
}

fn install(args: &InstallArgs, env: &Env, out: &mut Vec<u8>) -> anyhow::Result<()> {
    let target = &args.target;
    let platform = platform(target);
    if target.user && args.run_as.is_some() {
        bail!("--run-as is for a system service; a --user service runs as you");
    }
    let config = args
        .config
        .as_deref()
        .map(|c| config_file(c, &env.cwd))
        .transpose()?;
    let spec = Spec {
        role: target.role,
        user: target.user,
        binary: env.binary.clone(),
        config,
        working_dir: env.cwd.clone(),
        run_as: args.run_as.clone(),
        home: env.home.clone(),
    };
    let text = unit::render(platform, &spec)?;
    let path = unit_dir(target, platform, env)?.join(unit::file_name(platform, target.role));
    let exists = std::fs::symlink_metadata(&path).is_ok();
    if exists && !args.force {
        bail!(
            "{} exists already: pass --force to replace it, or `railyard service uninstall` first",
            path.display()
        );
    }
    if target.dry_run {
        writeln!(out, "# would write {} (dry run: nothing written)", path.display())?;
        out.extend_from_slice(text.as_bytes());
        writeln!(out, "# then start it with:")?;
        writeln!(
            out,
            "{}",
            unit::start_command(platform, target.role, target.user, &path)
        )?;
        return Ok(());
    }
    write_unit(&path, &text)?;
    writeln!(out, "wrote {}:", path.display())?;
    out.extend_from_slice(text.as_bytes());
    writeln!(out, "Nothing was started. Start it with:")?;
    writeln!(
        out,
        "  {}",
        unit::start_command(platform, target.role, target.user, &path)
    )?;
    Ok(())
}

/// Writes the unit through a temporary file in the same directory, so a reader never
/// sees half of it, mode 0644 (service managers read it as another user).
fn write_unit(path: &Path, text: &str) -> anyhow::Result<()> {
    let dir = path.parent().context("the unit path has no directory")?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("cannot write into {}", dir.display()))?;
    tmp.write_all(text.as_bytes())?;
    tmp.as_file().sync_all()?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644))?;
    }
    tmp.persist(path)
        .map_err(|e| e.error)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

fn uninstall(args: &UninstallArgs, env: &Env, out: &mut Vec<u8>) -> anyhow::Result<()> {
    let target = &args.target;
    let platform = platform(target);
    let path = unit_dir(target, platform, env)?.join(unit::file_name(platform, target.role));
    let meta = match std::fs::symlink_metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("{} does not exist: nothing to uninstall", path.display())
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    if !meta.is_file() {
        bail!(
            "{} is not a regular file ({}): not removing it",
            path.display(),
            railyard_files::kind_of(&meta)
        );
    }
    let stop = unit::stop_command(platform, target.role, target.user, &path);
    if target.dry_run {
        writeln!(
            out,
            "# would remove {} (dry run: nothing removed)",
            path.display()
        )?;
        writeln!(out, "# stop it first if it runs:")?;
        writeln!(out, "{stop}")?;
        return Ok(());
    }
    std::fs::remove_file(&path).with_context(|| format!("cannot remove {}", path.display()))?;
    writeln!(out, "removed {}", path.display())?;
    writeln!(out, "Nothing was stopped. If it still runs, stop it with:")?;
    writeln!(out, "  {stop}")?;
    Ok(())
}

#[cfg(test)]
mod tests;
