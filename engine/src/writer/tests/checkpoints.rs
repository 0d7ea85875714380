//! Checkpoints that grow by appended segments, on every backend: an append on the
//! stored base, a repeated one applied once, a lost or reordered one refused for its
//! base (changing nothing), a full checkpoint replacing every segment, compaction (a
//! tail of `CHECKPOINT_TAIL` small appends merged into one segment, then the whole
//! rewritten; an agent's turns of kilobytes never merged), and a retried attempt handed the whole checkpoint with the digest the
//! last heartbeat acknowledged.

use super::*;
use crate::writer::cx::CHECKPOINT_TAIL;
use railyard_model::checkpoint::{self as digest, BASE_MISMATCH, CheckpointDigest};
use railyard_model::run::StepFailure;

type Acked = (u64, CheckpointDigest);

impl Fixture {
    async fn beat(
        &self,
        claims: &TokenClaims,
        checkpoint: BeatCheckpoint,
    ) -> Result<HeartbeatReply, WriteError> {
        self.writer
            .call(crate::writer::Heartbeat {
                claims: claims.clone(),
                identity: "w".into(),
                checkpoint,
                notes: Vec::new(),
                acked: 0,
                report: Default::default(),
            })
            .await
    }

    async fn append(&self, claims: &TokenClaims, base: Acked, bytes: &[u8]) -> Result<Acked, WriteError> {
        let append = BeatCheckpoint::Append {
            base_len: base.0,
            base_digest: base.1,
            bytes: bytes.to_vec(),
        };
        Ok(self
            .beat(claims, append)
            .await?
            .checkpoint
            .expect("an append is acknowledged"))
    }

    fn segments(&self, id: &str) -> u32 {
        self.head(id).0
    }

    /// (segments, compacted segments) of the run's checkpoint.
    fn head(&self, id: &str) -> (u32, u32) {
        let snap = self.store.snapshot().unwrap();
        let head = snap
            .checkpoint_head(&RunKey::new("default", id), railyard_store::CheckpointAt::Step(0))
            .unwrap();
        head.map_or((0, 0), |h| (h.segments, h.merged))
    }
}

/// A fixture with run `r1` started and its first step leased, and the lease's claims.
async fn leased(kind: Kind) -> (Fixture, TokenClaims) {
    let fx = fixture(kind);
    let task = fx.start("r1").await;
    let grant = fx
        .writer
        .call(crate::writer::LeaseTask {
            task,
            worker: "w".into(),
        })
        .await
        .unwrap();
    let c = claims(&grant);
    (fx, c)
}

fn refused_for_base(r: Result<Acked, WriteError>) -> bool {
    matches!(r, Err(WriteError::Rejected(Rejection::FailedPrecondition(m))) if m.starts_with(BASE_MISMATCH))
}

on_each!(appends_are_checked_against_the_stored_base, appends_checked);
async fn appends_checked(kind: Kind) {
    let (fx, c) = leased(kind).await;
    // An append to no checkpoint names the empty base.
    let a1 = fx.append(&c, (0, digest::EMPTY_DIGEST), b"ab").await.unwrap();
    assert_eq!(a1, (2, digest::full(b"ab")));
    let a2 = fx.append(&c, a1, b"cd").await.unwrap();
    assert_eq!(a2, (4, digest::extend(&a1.1, b"cd")));
    assert_eq!(
        fx.store.checkpoint(&RunKey::new("default", "r1")).unwrap(),
        b"abcd"
    );
    assert_eq!(fx.segments("r1"), 2);

    // Repeated (its answer lost): applied once, answered the same.
    assert_eq!(fx.append(&c, a1, b"cd").await.unwrap(), a2);
    assert_eq!(
        fx.store.checkpoint(&RunKey::new("default", "r1")).unwrap(),
        b"abcd"
    );
    // Lost: the next one's base is behind the stored one. Reordered: an older append
    // arriving after a newer one. Both refused, changing nothing, not even the notes.
    let before = fx.kinds("r1").len();
    assert!(refused_for_base(fx.append(&c, a1, b"cdef").await));
    assert!(refused_for_base(
        fx.append(&c, (0, digest::EMPTY_DIGEST), b"ab").await
    ));
    assert!(refused_for_base(
        fx.append(&c, (4, digest::EMPTY_DIGEST), b"ef").await
    ));
    assert_eq!(
        fx.store.checkpoint(&RunKey::new("default", "r1")).unwrap(),
        b"abcd"
    );
    assert_eq!(fx.kinds("r1").len(), before);

    // The worker's answer to a refusal: the checkpoint whole, replacing every segment.
    let whole = fx
        .beat(&c, BeatCheckpoint::Full(b"abcdef".to_vec()))
        .await
        .unwrap();
    assert_eq!(whole.checkpoint, Some((6, digest::full(b"abcdef"))));
    assert_eq!(fx.segments("r1"), 1);
    let a3 = fx.append(&c, (6, digest::full(b"abcdef")), b"g").await.unwrap();
    assert_eq!(
        fx.store.checkpoint(&RunKey::new("default", "r1")).unwrap(),
        b"abcdefg"
    );
    // A heartbeat without a checkpoint keeps it and reports none.
    assert_eq!(fx.beat(&c, BeatCheckpoint::None).await.unwrap().checkpoint, None);
    assert_eq!(
        fx.store.checkpoint(&RunKey::new("default", "r1")).unwrap(),
        b"abcdefg"
    );

    // A stale lease is refused as such, whatever the base.
    let mut stale = c.clone();
    stale.lease += 1;
    let r = fx.append(&stale, (0, digest::EMPTY_DIGEST), b"x").await;
    assert!(
        matches!(r, Err(WriteError::Rejected(Rejection::FailedPrecondition(ref m))) if !m.starts_with(BASE_MISMATCH)),
        "{r:?}"
    );
    let _ = a3;
}

