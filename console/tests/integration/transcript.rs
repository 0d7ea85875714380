//! The transcript: a step's live output replayed as a conversation over SSE, escaped,
//! with a huge tool result cut and its size said.

use railyard_proto::v1::{AppendStepOutputRequest, OutputChunk, OutputKind};
use railyard_sdk::Completion;

use crate::support::{Console, Leased};

fn chunk(kind: OutputKind, text: &str, name: &str) -> OutputChunk {
    OutputChunk {
        kind: kind as i32,
        text: text.into(),
        name: name.into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn the_transcript_replays_the_output_as_a_conversation() {
    let console = Console::start(false).await;
    let Leased {
        client,
        run_id: run,
        worker,
        task,
    } = console.start_and_lease("one", "look around").await;
    let huge = "x".repeat(100_000);
    client
        .append_step_output(AppendStepOutputRequest {
            task_token: task.task_token.clone(),
            identity: "w".into(),
            chunks: vec![
                chunk(OutputKind::Text, "I will list the files.", ""),
                chunk(OutputKind::ToolCallStart, "", "bash"),
                chunk(OutputKind::ToolInput, r#"{"command":"ls"}"#, ""),
                chunk(
                    OutputKind::ToolResult,
                    "<script>alert(1)</script> \"><img src=x onerror=alert(2)>",
                    "bash",
                ),
                chunk(OutputKind::ToolResult, &huge, "bash"),
                chunk(OutputKind::ToolCallStart, "", "mcp__github__get_issue"),
                chunk(
                    OutputKind::ToolResult,
                    "issue 7: the parser",
                    "mcp__github__get_issue",
                ),
                chunk(OutputKind::TurnEnd, "tool_use", ""),
            ],
        })
        .await
        .unwrap();
    worker
        .complete(&task.task_token, Completion::notes("done"))
        .await
        .unwrap();
    let mut b = console.browser();
    let page = b.get(&format!("/ui/runs/{run}/transcript")).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("sse-connect=\"/ui/runs/"), "{}", page.body);
    let stream = b
        .get(&format!("/ui/runs/{run}/transcript/stream?ns=default"))
        .await;
    assert_eq!(stream.status, 200);
    assert!(stream.header("content-type").starts_with("text/event-stream"));
    assert_eq!(stream.calls(), 1);
    let body = &stream.body;
    assert!(body.contains("event: chunk"));
    assert!(body.contains("Step only, attempt 1"), "{body}");
    assert!(body.contains("I will list the files."));
    assert!(body.contains("Tool call <strong>bash</strong>"));
    assert!(body.contains("{&quot;command&quot;:&quot;ls&quot;}"));
    // An MCP call names its server and tool.
    let mcp = "<strong title=\"mcp__github__get_issue\">get_issue</strong> <span class=\"mcp\">(MCP server <strong>github</strong>)</span>";
    assert!(body.contains(&format!("Tool call {mcp}")), "{body}");
    assert!(body.contains(&format!("Result of {mcp}")), "{body}");
    assert!(
        !body.contains("<script>alert") && !body.contains("<img src=x"),
        "inert"
    );
    assert!(body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(
        body.contains("more bytes (100000 in all)"),
        "a huge tool result is cut"
    );
    assert!(body.len() < 60_000, "and not sent whole: {} bytes", body.len());
    assert!(
        body.trim_end().ends_with("event: end\ndata: end"),
        "the stream ends with the closed run"
    );
}

/// One line of a worker's version-2 checkpoint: message `at`.
fn line(at: usize, role: &str, content: serde_json::Value) -> String {
    format!(
        "{}\n",
        serde_json::json!({ "at": at, "message": { "role": role, "content": content } })
    )
}

/// A 4 MiB checkpoint in the worker's format, paged: each page is one
/// `GetStepCheckpoint` call of at most 256 KiB, rendered as a conversation (the
/// prompt, the model's turns, tool calls and results, a steer, a refusal fed back),
/// escaped, a huge tool result cut with its size said, a line longer than a page
/// skipped to its end; following "Next part" reaches the end.
#[tokio::test]
async fn the_transcript_pages_through_a_4_mib_checkpoint_as_a_conversation() {
    use serde_json::json;
    let console = Console::start(false).await;
    let Leased {
        client: _,
        run_id: run,
        worker,
        task,
    } = console.start_and_lease("one", "look around").await;
    let mut cp = String::from("{\"version\":2}\n");
    cp += &line(0, "user", json!([{ "type": "text", "text": "Do look around" }]));
    cp += &line(
        1,
        "assistant",
        json!([{ "type": "tool_use", "id": "m1", "name": "mcp__fs__read_media_file", "input": { "path": "a.png" } }]),
    );
    cp += &line(
        2,
        "user",
        json!([{ "type": "tool_result", "tool_use_id": "m1", "content": "[image 1 (image/png, 4 bytes base64)]",
                 "images": [{ "media_type": "image/png", "data": "AAAA" }] }]),
    );
    cp += &line(
        3,
        "assistant",
        json!([{ "type": "tool_use", "id": "w1", "name": "write_file",
                 "input": { "path": "NOTES.md", "content": "# Notes\n\n- first <b>\n- second\n", "mode": 420 } }]),
    );
    let mut at = 4;
    let evil =
        "<script>alert(1)</script> \"><img src=x onerror=alert(2)> <a href=\"javascript:alert(3)\">x</a>";
    while cp.len() < 4 << 20 {
        cp += &line(
            at,
            "assistant",
            json!([
                { "type": "text", "text": format!("Turn {at}: I will list the files.") },
                { "type": "tool_use", "id": format!("call-{at}"), "name": "bash", "input": { "command": "ls" } }
            ]),
        );
        cp += &line(
            at + 1,
            "user",
            json!([
                { "type": "tool_result", "tool_use_id": format!("call-{at}"), "content": format!("{evil} {}", "y".repeat(30_000)), "is_error": false }
            ]),
        );
        at += 2;
        if at == 42 {
            // One line longer than a page.
            cp += &line(
                at,
                "user",
                json!([{ "type": "text", "text": "z".repeat(300_000) }]),
            );
            at += 1;
        }
    }
    cp += &line(
        at,
        "assistant",
        json!([
            { "type": "tool_use", "id": "done-1", "name": "complete_step", "input": { "notes": "" } }
        ]),
    );
    cp += &line(
        at + 1,
        "user",
        json!([
            { "type": "tool_result", "tool_use_id": "done-1", "content": "the output contract refuses it: notes are empty", "is_error": true },
            { "type": "text", "text": "[steer] look in src/ instead" }
        ]),
    );
    cp += "{\"turns\":99,\"signals_through\":3}\n";
    let total = cp.len();
    // Sent in four heartbeats: the first whole, the others appended as segments.
    let mut sync = railyard_sdk::CheckpointSync::from_task(&task);
    for part in 1..=4 {
        let upto = if part == 4 {
            total
        } else {
            cp[..total * part / 4].rfind('\n').unwrap() + 1
        };
        worker
            .heartbeat(&task.task_token)
            .checkpoint(&cp.as_bytes()[..upto])
            .sync(&mut sync)
            .send()
            .await
            .unwrap();
    }

    let mut b = console.browser();
    let mut url = format!("/ui/runs/{run}/transcript?ns=default");
    let (mut pages, mut shown) = (0, String::new());
    loop {
        let page = b.get(&url).await;
        assert_eq!(page.status, 200, "{url}: {}", page.body);
        assert_eq!(page.calls(), railyard_console::api::TRANSCRIPT.calls, "{url}");
        assert!(
            page.body.len() < 1 << 20,
            "a page is bounded: {} bytes",
            page.body.len()
        );
        assert!(
            !page.body.contains("<script>alert")
                && !page.body.contains("<img src=x")
                && !page.body.contains("href=\"javascript:"),
            "inert: {url}"
        );
        assert!(page.body.contains(&format!("{total} bytes in all")));
        pages += 1;
        shown += &page.body;
        let Some(i) = page.body.find("\">Next part</a>") else {
            break;
        };
        let start = page.body[..i].rfind("href=\"").unwrap() + 6;
        url = page.body[start..i].replace("&amp;", "&");
        assert!(pages < 40, "paging ends");
    }
    assert!(pages >= total / (256 * 1024), "{pages} pages of {total} bytes");
    assert!(shown.contains("<strong>Prompt</strong>"));
    assert!(shown.contains("Do look around"));
    assert!(shown.contains("Turn 4: I will list the files."));
    assert!(shown.contains("Tool call <strong>bash</strong>"));
    assert!(shown.contains("Result of <strong>bash</strong>"));
    // A tool call's string arguments are text with their line breaks.
    assert!(
        shown.contains("<dt>content</dt><dd><pre class=\"tool-input\"># Notes\n\n- first &lt;b&gt;\n- second\n</pre></dd>"),
        "{shown:.4000}"
    );
    assert!(shown.contains("<dt>path</dt><dd><pre class=\"tool-input\">NOTES.md</pre></dd>"));
    assert!(shown.contains("<dt>mode</dt><dd><pre class=\"tool-input\">420</pre></dd>"));
    let mcp = "<strong title=\"mcp__fs__read_media_file\">read_media_file</strong> <span class=\"mcp\">(MCP server <strong>fs</strong>)</span>";
    assert!(shown.contains(&format!("Tool call {mcp}")));
    assert!(shown.contains(&format!("Result of {mcp}")));
    assert!(shown.contains("With 1 image(s), passed to the model (not shown here)."));
    assert!(!shown.contains("AAAA"), "an image's data is not in the page");
    assert!(shown.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(
        shown.contains("more bytes ("),
        "a long tool result is cut with its size"
    );
    assert!(shown.contains("A line of more than"), "a line longer than a page");
    assert!(shown.contains("Refused or failed, fed back: <strong>complete_step</strong>"));
    assert!(shown.contains("the output contract refuses it"));
    assert!(shown.contains("<strong>Steer</strong>"));
    assert!(shown.contains("99 model turns so far"));
    // Every message line shown once.
    assert_eq!(shown.matches("Turn 8: I will").count(), 1);
}

/// A finished step's transcript: the run page links each step that ran to its
/// transcript, and the page shows the step's last checkpoint, kept by the server
/// after the step completed and the run closed, as a conversation, escaped.
#[tokio::test]
async fn a_finished_steps_transcript_is_linked_from_the_run_page_and_shown() {
    use serde_json::json;
    let console = Console::start(false).await;
    let Leased {
        client: _,
        run_id: run,
        worker,
        task,
    } = console.start_and_lease("one", "look around").await;
    let mut cp = String::from("{\"version\":2}\n");
    cp += &line(0, "user", json!([{ "type": "text", "text": "Do look around" }]));
    cp += &line(
        1,
        "assistant",
        json!([{ "type": "text", "text": "Finished <script>alert(1)</script> the survey." }]),
    );
    let mut sync = railyard_sdk::CheckpointSync::from_task(&task);
    worker
        .heartbeat(&task.task_token)
        .checkpoint(cp.as_bytes())
        .sync(&mut sync)
        .send()
        .await
        .unwrap();
    worker
        .complete(&task.task_token, Completion::notes("done"))
        .await
        .unwrap();

    let mut b = console.browser();
    let page = b.get(&format!("/ui/runs/{run}?ns=default")).await;
    assert_eq!(page.status, 200);
    let link = format!("/ui/runs/{run}/transcript?ns=default&amp;step=only");
    assert!(page.body.contains(&link), "{}", page.body);
    assert!(page.body.contains("Transcript of step only"));

    let page = b
        .get(&format!("/ui/runs/{run}/transcript?ns=default&step=only"))
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(page.calls(), railyard_console::api::TRANSCRIPT.calls);
    assert!(
        page.body.contains("Step only, from its last checkpoint"),
        "{}",
        page.body
    );
    assert!(page.body.contains("Do look around"));
    assert!(
        page.body
            .contains("Finished &lt;script&gt;alert(1)&lt;/script&gt; the survey.")
    );
    assert!(!page.body.contains("<script>alert"));
    assert!(page.body.contains(&format!("{} bytes in all", cp.len())));

    // A run's step with nothing kept says so; one the run lacks is refused.
    let other = console.start_run("one", "idle").await;
    let page = b
        .get(&format!("/ui/runs/{other}/transcript?ns=default&step=only"))
        .await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("No checkpoint of step only is kept"),
        "{}",
        page.body
    );
    let page = b
        .get(&format!("/ui/runs/{other}/transcript?ns=default&step=nope"))
        .await;
    assert_eq!(page.status, 404, "{}", page.body);
}
