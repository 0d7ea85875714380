//! A real server in this process with the console mounted as the binary mounts it,
//! and a small browser: a cookie jar, GET and form POST, the CSRF token read from the
//! page.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use railyard_proto::v1::StepTask;
use railyard_sdk::{ApiKey, Client, ConnectOptions, StepWorker};
use railyard_server::{RunningServer, ServerConfig};

/// A workflow of two steps, the first held for approval.
pub const DRAFT: &str = r#"{"id":"draft","version":"1","name":"Draft","steps":[
  {"id":"write","title":"Write","prompt":"Write {{goal}}","requireConfirmation":true},
  {"id":"send","title":"Send","prompt":"Send it"}]}"#;
/// A workflow of one step.
pub const ONE: &str = r#"{"id":"one","version":"2","name":"One","steps":[
  {"id":"only","title":"Only","prompt":"Do {{goal}}"}]}"#;

pub struct Console {
    pub server: RunningServer,
    pub admin_key: Option<String>,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

impl Console {
    pub async fn start(auth: bool) -> Self {
        Self::start_on(tempfile::tempdir().unwrap(), auth).await
    }

    /// A server on `data`, a data directory that may already hold a store.
    pub async fn start_on(data: tempfile::TempDir, auth: bool) -> Self {
        Self::start_with(data, auth, None).await
    }

    /// The same, serving `store` when given (else the data directory's).
    pub async fn start_with(
        data: tempfile::TempDir,
        auth: bool,
        store: Option<railyard_store::Store>,
    ) -> Self {
        let workflows = tempfile::tempdir().unwrap();
        std::fs::write(workflows.path().join("draft.json"), DRAFT).unwrap();
        std::fs::write(workflows.path().join("one.json"), ONE).unwrap();
        let mut config = ServerConfig::new(data.path(), workflows.path());
        config.grpc_listen = "127.0.0.1:0".parse().unwrap();
        config.http_listen = "127.0.0.1:0".parse().unwrap();
        config.auth = auth;
        config.store = store;
        config.http_open_extension = Some(Arc::new(|cx: railyard_server::HttpContext| {
            let config = railyard_console::ConsoleConfig {
                auth: cx.auth,
                tls: cx.tls,
                ..Default::default()
            };
            railyard_console::router(cx.grpc_channel.clone(), config, Some(cx.shutdown.clone())).unwrap()
        }));
        let server = RunningServer::start(config).await.unwrap();
        let admin_key = server
            .admin_key_file
            .as_ref()
            .map(|p| std::fs::read_to_string(p).unwrap().trim().to_string());
        Self {
            server,
            admin_key,
            _dirs: (data, workflows),
        }
    }

    /// A gRPC client with `key`.
    pub async fn client(&self, key: Option<&str>) -> Client {
        let opts = ConnectOptions {
            api_key: key.map(ApiKey::new),
            max_attempts: 1,
            ..ConnectOptions::default()
        };
        Client::connect_with(&format!("http://{}", self.server.grpc_addr), opts)
            .await
            .unwrap()
    }

    /// The admin's client (or an anonymous one without auth).
    pub async fn admin(&self) -> Client {
        self.client(self.admin_key.as_deref()).await
    }

    pub fn browser(&self) -> Browser {
        Browser {
            base: format!("http://{}", self.server.http_addr),
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
            cookies: HashMap::new(),
        }
    }

    pub async fn start_run(&self, workflow: &str, goal: &str) -> String {
        self.admin()
            .await
            .start_run("default", workflow, goal, HashMap::new())
            .await
            .unwrap()
    }

    /// The webhook trigger `hook` of the default namespace, starting `one` with the
    /// payload's title in its goal.
    pub async fn create_hook_trigger(&self) {
        self.admin()
            .await
            .create_trigger(railyard_proto::v1::CreateTriggerRequest {
                namespace: "default".into(),
                trigger_id: "hook".into(),
                spec: Some(railyard_proto::v1::TriggerSpec {
                    workflow_id: "one".into(),
                    goal: "From the hook: {{$.title}}".into(),
                    ..Default::default()
                }),
                identity: String::new(),
            })
            .await
            .unwrap();
    }

    /// A run of `workflow` started with an admin key and its first step leased by
    /// worker `w` on the default queue.
    pub async fn start_and_lease(&self, workflow: &str, goal: &str) -> Leased {
        let client = self.admin().await;
        let run_id = self.start_run(workflow, goal).await;
        let worker = StepWorker::new(client.clone(), "default", "default", "w");
        let task = worker
            .poll(Duration::from_secs(10))
            .await
            .unwrap()
            .expect("a task");
        Leased {
            client,
            run_id,
            worker,
            task,
        }
    }
}

/// A started run whose first step a worker holds.
pub struct Leased {
    pub client: Client,
    pub run_id: String,
    pub worker: StepWorker,
    pub task: StepTask,
}

/// An answer: status, headers, body.
pub struct Page {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

impl Page {
    /// The gRPC calls the page says it made.
    pub fn calls(&self) -> u32 {
        self.headers
            .get(railyard_console::api::CALLS_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .expect("the calls header")
    }

    pub fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default()
    }

    /// The first CSRF token in a form on the page.
    pub fn csrf(&self) -> String {
        let at = self.body.find("name=\"csrf\" value=\"").expect("a CSRF field") + 19;
        self.body[at..].split('"').next().unwrap().to_string()
    }
}

pub struct Browser {
    base: String,
    http: reqwest::Client,
    cookies: HashMap<String, String>,
}

fn encode(value: &str) -> String {
    let mut out = String::new();
    for b in value.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

impl Browser {
    fn cookie_header(&self) -> String {
        self.cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    async fn take(&mut self, response: reqwest::Response) -> Page {
        for c in response.headers().get_all(reqwest::header::SET_COOKIE) {
            let c = c.to_str().unwrap();
            let pair = c.split(';').next().unwrap();
            let (k, v) = pair.split_once('=').unwrap();
            if v.is_empty() || c.contains("Max-Age=0") {
                self.cookies.remove(k);
            } else {
                self.cookies.insert(k.to_string(), v.to_string());
            }
        }
        Page {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            body: response.text().await.unwrap(),
        }
    }

    pub async fn get(&mut self, path: &str) -> Page {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .header(reqwest::header::COOKIE, self.cookie_header())
            .send()
            .await
            .unwrap();
        self.take(response).await
    }

    pub async fn post(&mut self, path: &str, fields: &[(&str, &str)]) -> Page {
        let body = fields
            .iter()
            .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
            .collect::<Vec<_>>()
            .join("&");
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .header(reqwest::header::COOKIE, self.cookie_header())
            .header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .unwrap();
        self.take(response).await
    }

    /// The CSRF token of this browser's session (from the runs page).
    pub async fn csrf(&mut self) -> String {
        let page = self.get("/ui/runs?start=1").await;
        assert_eq!(page.status, 200, "{}", page.body);
        page.csrf()
    }
}
