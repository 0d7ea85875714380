//! The service files: a systemd unit and a launchd plist for `railyard server` or
//! `railyard worker`, and the commands that start and stop them. Pure: no I/O.

use std::path::{Path, PathBuf};

use anyhow::bail;
use clap::ValueEnum;

use super::Role;

/// A service manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Platform {
    /// A systemd unit (Linux).
    Systemd,
    /// A launchd property list (macOS).
    Launchd,
}

/// What the service runs, and how.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    /// `server` or `worker`.
    pub role: Role,
    /// A user service rather than a system one.
    pub user: bool,
    /// The absolute path of the `railyard` binary.
    pub binary: PathBuf,
    /// The absolute configuration file, if any.
    pub config: Option<PathBuf>,
    /// The working directory (relative settings are taken from it).
    pub working_dir: PathBuf,
    /// The user a system service runs as.
    pub run_as: Option<String>,
    /// `$HOME`, where a launchd user agent's log goes.
    pub home: Option<PathBuf>,
}

/// The systemd unit's name (without `.service`), also launchd's label suffix.
pub(crate) fn service_name(role: Role) -> &'static str {
    match role {
        Role::Server => "railyard-server",
        Role::Worker => "railyard-worker",
    }
}

/// The launchd label.
fn label(role: Role) -> String {
    format!("dev.railyard.{}", role.command())
}

/// The file's name in its directory.
pub(crate) fn file_name(platform: Platform, role: Role) -> String {
    match platform {
        Platform::Systemd => format!("{}.service", service_name(role)),
        Platform::Launchd => format!("{}.plist", label(role)),
    }
}

/// How long the manager waits after SIGTERM: a worker lets running steps finish.
fn stop_timeout_secs(role: Role) -> u32 {
    match role {
        Role::Server => 30,
        Role::Worker => 120,
    }
}

/// A path as text a service file can hold: UTF-8 without control characters.
fn path_text(p: &Path, what: &str) -> anyhow::Result<String> {
    match p.to_str() {
        Some(s) if !s.chars().any(char::is_control) => Ok(s.to_string()),
        _ => bail!(
            "{what} {}: a service file cannot name a path that is not plain UTF-8 text",
            p.display()
        ),
    }
}

/// The command line, as separate arguments.
fn arguments(spec: &Spec) -> anyhow::Result<Vec<String>> {
    let text = path_text;
    let mut args = vec![text(&spec.binary, "the binary")?, spec.role.command().to_string()];
    if let Some(c) = &spec.config {
        args.push("--config".into());
        args.push(text(c, "--config")?);
    }
    Ok(args)
}

fn check_run_as(spec: &Spec) -> anyhow::Result<()> {
    if let Some(u) = &spec.run_as {
        let ok = !u.is_empty()
            && u.len() <= 64
            && u.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
        if !ok {
            bail!(
                "--run-as {}: a user name is 1 to 64 letters, digits, '.', '_' or '-'",
                railyard_model::echo(u)
            );
        }
    }
    Ok(())
}

/// Renders the service file.
pub(crate) fn render(platform: Platform, spec: &Spec) -> anyhow::Result<String> {
    check_run_as(spec)?;
    let args = arguments(spec)?;
    let dir = path_text(&spec.working_dir, "the working directory")?;
    Ok(match platform {
        Platform::Systemd => systemd(spec, &args, &dir),
        Platform::Launchd => launchd(spec, &args, &dir),
    })
}

fn systemd(spec: &Spec, args: &[String], dir: &str) -> String {
    let description = match spec.role {
        Role::Server => "Railyard history server",
        Role::Worker => "Railyard worker",
    };
    let exec = args
        .iter()
        .map(|a| systemd_quote(a))
        .collect::<Vec<_>>()
        .join(" ");
    let mut s = String::new();
    s.push_str("# Written by `railyard service install`; remove with `railyard service uninstall`.\n");
    s.push_str("[Unit]\n");
    s.push_str(&format!("Description={description}\n"));
    s.push_str("After=network-online.target\nWants=network-online.target\n\n");
    s.push_str("[Service]\nType=simple\n");
    if let Some(u) = &spec.run_as {
        s.push_str(&format!("User={u}\n"));
    }
    s.push_str(&format!("WorkingDirectory={}\n", systemd_quote(dir)));
    s.push_str(&format!("ExecStart={exec}\n"));
    s.push_str("# SIGTERM stops it gracefully (a worker lets running steps finish).\n");
    s.push_str("KillSignal=SIGTERM\n");
    s.push_str(&format!("TimeoutStopSec={}\n", stop_timeout_secs(spec.role)));
    s.push_str("Restart=on-failure\nRestartSec=5\n");
    if spec.role == Role::Server {
        s.push_str("LimitNOFILE=65536\n");
    }
    s.push_str("\n[Install]\n");
    let wanted = if spec.user {
        "default.target"
    } else {
        "multi-user.target"
    };
    s.push_str(&format!("WantedBy={wanted}\n"));
    s
}

