//! `railyard service install|uninstall` as a user runs it: dry runs for both service
//! managers, a unit written into and removed from a temporary directory, and the
//! refusals (no such configuration file, a FIFO, an existing unit without `--force`).

use std::process::Command;

use crate::support::*;

fn service(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .current_dir(dir)
        .arg("service")
        .args(args)
        .output()
        .expect("run railyard service")
}

/// The binary's own absolute path, as the unit names it.
fn binary() -> String {
    std::fs::canonicalize(BIN).unwrap().display().to_string()
}

#[test]
fn dry_runs_print_a_systemd_unit_and_a_launchd_plist_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("railyard.toml"), "[server]\n").unwrap();
    let config = dir.path().join("railyard.toml").display().to_string();
    let units = dir.path().join("units");
    let units_arg = units.to_str().unwrap();

    let unit = ok(service(
        dir.path(),
        &[
            "install",
            "server",
            "--config",
            "railyard.toml",
            "--user",
            "--dry-run",
            "--platform",
            "systemd",
            "--unit-dir",
            units_arg,
        ],
    ));
    assert!(unit.contains("would write"), "{unit}");
    assert!(unit.contains("railyard-server.service"), "{unit}");
    assert!(unit.contains(&format!(" server --config {config}\n")), "{unit}");
    assert!(unit.contains(&binary()) || unit.contains(BIN), "{unit}");
    assert!(unit.contains("Restart=on-failure"), "{unit}");
    assert!(
        unit.contains("systemctl --user daemon-reload && systemctl --user enable --now railyard-server"),
        "{unit}"
    );

    let plist = ok(service(
        dir.path(),
        &[
            "install",
            "worker",
            "--config",
            &config,
            "--dry-run",
            "--platform",
            "launchd",
            "--unit-dir",
            units_arg,
        ],
    ));
    assert!(plist.contains("dev.railyard.worker.plist"), "{plist}");
    assert!(plist.contains("<string>worker</string>"), "{plist}");
    assert!(plist.contains(&format!("<string>{config}</string>")), "{plist}");
    assert!(plist.contains("<key>KeepAlive</key>"), "{plist}");
    assert!(plist.contains("sudo launchctl bootstrap system"), "{plist}");

    assert!(!units.exists(), "a dry run wrote {}", units.display());
}

#[test]
fn install_writes_the_unit_and_uninstall_removes_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("worker.toml"), "slots = 2\n").unwrap();
    let units = dir.path().join("units");
    let units_arg = units.to_str().unwrap();
    let install = |extra: &[&str]| {
        let mut args = vec![
            "install",
            "worker",
            "--config",
            "worker.toml",
            "--user",
            "--platform",
            "systemd",
            "--unit-dir",
            units_arg,
        ];
        args.extend_from_slice(extra);
        service(dir.path(), &args)
    };

    let printed = ok(install(&[]));
    let path = units.join("railyard-worker.service");
    let written = std::fs::read_to_string(&path).unwrap();
    assert!(
        printed.contains(&format!("wrote {}", path.display())),
        "{printed}"
    );
    assert!(printed.contains(&written), "{printed}");
    assert!(printed.contains("Nothing was started"), "{printed}");
    assert!(written.contains("ExecStart="), "{written}");
    assert!(
        written.contains(&format!("--config {}", dir.path().join("worker.toml").display())),
        "{written}"
    );

    // An existing unit is kept unless --force.
    let again = install(&[]);
    assert_eq!(again.status.code(), Some(1));
    assert!(stderr(&again).contains("--force"), "{}", stderr(&again));
    ok(install(&["--force"]));

    let removed = ok(service(
        dir.path(),
        &[
            "uninstall",
            "worker",
            "--user",
            "--platform",
            "systemd",
            "--unit-dir",
            units_arg,
        ],
    ));
    assert!(removed.contains("removed"), "{removed}");
    assert!(
        removed.contains("systemctl --user disable --now railyard-worker"),
        "{removed}"
    );
    assert!(!path.exists());
    let none = service(
        dir.path(),
        &[
            "uninstall",
            "worker",
            "--user",
            "--platform",
            "systemd",
            "--unit-dir",
            units_arg,
        ],
    );
    assert_eq!(none.status.code(), Some(1));
    assert!(stderr(&none).contains("does not exist"), "{}", stderr(&none));
}

#[test]
fn install_refuses_a_missing_config_and_a_fifo() {
    let dir = tempfile::tempdir().unwrap();
    let units = dir.path().join("units");
    let units_arg = units.to_str().unwrap();
    let missing = service(
        dir.path(),
        &[
            "install",
            "server",
            "--config",
            "nope.toml",
            "--dry-run",
            "--unit-dir",
            units_arg,
        ],
    );
    assert_eq!(missing.status.code(), Some(1));
    assert!(stderr(&missing).contains("nope.toml"), "{}", stderr(&missing));

    let fifo = dir.path().join("fifo.toml");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    let refused = service(
        dir.path(),
        &[
            "install",
            "server",
            "--config",
            "fifo.toml",
            "--unit-dir",
            units_arg,
        ],
    );
    assert_eq!(refused.status.code(), Some(1));
    let err = stderr(&refused);
    assert!(err.contains("fifo.toml") && err.contains("a FIFO"), "{err}");
    assert!(!units.exists());
}
