//! Rendering and quoting of service files, and install / uninstall into a temporary
//! directory with a given environment.

use std::path::PathBuf;

use super::unit::{self, Platform, Spec, systemd_quote, xml};
use super::*;

fn spec(role: Role, user: bool) -> Spec {
    Spec {
        role,
        user,
        binary: PathBuf::from("/opt/rail yard/bin/railyard"),
        config: Some(PathBuf::from("/etc/railyard/100%$HOME.toml")),
        working_dir: PathBuf::from("/srv/railyard"),
        run_as: None,
        home: Some(PathBuf::from("/Users/ann")),
    }
}

#[test]
fn systemd_arguments_are_quoted_and_not_expanded() {
    assert_eq!(systemd_quote("/usr/bin/railyard"), "/usr/bin/railyard");
    assert_eq!(systemd_quote("a b"), "\"a b\"");
    assert_eq!(systemd_quote("50%"), "50%%");
    assert_eq!(systemd_quote("$HOME"), "$$HOME");
    assert_eq!(systemd_quote("a\"b\\c"), "\"a\\\"b\\\\c\"");
    assert_eq!(systemd_quote(""), "\"\"");
}

#[test]
fn a_systemd_unit_runs_this_binary_with_its_config_and_restarts_on_failure() {
    let text = unit::render(Platform::Systemd, &spec(Role::Worker, true)).unwrap();
    assert!(
        text.contains(
            "ExecStart=\"/opt/rail yard/bin/railyard\" worker --config /etc/railyard/100%%$$HOME.toml\n"
        ),
        "{text}"
    );
    assert!(text.contains("Restart=on-failure\n"), "{text}");
    assert!(text.contains("WorkingDirectory=/srv/railyard\n"), "{text}");
    assert!(text.contains("TimeoutStopSec=120\n"), "{text}");
    assert!(text.contains("WantedBy=default.target\n"), "{text}");
    assert!(!text.contains("User="), "{text}");

    let mut system = spec(Role::Server, false);
    system.run_as = Some("railyard".into());
    let text = unit::render(Platform::Systemd, &system).unwrap();
    assert!(text.contains("User=railyard\n"), "{text}");
    assert!(text.contains("WantedBy=multi-user.target\n"), "{text}");
    assert!(text.contains(" server --config "), "{text}");
}

#[test]
fn a_launchd_plist_lists_the_arguments_escaped_and_keeps_a_failed_service_alive() {
    let mut s = spec(Role::Server, true);
    s.config = Some(PathBuf::from("/Users/ann/r&d/<cfg>.toml"));
    let text = unit::render(Platform::Launchd, &s).unwrap();
    assert!(text.contains("<string>dev.railyard.server</string>"), "{text}");
    assert!(text.contains("<string>/opt/rail yard/bin/railyard</string>\n    <string>server</string>\n    <string>--config</string>\n    <string>/Users/ann/r&amp;d/&lt;cfg&gt;.toml</string>"), "{text}");
    assert!(text.contains("<key>SuccessfulExit</key>\n    <false/>"), "{text}");
    assert!(
        text.contains("/Users/ann/Library/Logs/railyard-server.log"),
        "{text}"
    );
    assert_eq!(xml("a'\"b"), "a&apos;&quot;b");
}

#[test]
fn paths_with_control_characters_and_bad_user_names_are_refused() {
    let mut s = spec(Role::Server, false);
    s.config = Some(PathBuf::from("/etc/a\nb.toml"));
    let e = unit::render(Platform::Systemd, &s).unwrap_err().to_string();
    assert!(e.contains("--config"), "{e}");
    let mut s = spec(Role::Server, false);
    s.run_as = Some("root\nUser=x".into());
    let e = unit::render(Platform::Launchd, &s).unwrap_err().to_string();
    assert!(e.contains("--run-as"), "{e}");
}

fn target(role: Role, platform: Platform, dir: &std::path::Path, dry_run: bool) -> Target {
    Target {
        role,
        user: true,
        platform: Some(platform),
        unit_dir: Some(dir.to_path_buf()),
        dry_run,
    }
}

#[test]
fn install_and_uninstall_in_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("worker.toml");
    std::fs::write(&config, "slots = 2\n").unwrap();
    let env = Env {
        binary: PathBuf::from("/usr/local/bin/railyard"),
        cwd: dir.path().to_path_buf(),
        home: None,
        xdg_config_home: None,
    };
    let units = dir.path().join("units");
    let args = InstallArgs {
        target: target(Role::Worker, Platform::Systemd, &units, false),
        config: Some(PathBuf::from("worker.toml")),
        run_as: None,
        force: false,
    };
    let mut out = Vec::new();
    install(&args, &env, &mut out).unwrap();
    let written = std::fs::read_to_string(units.join("railyard-worker.service")).unwrap();
    assert!(
        written.contains(&format!("--config {}", config.display())),
        "{written}"
    );
    let printed = String::from_utf8(out).unwrap();
    assert!(
        printed.contains("systemctl --user daemon-reload && systemctl --user enable --now railyard-worker")
    );

    let again = install(&args, &env, &mut Vec::new()).unwrap_err().to_string();
    assert!(again.contains("--force"), "{again}");

    let un = UninstallArgs {
        target: target(Role::Worker, Platform::Systemd, &units, false),
    };
    uninstall(&un, &env, &mut Vec::new()).unwrap();
    assert!(!units.join("railyard-worker.service").exists());
    let e = uninstall(&un, &env, &mut Vec::new()).unwrap_err().to_string();
    assert!(e.contains("does not exist"), "{e}");
}

#[test]
fn user_units_go_under_the_home_directory() {
    let env = Env {
        binary: PathBuf::from("/bin/railyard"),
        cwd: PathBuf::from("/"),
        home: Some(PathBuf::from("/home/ann")),
        xdg_config_home: None,
    };
    let t = |platform, user| Target {
        role: Role::Server,
        user,
        platform: Some(platform),
        unit_dir: None,
        dry_run: true,
    };
    let dir = |platform, user| unit_dir(&t(platform, user), platform, &env).unwrap();
    assert_eq!(
        dir(Platform::Systemd, true),
        PathBuf::from("/home/ann/.config/systemd/user")
    );
    assert_eq!(
        dir(Platform::Systemd, false),
        PathBuf::from("/etc/systemd/system")
    );
    assert_eq!(
        dir(Platform::Launchd, true),
        PathBuf::from("/home/ann/Library/LaunchAgents")
    );
    assert_eq!(
        dir(Platform::Launchd, false),
        PathBuf::from("/Library/LaunchDaemons")
    );
    let xdg = Env {
        xdg_config_home: Some(PathBuf::from("/x")),
        ..env.clone()
    };
    assert_eq!(
        unit_dir(&t(Platform::Systemd, true), Platform::Systemd, &xdg).unwrap(),
        PathBuf::from("/x/systemd/user")
    );
}
