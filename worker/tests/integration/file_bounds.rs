//! The file tools touch only regular files with a single link: a FIFO never blocks a
//! worker thread, and a hard link `bash` made to a file outside the workspace is
//! neither read nor written.

use std::path::Path;
use std::time::Duration;

use railyard_worker::tools::{ToolBox, ToolLimits, ToolOutput};
use serde_json::{Value, json};

/// Runs a tool, failing the test (instead of hanging it) if it does not answer.
async fn call(tools: &ToolBox, name: &str, input: Value) -> ToolOutput {
    tokio::time::timeout(Duration::from_secs(30), tools.execute(name, &input))
        .await
        .unwrap_or_else(|_| panic!("{name} {input} blocked"))
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success(), "mkfifo failed");
}

#[tokio::test]
async fn a_fifo_in_the_workspace_is_refused_without_blocking() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir(ws.path().join("docs")).unwrap();
    std::fs::write(ws.path().join("docs/notes.md"), "needle here\n").unwrap();
    mkfifo(&ws.path().join("pipe"));
    mkfifo(&ws.path().join("docs/pipe2"));
    let tools = ToolBox::new(ws.path(), ToolLimits::default()).unwrap();

    for (name, input) in [
        ("read_file", json!({"path": "pipe"})),
        ("read_file", json!({"path": "docs/pipe2"})),
        ("grep", json!({"pattern": "x", "path": "pipe"})),
        ("write_file", json!({"path": "pipe", "content": "x"})),
        (
            "edit_file",
            json!({"path": "pipe", "old_string": "a", "new_string": "b"}),
        ),
    ] {
        let out = call(&tools, name, input.clone()).await;
        assert!(out.is_error, "{name} {input}: {}", out.content);
        assert!(
            out.content
                .contains("is a FIFO (named pipe); only regular files can be used"),
            "{name} {input}: {}",
            out.content
        );
    }
    // Walks go past FIFOs: grep finds what is in regular files, list_files names them.
    let found = call(&tools, "grep", json!({"pattern": "needle"})).await;
    assert_eq!(found.content, "docs/notes.md:1: needle here", "{found:?}");
    let listed = call(&tools, "list_files", json!({})).await;
    assert!(
        listed
            .content
            .contains("docs/pipe2 (a FIFO (named pipe), not readable)"),
        "{}",
        listed.content
    );
    assert!(
        listed
            .content
            .contains("pipe (a FIFO (named pipe), not readable)"),
        "{}",
        listed.content
    );
    // Still a FIFO: nothing replaced it.
    use std::os::unix::fs::FileTypeExt;
    assert!(
        std::fs::symlink_metadata(ws.path().join("pipe"))
            .unwrap()
            .file_type()
            .is_fifo()
    );
}

#[tokio::test]
async fn a_hard_link_made_by_bash_does_not_reach_a_file_outside() {
    let ws = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, "top secret value\n").unwrap();
    let tools = ToolBox::new(ws.path(), ToolLimits::default()).unwrap();

    // bash is not confined: it can make the link, as a model's command would.
    let made = call(
        &tools,
        "bash",
        json!({"command": format!("ln {} link.txt && echo linked", secret.display())}),
    )
    .await;
    assert!(
        !made.is_error && made.content.contains("linked"),
        "{}",
        made.content
    );

    for (name, input) in [
        ("read_file", json!({"path": "link.txt"})),
        ("grep", json!({"pattern": "secret", "path": "link.txt"})),
        (
            "write_file",
            json!({"path": "link.txt", "content": "overwritten"}),
        ),
        (
            "edit_file",
            json!({"path": "link.txt", "old_string": "top", "new_string": "no"}),
        ),
    ] {
        let out = call(&tools, name, input.clone()).await;
        assert!(out.is_error, "{name} {input}: {}", out.content);
        assert!(
            out.content.contains("\"link.txt\" has 2 hard links") && !out.content.contains("top secret"),
            "{name} {input}: {}",
            out.content
        );
    }
    assert_eq!(
        std::fs::read_to_string(&secret).unwrap(),
        "top secret value\n",
        "the file outside is untouched"
    );
    // A walk does not read it either, and says why it was skipped.
    let grep = call(&tools, "grep", json!({"pattern": "secret"})).await;
    assert!(
        !grep.content.contains("top secret value") && grep.content.contains("1 file(s) could not be read"),
        "{}",
        grep.content
    );
    let listed = call(&tools, "list_files", json!({})).await;
    assert!(
        listed.content.contains("link.txt (17 bytes, 2 hard links"),
        "{}",
        listed.content
    );
    // Once the link is gone, the name is an ordinary new file again.
    std::fs::remove_file(ws.path().join("link.txt")).unwrap();
    let written = call(
        &tools,
        "write_file",
        json!({"path": "link.txt", "content": "mine"}),
    )
    .await;
    assert!(!written.is_error, "{}", written.content);
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "top secret value\n");
}

#[tokio::test]
async fn ordinary_files_still_read_write_and_edit() {
    let ws = tempfile::tempdir().unwrap();
    let tools = ToolBox::new(ws.path(), ToolLimits::default()).unwrap();
    let w = call(
        &tools,
        "write_file",
        json!({"path": "a/b.txt", "content": "one two"}),
    )
    .await;
    assert!(!w.is_error, "{}", w.content);
    // Overwriting truncates: no tail of the longer old content is left.
    let w = call(&tools, "write_file", json!({"path": "a/b.txt", "content": "uno"})).await;
    assert!(!w.is_error, "{}", w.content);
    let e = call(
        &tools,
        "edit_file",
        json!({"path": "a/b.txt", "old_string": "uno", "new_string": "eins"}),
    )
    .await;
    assert!(!e.is_error, "{}", e.content);
    let r = call(&tools, "read_file", json!({"path": "a/b.txt"})).await;
    assert_eq!(r.content, "eins");
}
