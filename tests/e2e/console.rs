//! The web console at `/ui` of a real `railyard server` process: the binary mounts it
//! beside `/mcp` and prints its link; under `--auth` its sign-in page and assets need
//! no key while `/mcp` still does, and a signed-in admin sees and acts on runs.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use crate::support::*;

const ONE: &str = r#"{"id":"one","version":"1","name":"One",
  "steps":[{"id":"a","title":"A","prompt":"do {{goal}}"}]}"#;

fn http() -> (tokio::runtime::Runtime, reqwest::Client) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    (rt, client)
}

/// The value of `name=` in a response's `set-cookie` headers.
fn cookie(response: &reqwest::Response, name: &str) -> Option<String> {
    response
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.split(';').next()?.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

fn field<'a>(html: &'a str, name: &str) -> &'a str {
    let marker = format!("name=\"{name}\" value=\"");
    let at = html.find(&marker).expect("the field") + marker.len();
    html[at..].split('"').next().unwrap()
}

#[test]
fn the_server_serves_the_console_and_signs_users_in_under_auth() {
    let sandbox = Sandbox::new();
    sandbox.workflow("one.json", ONE);
    let server = sandbox.server_with(&["--auth"]);
    let admin_key = std::fs::read_to_string(sandbox.path("data").join("admin.key"))
        .unwrap()
        .trim()
        .to_string();
    let started = json(server.ry(&[
        "run",
        "start",
        "one",
        "--goal",
        "seen from the console",
        "-o",
        "json",
        "--api-key",
        &admin_key,
    ]));
    let run = started["run_id"].as_str().expect("a run id").to_string();
    let base = format!("http://{}", server.http_addr);
    let (rt, client) = http();
    rt.block_on(async {
        // /mcp keeps its key check; /ui signs users in itself.
        let mcp = client.post(format!("{base}/mcp")).send().await.unwrap();
        assert_eq!(mcp.status().as_u16(), 401);
        let runs = client.get(format!("{base}/ui/runs")).send().await.unwrap();
        assert_eq!(runs.status().as_u16(), 303);
        let signin = client.get(format!("{base}/ui/signin")).send().await.unwrap();
        assert_eq!(signin.status().as_u16(), 200);
        let pre = cookie(&signin, "railyard_signin").expect("the sign-in cookie");
        let html = signin.text().await.unwrap();
        let token = field(&html, "csrf").to_string();
        assert_eq!(token, pre);
        let form = format!("csrf={token}&namespace=default&key={admin_key}");
        let signed = client
            .post(format!("{base}/ui/signin"))
            .header("cookie", format!("railyard_signin={pre}"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form)
            .send()
            .await
            .unwrap();
        assert_eq!(signed.status().as_u16(), 303);
        let session = cookie(&signed, "railyard_session").expect("a session");
        let page = client
            .get(format!("{base}/ui/runs"))
            .header("cookie", format!("railyard_session={session}"))
            .send()
            .await
            .unwrap();
        assert_eq!(page.status().as_u16(), 200);
        let html = page.text().await.unwrap();
        assert!(
            html.contains(&run) && html.contains("seen from the console"),
            "{html}"
        );
        assert!(html.contains("/ui/keys"), "an admin sees the admin pages");
        // Cancel it from the console.
        let csrf = field(&html, "csrf").to_string();
        let done = client
            .post(format!("{base}/ui/runs/{run}/act/cancel?ns=default"))
            .header("cookie", format!("railyard_session={session}"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("csrf={csrf}&confirmed=1&text=from+the+console"))
            .send()
            .await
            .unwrap();
        assert_eq!(done.status().as_u16(), 200, "{}", done.text().await.unwrap());
    });
    let described = json(server.ry(&["run", "describe", &run, "-o", "json", "--api-key", &admin_key]));
    assert_eq!(described["run"]["status"], "CANCELED", "{described}");
}

#[test]
fn railyard_server_prints_the_console_link() {
    let sandbox = Sandbox::new();
    let mut child = Command::new(BIN)
        .args([
            "server",
            "--listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(sandbox.path("data"))
        .arg("--workflows")
        .arg(sandbox.path("workflows"))
        .env_remove("RAILYARD_AUTH")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let (mut first, mut second) = (String::new(), String::new());
    out.read_line(&mut first).unwrap();
    out.read_line(&mut second).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let http = first
        .split_whitespace()
        .find_map(|w| w.strip_prefix("http="))
        .expect("the HTTP address");
    assert_eq!(second.trim(), format!("web console: http://{http}/ui"));
}
