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
