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

#[test]
fn apply_says_what_changed() {
    let mut resp = RegisterWorkflowResponse {
        workflow: Some(WorkflowInfo {
            id: "coded".into(),
            version: "2".into(),
            content_hash: "0123456789abcdef0123456789abcdef".into(),
            registered: true,
            source_file: "<registered>/team/coded".into(),
            ..Default::default()
        }),
        changed: true,
    };
    assert_eq!(
        apply_line("team", &resp),
        "registered workflow coded version 2 in namespace team (content 0123456789ab); new runs start with it"
    );
    resp.changed = false;
    assert_eq!(
        apply_line("", &resp),
        "workflow coded unchanged: version 2 (content 0123456789ab) is registered in namespace default already"
    );
    let lines = list_lines(&ListWorkflowsResponse {
        workflows: vec![resp.workflow.clone().unwrap()],
        invalid: vec![],
    });
    assert!(
        lines[3].starts_with("<registered>: registered from code"),
        "{lines:?}"
    );
}
