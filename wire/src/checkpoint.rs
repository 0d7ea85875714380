//! The checkpoint digest both ends compute, so that a heartbeat can send only what a
//! step's checkpoint gained since the last one the server acknowledged
//! (`CheckpointAppend`): the digest names the base an append extends.
//!
//! It is a chain over the checkpoint's writes, not a hash of its bytes, so that
//! either end extends it in O(appended bytes): the empty checkpoint's digest is
//! [`EMPTY_DIGEST`]; a full checkpoint `B` has `SHA-256(EMPTY_DIGEST || B)`; appending
//! `A` to a checkpoint of digest `D` gives `SHA-256(D || A)`.

use sha2::{Digest as _, Sha256};

/// A checkpoint digest.
pub type CheckpointDigest = [u8; 32];

/// The digest of the empty checkpoint (none stored).
pub const EMPTY_DIGEST: CheckpointDigest = [0; 32];

/// What a refused append's `FAILED_PRECONDITION` message starts with: its base is not
/// the stored checkpoint (a heartbeat lost, reordered, or from before a full write).
/// The worker then sends the checkpoint whole.
pub const BASE_MISMATCH: &str = "checkpoint base mismatch";

/// The digest after appending `bytes` to a checkpoint whose digest is `base`.
pub fn extend(base: &CheckpointDigest, bytes: &[u8]) -> CheckpointDigest {
    let mut h = Sha256::new();
    h.update(base);
    h.update(bytes);
    h.finalize().into()
}

/// The digest of a checkpoint written whole.
pub fn full(bytes: &[u8]) -> CheckpointDigest {
    extend(&EMPTY_DIGEST, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned() {
        // Both ends (and other SDKs) must agree on these bytes: never change them.
        assert_eq!(hex(&full(b"abc")), hex(&extend(&EMPTY_DIGEST, b"abc")),);
        assert_eq!(
            hex(&extend(&full(b"ab"), b"c")),
            hex(&{
                let mut h = Sha256::new();
                h.update(full(b"ab"));
                h.update(b"c");
                let d: CheckpointDigest = h.finalize().into();
                d
            })
        );
        assert_ne!(full(b"abc"), extend(&full(b"ab"), b"c"));
        assert_eq!(
            hex(&full(b"")),
            "66687aadf862bd776c8fc18b8e9f8e20089714856ee233b3902a591d0d5f2925"
        );
    }

    fn hex(d: &CheckpointDigest) -> String {
        d.iter().map(|b| format!("{b:02x}")).collect()
    }
}
