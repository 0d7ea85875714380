//! List queries and counts over real gRPC (`ListRunsRequest.query`,
//! `History.CountRuns`): answers, the old filter fields beside a query, page tokens,
//! and errors naming the column.

use std::collections::HashMap;

use railyard_proto::v1::{CountRunsRequest, ListRunsRequest, RunStatus, TerminateRunRequest};
use railyard_sdk::ClientError;
use railyard_server::ServerConfig;

const ONE: &str = r#"{"id":"ID","version":"1","name":"One","steps":[
  {"id":"a","title":"A","prompt":"do {{goal}}"}]}"#;

fn ids(resp: &railyard_proto::v1::ListRunsResponse) -> Vec<String> {
    resp.runs.iter().map(|r| r.run_id.clone()).collect()
}

#[tokio::test]
async fn runs_are_listed_and_counted_by_query() {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    for wf in ["review-pr", "triage"] {
        std::fs::write(workflows.path().join(format!("{wf}.json")), ONE.replace("ID", wf)).unwrap();
    }
    let (server, c) = crate::support::start(ServerConfig::new(data.path(), workflows.path())).await;
    let mut review = Vec::new();
    for i in 0..6 {
        let wf = if i % 2 == 0 { "review-pr" } else { "triage" };
        let id = c.start_run("default", wf, "g", HashMap::new()).await.unwrap();
        if wf == "review-pr" {
            review.push(id.clone());
        }
        if i < 3 {
            c.terminate_run(TerminateRunRequest {
                namespace: "default".into(),
                run_id: id,
                reason: "enough".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        }
    }
    let list = |query: &str, page_size: u32, page_token: String| {
        let c = c.clone();
        let req = ListRunsRequest {
            query: query.into(),
            page_size,
            page_token,
            ..Default::default()
        };
        async move { c.list_runs(req).await }
    };
    // Runs 0 and 2 are terminated review-pr runs.
    let got = list(
        r#"WorkflowId = "review-pr" AND Status = "TERMINATED" ORDER BY StartTime DESC"#,
        0,
        String::new(),
    )
    .await
    .unwrap();
    assert_eq!(got.runs.len(), 2);
    assert!(got.runs.iter().all(|r| r.workflow_id == "review-pr"));
    // Pages of one follow their tokens to the same answer.
    let mut paged = Vec::new();
    let mut token = String::new();
    loop {
        let page = list("WorkflowId = 'review-pr'", 1, token).await.unwrap();
        paged.extend(ids(&page));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    let mut sorted = paged.clone();
    sorted.sort();
    let mut expected = review.clone();
    expected.sort();
    assert_eq!(sorted, expected);
    // The old fields and a query together.
    let both = c
        .list_runs(ListRunsRequest {
            status: RunStatus::Running as i32,
            query: "WorkflowId = 'triage'".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(both.runs.len(), 2, "triage runs 3 and 5 run on");

    // Counts, whole and by status.
    let count = |query: &str, group_by: &str| {
        let c = c.clone();
        let req = CountRunsRequest {
            query: query.into(),
            group_by: group_by.into(),
            ..Default::default()
        };
        async move { c.count_runs(req).await }
    };
    assert_eq!(count("", "").await.unwrap().count, 6);
    let by = count("", "Status").await.unwrap();
    let groups: Vec<(String, u64)> = by.groups.iter().map(|g| (g.value.clone(), g.count)).collect();
    assert_eq!(
        groups,
        [("RUNNING".to_string(), 3), ("TERMINATED".to_string(), 3)]
    );
    let by = count("Status = 'TERMINATED'", "WorkflowId").await.unwrap();
    let groups: Vec<(String, u64)> = by.groups.iter().map(|g| (g.value.clone(), g.count)).collect();
    assert_eq!(by.count, 3);
    assert_eq!(groups, [("review-pr".to_string(), 2), ("triage".to_string(), 1)]);

    // Errors name the field, the column and what was expected.
    let Err(ClientError::InvalidArgument(m)) = list("WorkflowId = ", 0, String::new()).await else {
        panic!("a bad query was accepted");
    };
    assert_eq!(
        m,
        "query: column 14: expected a keyword (a string) value for WorkflowId, found the end of the query"
    );
    let Err(ClientError::InvalidArgument(m)) = list("customer = 'acme'", 0, String::new()).await else {
        panic!("an unknown field was accepted");
    };
    assert!(
        m.starts_with("query: column 1: unknown field \"customer\""),
        "{m}"
    );
    let Err(ClientError::InvalidArgument(m)) = list("ORDER BY CloseTime", 0, String::new()).await else {
        panic!("an unsupported order was accepted");
    };
    assert!(m.contains("only ORDER BY StartTime DESC"), "{m}");
    let Err(ClientError::InvalidArgument(m)) = count("", "Tokens").await else {
        panic!("a numeric group-by was accepted");
    };
    assert!(m.starts_with("group_by: Tokens is not a keyword field"), "{m}");
    server.shutdown().await;
}

#[tokio::test]
async fn runs_are_found_by_a_word_of_their_goal() {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("one.json"), ONE.replace("ID", "one")).unwrap();
    let (server, c) = crate::support::start(ServerConfig::new(data.path(), workflows.path())).await;
    let mut ids_by_goal = Vec::new();
    for goal in ["Review PR #42", "Triage the flaky test", "review: the DOCS"] {
        ids_by_goal.push(c.start_run("default", "one", goal, HashMap::new()).await.unwrap());
    }
    let found = |query: &str| {
        let c = c.clone();
        let req = ListRunsRequest {
            query: query.into(),
            ..Default::default()
        };
        async move {
            let mut got = ids(&c.list_runs(req).await.unwrap());
            got.sort();
            got
        }
    };
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    assert_eq!(
        found("Goal = 'review'").await,
        sorted(vec![ids_by_goal[0].clone(), ids_by_goal[2].clone()])
    );
    assert_eq!(found("Goal = 'the docs'").await, vec![ids_by_goal[2].clone()]);
    assert_eq!(
        found("Goal = 'FLAKY' AND Status = 'RUNNING'").await,
        vec![ids_by_goal[1].clone()]
    );
    assert!(found("Goal = 'flak'").await.is_empty(), "a word matches whole");
    assert_eq!(found("Goal != 'review'").await, vec![ids_by_goal[1].clone()]);
    let counted = c
        .count_runs(CountRunsRequest {
            query: "Goal = 'the'".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(counted.count, 2);
    let e = c
        .list_runs(ListRunsRequest {
            query: "Goal > 'a'".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("Goal is text: it takes = and != only"),
        "{e}"
    );
    server.shutdown().await;
}
