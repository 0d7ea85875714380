//! Search attributes with the real binary: `railyard namespace attribute add`,
//! `run start --attr`, `task complete --attr`, `run list --query` on them (JSON and
//! table), `run describe`, and an undeclared attribute refused naming it.

use crate::support::*;

const TWO: &str = r#"{"id":"two","version":"1","name":"Two","steps":[
    {"id":"a","title":"A","prompt":"Do {{goal}}"},
    {"id":"b","title":"B","prompt":"Then"}]}"#;

#[test]
fn attributes_are_declared_set_and_queried_from_the_cli() {
    let sandbox = Sandbox::new();
    sandbox.workflow("two.json", TWO);
    let server = sandbox.server();
    let added = ok(server.ry(&["namespace", "attribute", "add", "customer", "keyword"]));
    assert!(added.contains("declared customer (keyword)"), "{added}");
    ok(server.ry(&["namespace", "attribute", "add", "priority", "int"]));
    let listed = json(server.ry(&["namespace", "attribute", "list", "-o", "json"]));
    assert_eq!(
        listed["search_attributes"],
        serde_json::json!([{"name": "customer", "type": "keyword"}, {"name": "priority", "type": "int"}])
    );

    for (id, customer, priority) in [("a-1", "acme", "2"), ("a-2", "globex", "5"), ("a-3", "acme", "9")] {
        json(server.ry(&[
            "run",
            "start",
            "two",
            "--goal",
            "g",
            "--run-id",
            id,
            "--attr",
            &format!("customer={customer}"),
            "--attr",
            &format!("priority={priority}"),
            "-o",
            "json",
        ]));
    }
    let out = server.ry(&["run", "start", "two", "--goal", "g", "--attr", "region=eu"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("\"region\" is not a search attribute the namespace declares"),
        "{err}"
    );
    let out = server.ry(&["run", "start", "two", "--goal", "g", "--attr", "priority=high"]);
    assert!(
        stderr(&out).contains("attributes.priority: int value"),
        "{}",
        stderr(&out)
    );

    let listed = json(server.ry(&[
        "run",
        "list",
        "--query",
        r#"customer = "acme" AND priority > 3"#,
        "-o",
        "json",
    ]));
    let runs = listed["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{listed}");
    assert_eq!(runs[0]["run_id"], "a-3");
    assert_eq!(
        runs[0]["search_attributes"],
        serde_json::json!({"customer": "acme", "priority": 9})
    );
    let table = ok(server.ry(&["run", "list", "--query", "customer = 'globex'"]));
    assert!(
        table.contains("ATTRIBUTES") && table.contains("customer=globex, priority=5"),
        "{table}"
    );
    let counted = json(server.ry(&["run", "count", "--group-by", "customer", "-o", "json"]));
    assert_eq!(counted["count"], 3);

    // A step sets one as it completes (`task complete --attr`).
    let task = json(server.ry(&["task", "poll", "--queue", "default", "-o", "json"]));
    let token = task["task_token"].as_str().unwrap().to_string();
    let run_id = task["run_id"].as_str().unwrap().to_string();
    ok(server.ry(&[
        "task",
        "complete",
        &token,
        "--notes",
        "n",
        "--attr",
        "customer=initech",
    ]));
    let described = ok(server.ry(&["run", "describe", &run_id]));
    assert!(described.contains("customer=initech"), "{described}");
    let listed = json(server.ry(&["run", "list", "--query", "customer = 'initech'", "-o", "json"]));
    assert_eq!(listed["runs"][0]["run_id"], run_id.as_str());
}

#[test]
fn schedule_and_trigger_describe_show_the_actions_attributes() {
    let sandbox = Sandbox::new();
    sandbox.workflow("two.json", TWO);
    let server = sandbox.server();
    ok(server.ry(&["namespace", "attribute", "add", "customer", "keyword"]));
    ok(server.ry(&["namespace", "attribute", "add", "priority", "int"]));
    ok(server.ry(&[
        "schedule",
        "create",
        "nightly",
        "--workflow",
        "two",
        "--goal",
        "g",
        "--cron",
        "0 9 * * *",
        "--attr",
        "priority=2",
        "--attr",
        "customer=acme",
    ]));
    let text = ok(server.ry(&["schedule", "describe", "nightly"]));
    assert!(
        text.contains("attribute    customer=acme\nattribute    priority=2"),
        "{text}"
    );
    ok(server.ry(&[
        "trigger",
        "create",
        "pr",
        "--workflow",
        "two",
        "--goal",
        "Review #{{$.number}}",
        "--attr",
        "customer={{$.org}}",
    ]));
    let text = ok(server.ry(&["trigger", "describe", "pr"]));
    assert!(
        text.lines()
            .any(|l| l.starts_with("attribute") && l.ends_with("customer = {{$.org}}")),
        "{text}"
    );
    let v = json(server.ry(&["trigger", "describe", "pr", "-o", "json"]));
    assert_eq!(v["search_attributes"]["customer"], "{{$.org}}");
}
