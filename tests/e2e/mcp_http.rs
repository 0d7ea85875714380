//! `/mcp` on the server's HTTP listener (MCP's streamable HTTP transport, spoken here
//! with plain HTTP JSON-RPC): under `--auth` it needs the caller's key and acts with
//! exactly that key's rights; on a server with mutual TLS it is served over https and
//! needs a client certificate, whose subject becomes the identity in history.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

const ONE: &str = r#"{"id":"one","version":"1","name":"One","taskQueue":"q1",
  "steps":[{"id":"a","title":"A","prompt":"do {{goal}}"}]}"#;

/// One MCP session over HTTP: the session id `initialize` got, and the headers sent
/// with every request.
pub(crate) struct HttpMcp {
    rt: tokio::runtime::Runtime,
    http: reqwest::Client,
    url: String,
    key: Option<String>,
    session: Option<String>,
    next_id: u64,
}

impl HttpMcp {
    pub(crate) fn new(url: &str, key: Option<&str>) -> Self {
        Self::with_client(url, key, reqwest::Client::new())
    }

    pub(crate) fn with_client(url: &str, key: Option<&str>, http: reqwest::Client) -> Self {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        Self {
            rt,
            http,
            url: url.to_string(),
            key: key.map(str::to_string),
            session: None,
            next_id: 0,
        }
    }

    /// POSTs one JSON-RPC message: the status and the JSON-RPC answer it carried (as
    /// JSON or as an event stream), or the plain body (a refusal) as `{"body": ...}`.
    pub(crate) fn post(&mut self, message: Value) -> (u16, Value) {
        self.post_raw(message.to_string())
    }

    /// POSTs a body as it is, JSON or not, as `application/json`.
    pub(crate) fn post_raw(&mut self, body: String) -> (u16, Value) {
        let mut req = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .timeout(Duration::from_secs(60))
            .body(body);
        if let Some(key) = &self.key {
            req = req.header("authorization", format!("Bearer {key}"));
        }
        if let Some(session) = &self.session {
            req = req.header("mcp-session-id", session);
        }
        let (status, session, body) = self.rt.block_on(async {
            let resp = req.send().await.expect("POST /mcp");
            let session = resp
                .headers()
                .get("mcp-session-id")
                .map(|v| v.to_str().unwrap().to_string());
            (resp.status().as_u16(), session, resp.text().await.unwrap())
        });
        if session.is_some() {
            self.session = session;
        }
        let answer = serde_json::from_str::<Value>(&body).ok().or_else(|| {
            body.lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
                .find(|m| m.get("id").is_some())
        });
        (status, answer.unwrap_or_else(|| json!({ "body": body })))
    }

    /// `initialize` and `notifications/initialized`; the status of the first.
    pub(crate) fn initialize(&mut self) -> (u16, Value) {
        let (status, answer) = self.post(json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "railyard-e2e-http", "version": "0"}
            }
        }));
        if status == 200 {
            let (notified, _) = self.post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
            assert_eq!(notified, 202);
        }
        (status, answer)
    }

    pub(crate) fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let (status, answer) =
            self.post(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        assert_eq!(status, 200, "{method}: {answer}");
        assert_eq!(answer["id"], json!(id), "{answer}");
        answer
    }

    /// Ends the session (HTTP DELETE with its id); the status.
    pub(crate) fn close(&mut self) -> u16 {
        let session = self.session.take().expect("a session to close");
        let mut req = self.http.delete(&self.url).header("mcp-session-id", session);
        if let Some(key) = &self.key {
            req = req.header("authorization", format!("Bearer {key}"));
        }
        self.rt
            .block_on(async { req.send().await.expect("DELETE /mcp").status().as_u16() })
    }

    /// A tool call's `result`.
    pub(crate) fn tool(&mut self, name: &str, arguments: Value) -> Value {
        let answer = self.request("tools/call", json!({"name": name, "arguments": arguments}));
        answer["result"].clone()
    }
}

/// A tool result's structured answer, which must not be an error.
fn ok_result(result: &Value) -> &Value {
    assert_ne!(result["isError"], json!(true), "{result}");
    &result["structuredContent"]
}

/// A tool error's text.
fn error_text(result: &Value) -> String {
    assert_eq!(result["isError"], json!(true), "{result}");
    result["content"][0]["text"].as_str().unwrap().to_string()
}

pub(crate) fn key(server: &ServerProcess, admin: &str, args: &[&str]) -> String {
    let created = json(server.ry(&[&["key", "create", "-o", "json", "--api-key", admin][..], args].concat()));
    created["api_key"].as_str().unwrap().to_string()
}

