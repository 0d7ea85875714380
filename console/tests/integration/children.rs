//! The runs list's top-level toggle: `top=1` lists runs without a parent only, each
//! parent with its number of children linked to the list filtered to them; the
//! toggle stays in the URL (filters and pager) and ANDs with a typed query.

use railyard_proto::v1::ChildRunSpec;

use crate::support::{Console, Leased};

#[tokio::test]
async fn top_level_only_hides_children_and_links_each_parent_to_its_children() {
    let console = Console::start(false).await;
    let Leased {
        client: _,
        run_id: parent,
        worker,
        task,
    } = console.start_and_lease("one", "fan out").await;
    let spec = |goal: &str| ChildRunSpec {
        workflow_id: "one".into(),
        goal: goal.into(),
        ..Default::default()
    };
    let children = worker
        .spawn_children(
            &task.task_token,
            vec![spec("left"), spec("right")],
            false,
            Vec::new(),
            Vec::new(),
        )
        .await
        .unwrap();
    assert_eq!(children.len(), 2);
    let solo = console.start_run("one", "alone").await;

    let mut b = console.browser();
    // Everything, children included; the parent says how many it has.
    let all = b.get("/ui/runs?ns=default").await;
    assert_eq!(all.status, 200);
    for id in children.iter().chain([&parent, &solo]) {
        assert!(all.body.contains(id.as_str()), "{id} listed");
    }
    let link = format!("/ui/runs?ns=default&amp;parent={parent}");
    assert!(
        all.body.contains(&format!("{link}\">2 children</a>")),
        "{}",
        all.body
    );

    // Top-level only: the children are gone, the parent links to them.
    let top = b.get("/ui/runs?ns=default&top=1").await;
    assert_eq!(top.status, 200);
    assert_eq!(top.calls(), railyard_console::api::RUNS.calls);
    assert!(top.body.contains(parent.as_str()) && top.body.contains(solo.as_str()));
    for id in &children {
        assert!(!top.body.contains(&format!(">{id}</a>")), "{id} hidden");
    }
    assert!(top.body.contains(&format!("{link}\">2 children</a>")));
    // The toggle is kept: checked in the form, in the refresh and pager URLs.
    assert!(
        top.body.contains("name=\"top\" value=\"1\" checked"),
        "{}",
        top.body
    );
    assert!(top.body.contains("/ui/runs?ns=default&amp;top=1&amp;fragment=1"));

    // Expanded: the list filtered to the parent holds its children.
    let expanded = b.get(&format!("/ui/runs?ns=default&parent={parent}&top=1")).await;
    assert_eq!(expanded.status, 200);
    for id in &children {
        assert!(
            expanded.body.contains(&format!(">{id}</a>")),
            "{id} under its parent"
        );
    }
    assert!(!expanded.body.contains(&format!(">{solo}</a>")));

    // With a typed query, both hold.
    let q = b
        .get("/ui/runs?ns=default&top=1&q=WorkflowId%20%3D%20%22one%22%20AND%20Status%20%3D%20%22RUNNING%22")
        .await;
    assert_eq!(q.status, 200, "{}", q.body);
    assert!(q.body.contains(&format!(">{parent}</a>")));
    for id in &children {
        assert!(!q.body.contains(&format!(">{id}</a>")));
    }
}
