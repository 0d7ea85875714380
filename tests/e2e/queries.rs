//! `railyard run list --query` and `railyard run count` against a real server
//! process: JSON and table output, the old flags beside a query, and a parse error
//! naming its column.

use crate::support::*;

const ONE: &str = r#"{"id":"ID","version":"1","name":"One","steps":[
    {"id":"only","title":"Only","prompt":"Do {{goal}}"}]}"#;

#[test]
fn runs_are_listed_and_counted_by_query_from_the_cli() {
    let sandbox = Sandbox::new();
    sandbox.workflow("review-pr.json", &ONE.replace("ID", "review-pr"));
    sandbox.workflow("triage.json", &ONE.replace("ID", "triage"));
    let server = sandbox.server();
    for (i, wf) in ["review-pr", "triage", "review-pr", "triage"].iter().enumerate() {
        let id = format!("q-{i}");
        json(server.ry(&["run", "start", wf, "--goal", "g", "--run-id", &id, "-o", "json"]));
        if i < 2 {
            ok(server.ry(&["run", "terminate", &id, "--reason", "enough"]));
        }
    }
    let listed = json(server.ry(&[
        "run",
        "list",
        "--query",
        r#"WorkflowId = "review-pr" AND Status = "TERMINATED" ORDER BY StartTime DESC"#,
        "-o",
        "json",
    ]));
    let ids: Vec<&str> = listed["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["q-0"]);
    let listed = json(server.ry(&[
        "run",
        "list",
        "--workflow",
        "triage",
        "--query",
        "Status IN ('RUNNING', 'FAILED')",
        "-o",
        "json",
    ]));
    assert_eq!(listed["runs"].as_array().unwrap().len(), 1);

    let counted = json(server.ry(&["run", "count", "--group-by", "Status", "-o", "json"]));
    assert_eq!(counted["count"], 4);
    assert_eq!(
        counted["groups"],
        serde_json::json!([{"value": "RUNNING", "count": 2}, {"value": "TERMINATED", "count": 2}])
    );
    let counted = json(server.ry(&["run", "count", "--query", "WorkflowId = 'triage'", "-o", "json"]));
    assert_eq!(counted, serde_json::json!({"count": 2}));
    let table = ok(server.ry(&["run", "count", "--group-by", "WorkflowId"]));
    assert!(table.contains("review-pr") && table.contains("TOTAL"), "{table}");

    let out = server.ry(&["run", "list", "--query", "Status = "]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("query: column 10: expected a keyword (a string) value for Status"),
        "{err}"
    );
}
