//! Flow control on a real server process (docs/flow-control.md): fairness keys
//! share one worker slot, priority 1 goes before a backlog, a resumption before a
//! first step, and a key limited to 2 never has 3 leased, across a SIGKILL and a
//! restart, on redb and on PostgreSQL. The "worker" is a gRPC client with one slot:
//! it polls, notes the run, completes the step, polls again.

use railyard_proto::v1::{CompleteStepTaskRequest, PollStepTaskRequest, StartRunRequest, StepTask};
use railyard_sdk::Client;
use railyard_store_postgres::testing::{TestDatabase, skipped, test_url};

use crate::support::*;

const WORKFLOW: &str = r#"{"id": "flow", "version": "1", "name": "Flow", "taskQueue": "flow",
  "steps": [{"id": "one", "title": "One", "prompt": "one", "heartbeatTimeoutSeconds": 600}]}"#;

const TWO_STEPS: &str = r#"{"id": "flow2", "version": "1", "name": "Flow two", "taskQueue": "flow",
  "steps": [{"id": "one", "title": "One", "prompt": "one", "heartbeatTimeoutSeconds": 600},
            {"id": "two", "title": "Two", "prompt": "two", "heartbeatTimeoutSeconds": 600}]}"#;

/// A client on its own small runtime.
struct Api {
    rt: tokio::runtime::Runtime,
    client: Client,
}

impl Api {
    fn new(url: &str) -> Self {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let client = rt.block_on(Client::connect(url)).expect("client");
        Self { rt, client }
    }

    fn start(&self, workflow: &str, run_id: &str, priority: u32, key: &str) {
        let req = StartRunRequest {
            namespace: "default".into(),
            workflow_id: workflow.into(),
            run_id: run_id.into(),
            goal: "g".into(),
            priority,
            fairness_key: key.into(),
            ..Default::default()
        };
        self.rt
            .block_on(self.client.start_run_with(req))
            .expect("start run");
    }

    /// One poll; `None` when nothing came within `wait_ms`.
    fn poll(&self, wait_ms: u32) -> Option<StepTask> {
        let req = PollStepTaskRequest {
            namespace: "default".into(),
            task_queue: "flow".into(),
            identity: "one-slot".into(),
            wait_timeout_ms: wait_ms,
            run_id: String::new(),
        };
        self.rt.block_on(self.client.poll_step_task(req)).expect("poll")
    }

    fn complete(&self, task: &StepTask) {
        let req = CompleteStepTaskRequest {
            task_token: task.task_token.clone(),
            notes: "done".into(),
            identity: "one-slot".into(),
            ..Default::default()
        };
        self.rt
            .block_on(self.client.complete_step_task(req))
            .expect("complete");
    }

    /// Leases `n` steps one at a time, completing each: the run ids in lease order.
    fn drain(&self, n: usize) -> Vec<String> {
        (0..n)
            .map(|i| {
                let task = self
                    .poll(10_000)
                    .unwrap_or_else(|| panic!("lease {i} of {n}: nothing came"));
                self.complete(&task);
                task.run_id
            })
            .collect()
    }

    fn flow_wait(&self, run_id: &str) -> String {
        let resp = self
            .rt
            .block_on(self.client.describe_run("default", run_id))
            .expect("describe");
        resp.run.expect("run").flow_wait
    }
}

fn sandbox() -> Sandbox {
    let sb = Sandbox::new();
    sb.workflow("flow.json", WORKFLOW);
    sb.workflow("flow2.json", TWO_STEPS);
    sb
}

#[test]
fn a_second_key_is_leased_early_despite_a_flood_under_the_first() {
    let sb = sandbox();
    let server = sb.server();
    let api = Api::new(&server.url);
    for i in 0..100 {
        api.start("flow", &format!("a-{i:03}"), 0, "customer:a");
    }
    for i in 0..5 {
        api.start("flow", &format!("b-{i}"), 0, "customer:b");
    }
    let order = api.drain(105);
    let b_at: Vec<usize> = order
        .iter()
        .enumerate()
        .filter(|(_, id)| id.starts_with("b-"))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(b_at.len(), 5, "{order:?}");
    assert!(b_at.iter().all(|&i| i < 12), "B's runs were leased at {b_at:?}");
    // Within key A, queue order holds.
    let a: Vec<&String> = order.iter().filter(|id| id.starts_with("a-")).collect();
    assert!(a.windows(2).all(|w| w[0] < w[1]), "{a:?}");
}

