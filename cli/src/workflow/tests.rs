//! Tests of `railyard workflow list`: valid then invalid definitions, and the built-in demo.

use super::*;
use railyard_proto::v1::{InvalidWorkflow, WorkflowInfo};

#[test]
fn lists_valid_then_invalid() {
    let resp = ListWorkflowsResponse {
        workflows: vec![WorkflowInfo {
            id: "demo".into(),
            version: "1".into(),
            name: "Demo".into(),
            step_ids: vec!["a".into(), "b".into()],
            source_file: "workflows/demo.json".into(),
            ..Default::default()
        }],
        invalid: vec![
            InvalidWorkflow {
                source_file: "workflows/bad.json".into(),
                error: "workflows/bad.json: $.steps[0].id: missing".into(),
            },
            InvalidWorkflow {
                source_file: "x.json".into(),
                error: "not JSON".into(),
            },
        ],
    };
    assert_eq!(
        list_lines(&resp),
        vec![
            "ID    VERSION  STEPS  NAME  FILE",
            "demo  1        2      Demo  workflows/demo.json",
            "",
            "invalid workflow files (2):",
            "  workflows/bad.json: $.steps[0].id: missing",
            "  x.json: not JSON",
        ]
    );
}

#[test]
fn says_when_the_built_in_demo_is_served() {
    let resp = ListWorkflowsResponse {
        workflows: vec![WorkflowInfo {
            id: "demo".into(),
            version: "1".into(),
            name: "Demo".into(),
            step_ids: vec!["a".into()],
            source_file: "<built-in>/demo.json".into(),
            ..Default::default()
        }],
        invalid: vec![],
    };
    let lines = list_lines(&resp);
    assert_eq!(lines[1], "demo  1        1      Demo  <built-in>/demo.json");
    assert!(
        lines[3].starts_with("<built-in>: built into the railyard binary"),
        "{lines:?}"
    );
}
