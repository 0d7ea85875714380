//! `railyard dev`: server and worker in one process, running the bundled demo with the
//! offline scripted provider.

use std::process::Command;

use crate::support::*;

#[test]
fn dev_runs_the_demo_to_completion_and_exits() {
    let sandbox = Sandbox::new();
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for file in ["demo.json", "demo.script.json"] {
        std::fs::copy(
            repo.join("workflows").join(file),
            sandbox.path("workflows").join(file),
        )
        .expect("copy the bundled demo");
    }
    let data = sandbox.path("data");
    let out = Command::new(BIN)
        .current_dir(sandbox.dir.path())
        .arg("dev")
        .arg("--exit-when-done")
        .arg("--data-dir")
        .arg(&data)
        .arg("--workflows")
        .arg(sandbox.path("workflows"))
        .args(["--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"])
        .args(["--goal", "a haiku about trains"])
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("RAILYARD_PROVIDER")
        .env_remove("RAILYARD_SCRIPT")
        .env_remove("RAILYARD_SERVER")
        .env_remove("RAILYARD_QUEUES")
        .env_remove("RAILYARD_WORKSPACE")
        .env_remove("RUST_LOG")
        .output()
        .expect("run railyard dev");
    let text = stdout(&out);
    assert!(
        out.status.success(),
        "dev failed ({}): {text}{}",
        out.status,
        stderr(&out)
    );

    // The screen says plainly that no real model is in use.
    assert!(
        text.contains("SCRIPTED provider") && text.contains("NOT a real model"),
        "{text}"
    );
    // And that it is open, on loopback only.
    assert!(
        text.contains("auth:      off - open to every process on this machine (loopback only)"),
        "{text}"
    );
    // And where its web console is.
    assert!(
        text.lines()
            .any(|l| l.starts_with("console:   http://127.0.0.1:") && l.ends_with("/ui")),
        "{text}"
    );
    // The three steps, in order, with their tool calls and results.
    let research = text.find("[1/3] Research the goal").expect("step 1 shown");
    let draft = text.find("[2/3] Draft the piece").expect("step 2 shown");
    let review = text.find("[3/3] Review and finalise").expect("step 3 shown");
    assert!(research < draft && draft < review, "{text}");
    assert!(text.contains("tool:  write_file notes.md"), "{text}");
    assert!(text.contains("tool:  bash wc -w draft.md"), "{text}");
    assert!(text.contains("note to coordinator (progress)"), "{text}");
    assert_eq!(text.matches("      completed: ").count(), 3, "{text}");

    // The final status and where the artifacts are.
    let run_id = text
        .lines()
        .find_map(|l| l.strip_prefix("Started run "))
        .and_then(|l| l.split_whitespace().next())
        .expect("run id printed")
        .to_string();
    assert!(text.contains(&format!("Run {run_id} COMPLETED")), "{text}");
    let workspace = data.join("workspaces").join(&run_id);
    assert!(
        text.contains(&format!("Artifacts are in {}/", workspace.display())),
        "{text}"
    );
    let draft_md = std::fs::read_to_string(workspace.join("draft.md")).expect("draft.md written");
    assert!(
        draft_md.contains("# a haiku about trains") && draft_md.contains("Status: reviewed"),
        "{draft_md}"
    );
    assert!(workspace.join("notes.md").is_file());
    // --exit-when-done prints no "keep running" instructions.
    assert!(!text.contains("Ctrl-C stops both"), "{text}");
}

