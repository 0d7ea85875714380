//! What every output store must do, for each implementation's tests (the
//! PostgreSQL one's too).

use super::*;
use railyard_model::output::ChunkBody;

pub(crate) fn chunk(offset: u64, body: ChunkBody) -> OutputChunk {
    OutputChunk {
        offset,
        step: "plan".into(),
        attempt: 1,
        at_ms: 1000 + offset as i64,
        body,
    }
}

fn every_kind() -> Vec<ChunkBody> {
    vec![
        ChunkBody::SegmentStart,
        ChunkBody::Text("héllo".into()),
        ChunkBody::Thinking("hmm".into()),
        ChunkBody::ToolCallStart {
            name: "bash".into(),
            id: "c1".into(),
        },
        ChunkBody::ToolInput("{\"cmd\":".into()),
        ChunkBody::ToolResult {
            name: "bash".into(),
            excerpt: "ok".into(),
            is_error: true,
        },
        ChunkBody::Usage {
            input_tokens: 3,
            output_tokens: 4,
        },
        ChunkBody::TurnEnd {
            stop_reason: "tool_use".into(),
        },
        ChunkBody::Error("429".into()),
        ChunkBody::Dropped { chunks: 2, bytes: 40 },
    ]
}

pub(crate) fn head(next: u64, last_ms: i64) -> OutputHead {
    OutputHead {
        next_offset: next,
        run_bytes: 7,
        step: "plan".into(),
        attempt: 1,
        last_ms,
        ..OutputHead::default()
    }
}

/// Appends, reads, the quiet index and purging, on an empty store; panics on a difference.
pub fn check(store: &dyn OutputStore) {
    let chunks: Vec<_> = every_kind()
        .into_iter()
        .enumerate()
        .map(|(i, b)| chunk(i as u64 + 1, b))
        .collect();
    let n = chunks.len() as u64;
    store
        .append(&[RunAppend {
            ns: "default".into(),
            run_id: "r1".into(),
            chunks: chunks.clone(),
            head: head(n + 1, 50),
        }])
        .unwrap();
    store
        .append(&[RunAppend {
            ns: "default".into(),
            run_id: "r2".into(),
            chunks: vec![chunk(1, ChunkBody::Text("x".into()))],
            head: head(2, 10),
        }])
        .unwrap();
    // Every kind round-trips, in offset order; reads start at an offset and stop at a limit.
    assert_eq!(store.read(&RunKey::new("default", "r1"), 0, 100).unwrap(), chunks);
    assert_eq!(
        store.read(&RunKey::new("default", "r1"), 4, 2).unwrap(),
        chunks[3..5].to_vec()
    );
    assert!(
        store
            .read(&RunKey::new("default", "r1"), n + 1, 10)
            .unwrap()
            .is_empty()
    );
    assert!(store.read(&RunKey::new("other", "r1"), 0, 10).unwrap().is_empty());
    assert_eq!(
        store.head(&RunKey::new("default", "r1")).unwrap(),
        Some(head(n + 1, 50))
    );
    assert_eq!(store.head(&RunKey::new("default", "nope")).unwrap(), None);

    // A later append moves the run in the quiet index.
    store
        .append(&[RunAppend {
            ns: "default".into(),
            run_id: "r1".into(),
            chunks: vec![chunk(n + 1, ChunkBody::Text("more".into()))],
            head: head(n + 2, 60),
        }])
        .unwrap();
    let q = |up_to, after: Option<&QuietRun>| {
        store
            .quiet_runs(up_to, after, 10)
            .unwrap()
            .into_iter()
            .map(|q| (q.last_ms, q.run_id))
            .collect::<Vec<_>>()
    };
    assert_eq!(q(100, None), vec![(10, "r2".to_string()), (60, "r1".to_string())]);
    assert_eq!(q(59, None), vec![(10, "r2".to_string())]);
    let first = QuietRun {
        last_ms: 10,
        ns: "default".into(),
        run_id: "r2".into(),
    };
    assert_eq!(q(100, Some(&first)), vec![(60, "r1".to_string())]);

    // Purging removes the chunks, the head and the index entry; other runs stay.
    store.purge(&[RunKey::new("default", "r1")]).unwrap();
    assert!(
        store
            .read(&RunKey::new("default", "r1"), 0, 100)
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.head(&RunKey::new("default", "r1")).unwrap(), None);
    assert_eq!(q(100, None), vec![(10, "r2".to_string())]);
    assert_eq!(store.read(&RunKey::new("default", "r2"), 0, 10).unwrap().len(), 1);
}
