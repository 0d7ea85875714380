//! The head row of a run's checkpoint in redb: its length, digest and segment count,
//! so that an appending heartbeat's base is checked without reading the bytes.

use serde::{Deserialize, Serialize};

use super::{Record, corrupt, decode_record, encode_record, v1};
use crate::backend::CheckpointHead;
use crate::error::StorageError;

#[derive(Debug, Serialize, Deserialize)]
struct CheckpointHeadRecord {
    #[serde(default = "v1")]
    v: u32,
    len: u64,
    /// The digest (`railyard_proto::checkpoint`), hex.
    digest: String,
    segments: u32,
    /// Compacted segments from the first (absent: only the first).
    #[serde(default = "v1")]
    merged: u32,
}

impl Record for CheckpointHeadRecord {
    const WHAT: &'static str = "checkpoint head";
    const VERSION: u32 = 1;
    fn version(&self) -> u32 {
        self.v
    }
}

/// Encodes a checkpoint's head row (its digest must be known).
pub(crate) fn encode_checkpoint_head(
    len: u64,
    digest: &[u8; 32],
    segments: u32,
    merged: u32,
) -> Result<Vec<u8>, StorageError> {
    encode_record(&CheckpointHeadRecord {
        v: CheckpointHeadRecord::VERSION,
        len,
        digest: hex::encode(digest),
        segments,
        merged,
    })
}

/// Decodes a checkpoint's head row.
pub(crate) fn decode_checkpoint_head(bytes: &[u8]) -> Result<CheckpointHead, StorageError> {
    let r: CheckpointHeadRecord = decode_record(bytes)?;
    let mut digest = [0u8; 32];
    hex::decode_to_slice(&r.digest, &mut digest).map_err(|e| corrupt(CheckpointHeadRecord::WHAT, e))?;
    Ok(CheckpointHead {
        len: r.len,
        digest: Some(digest),
        segments: r.segments,
        merged: r.merged,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_row() {
        let row = encode_checkpoint_head(7, &[0xab; 32], 3, 2).unwrap();
        assert_eq!(
            String::from_utf8(row.clone()).unwrap(),
            format!(
                r#"{{"v":1,"len":7,"digest":"{}","segments":3,"merged":2}}"#,
                "ab".repeat(32)
            )
        );
        let head = decode_checkpoint_head(&row).unwrap();
        assert_eq!(
            head,
            CheckpointHead {
                len: 7,
                digest: Some([0xab; 32]),
                segments: 3,
                merged: 2,
            }
        );
        assert!(decode_checkpoint_head(br#"{"v":2,"len":1,"digest":"","segments":1}"#).is_err());
    }
}
