//! Bounded reads: with many runs stored and a run with a long history, each page makes
//! at most its stated number of gRPC calls and shows at most a page of rows.

use std::collections::HashMap;

use railyard_console::api;
use railyard_proto::v1::SignalRunRequest;

use crate::support::Console;

/// Runs stored (kept small enough for a test; each page's reads do not grow with it).
const RUNS: usize = 1500;
/// Events of the long run (signals: the namespace holds at most 1000 pending).
const SIGNALS: usize = 950;

#[tokio::test]
async fn pages_stay_within_their_call_budgets_on_a_large_store() {
    let console = Console::start(false).await;
    let client = console.admin().await;
    let mut starts = Vec::new();
    for i in 0..RUNS {
        let client = client.clone();
        starts.push(tokio::spawn(async move {
            client
                .start_run("default", "one", &format!("run {i}"), HashMap::new())
                .await
                .unwrap()
        }));
        if starts.len() == 50 {
            for s in starts.drain(..) {
                s.await.unwrap();
            }
        }
    }
    for s in starts {
        s.await.unwrap();
    }
    let long = console.start_run("one", "long").await;
    for i in 0..SIGNALS {
        client
            .signal_run(SignalRunRequest {
                namespace: "default".into(),
                run_id: long.clone(),
                signal_name: "steer".into(),
                payload_json: format!("\"{i}\""),
                identity: String::new(),
                request_id: String::new(),
            })
            .await
            .unwrap();
    }
    let mut b = console.browser();
    let runs = b.get("/ui/runs").await;
    assert_eq!(runs.calls(), api::RUNS.calls);
    assert_eq!(runs.body.matches("<tr>").count(), 1 + 50, "one page of rows");
    let run = b.get(&format!("/ui/runs/{long}")).await;
    assert!(run.calls() <= api::RUN.calls, "{} calls", run.calls());
    assert!(
        run.body.matches("class=\"event\"").count() <= 100,
        "one page of events"
    );
    assert!(run.body.contains("Next events"));
    let later = b.get(&format!("/ui/runs/{long}?from=901")).await;
    assert_eq!(later.status, 200);
    assert!(later.calls() <= api::RUN.calls);
    assert!(later.body.contains("#901 "));
    let approvals = b.get("/ui/approvals").await;
    assert!(
        approvals.calls() <= api::APPROVALS.calls,
        "{} calls",
        approvals.calls()
    );
    assert!(
        approvals.body.contains("Only the first"),
        "the scan stops at its bound"
    );
    let queues = b.get("/ui/queues").await;
    assert!(queues.calls() <= api::QUEUES.calls);
}
