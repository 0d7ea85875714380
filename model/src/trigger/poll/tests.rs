use serde_json::json;

use super::*;

fn source(kind: SourceKind) -> PollSource {
    PollSource {
        kind,
        repo: "acme/app".into(),
        labels: vec!["agent".into()],
        every_ms: 60_000,
        ..PollSource::default()
    }
}

#[test]
fn link_headers_give_the_next_page() {
    let h = r#"<https://api.github.com/repositories/1/issues?page=2>; rel="next", <https://api.github.com/repositories/1/issues?page=5>; rel="last""#;
    assert_eq!(
        next_link(h).as_deref(),
        Some("https://api.github.com/repositories/1/issues?page=2")
    );
    let last_only = r#"<https://x/issues?page=1>; rel="first", <https://x/issues?page=5>; rel="prev""#;
    assert_eq!(next_link(last_only), None);
    assert_eq!(next_link(""), None);
    assert_eq!(next_link("garbage; rel=next"), None);
    assert_eq!(
        next_link("<https://x/?page=3>; rel=next").as_deref(),
        Some("https://x/?page=3")
    );
}

#[test]
fn github_items_are_read_and_filtered() {
    let issue = json!({"number": 7, "title": "t", "state": "open", "user": {"login": "Ann"},
        "labels": [{"name": "agent"}, {"name": "bug"}],
        "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:01:00Z"});
    let it = item(SourceKind::GithubIssues, &issue).unwrap();
    assert_eq!(it.id, "7");
    assert_eq!(it.updated_ms - it.created_ms, 60_000);
    assert!(!it.is_pull);
    let mut src = source(SourceKind::GithubIssues);
    assert!(matches(&src, &it));
    src.author = "ann".into();
    assert!(matches(&src, &it), "logins compare without case");
    src.author = "bob".into();
    assert!(!matches(&src, &it));
    src.author.clear();
    src.labels.push("urgent".into());
    assert!(!matches(&src, &it), "every label must be on the item");
    src.labels.pop();
    src.state = "closed".into();
    assert!(!matches(&src, &it));
    src.state = "all".into();
    assert!(matches(&src, &it));
    // A pull request in the issues listing is a pull, not an issue.
    let mut pr = issue.clone();
    pr["pull_request"] = json!({"url": "u"});
    let pr = item(SourceKind::GithubIssues, &pr).unwrap();
    assert!(!matches(&src, &pr));
    assert!(matches(
        &PollSource {
            kind: SourceKind::GithubPulls,
            ..src
        },
        &pr
    ));
    // Missing or odd fields: not an item.
    assert!(item(SourceKind::GithubIssues, &json!({"number": "7"})).is_none());
    assert!(item(SourceKind::GithubIssues, &json!([1])).is_none());
    let long = json!({"number": 1, "created_at": "2026-01-01T00:00:00Z", "updated_at": "x".repeat(100)});
    assert!(item(SourceKind::GithubIssues, &long).is_none());
}

#[test]
fn gitlab_merge_requests_are_read() {
    let mr = json!({"iid": 3, "id": 99, "state": "opened", "author": {"username": "ann"},
        "labels": ["agent"], "created_at": "2026-01-01T00:00:00.000Z", "updated_at": "2026-01-01T00:00:00.000Z"});
    let it = item(SourceKind::GitlabMergeRequests, &mr).unwrap();
    assert_eq!((it.id.as_str(), it.author.as_str()), ("3", "ann"));
    assert!(matches(&source(SourceKind::GitlabMergeRequests), &it));
}

