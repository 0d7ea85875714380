//! The writer driven through its commands, on each backend: a real database file,
//! the in-memory reference, and PostgreSQL when `RAILYARD_TEST_POSTGRES` names a
//! database (a fresh schema per test; skipped, saying so, when it does not). Every
//! test here runs on each (see `on_each!`).

use std::time::Duration;

use super::commands::{Complete, LeaseTask};
use super::*;
use crate::clock::ManualClock;
use crate::service::{Core, CoreBuilder};
use railyard_model::run::{EventKind, TimeoutKind};
use railyard_model::workflow::parse_definition;
use railyard_store::memory::MemoryBackend;
use railyard_store_postgres::testing::{TestSchema, skipped, test_url};

mod batches;
mod checkpoints;
mod compare;
mod faults;
mod purge;
mod replacing;
mod schedules;
mod triggers;

pub(super) const TWO_STEPS: &str = r#"{"id":"two","version":"1","name":"Two","steps":[
  {"id":"a","title":"A","prompt":"do a"},{"id":"b","title":"B","prompt":"do b"}]}"#;

/// Which backend a test runs on.
#[derive(Debug, Clone, Copy)]
pub(super) enum Kind {
    Redb,
    Memory,
    /// Only when [`postgres_configured`].
    Postgres,
}

/// What keeps a test's database while the test runs: the directory of a redb file,
/// or the Postgres schema (dropped with its tables when this is).
pub(super) type Held = Box<dyn std::any::Any + Send + Sync>;

/// A store of `kind`, and what holds its database (if anything).
pub(super) fn store(kind: Kind) -> (Store, Option<Held>) {
    match kind {
        Kind::Redb => {
            let dir = tempfile::tempdir().unwrap();
            (Store::open(dir.path()).unwrap(), Some(Box::new(dir) as Held))
        }
        Kind::Memory => (Store::new(Arc::new(MemoryBackend::default())), None),
        Kind::Postgres => {
            let url = test_url().expect("Postgres tests run only when a database is configured");
            let schema = TestSchema::create(&url).unwrap();
            let backend = schema.open().unwrap();
            (Store::new(Arc::new(backend)), Some(Box::new(schema) as Held))
        }
    }
}

/// Whether the Postgres tests can run; when they cannot, says that `test` skipped.
pub(super) fn postgres_configured(test: &str) -> bool {
    let configured = test_url().is_some();
    if !configured {
        eprintln!("{}", skipped(test));
    }
    configured
}

/// What every writer test builds on: the service's one builder (so the writer is
/// wired as the server wires it), with the manual clock at 1 000.
pub(super) fn builder(store: Store) -> CoreBuilder {
    Core::builder(store).clock(Arc::new(ManualClock::new(1_000)))
}

pub(super) struct Fixture {
    pub writer: Writer,
    pub store: Store,
    pub matching: Arc<Matching>,
    _dir: Option<Held>,
}

pub(super) fn fixture(kind: Kind) -> Fixture {
    let (store, dir) = store(kind);
    Fixture::built(builder(store), dir)
}

impl Fixture {
    /// The writer, store and matching of the core `builder` makes; `dir` holds its
    /// database file, if any.
    pub(super) fn built(builder: CoreBuilder, dir: Option<Held>) -> Self {
        let core = builder.build().unwrap().core;
        Self {
            writer: core.writer.clone(),
            store: core.store.clone(),
            matching: core.matching.clone(),
            _dir: dir,
        }
    }
}

pub(super) fn start_command(id: &str) -> StartCommand {
    let params = StartParams {
        namespace: "default".into(),
        run_id: id.into(),
        ..Default::default()
    };
    let definition = Arc::new(parse_definition(TWO_STEPS).unwrap());
    StartCommand { params, definition }
}

impl Fixture {
    /// Starts run `id` and takes its first task from matching.
    pub(super) async fn start(&self, id: &str) -> TaskRef {
        self.writer.call(start_command(id)).await.unwrap();
        let until = tokio::time::Instant::now() + Duration::from_secs(30);
        self.matching
            .take_or_park("default", "default", "w", 0, until)
            .expect("the first step is ready")
    }

    /// Sends a command whose caller has already gone away.
    async fn send_unanswerable<C: Apply>(&self, c: C)
    where
        Command: From<(C, Reply<C::Output>)>,
    {
        let (reply, rx) = oneshot::channel();
        drop(rx);
        self.writer.tx.send(Command::from((c, reply))).await.unwrap();
    }

    pub(super) fn kinds(&self, id: &str) -> Vec<EventKind> {
        self.store
            .history(&RunKey::new("default", id), 1, 100)
            .unwrap()
            .into_iter()
            .map(|e| e.kind)
            .collect()
    }