#[test]
fn mcp_over_http_needs_a_key_and_acts_with_its_rights() {
    let sandbox = Sandbox::new();
    sandbox.workflow("one.json", ONE);
    let server = sandbox.server_with(&["--auth"]);
    let admin = std::fs::read_to_string(sandbox.path("data").join("admin.key"))
        .unwrap()
        .trim()
        .to_string();
    ok(server.ry(&["namespace", "create", "other", "--api-key", &admin]));
    let client_key = key(&server, &admin, &["--role", "client"]);
    let worker_key = key(&server, &admin, &["--role", "worker", "--queue", "mcp"]);
    let q1_worker = key(&server, &admin, &["--role", "worker", "--queue", "q1"]);
    let other_ns = key(&server, &admin, &["--role", "client", "--namespace", "other"]);
    let url = format!("http://{}/mcp", server.http_addr);

    // No key, or a wrong one: 401 before any session exists.
    for bad in [
        None,
        Some("ry_0000000000000000_nope"),
        Some(&admin[..admin.len() - 1]),
    ] {
        let mut mcp = HttpMcp::new(&url, bad);
        let (status, answer) = mcp.initialize();
        assert_eq!(status, 401, "{bad:?}: {answer}");
        assert!(mcp.session.is_none());
        let body = answer.to_string();
        assert!(
            body.contains("API key") || body.contains("authorization"),
            "{body}"
        );
    }

    // A client key lists the tools and starts a run, but may not lease its step.
    let mut client = HttpMcp::new(&url, Some(&client_key));
    let (status, init) = client.initialize();
    assert_eq!(status, 200, "{init}");
    assert_eq!(init["result"]["serverInfo"]["name"], "railyard", "{init}");
    let tools = client.request("tools/list", json!({}));
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    for t in ["list_workflows", "start_workflow", "complete_step", "resume_run"] {
        assert!(names.contains(&t), "{names:?}");
    }
    let listed = client.tool("list_workflows", json!({}));
    assert!(ok_result(&listed).to_string().contains("\"one\""), "{listed}");
    let started = client.tool("start_workflow", json!({"workflow_id": "one", "goal": "g"}));
    let refusal = error_text(&started);
    assert!(
        refusal.contains("permission denied") && refusal.contains("role client") && refusal.contains("poll"),
        "{refusal}"
    );
    let run_id = refusal
        .strip_prefix("run ")
        .and_then(|r| r.split_whitespace().next())
        .expect("the refusal names the started run")
        .trim_end_matches(',')
        .to_string();

    // A worker key limited to another queue is refused the lease.
    let mut q1 = HttpMcp::new(&url, Some(&q1_worker));
    q1.initialize();
    let refused = error_text(&q1.tool("resume_run", json!({"run_id": run_id, "wait_seconds": 1})));
    assert!(
        refused.contains("permission denied") && refused.contains("task queues [q1]"),
        "{refused}"
    );
    // Nor may it read that run, goal and context, through get_run.
    let refused = error_text(&q1.tool("get_run", json!({"run_id": run_id})));
    assert!(
        refused.contains("may describe only runs with a step on its task queues [q1]"),
        "{refused}"
    );
    assert!(!refused.contains("\"g\""), "{refused}");

    // A key of another namespace is refused whatever it asks.
    let mut stranger = HttpMcp::new(&url, Some(&other_ns));
    stranger.initialize();
    let refused = error_text(&stranger.tool("list_workflows", json!({})));
    assert!(
        refused.contains("permission denied") && refused.contains("namespace \"other\""),
        "{refused}"
    );

    // A worker key takes the step; the continue token is good for it alone.
    let mut worker = HttpMcp::new(&url, Some(&worker_key));
    worker.initialize();
    let refused = error_text(&worker.tool("list_workflows", json!({})));
    assert!(refused.contains("role worker"), "{refused}");
    let step = worker.tool("resume_run", json!({"run_id": run_id}));
    let token = ok_result(&step)["continue_token"].as_str().unwrap().to_string();
    let stolen = client.tool("complete_step", json!({"continue_token": token, "notes": "mine"}));
    assert!(error_text(&stolen).contains("continue_token refused"), "{stolen}");
    let done = worker.tool(
        "complete_step",
        json!({"continue_token": token, "notes": "done over http"}),
    );
    assert_eq!(ok_result(&done)["status"], "finished", "{done}");

    let described = json(server.ry(&["run", "describe", &run_id, "-o", "json", "--api-key", &admin]));
    assert_eq!(described["run"]["status"], "COMPLETED", "{described}");
    assert_eq!(
        described["run"]["steps"][0]["notes"], "done over http",
        "{described}"
    );
}