#[test]
fn priority_one_beats_a_backlog_of_priority_three_and_resumptions_go_first() {
    let sb = sandbox();
    let server = sb.server();
    let api = Api::new(&server.url);
    api.start("flow2", "two-steps", 3, "");
    for i in 0..20 {
        api.start("flow", &format!("p3-{i:02}"), 3, "");
    }
    api.start("flow", "p5", 5, "");
    let first = api.poll(10_000).expect("the two-step run's first step");
    assert_eq!(
        (first.run_id.as_str(), first.step_id.as_str()),
        ("two-steps", "one")
    );
    api.complete(&first);
    // Its second step is queued after the whole backlog, yet goes first: a run
    // already under way finishes before more runs start.
    let second = api.poll(10_000).expect("the two-step run's second step");
    assert_eq!(
        (second.run_id.as_str(), second.step_id.as_str()),
        ("two-steps", "two")
    );
    api.complete(&second);
    assert_eq!(api.drain(2), ["p3-00", "p3-01"]);
    api.start("flow", "p1", 1, "");
    assert_eq!(api.drain(1), ["p1"], "priority 1 goes before the backlog");
    let rest = api.drain(19);
    assert_eq!(rest.first().map(String::as_str), Some("p3-02"));
    assert_eq!(
        rest.last().map(String::as_str),
        Some("p5"),
        "priority 5 goes last"
    );
    assert!(api.poll(200).is_none());
    assert_eq!(
        json(server.ry(&["--output", "json", "run", "describe", "p1"]))["run"]["priority"],
        1
    );

    // Bad input is refused naming the field, and starts nothing.
    for (args, field) in [
        (vec!["--priority", "7"], "priority"),
        (vec!["--fairness-weight", "1000000000"], "fairness_weight"),
        (vec!["--fairness-key", &"k".repeat(10 * 1024)], "fairness_key"),
    ] {
        let mut all = vec!["run", "start", "flow", "--goal", "g", "--run-id", "bad"];
        all.extend(args.iter().copied());
        let out = server.ry(&all);
        assert!(!out.status.success());
        assert!(stderr(&out).contains(field), "{field}: {}", stderr(&out));
    }
    let out = server.ry(&["run", "describe", "bad"]);
    assert!(!out.status.success(), "nothing was started");
}

/// A key limited to 2: two leases, the third run waits (and says so), a SIGKILL and
/// a restart forget no slot, and a freed slot goes to the waiting run.
fn a_key_limited_to_two(mut server: ServerProcess) {
    for (args, field) in [
        (
            vec!["--key", "customer:acme", "--concurrency", "-1"],
            "concurrency",
        ),
        (
            vec!["--key", "customer:acme", "--weight", "0", "--concurrency", "0"],
            "concurrency",
        ),
        (vec!["--key", "customer:acme", "--weight", "1000000000"], "weight"),
        (
            vec!["--key", "anthropic:prod", "--requests-per-minute", "-1"],
            "requests_per_minute",
        ),
    ] {
        let mut all = vec!["limit", "set"];
        all.extend(args.iter().copied());
        let out = server.ry(&all);
        assert!(!out.status.success());
        assert!(stderr(&out).contains(field), "{field}: {}", stderr(&out));
    }
    let long = "k".repeat(10 * 1024);
    let out = server.ry(&["limit", "set", "--key", &long, "--concurrency", "2"]);
    assert!(stderr(&out).contains("key"), "{}", stderr(&out));
    let out = server.ry(&[
        "limit",
        "set",
        "--key",
        "x",
        "--concurrency",
        "2",
        "--in",
        "nowhere",
    ]);
    assert!(!out.status.success(), "a rule in a namespace that does not exist");
    assert_eq!(
        ok(server.ry(&["limit", "list"])).trim(),
        "no rules",
        "nothing was stored"
    );

    ok(server.ry(&["limit", "set", "--key", "customer:*", "--concurrency", "5"]));
    ok(server.ry(&["limit", "set", "--key", "customer:acme", "--concurrency", "2"]));
    let api = Api::new(&server.url);
    for i in 0..6 {
        api.start("flow", &format!("acme-{i}"), 0, "customer:acme");
    }
    api.start("flow", "other", 0, "customer:other");
    let (mut held, other): (Vec<StepTask>, Vec<StepTask>) = (0..3)
        .map(|_| api.poll(5_000).expect("a lease"))
        .partition(|t| t.run_id.starts_with("acme-"));
    assert_eq!(held.len(), 2, "another key is not held back");
    api.complete(&other[0]);
    assert!(api.poll(500).is_none(), "a third run of customer:acme was leased");
    assert!(
        api.flow_wait("acme-2").contains("concurrency limit"),
        "{}",
        api.flow_wait("acme-2")
    );
    let list = json(server.ry(&["--output", "json", "limit", "list"]));
    let acme = list["rules"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["key"] == "customer:acme").cloned())
        .expect("the acme rule");
    assert_eq!(
        (acme["concurrency"].as_i64(), acme["running"].as_i64()),
        (Some(2), Some(2))
    );
    let queue = json(server.ry(&["--output", "json", "queue", "describe", "flow"]));
    let key = queue["keys"]
        .as_array()
        .and_then(|k| k.iter().find(|k| k["key"] == "customer:acme").cloned())
        .expect("acme in queue describe");
    assert_eq!(
        (key["queued"].as_i64(), key["running"].as_i64()),
        (Some(4), Some(2))
    );

    server = server.crash_and_restart();
    let api = Api::new(&server.url);
    assert!(
        api.poll(1_000).is_none(),
        "after the restart a third run of customer:acme was leased"
    );
    assert!(
        api.flow_wait("acme-2").contains("2 of 2"),
        "{}",
        api.flow_wait("acme-2")
    );
    // A freed slot goes to the next run of the key, and still no more than two.
    api.complete(&held.remove(0));
    let next = api.poll(5_000).expect("the freed slot is taken");
    assert!(next.run_id.starts_with("acme-"));
    assert!(api.poll(500).is_none());
    api.complete(&next);
    api.complete(&held.remove(0));
    let rest = api.drain(3);
    assert_eq!(rest.len(), 3);
    assert!(api.poll(200).is_none());
}

