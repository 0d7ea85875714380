//! Sign-in under auth, roles deciding what shows, sign-out, the security headers, and
//! stored strings (a goal, a note, a tool result, a webhook value) rendered inert.

use std::time::Duration;

use railyard_proto::v1::{ApiKeyRole, CreateApiKeyRequest};
use railyard_sdk::{Completion, StepWorker};

use crate::support::Console;

async fn key(console: &Console, role: ApiKeyRole) -> String {
    console
        .admin()
        .await
        .create_api_key(CreateApiKeyRequest {
            namespace: "default".into(),
            role: role as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .api_key
}

#[tokio::test]
async fn under_auth_nothing_shows_before_sign_in_and_the_role_decides_what_does() {
    let console = Console::start(true).await;
    let run = console.start_run("one", "secret goal").await;
    let mut b = console.browser();
    for path in [
        "/ui/runs",
        &format!("/ui/runs/{run}"),
        "/ui/approvals",
        "/ui/keys",
    ] {
        let page = b.get(path).await;
        assert_eq!(page.status, 303, "{path}");
        assert_eq!(page.header("location"), "/ui/signin");
        assert!(!page.body.contains("secret goal"));
    }
    let posted = b
        .post(&format!("/ui/runs/{run}/act/cancel"), &[("confirmed", "1")])
        .await;
    assert_eq!(posted.status, 303, "no action without a session");
    // The sign-in page and its assets need no key.
    let signin = b.get("/ui/signin").await;
    assert_eq!(signin.status, 200);
    assert_eq!(b.get("/ui/assets/console.css").await.status, 200);
    // A wrong key is refused with the server's words.
    let token = signin.csrf();
    let wrong = b
        .post(
            "/ui/signin",
            &[
                ("csrf", &token),
                ("key", "ry_nope_nope"),
                ("namespace", "default"),
            ],
        )
        .await;
    assert_eq!(wrong.status, 401, "{}", wrong.body);
    assert!(wrong.body.contains("unauthenticated"), "{}", wrong.body);
    // The sign-in form's double-submit token must match its cookie.
    let client_key = key(&console, ApiKeyRole::Client).await;
    let forged = b
        .post("/ui/signin", &[("csrf", "forged"), ("key", &client_key)])
        .await;
    assert_eq!(forged.status, 403);
    // A client key: runs, no admin pages.
    let token = b.get("/ui/signin").await.csrf();
    let ok = b
        .post(
            "/ui/signin",
            &[("csrf", &token), ("key", &client_key), ("namespace", "default")],
        )
        .await;
    assert_eq!(ok.status, 303, "{}", ok.body);
    let cookie = ok.header("set-cookie");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    assert!(!cookie.contains("Secure"), "plain HTTP: not Secure");
    let runs = b.get("/ui/runs").await;
    assert_eq!(runs.status, 200);
    assert!(runs.body.contains("secret goal"));
    assert!(!runs.body.contains("/ui/keys"), "no admin links for a client");
    assert!(runs.body.contains("Sign out"));
    assert_eq!(b.get("/ui/keys").await.status, 403);
    assert_eq!(b.get("/ui/schedules").await.status, 403);
    // Sign-out ends the session.
    let csrf = runs.csrf();
    let out = b.post("/ui/signout", &[("csrf", &csrf)]).await;
    assert_eq!(out.status, 303);
    assert_eq!(b.get("/ui/runs").await.status, 303);
    // An admin key: the admin pages, never a secret.
    let mut admin = console.browser();
    let token = admin.get("/ui/signin").await.csrf();
    let admin_key = console.admin_key.clone().unwrap();
    let ok = admin
        .post("/ui/signin", &[("csrf", &token), ("key", &admin_key)])
        .await;
    assert_eq!(ok.status, 303);
    let keys = admin.get("/ui/keys").await;
    assert_eq!(keys.status, 200, "{}", keys.body);
    let secret = client_key.rsplit('_').next().unwrap();
    let key_id = client_key.split('_').nth(1).unwrap();
    assert!(keys.body.contains(key_id), "{}", keys.body);
    assert!(keys.body.contains("client"));
    assert!(!keys.body.contains(secret), "no key's secret is shown");
    assert!(!keys.body.contains(&admin_key));
    // A worker key may not read runs: refused at sign-in with the server's words.
    let worker_key = key(&console, ApiKeyRole::Worker).await;
    let mut w = console.browser();
    let token = w.get("/ui/signin").await.csrf();
    let refused = w
        .post("/ui/signin", &[("csrf", &token), ("key", &worker_key)])
        .await;
    assert_eq!(refused.status, 403);
    assert!(
        refused.body.contains("which may not list runs"),
        "{}",
        refused.body
    );
}

#[tokio::test]
async fn every_page_carries_the_security_headers_and_no_inline_script() {
    let console = Console::start(false).await;
    let run = console.start_run("one", "x").await;
    let mut b = console.browser();
    for path in [
        "/ui/runs",
        &format!("/ui/runs/{run}"),
        "/ui/approvals",
        "/ui/signin",
        "/ui/workflows",
    ] {
        let page = b.get(path).await;
        let csp = page.header("content-security-policy");
        assert!(
            csp.contains("script-src 'self'") && !csp.contains("unsafe"),
            "{csp}"
        );
        assert_eq!(page.header("x-frame-options"), "DENY");
        for tag in page.body.split("<script").skip(1) {
            assert!(
                tag.trim_start().starts_with("src=\"/ui/assets/"),
                "only our own script files: {tag}"
            );
        }
        assert!(!page.body.contains("style=\""), "no inline style on {path}");
        assert!(!has_handler(&page.body), "no event handler attributes on {path}");
    }
    // A POST from another origin is refused before anything is read.
    let csrf = b.csrf().await;
    let page = b
        .post(&format!("/ui/runs/{run}/act/cancel"), &[("csrf", &csrf)])
        .await;
    assert_eq!(page.status, 200, "same origin (no Origin header) passes");
}

/// Whether some ` on<letters>=` (an event handler attribute) is in `html`.
fn has_handler(html: &str) -> bool {
    html.match_indices(" on").any(|(at, _)| {
        let rest = &html[at + 3..];
        let letters = rest.chars().take_while(char::is_ascii_alphabetic).count();
        letters > 0 && rest[letters..].starts_with('=')
    })
}

const PAYLOADS: [&str; 3] = [
    "<script>alert(1)</script>",
    "\"><img src=x onerror=alert(2)>",
    "javascript:alert(3)",
];

fn assert_inert(body: &str) {
    assert!(!body.contains("<script>alert"), "a script tag got through");
    assert!(!body.contains("<img src=x"), "an img tag got through");
    assert!(!body.contains("\"><img"), "an attribute was closed");
    assert!(
        !body.to_lowercase().contains("href=\"javascript:"),
        "a javascript: link"
    );
    assert!(
        body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "the text is shown, escaped"
    );
}

#[tokio::test]
async fn stored_strings_render_inert() {
    let console = Console::start(false).await;
    let client = console.admin().await;
    let evil = PAYLOADS.join(" ");
    // A goal, a note and a tool result.
    let run = console.start_run("one", &evil).await;
    let worker = StepWorker::new(client.clone(), "default", "default", "w");
    let task = worker
        .poll(Duration::from_secs(10))
        .await
        .unwrap()
        .expect("a task");
    let result = serde_json::json!({ "toolOutput": evil }).to_string();
    worker
        .complete(
            &task.task_token,
            Completion {
                notes: evil.clone(),
                result_json: result,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    // A webhook value, through a trigger's goal template.
    console.create_hook_trigger().await;
    let hooked = reqwest::Client::new()
        .post(format!("http://{}/hooks/default/hook", console.server.http_addr))
        .header("content-type", "application/json")
        .body(serde_json::json!({ "title": evil }).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(hooked.status().as_u16(), 202);
    let hooked: serde_json::Value = serde_json::from_str(&hooked.text().await.unwrap()).unwrap();
    let hook_run = hooked["runId"].as_str().unwrap().to_string();
    let mut b = console.browser();
    for path in [
        "/ui/runs".to_string(),
        format!("/ui/runs/{run}"),
        format!("/ui/runs/{run}?all=1"),
        format!("/ui/runs/{hook_run}"),
    ] {
        let page = b.get(&path).await;
        assert_eq!(page.status, 200, "{path}");
        assert_inert(&page.body);
    }
    // A refusal quoting a client's value is escaped too.
    let page = b
        .get(&format!(
            "/ui/runs?status={}",
            "%3Cscript%3Ealert(1)%3C%2Fscript%3E"
        ))
        .await;
    assert!(!page.body.contains("<script>alert"));
}