#[test]
fn dev_without_the_demo_workflow_says_what_to_do() {
    let sandbox = Sandbox::new();
    let out = Command::new(BIN)
        .current_dir(sandbox.dir.path())
        .arg("dev")
        .arg("--exit-when-done")
        .arg("--data-dir")
        .arg(sandbox.path("data"))
        .arg("--workflows")
        .arg(sandbox.path("workflows"))
        .args(["--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"])
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("RAILYARD_PROVIDER")
        .env("RAILYARD_SCRIPT", r#"{"default": []}"#)
        .output()
        .expect("run railyard dev");
    assert_eq!(out.status.code(), Some(1), "{}{}", stdout(&out), stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("`demo` workflow is not in") && err.contains("--no-demo"),
        "{err}"
    );
}

/// Clears every variable that would configure a model, a workflows directory or a
/// config file, as on the machine of someone who just installed `railyard`.
fn bare(cmd: &mut Command) -> &mut Command {
    for var in [
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "RAILYARD_PROVIDER",
        "RAILYARD_MODEL",
        "RAILYARD_SCRIPT",
        "RAILYARD_SERVER",
        "RAILYARD_QUEUES",
        "RAILYARD_WORKSPACE",
        "RAILYARD_WORKFLOWS",
        "RAILYARD_DATA_DIR",
        "RAILYARD_LISTEN",
        "RAILYARD_HTTP_LISTEN",
        "RAILYARD_SERVER_CONFIG",
        "RUST_LOG",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// `railyard dev` for someone who ran `cargo install --path cli`: an empty directory, no
/// `--workflows`, no model keys. The demo and its offline script come from the binary,
/// and the screen says so.
#[test]
fn dev_runs_the_built_in_demo_in_an_empty_directory() {
    let sandbox = Sandbox::new();
    let empty = sandbox.path("empty");
    std::fs::create_dir(&empty).unwrap();
    let out = bare(Command::new(BIN).current_dir(&empty))
        .args(["dev", "--exit-when-done"])
        .args(["--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"])
        .args(["--goal", "a haiku about trains"])
        .output()
        .expect("run railyard dev");
    let text = stdout(&out);
    assert!(
        out.status.success(),
        "dev failed ({}): {text}{}",
        out.status,
        stderr(&out)
    );

    assert!(text.contains(" workflows=<built-in>"), "{text}");
    assert!(
        text.contains("workflows: the demo built into this binary (<built-in>/demo.json)"),
        "{text}"
    );
    assert!(
        text.contains("SCRIPTED provider")
            && text.contains("<built-in>/demo.script.json (built into this binary)"),
        "{text}"
    );
    let research = text.find("[1/3] Research the goal").expect("step 1 shown");
    let review = text.find("[3/3] Review and finalise").expect("step 3 shown");
    assert!(research < review, "{text}");
    assert_eq!(text.matches("      completed: ").count(), 3, "{text}");
    let run_id = text
        .lines()
        .find_map(|l| l.strip_prefix("Started run "))
        .and_then(|l| l.split_whitespace().next())
        .expect("run id printed")
        .to_string();
    assert!(text.contains(&format!("Run {run_id} COMPLETED")), "{text}");

    // Everything went to ./.railyard of the directory it ran in, and nothing else.
    let draft = std::fs::read_to_string(empty.join(".railyard/workspaces").join(&run_id).join("draft.md"))
        .expect("draft.md written in ./.railyard/workspaces");
    assert!(
        draft.contains("# a haiku about trains") && draft.contains("Status: reviewed"),
        "{draft}"
    );
    let made: Vec<_> = std::fs::read_dir(&empty)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(made, [".railyard"], "{made:?}");
}

/// `railyard server` in an empty directory serves the built-in demo, and
/// `railyard workflow list` says where it comes from.
#[test]
fn server_in_an_empty_directory_serves_the_built_in_demo() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let sandbox = Sandbox::new();
    let empty = sandbox.path("empty");
    std::fs::create_dir(&empty).unwrap();
    let mut child = bare(Command::new(BIN).current_dir(&empty))
        .args([
            "server",
            "--listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
        ])
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn railyard server");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let field = |name: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .unwrap_or_else(|| panic!("{name} in {line:?}"))
            .to_string()
    };
    assert_eq!(field("workflows="), "<built-in>", "{line}");
    let url = format!("http://{}", field("grpc="));

    let listed = ok(ry(&url, &["workflow", "list"]));
    assert!(listed.contains("<built-in>/demo.json"), "{listed}");
    assert!(
        listed.contains("<built-in>: built into the railyard binary"),
        "{listed}"
    );
    let listed = json(ry(&url, &["workflow", "list", "-o", "json"]));
    assert_eq!(listed["workflows"][0]["id"], "demo", "{listed}");
    assert_eq!(
        listed["workflows"][0]["source_file"], "<built-in>/demo.json",
        "{listed}"
    );
    assert_eq!(listed["invalid"], serde_json::json!([]), "{listed}");
    let started = ok(ry(
        &url,
        &["run", "start", "demo", "--goal", "g", "--run-id", "b1"],
    ));
    assert_eq!(started.trim(), "started run b1 of demo");

    child.kill().unwrap();
    let out = child.wait_with_output().unwrap();
    let logs = stderr(&out);
    assert!(logs.contains("serving the demo built into this binary"), "{logs}");
}