    /// Waits for the run's history to end with `StepTimedOut`, and returns it.
    async fn timed_out(&self, id: &str) -> Vec<EventKind> {
        for _ in 0..500 {
            let kinds = self.kinds(id);
            if kinds.iter().any(|k| matches!(k, EventKind::StepTimedOut { .. })) {
                return kinds;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("run {id} never timed out");
    }
}

/// Declares `mod $name { redb, memory, postgres }`: the async test `$body(Kind)` on
/// each backend (on Postgres only when a database is configured).
macro_rules! on_each {
    ($name:ident, $body:path) => {
        mod $name {
            use super::*;

            #[tokio::test]
            async fn redb() {
                $body(Kind::Redb).await
            }

            #[tokio::test]
            async fn memory() {
                $body(Kind::Memory).await
            }

            #[tokio::test]
            async fn postgres() {
                if postgres_configured(concat!(module_path!(), "::postgres")) {
                    $body(Kind::Postgres).await
                }
            }
        }
    };
}
pub(super) use on_each;

fn claims(grant: &Grant) -> TokenClaims {
    TokenClaims {
        namespace: "default".into(),
        run_id: grant.run.run_id.clone(),
        step: grant.run.definition.steps[grant.run.current_step].id.clone(),
        attempt: grant.run.steps[grant.run.current_step].attempt,
        lease: grant.lease.seq,
        kid: "test".into(),
    }
}

fn undelivered(kinds: &[EventKind], step: &str) -> bool {
    kinds.iter().any(|k| {
        matches!(k, EventKind::StepTimedOut { step_id, timeout: TimeoutKind::Undelivered, will_retry: true, .. }
            if step_id == step)
    })
}

on_each!(
    a_lease_whose_poll_gave_up_during_the_commit_ends_at_once,
    lease_whose_poll_gave_up
);
async fn lease_whose_poll_gave_up(kind: Kind) {
    let fx = fixture(kind);
    let task = fx.start("r1").await;
    fx.send_unanswerable(LeaseTask {
        task,
        worker: "w".into(),
    })
    .await;
    let kinds = fx.timed_out("r1").await;
    assert!(undelivered(&kinds, "a"), "{kinds:?}");
}

on_each!(
    an_eager_next_step_whose_caller_gave_up_ends_at_once,
    eager_next_step_caller_gave_up
);
async fn eager_next_step_caller_gave_up(kind: Kind) {
    let fx = fixture(kind);
    let task = fx.start("r2").await;
    let grant = fx
        .writer
        .call(crate::writer::LeaseTask {
            task,
            worker: "w".into(),
        })
        .await
        .unwrap();
    fx.send_unanswerable(Complete {
        claims: claims(&grant),
        identity: "w".into(),
        completion: StepCompletion {
            notes: "done".into(),
            take_next: true,
            ..Default::default()
        },
    })
    .await;
    let kinds = fx.timed_out("r2").await;
    // Step a's completion stands; only the lease on b, which nobody took, ends.
    assert!(kinds.iter().any(|k| matches!(k, EventKind::StepCompleted { .. })));
    assert!(undelivered(&kinds, "b"), "{kinds:?}");
}

on_each!(
    api_keys_are_created_once_and_revoked_once,
    api_keys_created_and_revoked
);
async fn api_keys_created_and_revoked(kind: Kind) {
    use railyard_model::auth::{ApiKey, Role};
    let fx = fixture(kind);
    let key = |id: &str, ns: &str| ApiKey {
        key_id: id.into(),
        namespace: ns.into(),
        role: Role::Worker,
        queues: vec!["q".into()],
        hash: [1; 32],
        created_ms: 5,
        expires_ms: None,
        revoked_ms: None,
        created_by: "t".into(),
        description: String::new(),
    };
    let a = fx
        .writer
        .call(crate::writer::CreateApiKey {
            key: key("aaaa", "default"),
        })
        .await
        .unwrap();
    fx.writer
        .call(crate::writer::CreateApiKey {
            key: key("bbbb", "*"),
        })
        .await
        .unwrap();
    assert_eq!(fx.store.api_key("aaaa").unwrap(), Some(a.clone()));
    // A taken id is refused and the stored key is left as it was.
    let mut other = key("aaaa", "elsewhere");
    other.role = Role::Admin;
    assert!(matches!(
        fx.writer.call(crate::writer::CreateApiKey { key: other }).await,
        Err(WriteError::Rejected(Rejection::AlreadyExists(_)))
    ));
    assert_eq!(fx.store.api_key("aaaa").unwrap(), Some(a.clone()));

    // Revoked at the writer's clock; a second revocation keeps the first time.
    let revoked = fx
        .writer
        .call(crate::writer::RevokeApiKey {
            key_id: "aaaa".into(),
        })
        .await
        .unwrap();
    assert_eq!(revoked.revoked_ms, Some(1_000));
    assert_eq!(
        fx.writer
            .call(crate::writer::RevokeApiKey {
                key_id: "aaaa".into()
            })
            .await
            .unwrap(),
        revoked
    );
    assert!(matches!(
        fx.writer
            .call(crate::writer::RevokeApiKey {
                key_id: "cccc".into()
            })
            .await,
        Err(WriteError::Rejected(Rejection::NotFound(_)))
    ));
    // Listed in id order, filtered and paged.
    let (all, next) = fx.store.api_keys("", 10, |_| true).unwrap();
    let ids: Vec<_> = all.iter().map(|k| k.key_id.as_str()).collect();
    assert_eq!((ids, next), (vec!["aaaa", "bbbb"], None));
    let (page, next) = fx.store.api_keys("", 1, |_| true).unwrap();
    assert_eq!((page[0].key_id.as_str(), next.as_deref()), ("aaaa", Some("aaaa")));
    let (rest, _) = fx.store.api_keys("aaaa", 10, |_| true).unwrap();
    assert_eq!(rest.len(), 1);
    let (active, _) = fx.store.api_keys("", 10, |k| k.revoked_ms.is_none()).unwrap();
    assert_eq!(active[0].key_id, "bbbb");
}
