//! Plays worker against a running server: starts a run, then leases and completes
//! each of its steps, and prints the run's history.
//!
//! ```sh
//! railyard server &                       # or: cargo run --release -- server
//! cargo run -p railyard-sdk --example play_worker -- demo "write a haiku"
//! ```
//! `RAILYARD_SERVER` picks the server (default `http://127.0.0.1:7400`).

use std::time::Duration;

use railyard_proto::DEFAULT_NAMESPACE;
use railyard_sdk::{Client, Completion, DEFAULT_SERVER_URL, StepWorker};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let workflow = args.next().unwrap_or_else(|| "demo".into());
    let goal = args.next().unwrap_or_else(|| "show the client SDK".into());
    let url = std::env::var("RAILYARD_SERVER").unwrap_or_else(|_| DEFAULT_SERVER_URL.into());

    let client = Client::connect(&url).await?;
    let run_id = client
        .start_run(DEFAULT_NAMESPACE, &workflow, &goal, Default::default())
        .await?;
    println!("started run {run_id} of {workflow}");

    let worker = StepWorker::new(client.clone(), DEFAULT_NAMESPACE, "default", "sdk-example");
    let mut next = worker.poll(Duration::from_secs(10)).await?;
    while let Some(task) = next {
        println!(
            "step {}/{} {:?} attempt {}: {}",
            task.step_index + 1,
            task.step_count,
            task.step_id,
            task.attempt,
            task.prompt
        );
        worker
            .heartbeat(&task.task_token)
            .checkpoint(b"working".to_vec())
            .send()
            .await?;
        let done = Completion::notes(format!("{} done by the SDK example", task.step_id));
        // Eager dispatch: the next step of the run comes back with the completion.
        next = worker.complete_and_take_next(&task.task_token, done).await?;
    }

    for event in client.full_history(DEFAULT_NAMESPACE, &run_id).await? {
        println!(
            "{:>3} {:<15} {}",
            event.event_id, event.event_type, event.attributes_json
        );
    }
    let run = client
        .describe_run(DEFAULT_NAMESPACE, &run_id)
        .await?
        .run
        .unwrap_or_default();
    println!("run {run_id} is {}", run.status().short_name());
    Ok(())
}
