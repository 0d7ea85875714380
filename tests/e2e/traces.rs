//! OpenTelemetry traces end to end: a server and a worker process exporting over
//! OTLP/HTTP to a collector in this test, which decodes what they send. A run
//! started with a `traceparent` (on `StartRun`, and on a webhook) is one trace under
//! that span: the server's step-attempt span, the worker's step span under it, and
//! the model-call and tool-call spans under that. A collector that is down costs
//! nothing but the spans.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use prost::Message;
use railyard_proto::v1::StartRunRequest;
use railyard_sdk::Client;
use serde_json::json;

use crate::support::mock_model::*;
use crate::support::worker::WorkerProcess;
use crate::support::*;

/// Only bounds a hang: exports leave every few seconds.
const LIMIT: Duration = Duration::from_secs(90);

const WORKFLOW: &str = r#"{"id":"traced","version":"1","name":"Traced","steps":[
    {"id":"write","title":"Write","prompt":"Do {{goal}}"}]}"#;

const GIVEN: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const HOOKED: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// One span as the collector received it.
#[derive(Debug, Clone)]
struct Got {
    service: String,
    name: String,
    trace_id: String,
    span_id: String,
    parent: String,
    attrs: HashMap<String, String>,
}

/// An OTLP/HTTP collector on a free loopback port, on its own runtime.
struct Collector {
    rt: Option<tokio::runtime::Runtime>,
    spans: Arc<Mutex<Vec<Got>>>,
    url: String,
}

/// An attribute value as text (arrays joined with commas).
fn text(v: &Option<Any>) -> String {
    match v {
        Some(Any::StringValue(s)) => s.clone(),
        Some(Any::IntValue(i)) => i.to_string(),
        Some(Any::BoolValue(b)) => b.to_string(),
        Some(Any::DoubleValue(d)) => d.to_string(),
        Some(Any::ArrayValue(a)) => a
            .values
            .iter()
            .map(|v| text(&v.value))
            .collect::<Vec<_>>()
            .join(","),
        _ => String::new(),
    }
}

async fn export(State(spans): State<Arc<Mutex<Vec<Got>>>>, body: Bytes) -> &'static str {
    let req = ExportTraceServiceRequest::decode(body).expect("an ExportTraceServiceRequest");
    let mut got = spans.lock().unwrap();
    for rs in req.resource_spans {
        let service = rs
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|a| a.key == "service.name")
            .map(|a| text(&a.value.as_ref().and_then(|v| v.value.clone())))
            .unwrap_or_default();
        for s in rs.scope_spans.into_iter().flat_map(|s| s.spans) {
            got.push(Got {
                service: service.clone(),
                name: s.name,
                trace_id: hex::encode(s.trace_id),
                span_id: hex::encode(s.span_id),
                parent: hex::encode(s.parent_span_id),
                attrs: s
                    .attributes
                    .into_iter()
                    .map(|a| (a.key, text(&a.value.and_then(|v| v.value))))
                    .collect(),
            });
        }
    }
    ""
}

impl Collector {
    fn start() -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let spans = Arc::new(Mutex::new(Vec::new()));
        let app = axum::Router::new()
            .route("/v1/traces", post(export))
            .with_state(spans.clone());
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind collector");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        rt.spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            rt: Some(rt),
            spans,
            url,
        }
    }

    fn spans(&self) -> Vec<Got> {
        self.spans.lock().unwrap().clone()
    }

    /// Waits for a span of `trace` that `pick` accepts.
    fn wait_for(&self, trace: &str, pick: impl Fn(&Got) -> bool) -> Got {
        eventually(LIMIT, || {
            self.spans().into_iter().find(|s| s.trace_id == trace && pick(s))
        })
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

fn worker(server: &ServerProcess, sandbox: &Sandbox, mock: &MockModel, endpoint: &str) -> WorkerProcess {
    WorkerProcess::start(
        &server.url,
        &sandbox.path("workspace"),
        "traced-worker",
        &[
            "--provider",
            "anthropic",
            "--model",
            "claude-mock",
            "--otlp-endpoint",
            endpoint,
        ],
        &[
            ("ANTHROPIC_BASE_URL", mock.url.as_str()),
            ("ANTHROPIC_API_KEY", "sk-ant-dummy"),
            // The worker's spans are info-level; the tests' default log level is warn.
            ("RUST_LOG", "warn"),
        ],
    )
}

/// A model that writes a file with a tool, then completes the step.
fn mock() -> MockModel {
    MockModel::start(|r| {
        Reply::Turn(match r.turn {
            0 => call("write_file", json!({"path": "out.txt", "content": "hi\n"})),
            _ => complete("wrote out.txt"),
        })
    })
}

fn start(server: &ServerProcess, run_id: &str, traceparent: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = Client::connect(&server.url).await.unwrap();
        client
            .start_run_with(StartRunRequest {
                namespace: "default".into(),
                workflow_id: "traced".into(),
                goal: "write".into(),
                run_id: run_id.into(),
                traceparent: traceparent.into(),
                ..Default::default()
            })
            .await
    })
    .map(|_| ())
    .unwrap_or_else(|e| panic!("start {run_id}: {e}"));
}

