//! Input parsing for the two tools the loop handles itself, and signal payloads.

use std::collections::HashMap;

use railyard_proto::v1::{CoordinatorNote, StepTask};
use railyard_sdk::Completion;
use serde_json::Value;

use crate::provider::ToolSpec;
use crate::tools;

pub(super) fn parse_completion(input: &Value) -> Result<Completion, String> {
    let notes = tools::str_arg(input, "notes").map_err(|e| format!("complete_step: {e}"))?;
    let artifacts = match input.get("artifacts") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| {
                i.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("complete_step: artifact {i} is not a string"))
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(format!(
                "complete_step: `artifacts` must be an array of paths, got {other}"
            ));
        }
    };
    let context_updates = match input.get("context_updates") {
        None | Some(Value::Null) => HashMap::new(),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| {
                // Context values are strings; other JSON is kept as its JSON text.
                let v = match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (k.clone(), v)
            })
            .collect(),
        Some(other) => {
            return Err(format!(
                "complete_step: `context_updates` must be an object, got {other}"
            ));
        }
    };
    let result_json = match input.get("result") {
        None | Some(Value::Null) => String::new(),
        Some(v @ Value::Object(_)) => v.to_string(),
        // Some models send an object as JSON text.
        Some(Value::String(text)) if serde_json::from_str::<Value>(text).is_ok_and(|v| v.is_object()) => {
            text.clone()
        }
        Some(_) => {
            return Err("complete_step: `result` must be a JSON object".to_string());
        }
    };
    let search_attributes = match input.get("search_attributes") {
        None | Some(Value::Null) => HashMap::new(),
        Some(v) => attribute_texts(v).map_err(|e| format!("complete_step: {e}"))?,
    };
    Ok(Completion {
        notes: notes.to_string(),
        artifacts,
        context_updates,
        result_json,
        search_attributes,
    })
}

/// Search attributes as the model gave them (an object of name → value) as the
/// texts the server reads by each attribute's declared type: a string as is, a
/// number or boolean as written, a list as a JSON array, null as "" (unset).
pub(super) fn attribute_texts(v: &Value) -> Result<HashMap<String, String>, String> {
    let Value::Object(map) = v else {
        return Err(format!(
            "search attributes must be an object of name → value, got {v}"
        ));
    };
    Ok(map
        .iter()
        .map(|(k, v)| {
            let text = match v {
                Value::Null => String::new(),
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (k.clone(), text)
        })
        .collect())
}

/// The tool specs with the step's output contract folded into `complete_step`: its
/// `result` takes the step's schema (and becomes required), and the description names
/// the artifacts the step must list. A schema that is not JSON leaves the spec as is.
pub(super) fn with_contract(mut specs: Vec<ToolSpec>, task: &StepTask) -> Vec<ToolSpec> {
    let schema = serde_json::from_str::<Value>(&task.output_schema_json).ok();
    if schema.is_none() && task.required_artifacts.is_empty() {
        return specs;
    }
    for spec in specs.iter_mut().filter(|s| s.name == tools::COMPLETE_STEP) {
        if let Some(schema) = &schema {
            spec.input_schema["properties"]["result"] = schema.clone();
            if let Some(required) = spec.input_schema["required"].as_array_mut() {
                required.push(Value::from("result"));
            }
        }
        if !task.required_artifacts.is_empty() {
            spec.description.push_str(&format!(
                " This step's `artifacts` must include a match for each of: {}.",
                task.required_artifacts.join(", ")
            ));
        }
    }
    specs
}

pub(super) fn parse_note(input: &Value) -> Result<CoordinatorNote, String> {
    let kind = tools::str_arg(input, "kind").map_err(|e| format!("signal_coordinator: {e}"))?;
    let message = tools::str_arg(input, "message").map_err(|e| format!("signal_coordinator: {e}"))?;
    Ok(CoordinatorNote {
        kind: kind.to_string(),
        message: message.to_string(),
    })
}

/// A steer payload may be a JSON string, an object with `message` or `text`, or raw text.
pub(super) fn steer_text(payload: &str) -> String {
    match serde_json::from_str::<Value>(payload) {
        Ok(Value::String(s)) => s,
        Ok(Value::Object(map)) => ["message", "text"]
            .iter()
            .find_map(|k| map.get(*k).and_then(Value::as_str).map(str::to_string))
            .unwrap_or_else(|| payload.to_string()),
        _ => payload.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn search_attributes_become_the_texts_the_server_reads() {
        let c = parse_completion(&json!({"notes": "n", "search_attributes": {
            "customer": "acme", "priority": 2, "urgent": true, "tags": ["a", "b"], "gone": null
        }}))
        .unwrap();
        let a = &c.search_attributes;
        assert_eq!(
            (
                a["customer"].as_str(),
                a["priority"].as_str(),
                a["urgent"].as_str()
            ),
            ("acme", "2", "true")
        );
        assert_eq!((a["tags"].as_str(), a["gone"].as_str()), (r#"["a","b"]"#, ""));
        let e = parse_completion(&json!({"notes": "n", "search_attributes": [1]})).unwrap_err();
        assert!(e.contains("must be an object"), "{e}");
    }

    #[test]
    fn completion_parsing() {
        let c = parse_completion(
            &json!({"notes": "n", "artifacts": ["a.md"], "context_updates": {"k": "v", "n": 3}}),
        )
        .unwrap();
        assert_eq!(c.artifacts, vec!["a.md"]);
        assert_eq!(c.context_updates["n"], "3");
        assert!(
            parse_completion(&json!({"artifacts": []}))
                .unwrap_err()
                .contains("notes")
        );
        assert!(parse_completion(&json!({"notes": "n", "artifacts": "a"})).is_err());
        let c = parse_completion(&json!({"notes": "n", "result": {"k": [1]}})).unwrap();
        assert_eq!(c.result_json, r#"{"k":[1]}"#);
        let c = parse_completion(&json!({"notes": "n", "result": "{\"k\": 2}"})).unwrap();
        assert_eq!(c.result_json, r#"{"k": 2}"#);
        assert_eq!(
            parse_completion(&json!({"notes": "n", "result": [1]})).unwrap_err(),
            "complete_step: `result` must be a JSON object"
        );
    }

    #[test]
    fn the_contract_shapes_complete_step() {
        let task = StepTask {
            output_schema_json: r#"{"type":"object","required":["n"]}"#.into(),
            required_artifacts: vec!["report.md".into()],
            ..Default::default()
        };
        let specs = with_contract(tools::specs(&[]), &task);
        let spec = specs.iter().find(|s| s.name == tools::COMPLETE_STEP).unwrap();
        assert_eq!(
            spec.input_schema["properties"]["result"]["required"],
            json!(["n"])
        );
        assert_eq!(spec.input_schema["required"], json!(["notes", "result"]));
        assert!(
            spec.description
                .ends_with("must include a match for each of: report.md.")
        );
        let plain = with_contract(tools::specs(&[]), &StepTask::default());
        assert_eq!(plain, tools::specs(&[]));
    }

    #[test]
    fn steer_payloads() {
        assert_eq!(steer_text(r#""go left""#), "go left");
        assert_eq!(steer_text(r#"{"message": "go right"}"#), "go right");
        assert_eq!(steer_text("plain"), "plain");
    }
}