#[test]
fn event_keys_follow_the_events_chosen() {
    let mut src = source(SourceKind::GithubIssues);
    let it = Item {
        id: "5".into(),
        created_ms: 1_000,
        updated_ms: 5_000,
        updated_at: "T5".into(),
        labels: vec!["agent".into()],
        state: "open".into(),
        author: String::new(),
        is_pull: false,
    };
    let keys = |src: &PollSource, baseline, after| -> Vec<String> {
        event_keys(src, &it, baseline, after)
            .into_iter()
            .map(|k| k.key)
            .collect()
    };
    assert_eq!(keys(&src, 0, 0), ["5:new"]);
    assert!(
        keys(&src, 2_000, 0).is_empty(),
        "created before polling began: not new"
    );
    src.events = Events::parse(&["labeled".into(), "updated".into()]).unwrap();
    assert_eq!(keys(&src, 2_000, 0), ["5:labeled", "5:updated:T5"]);
    assert_eq!(
        keys(&src, 2_000, 6_000),
        ["5:labeled"],
        "a change older than the window"
    );
    assert!(Events::parse(&["edited".into()]).is_err());
}

#[test]
fn sources_are_checked_naming_the_field() {
    let ok = source(SourceKind::GithubIssues);
    assert!(ok.check().is_ok());
    let bad = |s: PollSource| s.check().unwrap_err().to_string();
    assert!(
        bad(PollSource {
            repo: "acme".into(),
            ..ok.clone()
        })
        .starts_with("poll.repo")
    );
    assert!(
        bad(PollSource {
            repo: "a/b/c".into(),
            ..ok.clone()
        })
        .starts_with("poll.repo")
    );
    assert!(
        PollSource {
            kind: SourceKind::GitlabMergeRequests,
            repo: "a/b/c".into(),
            ..ok.clone()
        }
        .check()
        .is_ok()
    );
    assert!(
        bad(PollSource {
            base_url: "ftp://x".into(),
            ..ok.clone()
        })
        .starts_with("poll.base_url")
    );
    assert!(
        bad(PollSource {
            base_url: "https://u:p@x".into(),
            ..ok.clone()
        })
        .starts_with("poll.base_url")
    );
    assert!(
        bad(PollSource {
            labels: vec!["a,b".into()],
            ..ok.clone()
        })
        .starts_with("poll.labels[0]")
    );
    assert!(
        bad(PollSource {
            state: "opened".into(),
            ..ok.clone()
        })
        .starts_with("poll.state")
    );
    assert!(
        bad(PollSource {
            every_ms: 10,
            ..ok.clone()
        })
        .starts_with("poll.every")
    );
    let labeled = Events::parse(&["labeled".into()]).unwrap();
    assert!(
        bad(PollSource {
            labels: vec![],
            events: labeled,
            ..ok.clone()
        })
        .starts_with("poll.events")
    );
}

#[test]
fn urls_ask_for_the_filters_oldest_change_first() {
    let mut src = source(SourceKind::GithubIssues);
    src.author = "ann".into();
    assert_eq!(
        src.first_page_url("2026-01-01T00:00:00Z", 100),
        "https://api.github.com/repos/acme/app/issues?state=open&labels=agent&per_page=100\
         &sort=updated&direction=asc&creator=ann&since=2026-01-01T00%3A00%3A00Z"
    );
    let gl = PollSource {
        kind: SourceKind::GitlabMergeRequests,
        repo: "grp/sub/app".into(),
        base_url: "https://git.example/".into(),
        ..source(SourceKind::GitlabMergeRequests)
    };
    assert_eq!(
        gl.first_page_url("", 50),
        "https://git.example/api/v4/projects/grp%2Fsub%2Fapp/merge_requests?state=opened&labels=agent\
         &per_page=50&order_by=updated_at&sort=asc"
    );
}

#[test]
fn backoff_doubles_up_to_an_hour() {
    assert_eq!(backoff_ms(60_000, 0), 60_000);
    assert_eq!(backoff_ms(60_000, 1), 120_000);
    assert_eq!(backoff_ms(60_000, 30), MAX_BACKOFF_MS);
    assert_eq!(
        format_time(parse_time("2026-01-02T03:04:05Z").unwrap()),
        "2026-01-02T03:04:05Z"
    );
}
