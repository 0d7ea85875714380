//! `StartReplacing`: terminate one run and start another in one commit.

use super::*;
use railyard_model::run::RunStatus;

fn replacing(old: &str, new: &str) -> StartReplacing {
    StartReplacing {
        terminate_run_id: old.into(),
        identity: "schedule".into(),
        reason: "replaced by a newer run".into(),
        start: start_command(new),
    }
}

fn status(fx: &Fixture, id: &str) -> Option<RunStatus> {
    fx.store
        .run(&RunKey::new("default", id))
        .unwrap()
        .map(|r| r.status)
}

on_each!(
    the_old_run_ends_and_the_new_one_starts_in_one_commit,
    ends_and_starts_together
);
async fn ends_and_starts_together(kind: Kind) {
    let fx = fixture(kind);
    fx.start("old").await;
    let r = fx.writer.call(replacing("old", "new")).await.unwrap();
    assert_eq!(
        r,
        Replaced {
            started: Started {
                run_id: "new".into(),
                started: true
            },
            terminated: true
        }
    );
    assert_eq!(status(&fx, "old"), Some(RunStatus::Terminated));
    assert_eq!(status(&fx, "new"), Some(RunStatus::Running));
    assert!(matches!(
        fx.kinds("old").last(),
        Some(EventKind::RunTerminated { .. })
    ));
    // The old run's task left matching; the new run's first step is ready.
    let tasks = fx.store.ready_tasks().unwrap();
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    assert_eq!(tasks[0].run_id, "new");
}

on_each!(
    a_refused_start_leaves_the_old_run_untouched,
    refused_start_changes_nothing
);
async fn refused_start_changes_nothing(kind: Kind) {
    let fx = fixture(kind);
    fx.start("old").await;
    fx.writer.call(start_command("taken")).await.unwrap();
    let before = (
        fx.store.run(&RunKey::new("default", "old")).unwrap(),
        fx.kinds("old"),
    );
    let err = fx.writer.call(replacing("old", "taken")).await.unwrap_err();
    assert!(
        matches!(err, WriteError::Rejected(Rejection::AlreadyExists(_))),
        "{err}"
    );
    let after = (
        fx.store.run(&RunKey::new("default", "old")).unwrap(),
        fx.kinds("old"),
    );
    assert_eq!(before, after, "the terminate was not applied either");
    assert_eq!(status(&fx, "old"), Some(RunStatus::Running));

    // A missing parent is a refusal too, also after the terminate would have run.
    let mut bad = replacing("old", "orphan");
    bad.start.params.parent_run_id = "nobody".into();
    let err = fx.writer.call(bad).await.unwrap_err();
    assert!(
        matches!(err, WriteError::Rejected(Rejection::InvalidArgument(_))),
        "{err}"
    );
    assert_eq!(status(&fx, "old"), Some(RunStatus::Running));
    assert_eq!(status(&fx, "orphan"), None);
}

on_each!(a_closed_or_missing_old_run_is_left_alone, nothing_to_terminate);
async fn nothing_to_terminate(kind: Kind) {
    let fx = fixture(kind);
    let r = fx.writer.call(replacing("ghost", "first")).await.unwrap();
    assert!(!r.terminated && r.started.started);
    let r = fx.writer.call(replacing("first", "second")).await.unwrap();
    assert!(r.terminated);
    let events = fx.kinds("first").len();
    let r = fx.writer.call(replacing("first", "third")).await.unwrap();
    assert!(!r.terminated, "a closed run is not terminated again");
    assert_eq!(fx.kinds("first").len(), events);
}

on_each!(a_replayed_request_does_nothing_again, replayed_request);
async fn replayed_request(kind: Kind) {
    let fx = fixture(kind);
    fx.start("old").await;
    let request = || {
        let mut c = replacing("old", "new");
        c.start.params.request_id = "req-1".into();
        c
    };
    assert!(fx.writer.call(request()).await.unwrap().terminated);
    let events = (fx.kinds("old").len(), fx.kinds("new").len());
    let again = fx.writer.call(request()).await.unwrap();
    assert_eq!(
        again,
        Replaced {
            started: Started {
                run_id: "new".into(),
                started: false
            },
            terminated: false
        }
    );
    assert_eq!((fx.kinds("old").len(), fx.kinds("new").len()), events);
}

on_each!(
    at_the_open_runs_limit_a_replace_counts_the_run_it_replaces_as_closing,
    replace_at_the_limit
);
async fn replace_at_the_limit(kind: Kind) {
    let fx = fixture(kind);
    let one = railyard_model::namespace::NamespaceChange {
        max_open_runs: Some(1),
        ..Default::default()
    };
    fx.writer
        .call(crate::writer::UpdateNamespace {
            name: "default".into(),
            change: one,
        })
        .await
        .unwrap();
    fx.start("old").await;
    // At the limit: a plain start is refused...
    let err = fx.writer.call(start_command("extra")).await.unwrap_err();
    assert!(
        matches!(&err, WriteError::Rejected(Rejection::ResourceExhausted(m)) if m.contains("max open runs 1")),
        "{err}"
    );
    // ...but a replace frees the slot it takes.
    let r = fx.writer.call(replacing("old", "new")).await.unwrap();
    assert!(r.terminated && r.started.started, "{r:?}");
    assert_eq!(status(&fx, "old"), Some(RunStatus::Terminated));
    assert_eq!(status(&fx, "new"), Some(RunStatus::Running));
    // The count is still exact: one open run, so a further plain start is refused,
    // and a replace of a run that is not open frees nothing.
    let err = fx.writer.call(start_command("extra")).await.unwrap_err();
    assert!(
        matches!(err, WriteError::Rejected(Rejection::ResourceExhausted(_))),
        "{err}"
    );
    let err = fx.writer.call(replacing("old", "newer")).await.unwrap_err();
    assert!(
        matches!(err, WriteError::Rejected(Rejection::ResourceExhausted(_))),
        "{err}"
    );
    assert_eq!(status(&fx, "newer"), None);
    assert_eq!(status(&fx, "new"), Some(RunStatus::Running));
}