on_each!(many_segments_are_compacted, compaction);
async fn compaction(kind: Kind) {
    let (fx, c) = leased(kind).await;
    let mut acked = (0, digest::EMPTY_DIGEST);
    let mut expected = Vec::new();
    let (mut most, mut tails, mut rewrites, mut last) = (0, 0, 0, (0, 0));
    for i in 0..(CHECKPOINT_TAIL * CHECKPOINT_TAIL + 5) {
        let turn = format!("turn {i};").into_bytes();
        expected.extend_from_slice(&turn);
        acked = fx.append(&c, acked, &turn).await.unwrap();
        let head = fx.head("r1");
        most = most.max(head.0);
        if head.1 > last.1 {
            tails += 1; // a tail merged into one compacted segment
        }
        if head.1 < last.1 {
            rewrites += 1; // the whole rewritten as one segment
        }
        last = head;
    }
    assert!(most < 2 * CHECKPOINT_TAIL, "{most}");
    assert!(
        tails >= CHECKPOINT_TAIL - 1 && rewrites == 1,
        "{tails} {rewrites} {last:?}"
    );
    assert_eq!(
        fx.store.checkpoint(&RunKey::new("default", "r1")).unwrap(),
        expected
    );
    // The digest is the chain over every append, compaction or not.
    assert_eq!(acked.0, expected.len() as u64);
}

on_each!(
    an_agents_turns_of_kilobytes_are_written_once_never_merged,
    big_turns
);
async fn big_turns(kind: Kind) {
    let (fx, c) = leased(kind).await;
    let mut acked = (0, digest::EMPTY_DIGEST);
    let mut expected = Vec::new();
    let mut compacted = None;
    let mut chain = digest::EMPTY_DIGEST;
    for i in 0..(3 * CHECKPOINT_TAIL) {
        let size = 4096 + (i as usize * 7919) % (16 * 1024);
        let turn: Vec<u8> = (0..size).map(|b| b'a' + ((b + i as usize) % 26) as u8).collect();
        expected.extend_from_slice(&turn);
        chain = digest::extend(&chain, &turn);
        acked = fx.append(&c, acked, &turn).await.unwrap();
        let (segments, merged) = fx.head("r1");
        assert!(segments > i, "turn {i}: {segments} segments");
        // The first append's segments are the compacted ones, and stay so.
        assert_eq!(*compacted.get_or_insert(merged), merged, "turn {i}: a merge");
    }
    assert_eq!(
        fx.store.checkpoint(&RunKey::new("default", "r1")).unwrap(),
        expected
    );
    assert_eq!(acked, (expected.len() as u64, chain));
}

on_each!(a_retried_attempt_resumes_from_the_whole_checkpoint, resumes_whole);
async fn resumes_whole(kind: Kind) {
    let (store, dir) = store(kind);
    let clock = Arc::new(ManualClock::new(1_000));
    let fx = Fixture::built(Core::builder(store).clock(clock.clone()), dir);
    let task = fx.start("r1").await;
    let grant = fx
        .writer
        .call(crate::writer::LeaseTask {
            task,
            worker: "w".into(),
        })
        .await
        .unwrap();
    assert_eq!((grant.checkpoint.len(), grant.checkpoint_digest), (0, None));
    let c = claims(&grant);
    let a1 = fx.append(&c, (0, digest::EMPTY_DIGEST), b"first;").await.unwrap();
    let a2 = fx.append(&c, a1, b"second;").await.unwrap();
    let failure = StepFailure {
        error_type: "flaky".into(),
        ..Default::default()
    };
    assert!(
        fx.writer
            .call(crate::writer::Fail {
                claims: c,
                identity: "w".into(),
                failure
            })
            .await
            .unwrap()
    );
    clock.advance(Duration::from_secs(120));
    fx.writer.call(crate::writer::FireTimers).await.unwrap();
    let until = tokio::time::Instant::now() + Duration::from_secs(30);
    let task = fx
        .matching
        .take_or_park("default", "default", "w", 0, until)
        .expect("the retry is ready");
    let grant = fx
        .writer
        .call(crate::writer::LeaseTask {
            task,
            worker: "w".into(),
        })
        .await
        .unwrap();
    assert_eq!(grant.checkpoint, b"first;second;");
    assert_eq!(grant.checkpoint_digest, Some(a2.1));
    // The new attempt appends to it at once.
    let c = claims(&grant);
    fx.append(&c, a2, b"third;").await.unwrap();
    assert_eq!(
        fx.store.checkpoint(&RunKey::new("default", "r1")).unwrap(),
        b"first;second;third;"
    );
}