/// One argument of `ExecStart=`: quoted when it holds anything systemd would read as
/// more than text (spaces, quotes, backslashes), with `%` and `$` doubled so systemd
/// neither expands specifiers nor variables.
pub(crate) fn systemd_quote(arg: &str) -> String {
    let escaped = arg.replace('%', "%%").replace('$', "$$");
    let plain = !escaped.is_empty()
        && !escaped
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, '"' | '\'' | '\\' | ';'));
    if plain {
        return escaped;
    }
    let mut q = String::from("\"");
    for c in escaped.chars() {
        if matches!(c, '"' | '\\') {
            q.push('\\');
        }
        q.push(c);
    }
    q.push('"');
    q
}

fn launchd(spec: &Spec, args: &[String], dir: &str) -> String {
    let log = match (&spec.home, spec.user) {
        (Some(home), true) => home
            .join("Library/Logs")
            .join(format!("{}.log", service_name(spec.role))),
        _ => PathBuf::from("/Library/Logs").join(format!("{}.log", service_name(spec.role))),
    };
    let log = xml(&log.to_string_lossy());
    let mut s = String::new();
    s.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    s.push_str(
        "<!DOCTYPE plist PUBLIC \"-//Apple//DTD PLIST 1.0//EN\" \"http://www.apple.com/DTDs/PropertyList-1.0.dtd\">\n",
    );
    s.push_str("<!-- Written by `railyard service install`; remove with `railyard service uninstall`. -->\n");
    s.push_str("<plist version=\"1.0\">\n<dict>\n");
    s.push_str(&format!(
        "  <key>Label</key>\n  <string>{}</string>\n",
        label(spec.role)
    ));
    s.push_str("  <key>ProgramArguments</key>\n  <array>\n");
    for a in args {
        s.push_str(&format!("    <string>{}</string>\n", xml(a)));
    }
    s.push_str("  </array>\n");
    if let Some(u) = &spec.run_as {
        s.push_str(&format!("  <key>UserName</key>\n  <string>{}</string>\n", xml(u)));
    }
    s.push_str(&format!(
        "  <key>WorkingDirectory</key>\n  <string>{}</string>\n",
        xml(dir)
    ));
    s.push_str("  <key>RunAtLoad</key>\n  <true/>\n");
    // Restarted when it exits with a failure, not after a clean stop.
    s.push_str("  <key>KeepAlive</key>\n  <dict>\n    <key>SuccessfulExit</key>\n    <false/>\n  </dict>\n");
    s.push_str("  <key>ThrottleInterval</key>\n  <integer>5</integer>\n");
    s.push_str(&format!(
        "  <key>ExitTimeOut</key>\n  <integer>{}</integer>\n",
        stop_timeout_secs(spec.role)
    ));
    s.push_str(&format!(
        "  <key>StandardOutPath</key>\n  <string>{log}</string>\n"
    ));
    s.push_str(&format!(
        "  <key>StandardErrorPath</key>\n  <string>{log}</string>\n"
    ));
    s.push_str("</dict>\n</plist>\n");
    s
}

/// Text escaped for an XML element.
pub(crate) fn xml(text: &str) -> String {
    let mut s = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => s.push_str("&amp;"),
            '<' => s.push_str("&lt;"),
            '>' => s.push_str("&gt;"),
            '"' => s.push_str("&quot;"),
            '\'' => s.push_str("&apos;"),
            c => s.push(c),
        }
    }
    s
}

/// The command that loads and starts the installed service.
pub(crate) fn start_command(platform: Platform, role: Role, user: bool, path: &Path) -> String {
    let name = service_name(role);
    let path = path.display();
    match (platform, user) {
        (Platform::Systemd, true) => {
            format!("systemctl --user daemon-reload && systemctl --user enable --now {name}")
        }
        (Platform::Systemd, false) => {
            format!("sudo systemctl daemon-reload && sudo systemctl enable --now {name}")
        }
        (Platform::Launchd, true) => format!("launchctl bootstrap gui/$(id -u) {path}"),
        (Platform::Launchd, false) => format!("sudo launchctl bootstrap system {path}"),
    }
}

/// The command that stops the service and forgets it.
pub(crate) fn stop_command(platform: Platform, role: Role, user: bool, _path: &Path) -> String {
    let name = service_name(role);
    let label = label(role);
    match (platform, user) {
        (Platform::Systemd, true) => {
            format!("systemctl --user disable --now {name} && systemctl --user daemon-reload")
        }
        (Platform::Systemd, false) => {
            format!("sudo systemctl disable --now {name} && sudo systemctl daemon-reload")
        }
        (Platform::Launchd, true) => format!("launchctl bootout gui/$(id -u)/{label}"),
        (Platform::Launchd, false) => format!("sudo launchctl bootout system/{label}"),
    }
}
