//! How a checkpoint's bytes are cut into rows of the `runs` table so that redb writes
//! them about once.
//!
//! redb gives a leaf holding one value larger than a page a run of `2^k` pages: a
//! 12 KiB value takes 16 KiB, a 17 KiB one 32 KiB (about 1.5 times the bytes for
//! the 4-20 KiB turns of an agent). A value that fills its pages exactly wastes
//! nothing, and a leaf of one value at least a page long is one redb appends beside
//! without rewriting it. So appended bytes are cut into pieces that each fill `2^k`
//! pages exactly, the last taking what remains (at most two pages' worth); the
//! pieces are consecutive slots, and a read concatenates the rows in slot order as
//! it always did, so an older release reads them too.

/// redb's page size (its default, which the server does not change).
const PAGE: usize = 4096;

/// A leaf's fixed bytes for one pair: its header, the key's and the value's end.
const LEAF_OVERHEAD: usize = 4 + 4 + 4;

/// The value bytes that fill a one-pair leaf of `pages` pages whose key is
/// `key_len` bytes long.
fn fill(pages: usize, key_len: usize) -> usize {
    (pages * PAGE).saturating_sub(LEAF_OVERHEAD + key_len)
}

/// The encoded length of a `runs` key of this run (the slot is fixed-width).
pub(super) fn key_len(ns: &str, run_id: &str) -> usize {
    let key = <super::reads::RunsKey as redb::Value>::as_bytes(&(ns, run_id, 0u64));
    AsRef::<[u8]>::as_ref(&key).len()
}

/// `bytes` cut into pieces for rows whose key is `key_len` bytes: every piece but the
/// last fills a power of two of pages exactly; the last is shorter than two pages'
/// fill. Empty bytes are one empty piece (an empty checkpoint is still a row).
pub(super) fn pieces(bytes: &[u8], key_len: usize) -> Vec<&[u8]> {
    let one = fill(1, key_len);
    let mut rest = bytes;
    if one == 0 || rest.is_empty() {
        // (A key of a page or more is not one the server accepts: one row.)
        return vec![rest];
    }
    let mut out = Vec::new();
    while rest.len() >= 2 * one {
        // The largest run of pages that leaves at least a page's fill behind, so the
        // last piece is never a sliver beside full ones.
        let mut pages = 1;
        while fill(pages * 2, key_len) <= rest.len() - one {
            pages *= 2;
        }
        let (piece, tail) = rest.split_at(fill(pages, key_len));
        out.push(piece);
        rest = tail;
    }
    if !rest.is_empty() {
        out.push(rest);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_fill_their_pages_exactly_and_join_to_the_bytes() {
        let key = key_len("default", "run-0001");
        let one = fill(1, key);
        for len in [
            0,
            1,
            one - 1,
            one,
            one + 1,
            2 * one - 1,
            2 * one,
            12_345,
            20_480,
            1 << 20,
            16 << 20,
        ] {
            let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let cut = pieces(&bytes, key);
            assert_eq!(cut.concat(), bytes, "{len}");
            let Some((last, full)) = cut.split_last() else {
                panic!("{len}: no piece");
            };
            for piece in full {
                let pages = (piece.len() + LEAF_OVERHEAD + key).div_ceil(PAGE);
                assert!(pages.is_power_of_two(), "{len}: {}", piece.len());
                assert_eq!(
                    piece.len(),
                    fill(pages, key),
                    "{len}: a piece that does not fill its pages"
                );
            }
            assert!(last.len() < 2 * one, "{len}: last piece {}", last.len());
            assert!(
                cut.len() <= 2 + 2 * (usize::BITS as usize),
                "{len}: {} pieces",
                cut.len()
            );
        }
    }

    #[test]
    fn the_key_length_is_redbs_encoding() {
        let short = key_len("n", "r");
        assert_eq!(key_len("namespace", "r"), short + 8);
        assert_eq!(key_len("n", "run-id"), short + 5);
    }
}