fn status(server: &ServerProcess, run_id: &str) -> String {
    let shown = json(server.ry(&["run", "describe", run_id, "--output", "json"]));
    shown["run"]["status"].as_str().unwrap_or_default().to_string()
}

fn wait_completed(server: &ServerProcess, run_id: &str) {
    let s = eventually(LIMIT, || Some(status(server, run_id)).filter(|s| s != "RUNNING"));
    assert_eq!(s, "COMPLETED", "run {run_id}");
}

/// `POST` a webhook with a `traceparent` header; the run id it started.
fn hook(server: &ServerProcess, traceparent: &str) -> String {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let answer: serde_json::Value = rt.block_on(async {
        reqwest::Client::new()
            .post(format!("http://{}/hooks/default/traced", server.http_addr))
            .header("content-type", "application/json")
            .header("traceparent", traceparent)
            .timeout(Duration::from_secs(30))
            .body("{}")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    });
    answer["runId"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"))
        .to_string()
}

#[test]
fn a_runs_spans_join_the_traceparent_it_started_with_on_server_and_worker() {
    let sandbox = Sandbox::new();
    sandbox.workflow("traced.json", WORKFLOW);
    let collector = Collector::start();
    let server = sandbox.server_with(&["--otlp-endpoint", &collector.url]);
    let mock = mock();
    let _worker = worker(&server, &sandbox, &mock, &collector.url);

    start(&server, "traced-1", GIVEN);
    wait_completed(&server, "traced-1");
    // The run holds its trace id, as `run describe` shows.
    let described = json(server.ry(&["run", "describe", "traced-1", "--output", "json"]));
    assert_eq!(described["run"]["trace_id"], &GIVEN[3..35], "{described}");
    ok(server.ry(&[
        "trigger",
        "create",
        "traced",
        "--workflow",
        "traced",
        "--goal",
        "hooked",
    ]));
    let hooked = hook(&server, HOOKED);
    wait_completed(&server, &hooked);

    // StartRun: the server's span of the attempt is under the caller's span ...
    let trace = &GIVEN[3..35];
    let attempt = collector.wait_for(trace, |s| s.service == "railyard-server");
    assert_eq!(attempt.name, "step write");
    assert_eq!(attempt.parent, &GIVEN[36..52]);
    assert_eq!(attempt.attrs["railyard.run_id"], "traced-1");
    assert_eq!(attempt.attrs["railyard.ended_by"], "StepCompleted");
    assert_eq!(attempt.attrs["railyard.worker"], "traced-worker");
    // ... the worker's step span under it ...
    let step = collector.wait_for(trace, |s| s.service == "railyard-worker" && s.name == "step");
    assert_eq!(step.parent, attempt.span_id);
    assert_eq!(step.attrs["run_id"], "traced-1");
    // ... and under that, each model call with the GenAI attributes and each tool call.
    let model = collector.wait_for(trace, |s| s.name == "chat claude-mock");
    assert_eq!(model.parent, step.span_id);
    assert_eq!(model.attrs["gen_ai.operation.name"], "chat");
    assert_eq!(model.attrs["gen_ai.provider.name"], "anthropic");
    assert_eq!(model.attrs["gen_ai.system"], "anthropic");
    assert_eq!(model.attrs["gen_ai.request.model"], "claude-mock");
    let (input, output, ..) = turn_usage(0);
    let first = collector.wait_for(trace, |s| {
        s.name == "chat claude-mock" && s.attrs["gen_ai.usage.input_tokens"] == input.to_string()
    });
    assert_eq!(first.attrs["gen_ai.usage.output_tokens"], output.to_string());
    assert_eq!(first.attrs["gen_ai.response.finish_reasons"], "tool_use");
    let tool = collector.wait_for(trace, |s| s.name == "execute_tool write_file");
    assert_eq!(tool.parent, step.span_id);
    assert_eq!(tool.attrs["gen_ai.tool.name"], "write_file");

    // A webhook's traceparent header: the same, in its own trace.
    let trace = &HOOKED[3..35];
    let attempt = collector.wait_for(trace, |s| s.service == "railyard-server");
    assert_eq!(attempt.parent, &HOOKED[36..52]);
    assert_eq!(attempt.attrs["railyard.run_id"], hooked);
    let step = collector.wait_for(trace, |s| s.service == "railyard-worker" && s.name == "step");
    assert_eq!(step.parent, attempt.span_id);

    // Every span of the two runs is in one of their two traces: none went astray.
    let ours = [&GIVEN[3..35], &HOOKED[3..35]];
    let astray: Vec<_> = collector
        .spans()
        .into_iter()
        .filter(|s| !ours.contains(&s.trace_id.as_str()))
        .collect();
    assert!(astray.is_empty(), "spans outside the runs' traces: {astray:#?}");
}

#[test]
fn a_run_without_a_traceparent_gets_its_own_trace_and_a_bad_one_is_refused() {
    let sandbox = Sandbox::new();
    sandbox.workflow("traced.json", WORKFLOW);
    let collector = Collector::start();
    let server = sandbox.server_with(&["--otlp-endpoint", &collector.url]);
    let mock = mock();
    let _worker = worker(&server, &sandbox, &mock, &collector.url);

    let out = server.ry(&["run", "start", "traced", "--goal", "write", "--run-id", "plain-1"]);
    ok(out);
    wait_completed(&server, "plain-1");
    let attempt = eventually(LIMIT, || {
        collector
            .spans()
            .into_iter()
            .find(|s| s.attrs.get("railyard.run_id").map(String::as_str) == Some("plain-1"))
    });
    // A root span of a trace of its own, which the worker's spans join, and which
    // the run holds.
    assert_eq!(attempt.parent, "");
    let described = json(server.ry(&["run", "describe", "plain-1", "--output", "json"]));
    assert_eq!(
        described["run"]["trace_id"],
        attempt.trace_id.as_str(),
        "{described}"
    );
    let step = collector.wait_for(&attempt.trace_id, |s| {
        s.service == "railyard-worker" && s.name == "step"
    });
    assert_eq!(step.parent, attempt.span_id);

    // An invalid traceparent on StartRun is refused, naming the field.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let err = rt
        .block_on(async {
            let client = Client::connect(&server.url).await.unwrap();
            client
                .start_run_with(StartRunRequest {
                    namespace: "default".into(),
                    workflow_id: "traced".into(),
                    traceparent: "00-zz".into(),
                    ..Default::default()
                })
                .await
        })
        .unwrap_err()
        .to_string();
    assert!(err.contains("traceparent") && err.contains("too short"), "{err}");
    // Text that is not ASCII where the fields are cut: refused the same way.
    let err = rt
        .block_on(async {
            let client = Client::connect(&server.url).await.unwrap();
            client
                .start_run_with(StartRunRequest {
                    namespace: "default".into(),
                    workflow_id: "traced".into(),
                    traceparent: "é".repeat(40),
                    ..Default::default()
                })
                .await
        })
        .unwrap_err()
        .to_string();
    assert!(err.contains("traceparent") && err.contains("not ASCII"), "{err}");
}

#[test]
fn a_collector_that_is_down_blocks_and_fails_nothing() {
    let sandbox = Sandbox::new();
    sandbox.workflow("traced.json", WORKFLOW);
    // A port nothing listens on: every export is refused.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let server = sandbox.server_with(&["--otlp-endpoint", &dead]);
    let mock = mock();
    let _worker = worker(&server, &sandbox, &mock, &dead);
    for i in 0..3 {
        let id = format!("down-{i}");
        start(&server, &id, GIVEN);
        wait_completed(&server, &id);
    }
    let health = std::net::TcpStream::connect(&server.http_addr).map(|mut s| {
        use std::io::{Read, Write};
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        answer
    });
    let health = health.unwrap();
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    assert!(server.stop().success());
}

#[test]
fn on_postgres_a_runs_trace_is_stored_with_it_and_its_spans_join_it() {
    use railyard_store_postgres::testing::{TestDatabase, skipped, test_url};
    let Some(url) = test_url() else {
        eprintln!(
            "{}",
            skipped("traces::on_postgres_a_runs_trace_is_stored_with_it")
        );
        return;
    };
    let db = TestDatabase::create(&url).expect("a database of the test's own");
    let sandbox = Sandbox::new();
    sandbox.workflow("traced.json", WORKFLOW);
    let collector = Collector::start();
    let args = ["--otlp-endpoint", collector.url.as_str()];
    let server = ServerProcess::start_on_store_with(
        db.url(),
        &sandbox.path("data"),
        &sandbox.path("workflows"),
        &args,
    );
    // Started with no worker: the run waits, its trace in the database only.
    start(&server, "pg-traced", GIVEN);
    // A new server on the database reads it back (a stopped server lets go of the
    // database's writer lease at once).
    assert!(server.stop().success());
    let server = ServerProcess::start_on_store_with(
        db.url(),
        &sandbox.path("data"),
        &sandbox.path("workflows"),
        &args,
    );
    let described = json(server.ry(&["run", "describe", "pg-traced", "--output", "json"]));
    assert_eq!(described["run"]["trace_id"], &GIVEN[3..35], "{described}");
    let mock = mock();
    let _worker = worker(&server, &sandbox, &mock, &collector.url);
    wait_completed(&server, "pg-traced");
    let trace = &GIVEN[3..35];
    let attempt = collector.wait_for(trace, |s| s.service == "railyard-server");
    assert_eq!(attempt.parent, &GIVEN[36..52]);
    let step = collector.wait_for(trace, |s| s.service == "railyard-worker" && s.name == "step");
    assert_eq!(step.parent, attempt.span_id);
}
