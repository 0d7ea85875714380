//! Webhook triggers end to end: the `railyard trigger` commands against a real
//! server process, a trigger from the config file, and a delivery id that answers
//! the same run after the server is SIGKILLed and restarted.

use std::time::Duration;

use serde_json::Value;

use crate::support::*;

/// A one-step workflow; nothing works its steps, so its runs stay open.
const WORKFLOW: &str = r#"{"id":"review","version":"1","name":"review","steps":[
    {"id":"only","title":"Only","prompt":"Do {{goal}}"}]}"#;

/// `POST /hooks/default/{trigger}` with `body` and `headers`: (status, JSON answer).
fn post(server: &ServerProcess, trigger: &str, body: &str, headers: &[(&str, &str)]) -> (u16, Value) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut req = reqwest::Client::new()
            .post(format!("http://{}/hooks/default/{trigger}", server.http_addr))
            .header("content-type", "application/json")
            .timeout(Duration::from_secs(30))
            .body(body.to_string());
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap())
    })
}

fn run_ids(server: &ServerProcess) -> Vec<String> {
    let listed = json(server.ry(&["run", "list", "--output", "json"]));
    let runs = listed
        .get("runs")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    runs.iter()
        .map(|r| r["run_id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn trigger_commands_and_a_delivery_id_that_survives_a_sigkill() {
    let sandbox = Sandbox::new();
    sandbox.workflow("review.json", WORKFLOW);
    let server = sandbox.server();

    let created = json(server.ry(&[
        "trigger",
        "create",
        "pr",
        "--workflow",
        "review",
        "--goal",
        "Review #{{$.number}}: {{$.pull_request.title}}",
        "--context",
        "repo={{$.repository.full_name}}",
        "--key",
        "{{$.repository.full_name}}#{{$.number}}",
        "--mode",
        "serial",
        "--output",
        "json",
    ]));
    assert_eq!(created["created"], true);
    assert_eq!(created["hook_path"], "/hooks/default/pr");
    assert_eq!(created["mode"], "serial");
    let human = ok(server.ry(&["trigger", "describe", "pr"]));
    assert!(human.contains("POST /hooks/default/pr"), "{human}");
    assert!(human.contains("serial"), "{human}");
    let listed = ok(server.ry(&["trigger", "list"]));
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("pr ") && l.contains("review")),
        "{listed}"
    );
    let updated = json(server.ry(&[
        "trigger",
        "update",
        "pr",
        "--description",
        "PR reviews",
        "--output",
        "json",
    ]));
    assert_eq!(updated["description"], "PR reviews");
    assert_eq!(updated["goal"], "Review #{{$.number}}: {{$.pull_request.title}}");
    // A literal secret is refused, and not echoed.
    let refused = server.ry(&["trigger", "update", "pr", "--signature-secret", "hunter2"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains("signature_secret"),
        "{}",
        stderr(&refused)
    );
    assert!(!stderr(&refused).contains("hunter2"));

    let body =
        r#"{"number":3,"pull_request":{"title":"Add triggers"},"repository":{"full_name":"acme/app"}}"#;
    let (status, first) = post(&server, "pr", body, &[("X-GitHub-Delivery", "d-1")]);
    assert_eq!(status, 202, "{first}");
    let run_id = first["runId"].as_str().unwrap().to_string();
    let described = json(server.ry(&["run", "describe", &run_id, "--output", "json"]));
    assert_eq!(described["run"]["goal"], "Review #3: Add triggers", "{described}");
    assert_eq!(described["run"]["context"]["repo"], "acme/app", "{described}");
    // The second delivery for the key waits for the first run.
    let (status, second) = post(&server, "pr", body, &[("X-GitHub-Delivery", "d-2")]);
    assert_eq!(status, 202);
    assert_eq!(second["queued"], true, "{second}");

    let server = server.crash_and_restart();
    let (status, again) = post(&server, "pr", body, &[("X-GitHub-Delivery", "d-1")]);
    assert_eq!(status, 202, "{again}");
    assert_eq!(
        again["runId"],
        run_id.as_str(),
        "the same run after SIGKILL and restart"
    );
    assert_eq!(again["duplicate"], true);
    let (_, again) = post(&server, "pr", body, &[("X-GitHub-Delivery", "d-2")]);
    assert_eq!(again["runId"], second["runId"]);
    assert_eq!(
        run_ids(&server),
        vec![run_id.clone()],
        "one run started; the second still waits"
    );

    // The waiting delivery starts when the first run closes.
    ok(server.ry(&["run", "terminate", &run_id, "--reason", "done"]));
    let second_id = second["runId"].as_str().unwrap().to_string();
    let described = json(server.ry(&["run", "describe", &second_id, "--output", "json"]));
    assert_eq!(described["run"]["status"], "RUNNING", "{described}");

    let deleted = json(server.ry(&["trigger", "delete", "pr", "--output", "json"]));
    assert_eq!(deleted["deleted"], true);
    let (status, gone) = post(&server, "pr", body, &[]);
    assert_eq!(status, 404, "{gone}");
}

#[test]
fn a_trigger_in_the_config_file_verifies_signatures() {
    let sandbox = Sandbox::new();
    sandbox.workflow("review.json", WORKFLOW);
    let config = sandbox.path("railyard.toml");
    std::fs::write(
        &config,
        r#"
[hooks]
max_body_bytes = 4096

[[triggers]]
id = "signed"
workflow = "review"
goal = "push to {{$.ref}}"
signature_secret = "$E2E_HOOK_SECRET"
"#,
    )
    .unwrap();
    // SAFETY: set before the server child is spawned; only that child reads it.
    unsafe { std::env::set_var("E2E_HOOK_SECRET", "e2e secret") };
    let server = sandbox.server_with(&["--config", config.to_str().unwrap()]);
    let described = json(server.ry(&["trigger", "describe", "signed", "--output", "json"]));
    assert_eq!(described["from_config"], true);

    let body = r#"{"ref":"refs/heads/main"}"#;
    let good = railyard_engine::signature::sign(b"e2e secret", body.as_bytes());
    let (status, answer) = post(&server, "signed", body, &[("X-Hub-Signature-256", &good)]);
    assert_eq!(status, 202, "{answer}");
    let bad = railyard_engine::signature::sign(b"not it", body.as_bytes());
    let (status, answer) = post(&server, "signed", body, &[("X-Hub-Signature-256", &bad)]);
    assert_eq!(status, 401, "{answer}");
    let big = format!(r#"{{"ref":"{}"}}"#, "x".repeat(5000));
    let sig = railyard_engine::signature::sign(b"e2e secret", big.as_bytes());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let status = rt.block_on(async {
        reqwest::Client::new()
            .post(format!("http://{}/hooks/default/signed", server.http_addr))
            .header("X-Hub-Signature-256", sig)
            .body(big)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    });
    assert_eq!(status, 413);
    assert_eq!(run_ids(&server).len(), 1, "only the good delivery started a run");
    // Read-only through the API.
    let refused = server.ry(&["trigger", "delete", "signed"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(stderr(&refused).contains("configuration"), "{}", stderr(&refused));
}
