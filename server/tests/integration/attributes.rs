//! Search attributes over real gRPC: declared per namespace, set at start, by a
//! completion and mid-step (`Tasks.UpsertSearchAttributes`), recorded in history,
//! shown by describe and list, queryable; an undeclared or mistyped one refused
//! naming it, with nothing written.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use railyard_engine::clock::ManualClock;
use railyard_proto::v1::{CountRunsRequest, GetHistoryRequest, ListRunsRequest, StartRunRequest};
use railyard_sdk::{Client, ClientError, Completion, StepWorker};
use railyard_server::ServerConfig;

const TWO: &str = r#"{"id":"two","version":"1","name":"Two","steps":[
  {"id":"a","title":"A","prompt":"do {{goal}}"},
  {"id":"b","title":"B","prompt":"then"}]}"#;

fn attrs(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

async fn start(c: &Client, pairs: &[(&str, &str)]) -> Result<String, ClientError> {
    let req = StartRunRequest {
        namespace: "default".into(),
        workflow_id: "two".into(),
        goal: "g".into(),
        search_attributes: attrs(pairs),
        ..Default::default()
    };
    Ok(c.start_run_with(req).await?.run_id)
}

async fn query(c: &Client, q: &str) -> Result<Vec<String>, ClientError> {
    let resp = c
        .list_runs(ListRunsRequest {
            namespace: "default".into(),
            query: q.into(),
            ..Default::default()
        })
        .await?;
    Ok(resp.runs.into_iter().map(|r| r.run_id).collect())
}

async fn shown(c: &Client, run_id: &str) -> Vec<(String, String, String)> {
    let run = c.describe_run("default", run_id).await.unwrap().run.unwrap();
    run.search_attributes
        .into_iter()
        .map(|a| (a.name, a.r#type, a.value))
        .collect()
}

async fn count(c: &Client) -> u64 {
    c.count_runs(CountRunsRequest {
        namespace: "default".into(),
        ..Default::default()
    })
    .await
    .unwrap()
    .count
}

fn invalid(r: Result<impl std::fmt::Debug, ClientError>, want: &str) {
    match r {
        Err(ClientError::InvalidArgument(m)) => assert!(m.contains(want), "{m:?} should say {want:?}"),
        other => panic!("expected INVALID_ARGUMENT saying {want:?}, got {other:?}"),
    }
}

#[tokio::test]
async fn attributes_are_declared_set_updated_and_queried() {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("two.json"), TWO).unwrap();
    let mut config = ServerConfig::new(data.path(), workflows.path());
    config.clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let (_server, c) = crate::support::start(config).await;

    // Declarations: checked, bounded, idempotent for the same type.
    for (name, ty) in [
        ("customer", "keyword"),
        ("priority", "int"),
        ("tags", "keyword_list"),
        ("due", "datetime"),
    ] {
        c.add_search_attribute("default", name, ty).await.unwrap();
    }
    let all = c
        .add_search_attribute("default", "customer", "keyword")
        .await
        .unwrap();
    assert_eq!(all.len(), 4);
    invalid(
        c.add_search_attribute("default", "region", "vector").await,
        "type:",
    );
    invalid(
        c.add_search_attribute("default", "Status", "keyword").await,
        "built-in field",
    );
    match c.add_search_attribute("default", "customer", "int").await {
        Err(ClientError::FailedPrecondition(m)) => assert!(m.contains("already declared as keyword"), "{m}"),
        other => panic!("{other:?}"),
    }

    // At start: typed by the declaration, shown, recorded in history.
    let acme = start(&c, &[("customer", "acme"), ("priority", "2")])
        .await
        .unwrap();
    let other = start(&c, &[("customer", "initech"), ("priority", "7")])
        .await
        .unwrap();
    assert_eq!(
        shown(&c, &acme).await,
        vec![
            ("customer".into(), "keyword".into(), "acme".into()),
            ("priority".into(), "int".into(), "2".into()),
        ]
    );
    let history = c
        .get_history(GetHistoryRequest {
            namespace: "default".into(),
            run_id: acme.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    let changed = history
        .events
        .iter()
        .find(|e| e.event_type == "SearchAttributesChanged")
        .expect("a SearchAttributesChanged event");
    assert!(
        changed.attributes_json.contains(r#""after":2"#),
        "{}",
        changed.attributes_json
    );

    // Undeclared or mistyped: refused naming it, and nothing written.
    let before = count(&c).await;
    invalid(
        start(&c, &[("region", "eu")]).await,
        "\"region\" is not a search attribute",
    );
    invalid(
        start(&c, &[("priority", "high")]).await,
        "attributes.priority: int value",
    );
    invalid(start(&c, &[("due", "tomorrow")]).await, "attributes.due");
    assert_eq!(count(&c).await, before, "a refused start writes nothing");

    // Queried by attribute.
    assert_eq!(
        query(&c, r#"customer = "acme""#).await.unwrap(),
        vec![acme.clone()]
    );
    assert_eq!(query(&c, "priority > 5").await.unwrap(), vec![other.clone()]);
    assert_eq!(
        query(&c, "customer STARTS_WITH 'ini'").await.unwrap(),
        vec![other.clone()]
    );
    invalid(
        query(&c, "priority = 'x'").await,
        "expected an int value for priority",
    );

    // Mid-step, under the step's lease.
    let w = StepWorker::new(c.clone(), "default", "default", "w");
    let mut task = w.poll(Duration::from_secs(10)).await.unwrap().expect("a task");
    if task.run_id != acme {
        // Step a of the other run first: complete it and take acme's.
        w.complete(&task.task_token, Completion::notes("n"))
            .await
            .unwrap();
        task = w.poll(Duration::from_secs(10)).await.unwrap().expect("a task");
    }
    assert_eq!(task.run_id, acme);
    let n = w
        .upsert_search_attributes(
            &task.task_token,
            attrs(&[("priority", "9"), ("tags", "red,blue")]),
        )
        .await
        .unwrap();
    assert_eq!(n, 2);
    assert_eq!(
        w.upsert_search_attributes(&task.task_token, attrs(&[("priority", "9")]))
            .await
            .unwrap(),
        0,
        "the same value again changes nothing"
    );
    invalid(
        w.upsert_search_attributes(&task.task_token, attrs(&[("region", "eu")]))
            .await,
        "region",
    );
    let mut ids = query(&c, "priority >= 7").await.unwrap();
    ids.sort();
    let mut want = vec![acme.clone(), other.clone()];
    want.sort();
    assert_eq!(ids, want);
    assert_eq!(query(&c, "tags = 'red'").await.unwrap(), vec![acme.clone()]);

    // With the completion: a mistyped one refuses it (the step stays leased) ...
    let bad = Completion {
        notes: "n".into(),
        search_attributes: attrs(&[("priority", "lots")]),
        ..Default::default()
    };
    invalid(
        w.complete(&task.task_token, bad).await,
        "search_attributes.priority",
    );
    // ... and a good one sets them as the step completes.
    let good = Completion {
        notes: "n".into(),
        search_attributes: attrs(&[("customer", "globex"), ("tags", "")]),
        ..Default::default()
    };
    w.complete(&task.task_token, good).await.unwrap();
    assert_eq!(
        query(&c, "customer = 'globex'").await.unwrap(),
        vec![acme.clone()]
    );
    assert!(query(&c, "customer = 'acme'").await.unwrap().is_empty());
    assert!(
        query(&c, "tags = 'red'").await.unwrap().is_empty(),
        "an empty value unsets"
    );
    let grouped = c
        .count_runs(CountRunsRequest {
            namespace: "default".into(),
            query: "priority > 0".into(),
            group_by: "customer".into(),
        })
        .await
        .unwrap();
    assert_eq!(grouped.count, 2);
    assert_eq!(grouped.groups.len(), 2);

    // Removing a declaration: no longer queryable or settable, values kept; declared
    // again with its type, queryable again.
    c.remove_search_attribute("default", "customer").await.unwrap();
    invalid(query(&c, "customer = 'globex'").await, "unknown field");
    invalid(start(&c, &[("customer", "x")]).await, "customer");
    assert!(
        shown(&c, &acme)
            .await
            .iter()
            .any(|(n, _, v)| n == "customer" && v == "globex")
    );
    c.add_search_attribute("default", "customer", "keyword")
        .await
        .unwrap();
    assert_eq!(query(&c, "customer = 'globex'").await.unwrap(), vec![acme]);
}

#[tokio::test]
async fn a_rerun_carries_the_attributes_still_declared_with_their_type() {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("two.json"), TWO).unwrap();
    let mut config = ServerConfig::new(data.path(), workflows.path());
    config.clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let (_server, c) = crate::support::start(config).await;
    for (name, ty) in [
        ("customer", "keyword"),
        ("priority", "int"),
        ("region", "keyword"),
    ] {
        c.add_search_attribute("default", name, ty).await.unwrap();
    }
    let old = start(&c, &[("customer", "acme"), ("priority", "2"), ("region", "eu")])
        .await
        .unwrap();
    // A declaration removed since: its value cannot be set on the new run.
    c.remove_search_attribute("default", "region").await.unwrap();

    let new = c
        .rerun_run(railyard_proto::v1::RerunRunRequest {
            namespace: "default".into(),
            run_id: old.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .run_id;
    assert_eq!(
        shown(&c, &new).await,
        vec![
            ("customer".into(), "keyword".into(), "acme".into()),
            ("priority".into(), "int".into(), "2".into()),
        ]
    );
    let mut found = query(&c, "customer = 'acme' AND priority = 2").await.unwrap();
    found.sort();
    let mut both = vec![old, new];
    both.sort();
    assert_eq!(found, both);
}
