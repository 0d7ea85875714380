//! Workflow definitions registered from code (`History.RegisterWorkflow`), over real
//! gRPC: registered, listed beside the files, run; registered again unchanged (nothing
//! written) and changed (new runs get the new version, a run started before keeps
//! its own, across a restart); refused when bad (naming the JSON path, changing
//! nothing) or when a file defines the id; one namespace's never seen in another;
//! found by schedules and webhooks; and under `--auth`, a client key refused while developer and
//! admin keys register.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use railyard_engine::clock::ManualClock;
use railyard_proto::v1::{self, ApiKeyRole, ListRunsRequest};
use railyard_sdk::{Client, ClientError, Completion, StepWorker};
use railyard_server::{RunningServer, ServerConfig};

/// The server's own file.
const FILE: &str = r#"{"id":"filed","version":"1","name":"Filed","steps":[{"id":"a","title":"A","prompt":"file {{goal}}"}]}"#;

/// A definition to register, with the prompt and version of the step `prompt`.
fn def(version: &str, prompt: &str) -> String {
    format!(
        r#"{{"id":"coded","version":"{version}","name":"Coded","steps":[
          {{"id":"a","title":"A","prompt":"{prompt} {{{{goal}}}}"}},
          {{"id":"b","title":"B","prompt":"{prompt} b"}}]}}"#
    )
}

const T0: i64 = 1_700_000_000_000;

async fn start_in(data: &Path, workflows: &Path, clock: &ManualClock) -> (RunningServer, Client) {
    let mut config = ServerConfig::new(data, workflows);
    config.clock = Arc::new(clock.clone());
    crate::support::start(config).await
}

fn dirs() -> (tempfile::TempDir, tempfile::TempDir) {
    let data = tempfile::tempdir().unwrap();
    let workflows = tempfile::tempdir().unwrap();
    std::fs::write(workflows.path().join("filed.json"), FILE).unwrap();
    (data, workflows)
}

async fn poll(w: &StepWorker) -> v1::StepTask {
    w.poll(Duration::from_secs(5)).await.unwrap().expect("a task")
}

async fn version_of(client: &Client, ns: &str, run_id: &str) -> String {
    client
        .describe_run(ns, run_id)
        .await
        .unwrap()
        .run
        .unwrap()
        .workflow_version
}

#[tokio::test]
async fn a_registered_workflow_is_listed_run_and_versioned_by_content() {
    let (data, workflows) = dirs();
    let clock = ManualClock::new(T0);
    let (server, client) = start_in(data.path(), workflows.path(), &clock).await;

    let first = client.register_workflow("", def("1", "first")).await.unwrap();
    assert!(first.changed);
    let info = first.workflow.unwrap();
    assert_eq!(
        (info.id.as_str(), info.version.as_str(), info.source_file.as_str()),
        ("coded", "1", "<registered>/default/coded")
    );
    assert!(info.registered && info.content_hash.len() == 32, "{info:?}");
    assert_eq!(info.register_time_unix_ms, T0);
    assert_eq!(info.step_ids, ["a", "b"]);

    // Listed after the server's own, with its source.
    let listed = client.list_workflows("default").await.unwrap();
    let ids: Vec<(&str, &str, bool)> = listed
        .workflows
        .iter()
        .map(|w| (w.id.as_str(), w.source_file.as_str(), w.registered))
        .collect();
    assert_eq!(ids[1], ("coded", "<registered>/default/coded", true));
    assert!(ids[0].1.ends_with("filed.json") && !ids[0].2, "{ids:?}");

    // The same content again (whitespace aside) changes nothing, not even the time.
    clock.advance(Duration::from_secs(5));
    let compact: serde_json::Value = serde_json::from_str(&def("1", "first")).unwrap();
    let again = client
        .register_workflow("default", compact.to_string())
        .await
        .unwrap();
    assert!(!again.changed);
    let same = again.workflow.unwrap();
    assert_eq!(
        (same.content_hash.as_str(), same.register_time_unix_ms),
        (info.content_hash.as_str(), T0)
    );

    // A run of it.
    let old_run = client
        .start_run("default", "coded", "g", HashMap::new())
        .await
        .unwrap();
    let w = StepWorker::new(client.clone(), "default", "default", "w");
    let task = poll(&w).await;
    assert_eq!(
        (task.run_id.as_str(), task.prompt.as_str()),
        (old_run.as_str(), "first g")
    );
    w.complete(&task.task_token, Completion::notes("done"))
        .await
        .unwrap();

    // Changed: the new version for new runs; the run in flight keeps its own.
    let changed = client
        .register_workflow("default", def("2", "second"))
        .await
        .unwrap();
    assert!(changed.changed);
    let new_info = changed.workflow.unwrap();
    assert_ne!(new_info.content_hash, info.content_hash);
    assert_eq!(new_info.register_time_unix_ms, T0 + 5000);
    let new_run = client
        .start_run("default", "coded", "g", HashMap::new())
        .await
        .unwrap();
    assert_eq!(version_of(&client, "default", &old_run).await, "1");
    assert_eq!(version_of(&client, "default", &new_run).await, "2");

    // Across a restart: the registration is the changed one, the old run finishes
    // on its own definition.
    server.shutdown().await;
    let (server, client) = start_in(data.path(), workflows.path(), &clock).await;
    let listed = client.list_workflows("default").await.unwrap();
    let coded = listed.workflows.iter().find(|w| w.id == "coded").unwrap();
    assert_eq!(
        (coded.version.as_str(), coded.content_hash.as_str()),
        ("2", new_info.content_hash.as_str())
    );
    let w = StepWorker::new(client.clone(), "default", "default", "w");
    let mut prompts = HashMap::new();
    for _ in 0..3 {
        let t = poll(&w).await;
        prompts
            .entry(t.run_id.clone())
            .or_insert_with(Vec::new)
            .push(t.prompt.clone());
        w.complete(&t.task_token, Completion::notes("done"))
            .await
            .unwrap();
    }
    assert_eq!(prompts[&new_run], ["second g", "second b"]);
    assert_eq!(prompts[&old_run], ["first b"]);
    for run in [&old_run, &new_run] {
        let run = client.describe_run("default", run).await.unwrap().run.unwrap();
        assert_eq!(run.status(), v1::RunStatus::Completed);
    }
    server.shutdown().await;
}

