//! Workflow definitions at the loader's limits, over real gRPC: a definition
//! of just under the largest file, with deeply nested output schemas, is described
//! and its history read (pretty-printed, it was more than the message limit:
//! `OUT_OF_RANGE`); one whose compact JSON passes `MAX_DEFINITION_JSON` is refused at
//! load, naming its file and its size.

use railyard_engine::registry::MAX_DEFINITION_BYTES;
use railyard_model::workflow::{MAX_DEFINITION_JSON, MAX_STEPS};
use railyard_proto::MAX_MESSAGE_BYTES;
use railyard_proto::v1::GetHistoryRequest;
use serde_json::{Value, json};

use crate::bounds::bed_with;

/// Levels of nested `properties` in each step's schema: the innermost properties sit
/// 4 + 2 × this deep in the file, within serde_json's limit of 128.
const LEVELS: usize = 55;

/// A step whose output schema is nested [`LEVELS`] deep, with `properties` at the
/// bottom.
fn step(i: usize, properties: usize) -> Value {
    let leaf: serde_json::Map<String, Value> = (0..properties)
        .map(|p| (format!("p{p:05}"), json!({"type": "string"})))
        .collect();
    let mut schema = json!({"type": "object", "properties": leaf});
    for _ in 0..LEVELS {
        schema = json!({"type": "object", "properties": {"n": schema}});
    }
    json!({"id": format!("s{i}"), "title": "T", "prompt": "p", "output": schema})
}

fn definition(id: &str, properties: usize) -> String {
    let steps: Vec<Value> = (0..MAX_STEPS).map(|i| step(i, properties)).collect();
    json!({"id": id, "version": "1", "name": "Nested", "steps": steps}).to_string()
}

/// The largest definition a file may hold, of [`MAX_STEPS`] such steps.
fn largest(id: &str) -> String {
    let bare = definition(id, 1).len();
    let per_property = (definition(id, 2).len() - bare) / MAX_STEPS;
    let room = MAX_DEFINITION_BYTES as usize - bare - 64;
    let text = definition(id, 1 + room / MAX_STEPS / per_property);
    assert!(text.len() <= MAX_DEFINITION_BYTES as usize, "{}", text.len());
    assert!(
        text.len() > MAX_DEFINITION_BYTES as usize - 64 * 1024,
        "{}",
        text.len()
    );
    text
}

#[tokio::test]
async fn the_largest_definition_with_deeply_nested_schemas_is_described() {
    let text = largest("nested");
    // Pretty-printed it is more than one message may hold: what DescribeRun sent.
    let pretty = serde_json::to_string_pretty(&serde_json::from_str::<Value>(&text).unwrap())
        .unwrap()
        .len();
    assert!(pretty > MAX_MESSAGE_BYTES, "{pretty}");
    let b = bed_with(|c| std::fs::write(c.workflows_dir.join("nested.json"), &text).unwrap()).await;
    let listing = b.client.list_workflows("default").await.unwrap();
    assert!(listing.invalid.is_empty(), "{:?}", listing.invalid);
    assert!(listing.workflows.iter().any(|w| w.id == "nested"));

    let run_id = b.start("nested", "deep").await.unwrap();
    let described = b.client.describe_run("default", &run_id).await.unwrap();
    let definition = &described.definition_json;
    assert!(definition.len() <= MAX_DEFINITION_JSON, "{}", definition.len());
    assert!(!definition.contains('\n'), "sent compact");
    let sent: Value = serde_json::from_str(definition).unwrap();
    assert_eq!(sent["steps"].as_array().map(Vec::len), Some(MAX_STEPS));
    let mut inner = &sent["steps"][MAX_STEPS - 1]["output"];
    for _ in 0..LEVELS {
        inner = &inner["properties"]["n"];
    }
    assert_eq!(inner["properties"]["p00000"], json!({"type": "string"}));

    // Its history, whose first event carries the definition, is read too.
    let history = b
        .client
        .get_history(GetHistoryRequest {
            namespace: "default".into(),
            run_id: run_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(history.events[0].event_type, "RunStarted");
    assert!(
        history.events[0].attributes_json.len() > definition.len(),
        "the event carries the definition"
    );
}

#[tokio::test]
async fn a_definition_longer_than_the_bound_as_compact_json_is_refused_at_load() {
    // Each `1e15` (4 bytes) is `1000000000000000.0` (18) as compact JSON.
    let numbers = vec!["1e15"; 3400].join(",");
    let steps: Vec<String> = (0..60)
        .map(|i| format!(r#"{{"id":"s{i}","title":"T","prompt":"p","output":{{"enum":[{numbers}]}}}}"#))
        .collect();
    let text = format!(
        r#"{{"id":"grown","version":"1","name":"G","steps":[{}]}}"#,
        steps.join(",")
    );
    assert!(text.len() <= MAX_DEFINITION_BYTES as usize);
    let b = bed_with(|c| std::fs::write(c.workflows_dir.join("grown.json"), &text).unwrap()).await;
    let listing = b.client.list_workflows("default").await.unwrap();
    assert!(listing.workflows.iter().all(|w| w.id != "grown"));
    let refused = listing
        .invalid
        .iter()
        .find(|i| i.source_file.ends_with("grown.json"))
        .unwrap_or_else(|| panic!("grown.json is listed as invalid: {:?}", listing.invalid));
    assert!(
        refused.error.contains("grown.json: $: the definition is ")
            && refused.error.contains(&format!(
                "bytes as compact JSON (as runs carry it), more than the limit of {MAX_DEFINITION_JSON}"
            )),
        "{}",
        refused.error
    );
}
