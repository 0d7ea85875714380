//! The transcript: a step's live output replayed as a conversation over SSE, escaped,
//! with a huge tool result cut and its size said.

use std::time::Duration;

use railyard_proto::v1::{AppendStepOutputRequest, OutputChunk, OutputKind};
use railyard_sdk::{Completion, StepWorker};

use crate::support::Console;

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
    let client = console.admin().await;
    let run = console.start_run("one", "look around").await;
    let worker = StepWorker::new(client.clone(), "default", "default", "w");
    let task = worker
        .poll(Duration::from_secs(10))
        .await
        .unwrap()
        .expect("a task");
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