#[tokio::test]
async fn a_bad_definition_is_refused_naming_its_path_and_changes_nothing() {
    let (data, workflows) = dirs();
    let clock = ManualClock::new(T0);
    let (server, client) = start_in(data.path(), workflows.path(), &clock).await;
    client.register_workflow("", def("1", "first")).await.unwrap();

    let bad = def("2", "x").replace(r#""title":"B""#, r#""title":"B","maxTurns":0"#);
    let Err(ClientError::InvalidArgument(m)) = client.register_workflow("", bad).await else {
        panic!("a bad definition was accepted")
    };
    assert!(m.starts_with("definition_json: steps[1].maxTurns: "), "{m}");
    let Err(ClientError::InvalidArgument(m)) = client.register_workflow("", "{\"id\":").await else {
        panic!("broken JSON was accepted")
    };
    assert!(m.starts_with("definition_json: "), "{m}");
    let huge = format!("{{\"id\":\"coded\",\"pad\":\"{}\"}}", "x".repeat(1 << 20));
    let Err(ClientError::InvalidArgument(m)) = client.register_workflow("", huge).await else {
        panic!("a definition past the file limit was accepted")
    };
    assert!(m.contains("more than the limit of 1048576"), "{m}");
    assert!(m.len() < 200, "the input is not echoed: {m}");

    // An id a file of the server defines.
    let filed = FILE.replace("file {{goal}}", "mine");
    let Err(ClientError::AlreadyExists(m)) = client.register_workflow("", filed).await else {
        panic!("a file's id was registered")
    };
    assert!(m.contains("\"filed\"") && m.contains("filed.json"), "{m}");

    // Nothing changed: the first registration stands, runs start from it.
    let listed = client.list_workflows("default").await.unwrap();
    let coded: Vec<_> = listed.workflows.iter().filter(|w| w.registered).collect();
    assert_eq!(coded.len(), 1);
    assert_eq!(coded[0].version, "1");
    let run = client
        .start_run("default", "filed", "g", HashMap::new())
        .await
        .unwrap();
    let w = StepWorker::new(client.clone(), "default", "default", "w");
    let task = poll(&w).await;
    assert_eq!((task.run_id, task.prompt), (run, "file g".to_string()));
    server.shutdown().await;
}

#[tokio::test]
async fn a_registration_belongs_to_its_namespace_and_schedules_find_it() {
    let (data, workflows) = dirs();
    let clock = ManualClock::new(T0);
    let (server, client) = start_in(data.path(), workflows.path(), &clock).await;
    client.create_namespace("team", "").await.unwrap();
    client.register_workflow("team", def("1", "team")).await.unwrap();

    // Not in `default`: not listed, not started.
    let listed = client.list_workflows("default").await.unwrap();
    assert!(listed.workflows.iter().all(|w| w.id != "coded"), "{listed:?}");
    let Err(ClientError::NotFound(m)) = client.start_run("default", "coded", "g", HashMap::new()).await
    else {
        panic!("another namespace's workflow started")
    };
    assert!(m.contains("coded"), "{m}");
    // `default` registers its own under the same id, apart.
    let own = client
        .register_workflow("default", def("7", "mine"))
        .await
        .unwrap();
    assert!(own.changed);
    assert_eq!(own.workflow.unwrap().source_file, "<registered>/default/coded");
    let team = client.list_workflows("team").await.unwrap();
    let coded = team.workflows.iter().find(|w| w.id == "coded").unwrap();
    assert_eq!(coded.version, "1");

    // A schedule of it fires a run of it.
    client
        .create_schedule(v1::CreateScheduleRequest {
            namespace: "team".into(),
            schedule_id: "every".into(),
            spec: Some(v1::ScheduleSpec {
                interval: "every 1m".into(),
                ..Default::default()
            }),
            action: Some(v1::ScheduleAction {
                workflow_id: "coded".into(),
                goal: "scheduled".into(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    clock.advance(Duration::from_secs(61));
    let w = StepWorker::new(client.clone(), "team", "default", "w");
    let task = poll(&w).await;
    assert_eq!(task.prompt, "team scheduled");
    let runs = client
        .list_runs(ListRunsRequest {
            namespace: "team".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(runs.runs[0].workflow_id, "coded");

    // So does a trigger's webhook.
    client
        .create_trigger(v1::CreateTriggerRequest {
            namespace: "team".into(),
            trigger_id: "hook".into(),
            spec: Some(v1::TriggerSpec {
                workflow_id: "coded".into(),
                goal: "hooked".into(),
                ..Default::default()
            }),
            identity: "test".into(),
        })
        .await
        .unwrap();
    let resp = reqwest::Client::new()
        .post(format!("http://{}/hooks/team/hook", server.http_addr))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());
    w.complete(&task.task_token, Completion::notes("done"))
        .await
        .unwrap();
    let mut prompts = Vec::new();
    for _ in 0..2 {
        let t = poll(&w).await;
        prompts.push(t.prompt.clone());
        w.complete(&t.task_token, Completion::notes("done"))
            .await
            .unwrap();
    }
    prompts.sort();
    assert_eq!(prompts, ["team b", "team hooked"]);
    let Err(ClientError::InvalidArgument(m)) = client
        .create_trigger(v1::CreateTriggerRequest {
            namespace: "default".into(),
            trigger_id: "hook".into(),
            spec: Some(v1::TriggerSpec {
                workflow_id: "nope".into(),
                ..Default::default()
            }),
            identity: "test".into(),
        })
        .await
    else {
        panic!("a trigger of an unknown workflow was made")
    };
    assert!(
        m.contains("neither loaded nor registered (known: filed, coded)"),
        "{m}"
    );

    // A namespace's registrations go with it: made again, it has none.
    client.create_namespace("gone", "").await.unwrap();
    client.register_workflow("gone", def("1", "gone")).await.unwrap();
    client.delete_namespace("gone").await.unwrap();
    client.create_namespace("gone", "").await.unwrap();
    let listed = client.list_workflows("gone").await.unwrap();
    assert!(listed.workflows.iter().all(|w| !w.registered), "{listed:?}");
    server.shutdown().await;
}

#[tokio::test]
async fn under_auth_a_client_is_refused_and_developers_and_admins_register() {
    let s = crate::auth::secured().await;
    let admin = s.admin().await;
    admin.create_namespace("team", "").await.unwrap();
    let (client_key, _) = s.key("team", ApiKeyRole::Client, &[], 0).await;
    let (dev_key, _) = s.key("team", ApiKeyRole::Developer, &[], 0).await;
    let client = s.client(Some(&client_key)).await;
    let dev = s.client(Some(&dev_key)).await;

    let Err(ClientError::PermissionDenied(m)) = client.register_workflow("team", def("1", "x")).await else {
        panic!("a client key registered a workflow")
    };
    assert!(m.contains("register workflows"), "{m}");
    assert!(
        client
            .list_workflows("team")
            .await
            .unwrap()
            .workflows
            .iter()
            .all(|w| !w.registered),
        "the refusal wrote nothing"
    );

    // A developer registers in its namespace, and only there; and runs it.
    let r = dev.register_workflow("team", def("1", "dev")).await.unwrap();
    assert!(r.changed);
    let Err(ClientError::PermissionDenied(_)) = dev.register_workflow("default", def("1", "dev")).await
    else {
        panic!("a developer registered outside its namespace")
    };
    dev.start_run("team", "coded", "g", HashMap::new()).await.unwrap();

    // An admin registers anywhere.
    let r = admin
        .register_workflow("default", def("3", "admin"))
        .await
        .unwrap();
    assert!(r.changed);
    s.server.shutdown().await;
}
