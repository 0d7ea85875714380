//! Workspace confinement of the file tools, and the bash tool's exit codes and timeout.

use std::time::Duration;

use railyard_worker::tools::{ToolBox, ToolLimits};
use serde_json::json;

fn toolbox(dir: &std::path::Path) -> ToolBox {
    ToolBox::new(dir, ToolLimits::default()).unwrap()
}

#[tokio::test]
async fn file_tools_refuse_escapes() {
    let ws = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "top secret").unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.path().join("out")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), ws.path().join("secret-link")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("nope.txt"), ws.path().join("dangling")).unwrap();
    let tools = toolbox(ws.path());

    let cases = [
        (
            "read_file",
            json!({"path": "../../etc/passwd"}),
            "escapes the workspace",
        ),
        (
            "read_file",
            json!({"path": "/etc/passwd"}),
            "absolute paths are not allowed",
        ),
        (
            "read_file",
            json!({"path": "out/secret.txt"}),
            "outside the workspace",
        ),
        (
            "read_file",
            json!({"path": "secret-link"}),
            "outside the workspace",
        ),
        (
            "write_file",
            json!({"path": "out/new.txt", "content": "x"}),
            "outside the workspace",
        ),
        (
            "write_file",
            json!({"path": "dangling", "content": "x"}),
            "cannot resolve",
        ),
        (
            "write_file",
            json!({"path": "/tmp/x", "content": "x"}),
            "absolute paths are not allowed",
        ),
        (
            "edit_file",
            json!({"path": "out/secret.txt", "old_string": "top", "new_string": "no"}),
            "outside",
        ),
        ("list_files", json!({"path": "out"}), "outside the workspace"),
        (
            "grep",
            json!({"pattern": "secret", "path": "out"}),
            "outside the workspace",
        ),
        ("list_files", json!({"path": "a/../../"}), "escapes the workspace"),
    ];
    for (tool, input, expected) in cases {
        let out = tools.execute(tool, &input).await;
        assert!(out.is_error, "{tool} {input} should be refused");
        assert!(out.content.contains(expected), "{tool} {input}: {}", out.content);
    }
    assert_eq!(
        std::fs::read_to_string(outside.path().join("secret.txt")).unwrap(),
        "top secret"
    );
    assert!(!outside.path().join("new.txt").exists());
    assert!(!outside.path().join("nope.txt").exists());

    // Listing shows the links without following them; grep does not search through them.
    let listing = tools.execute("list_files", &json!({})).await;
    assert!(!listing.is_error);
    assert!(listing.content.contains("out -> "), "{}", listing.content);
    assert!(!listing.content.contains("secret.txt ("), "{}", listing.content);
    let hits = tools.execute("grep", &json!({"pattern": "top secret"})).await;
    assert_eq!(hits.content, "no matches for \"top secret\"");

    // Inside the workspace, symlinks that stay inside are fine.
    tools
        .execute(
            "write_file",
            &json!({"path": "real/file.txt", "content": "inside"}),
        )
        .await;
    std::os::unix::fs::symlink(ws.path().join("real"), ws.path().join("alias")).unwrap();
    let read = tools
        .execute("read_file", &json!({"path": "alias/file.txt"}))
        .await;
    assert_eq!(read.content, "inside");
}

#[tokio::test]
async fn bash_reports_nonzero_exit_with_code_stdout_and_stderr() {
    let ws = tempfile::tempdir().unwrap();
    let tools = toolbox(ws.path());
    let out = tools
        .execute(
            "bash",
            &json!({"command": "echo to-out; echo to-err >&2; pwd; exit 3"}),
        )
        .await;
    assert!(out.is_error);
    assert!(out.content.starts_with("exit code: 3\n"), "{}", out.content);
    assert!(
        out.content.contains("--- stdout ---\nto-out\n"),
        "{}",
        out.content
    );
    assert!(
        out.content.contains("--- stderr ---\nto-err\n"),
        "{}",
        out.content
    );
    // It ran in the workspace.
    let root = ws.path().canonicalize().unwrap();
    assert!(
        out.content.contains(&root.display().to_string()),
        "{}",
        out.content
    );

    let ok = tools
        .execute("bash", &json!({"command": "printf hi > f.txt && cat f.txt"}))
        .await;
    assert!(!ok.is_error);
    assert!(
        ok.content.starts_with("exit code: 0\n--- stdout ---\nhi"),
        "{}",
        ok.content
    );

    let bad = tools.execute("bash", &json!({"cmd": "ls"})).await;
    assert!(bad.is_error && bad.content.contains("missing required argument `command`"));
}

#[tokio::test]
async fn bash_timeout_kills_the_command() {
    let ws = tempfile::tempdir().unwrap();
    let limits = ToolLimits {
        bash_timeout: Duration::from_millis(300),
        ..ToolLimits::default()
    };
    let tools = ToolBox::new(ws.path(), limits).unwrap();
    // The background child keeps the output pipe open; it must be killed with the group.
    let out = tools
        .execute(
            "bash",
            &json!({"command": "echo started; sleep 30 & sleep 30; echo never"}),
        )
        .await;
    assert!(out.is_error);
    assert!(
        out.content.starts_with("timed out after 300ms"),
        "{}",
        out.content
    );
    assert!(
        out.content.contains("started") && !out.content.contains("never"),
        "{}",
        out.content
    );
}

#[tokio::test]
async fn bash_output_is_capped() {
    let ws = tempfile::tempdir().unwrap();
    let limits = ToolLimits {
        output_cap: 1000,
        ..ToolLimits::default()
    };
    let tools = ToolBox::new(ws.path(), limits).unwrap();
    let out = tools
        .execute(
            "bash",
            &json!({"command": "head -c 50000 /dev/zero | tr '\\0' a"}),
        )
        .await;
    assert!(!out.is_error);
    assert!(
        out.content
            .contains("[... truncated: 1000 of 50000 bytes shown (cap 1000)]"),
        "{}",
        &out.content[..200]
    );
    assert!(out.content.len() < 1300);
}