#[test]
fn a_key_limited_to_two_never_has_three_leased_across_a_sigkill() {
    let sb = sandbox();
    a_key_limited_to_two(sb.server());
}

#[test]
fn a_key_limited_to_two_never_has_three_leased_across_a_sigkill_on_postgres() {
    let Some(url) = test_url() else {
        eprintln!(
            "{}",
            skipped("flow_control::a_key_limited_to_two_never_has_three_leased_across_a_sigkill_on_postgres")
        );
        return;
    };
    let sb = sandbox();
    let db = TestDatabase::create(&url).expect("a database of the test's own");
    // A restarted node takes over once the killed one's writer lease expires.
    let server = ServerProcess::start_on_store_with(
        db.url(),
        &sb.path("data"),
        &sb.path("workflows"),
        &["--node-lease", "3s"],
    );
    a_key_limited_to_two(server);
}

#[test]
fn a_schedules_runs_have_its_priority_and_fairness_key() {
    let sb = sandbox();
    let server = sb.server();
    let schedule = |extra: &[&str]| {
        let mut args = vec![
            "schedule",
            "create",
            "hourly",
            "--workflow",
            "flow",
            "--goal",
            "g",
        ];
        args.extend(["--interval", "every 1h"]);
        args.extend(extra.iter().copied());
        server.ry(&args)
    };
    let out = schedule(&["--priority", "9"]);
    assert!(stderr(&out).contains("priority"), "{}", stderr(&out));
    let out = schedule(&["--fairness-key", &"k".repeat(10 * 1024)]);
    assert!(stderr(&out).contains("fairness_key"), "{}", stderr(&out));
    assert!(
        !server.ry(&["schedule", "describe", "hourly"]).status.success(),
        "nothing stored"
    );

    ok(schedule(&["--priority", "1", "--fairness-key", "tenant:nightly"]));
    let info = json(server.ry(&["schedule", "describe", "hourly", "-o", "json"]));
    assert_eq!(info["action"]["priority"], 1, "{info}");
    let triggered = json(server.ry(&["schedule", "trigger", "hourly", "-o", "json"]));
    let run_id = triggered["run_id"].as_str().expect("run id").to_string();
    let run = json(server.ry(&["run", "describe", &run_id, "-o", "json"]))["run"].take();
    assert_eq!(
        (run["priority"].as_u64(), run["fairness_key"].as_str()),
        (Some(1), Some("tenant:nightly"))
    );
}
