//! `--log-format`: the real binary's logs on stderr, as text by default and as one
//! JSON object per line with `--log-format json`, spans included.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::support::*;
use serde_json::Value;

/// A `railyard server` whose stderr lines arrive on a channel.
struct LoggingServer {
    child: Child,
    url: String,
    lines: mpsc::Receiver<String>,
}

impl LoggingServer {
    fn start(sandbox: &Sandbox, extra: &[&str], rust_log: &str) -> Self {
        let mut child = Command::new(BIN)
            .arg("server")
            .args(["--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(sandbox.path("data"))
            .arg("--workflows")
            .arg(sandbox.path("workflows"))
            .args(extra)
            .env("RUST_LOG", rust_log)
            .env_remove("RAILYARD_LOG_FORMAT")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn railyard server");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        out.read_line(&mut line).expect("read listening line");
        let grpc = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("grpc="))
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .to_string();
        drain(out);
        let (tx, lines) = mpsc::channel();
        let err = BufReader::new(child.stderr.take().expect("stderr"));
        std::thread::spawn(move || {
            for line in err.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            url: format!("http://{grpc}"),
            lines,
        }
    }

    /// The next stderr line that satisfies `want`, waiting at most 30 s in all.
    fn line_where(&self, want: impl Fn(&str) -> bool) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if want(&line) => return line,
                Ok(_) => {}
                Err(e) => panic!("no such log line on stderr ({e})"),
            }
        }
    }
}

impl Drop for LoggingServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn parse(line: &str) -> Value {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"))
}

#[test]
fn json_logs_are_one_object_per_line_with_fields_and_spans() {
    let sandbox = Sandbox::new();
    let server = LoggingServer::start(
        &sandbox,
        &["--log-format", "json"],
        "info,railyard_server::metrics=debug",
    );
    // Every line is JSON, the first one included.
    let first = parse(&server.line_where(|_| true));
    for field in ["timestamp", "level", "target", "message"] {
        assert!(first.get(field).is_some(), "no {field} in {first}");
    }
    let started = parse(&server.line_where(|l| l.contains("railyard server started")));
    assert_eq!(started["level"], "INFO");
    assert_eq!(started["target"], "railyard_server");
    assert!(
        started["grpc"].as_str().is_some_and(|a| server.url.ends_with(a)),
        "{started}"
    );

    // A request's log lines carry its span: service, method and status code.
    ok(ry(&server.url, &["queue", "describe", "q"]));
    let finished = parse(&server.line_where(|l| l.contains("rpc finished")));
    assert_eq!(finished["level"], "DEBUG");
    assert_eq!(finished["code"], "OK");
    let span = &finished["span"];
    assert_eq!(span["name"], "rpc", "{finished}");
    assert_eq!(span["service"], "railyard.v1.Tasks", "{finished}");
    assert_eq!(span["method"], "DescribeTaskQueue", "{finished}");
}

#[test]
fn logs_are_text_by_default() {
    let sandbox = Sandbox::new();
    let server = LoggingServer::start(&sandbox, &[], "info");
    let line = server.line_where(|l| l.contains("railyard server started"));
    assert!(serde_json::from_str::<Value>(&line).is_err(), "{line}");
    assert!(line.contains("INFO"), "{line}");
}
