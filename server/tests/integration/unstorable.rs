//! Values PostgreSQL cannot store or compare (a NUL byte), wherever a client's
//! string reaches a query: on PostgreSQL `WorkflowId = "\u0000"` once answered
//! INTERNAL with the database's own words (`invalid byte sequence for encoding
//! "UTF8": 0x00`) while redb answered OK. Now each is INVALID_ARGUMENT naming the
//! field, the same on both backends, and nothing is written.

use std::collections::HashMap;

use railyard_proto::v1::{
    self, BatchAction, CountRunsRequest, ListRunsRequest, StartBatchRequest, StartRunRequest,
};
use railyard_sdk::{Client, ClientError};
use railyard_server::ServerConfig;

const ONE: &str = r#"{"id":"one","version":"1","name":"One","steps":[
  {"id":"a","title":"A","prompt":"do {{goal}}"}]}"#;

fn invalid<T: std::fmt::Debug>(what: &str, r: Result<T, ClientError>, field: &str) {
    match r {
        Err(ClientError::InvalidArgument(m)) => {
            assert!(m.contains(field), "{what}: {m:?} should name {field:?}");
            assert!(
                m.contains("NUL") || m.contains("control character") || m.contains("not a"),
                "{what}: {m:?} should say why"
            );
            assert!(
                !m.contains("0x00") && !m.contains("UTF8"),
                "{what}: {m:?} is the database's"
            );
        }
        other => panic!("{what}: expected INVALID_ARGUMENT naming {field:?}, got {other:?}"),
    }
}

fn list(query: &str) -> ListRunsRequest {
    ListRunsRequest {
        namespace: "default".into(),
        query: query.into(),
        ..Default::default()
    }
}

async fn count(c: &Client, query: &str) -> Result<v1::CountRunsResponse, ClientError> {
    c.count_runs(CountRunsRequest {
        namespace: "default".into(),
        query: query.into(),
        ..Default::default()
    })
    .await
}

#[tokio::test]
async fn a_nul_byte_is_refused_naming_the_field_on_every_backend() {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("one.json"), ONE).unwrap();
    let (server, c) = crate::support::start(ServerConfig::new(data.path(), workflows.path())).await;
    c.add_search_attribute("default", "customer", "keyword")
        .await
        .unwrap();
    c.add_search_attribute("default", "notes", "text").await.unwrap();
    c.add_search_attribute("default", "tags", "keyword_list")
        .await
        .unwrap();
    let run = c.start_run("default", "one", "g", HashMap::new()).await.unwrap();

    for q in [
        "WorkflowId = \"\0\"",
        "WorkflowId = \"w\0\"",
        "WorkflowId STARTS_WITH \"\0\"",
        "customer = \"a\0b\"",
        "customer STARTS_WITH \"\0\"",
        "notes = \"\0\"",
        "tags = \"\0\"",
        "customer IN (\"a\", \"\0\")",
        "RunId = \"\0\"",
        "ParentRunId = \"\0\"",
        "TaskQueue = \"\0\"",
        "\0",
    ] {
        invalid(q, c.list_runs(list(q)).await, "query");
        invalid(q, count(&c, q).await, "query");
    }
    invalid(
        "workflow_id filter",
        c.list_runs(ListRunsRequest {
            workflow_id: "w\0".into(),
            ..list("")
        })
        .await,
        "workflow_id",
    );
    invalid(
        "parent_run_id filter",
        c.list_runs(ListRunsRequest {
            parent_run_id: "\0".into(),
            ..list("")
        })
        .await,
        "parent_run_id",
    );
    invalid(
        "group_by",
        c.count_runs(CountRunsRequest {
            namespace: "default".into(),
            group_by: "Workflow\0Id".into(),
            ..Default::default()
        })
        .await,
        "group_by",
    );
    invalid(
        "batch query",
        c.start_batch(StartBatchRequest {
            namespace: "default".into(),
            action: BatchAction::Terminate as i32,
            query: "WorkflowId = \"\0\"".into(),
            reason: "r".into(),
            rate_per_second: Some(10),
            ..Default::default()
        })
        .await,
        "query",
    );
    // Attribute values at start: refused, nothing started.
    for (name, value) in [("customer", "a\0"), ("notes", "\0"), ("tags", "[\"\\u0000\"]")] {
        invalid(
            name,
            c.start_run_with(StartRunRequest {
                namespace: "default".into(),
                workflow_id: "one".into(),
                goal: "g".into(),
                search_attributes: [(name.to_string(), value.to_string())].into(),
                ..Default::default()
            })
            .await,
            name,
        );
    }
    let all = c.list_runs(list("")).await.unwrap();
    assert_eq!(all.runs.len(), 1, "nothing else started");
    assert_eq!(all.runs[0].run_id, run);
    // The server goes on answering.
    assert_eq!(count(&c, "WorkflowId = \"one\"").await.unwrap().count, 1);
    server.shutdown().await;
}