#[test]
fn mcp_over_http_answers_a_body_that_is_not_json_with_a_parse_error() {
    let sandbox = Sandbox::new();
    sandbox.workflow("one.json", ONE);
    let server = sandbox.server();
    let url = format!("http://{}/mcp", server.http_addr);
    let mut mcp = HttpMcp::new(&url, None);

    // Before a session, and within one: 400 with a JSON-RPC error, not 415.
    let (status, answer) = mcp.post_raw("{not json".into());
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
    assert_eq!(answer["id"], Value::Null, "{answer}");
    assert_eq!(answer["error"]["code"], -32700, "{answer}");
    let (status, init) = mcp.initialize();
    assert_eq!(status, 200, "{init}");
    for (body, code) in [
        ("garbage", -32700),
        ("", -32700),
        (r#"{"hello":"world"}"#, -32600),
    ] {
        let (status, answer) = mcp.post_raw(body.into());
        assert_eq!(status, 400, "{body:?}: {answer}");
        assert_eq!(answer["error"]["code"], code, "{body:?}: {answer}");
        assert_eq!(answer["id"], Value::Null, "{answer}");
        assert!(answer["error"]["message"].is_string(), "{answer}");
    }

    // The session goes on: a valid request on it is answered.
    let listed = mcp.tool("list_workflows", json!({}));
    assert!(ok_result(&listed).to_string().contains("\"one\""), "{listed}");
}

#[test]
fn mcp_over_https_with_mutual_tls_takes_the_certificate_as_identity() {
    let sandbox = Sandbox::new();
    let certs = sandbox.path("certs");
    std::fs::create_dir_all(&certs).unwrap();
    let ca = crate::tls::certificates(&certs, "railyard-ca", &["server", "agent-1"]);
    let repo_workflows = Path::new(env!("CARGO_MANIFEST_DIR")).join("../workflows");
    let mut child = Command::new(BIN)
        .arg("server")
        .args(["--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(sandbox.path("data"))
        .arg("--workflows")
        .arg(&repo_workflows)
        .arg("--tls-cert")
        .arg(certs.join("server.pem"))
        .arg("--tls-key")
        .arg(certs.join("server.key"))
        .arg("--tls-client-ca")
        .arg(&ca)
        .env_remove("RAILYARD_AUTH")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn railyard server");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let field = |name: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .expect("address")
            .to_string()
    };
    let (grpc, http) = (field("grpc="), field("http="));
    drain(out);
    let port = |addr: &str| addr.rsplit(':').next().unwrap().to_string();
    let url = format!("https://localhost:{}/mcp", port(&http));
    let ca_cert = reqwest::Certificate::from_pem(&std::fs::read(&ca).unwrap()).unwrap();
    let tls_client = |identity: Option<&str>| {
        let mut b = reqwest::Client::builder().add_root_certificate(ca_cert.clone());
        if let Some(name) = identity {
            let mut pem = std::fs::read(certs.join(format!("{name}.pem"))).unwrap();
            pem.extend(std::fs::read(certs.join(format!("{name}.key"))).unwrap());
            b = b.identity(reqwest::Identity::from_pem(&pem).unwrap());
        }
        b.build().unwrap()
    };

    // Without a client certificate: /healthz answers, /mcp does not.
    let mut anonymous = HttpMcp::with_client(&url, None, tls_client(None));
    let healthz = anonymous.rt.block_on(async {
        let resp = anonymous
            .http
            .get(format!("https://localhost:{}/healthz", port(&http)))
            .send()
            .await
            .unwrap();
        resp.status().as_u16()
    });
    assert_eq!(healthz, 200);
    let (status, answer) = anonymous.initialize();
    assert_eq!(status, 401, "{answer}");
    assert!(answer.to_string().contains("client certificate"), "{answer}");

    // With one: the demo's first step over https, recorded under the certificate's subject.
    let mut agent = HttpMcp::with_client(&url, None, tls_client(Some("agent-1")));
    let (status, init) = agent.initialize();
    assert_eq!(status, 200, "{init}");
    let started = agent.tool(
        "start_workflow",
        json!({"workflow_id": "demo", "goal": "a haiku"}),
    );
    let step = ok_result(&started).clone();
    assert_eq!(step["status"], "step", "{step}");
    let run_id = step["run_id"].as_str().unwrap().to_string();
    let next = agent.tool(
        "complete_step",
        json!({"continue_token": step["continue_token"], "notes": "planned"}),
    );
    assert_eq!(ok_result(&next)["status"], "step", "{next}");

    let cli = Command::new(BIN)
        .args(["run", "history", &run_id, "-o", "json"])
        .args(["--server", &format!("https://localhost:{}", port(&grpc))])
        .arg("--tls-ca")
        .arg(&ca)
        .arg("--tls-cert")
        .arg(certs.join("agent-1.pem"))
        .arg("--tls-key")
        .arg(certs.join("agent-1.key"))
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let history = ok(cli);
    assert!(history.contains("CN=agent-1"), "{history}");
    let _ = child.kill();
    let _ = child.wait();
}
