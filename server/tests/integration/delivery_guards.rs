//! What result delivery refuses and how it shares its calls, over a real server:
//! internal destinations (by literal address at the API, by resolved address in the
//! sender, the server's own ports), the error clients see, the scheme in any case,
//! and hanging receivers that must not starve healthy ones.

use std::time::{Duration, Instant};

use railyard_engine::delivery::UNREACHABLE;
use railyard_proto::v1;
use railyard_sdk::{Completion, StepWorker};
use tonic::Code;

use crate::delivery::{attrs, harness_with, receiver, settings};

fn start(ns: &str, run_id: &str, callback: &str) -> v1::StartRunRequest {
    v1::StartRunRequest {
        namespace: ns.into(),
        workflow_id: "one".into(),
        goal: "g".into(),
        run_id: run_id.into(),
        callback_url: callback.into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn internal_destinations_are_refused_by_default_and_clients_see_one_generic_error() {
    let mut s = settings(true);
    s.allow_networks.clear();
    let h = harness_with(s).await;
    // Literal internal addresses: refused at once, naming the field.
    for url in [
        "http://127.0.0.1:9/x",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/",
        "http://[::1]:8080/",
        "http://[::ffff:192.168.0.1]/",
        "HTTP://0.0.0.0:7401/",
    ] {
        let e = h
            .client
            .start_run_with(start("default", "", url))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Some(Code::InvalidArgument), "{url}: {e}");
        assert!(
            e.to_string().contains("callback_url") && e.to_string().contains("internal address"),
            "{url}: {e}"
        );
    }
    let e = h
        .client
        .subscribe_namespace(
            "default",
            v1::Subscription {
                id: "s".into(),
                url: "http://172.16.0.1/hook".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(Code::InvalidArgument));
    assert!(e.to_string().contains("subscription.url"), "{e}");

    // A name is checked on what it resolves to: `localhost` reaches no receiver, and
    // a listening port and a closed one fail with the same error.
    let r = receiver(h.clock.clone()).await;
    let listening = r.url.replace("127.0.0.1", "localhost");
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        drop(l);
        format!("http://localhost:{port}/hook")
    };
    h.run("open-port", &listening, true).await;
    h.run("closed-port", &closed, true).await;
    let mut errors = Vec::new();
    for run in ["open-port", "closed-port"] {
        h.wait_for(run, "DeliveryFailed", 1).await;
        let history = h.history(run).await;
        let failed = history.iter().find(|e| e.event_type == "DeliveryFailed").unwrap();
        errors.push(attrs(failed)["error"].as_str().unwrap().to_string());
    }
    assert_eq!(errors, [UNREACHABLE, UNREACHABLE]);
    assert!(
        r.got.lock().unwrap().is_empty(),
        "the loopback receiver got nothing"
    );
    h.server.shutdown().await;
}

#[tokio::test]
async fn the_servers_own_ports_stay_refused_when_loopback_is_allowed_and_the_scheme_may_be_upper_case() {
    let h = harness_with(settings(true)).await;
    // An unsigned trigger: a delivery that reached the server's own webhook would
    // start a run.
    h.client
        .create_trigger(v1::CreateTriggerRequest {
            namespace: "default".into(),
            trigger_id: "loop".into(),
            spec: Some(v1::TriggerSpec {
                workflow_id: "one".into(),
                goal: "looped".into(),
                ..Default::default()
            }),
            identity: "test".into(),
        })
        .await
        .unwrap();
    let own = format!(
        "http://127.0.0.1:{}/hooks/default/loop",
        h.server.http_addr.port()
    );
    h.run("self", &own, true).await;
    h.wait_for("self", "DeliveryFailed", 1).await;
    let history = h.history("self").await;
    let failed = history.iter().find(|e| e.event_type == "DeliveryFailed").unwrap();
    assert_eq!(attrs(failed)["error"], UNREACHABLE);
    let runs = h
        .client
        .list_runs(v1::ListRunsRequest {
            namespace: "default".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .runs;
    assert_eq!(runs.len(), 1, "the trigger started nothing: {runs:?}");

    // An allowed loopback receiver, named with an upper-case scheme, is delivered to.
    let r = receiver(h.clock.clone()).await;
    h.run("upper", &r.url.replace("http://", "HTTP://"), true).await;
    h.wait_for("upper", "DeliverySucceeded", 1).await;
    assert_eq!(r.got.lock().unwrap().len(), 1);
    h.server.shutdown().await;
}

/// Starts a run of `one` in `ns` with a callback and completes its step.
async fn closed_run(h: &crate::delivery::Harness, ns: &str, run_id: &str, callback: &str) {
    h.client
        .start_run_with(start(ns, run_id, callback))
        .await
        .unwrap();
    let w = StepWorker::new(h.client.clone(), ns, "default", "w");
    let task = w.poll(Duration::from_secs(10)).await.unwrap().expect("a task");
    assert_eq!(task.run_id, run_id);
    w.complete(&task.task_token, Completion::default()).await.unwrap();
}

async fn events(h: &crate::delivery::Harness, ns: &str, run_id: &str, kind: &str) -> usize {
    h.client
        .full_history(ns, run_id)
        .await
        .unwrap()
        .iter()
        .filter(|e| e.event_type == kind)
        .count()
}

#[tokio::test]
async fn receivers_that_never_answer_do_not_starve_a_healthy_one_or_use_up_attempts_waiting() {
    // Two calls at once; each hanging call holds its slot for a minute (far longer
    // than the test), so only the per-target and per-namespace shares let the
    // healthy receiver through.
    let mut s = settings(true);
    s.max_concurrent = 2;
    s.request_timeout = Duration::from_secs(60);
    let h = harness_with(s).await;
    h.client.create_namespace("tenant", "").await.unwrap();
    let hanging = receiver(h.clock.clone()).await;
    hanging.script.lock().unwrap().extend([None; 16]);
    let healthy = receiver(h.clock.clone()).await;
    for i in 0..8 {
        closed_run(&h, "tenant", &format!("hang-{i}"), &hanging.url).await;
    }
    for i in 0..5 {
        closed_run(&h, "default", &format!("ok-{i}"), &healthy.url).await;
    }
    // Attempts that found no slot try again a second later on the server's clock:
    // move it a second at a time (far from any attempt's 121 s deadline) until the
    // healthy receiver has all five. The deadline only bounds a hang.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut advanced = 0;
    while healthy.got.lock().unwrap().len() < 5 {
        assert!(
            Instant::now() < deadline,
            "the healthy receiver got {} of 5",
            healthy.got.lock().unwrap().len()
        );
        h.clock.advance(Duration::from_secs(1));
        advanced += 1;
        assert!(advanced < 100, "the clock moved past the attempts' deadline");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for i in 0..5 {
        let run = format!("ok-{i}");
        let wait = Instant::now() + Duration::from_secs(20);
        while events(&h, "default", &run, "DeliverySucceeded").await == 0 {
            assert!(Instant::now() < wait, "{run} not recorded as delivered");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(events(&h, "default", &run, "DeliveryAttempted").await, 1, "{run}");
        assert_eq!(events(&h, "default", &run, "DeliveryFailed").await, 0, "{run}");
    }
    // The hanging target held at most its share (one call), and no attempt of it
    // was counted as failed for waiting.
    let mut attempted = 0;
    for i in 0..8 {
        let run = format!("hang-{i}");
        attempted += events(&h, "tenant", &run, "DeliveryAttempted").await;
        assert_eq!(events(&h, "tenant", &run, "DeliveryFailed").await, 0, "{run}");
    }
    assert_eq!(attempted, 1, "one call in flight to the hanging target");
    assert_eq!(hanging.got.lock().unwrap().len(), 1);
    // No graceful shutdown: it would wait out the hanging call's minute.
    drop(h);
}
