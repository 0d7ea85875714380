//! A definition's agent settings in storage: `model`, `provider`, `fallbackModels`
//! and `mcpServers` round-trip (a definition without them stores none of them, so
//! its content hash holds: the pinned hashes of `event_tests` check that).

use super::tests::{DEFS, db};
use super::*;
use railyard_model::workflow::parse_definition;

#[test]
fn agent_settings_round_trip_in_a_stored_definition() {
    let text = r#"{"id":"wf","version":"1","name":"W","model":"m1",
      "mcpServers":{"gh":{"command":"gh-mcp","args":["--x"],"env":{"T":"$GITHUB_TOKEN"}}},
      "steps":[{"id":"a","title":"A","prompt":"p","provider":"openai","model":"gpt-4o",
        "fallbackModels":["m2",{"model":"m3","provider":"anthropic"}],
        "allowedTools":["mcp__gh__*","mcp__web"],
        "mcpServers":{"web":{"url":"https://mcp.example/mcp","headers":{"Authorization":"Bearer $TOK"}}}}]}"#;
    let def = Arc::new(parse_definition(text).unwrap());
    let d = db();
    let tx = d.db.begin_write().unwrap();
    let mut table = tx.open_table(DEFS).unwrap();
    let key = d.defs.store(&def, &mut table).unwrap();
    let back = Definitions::default().resolve(&key, &table).unwrap();
    assert_eq!(*back, *def);
    assert_eq!(back.steps[0].fallback_models[1].provider(), Some("anthropic"));
    assert_eq!(back.mcp_servers["gh"].env["T"], "$GITHUB_TOKEN");
}
