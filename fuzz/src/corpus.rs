//! The checked-in corpus (`fuzz/corpus/<target>/`) and the mutations applied to it.
//!
//! Every file of a target's directory is a seed input (or, for `*.txt`, every
//! line). Each target draws seeds as they are, mutates them (bit flips, cuts,
//! splices, nasty insertions), and generates fresh inputs.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use proptest::prelude::*;

/// The directory of `target`'s seeds.
pub fn dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus").join(target)
}

/// The files of a directory, sorted, as bytes (missing directory: none).
pub fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    paths
        .into_iter()
        .filter_map(|p| std::fs::read(&p).ok().map(|b| (p, b)))
        .collect()
}

/// The seeds of `target`: every file of its directory.
pub fn seeds(target: &str) -> Vec<Vec<u8>> {
    files(&dir(target)).into_iter().map(|(_, b)| b).collect()
}

/// The lines of every `*.txt` file of `target`'s directory: for corpora of short
/// values (cron expressions, nasty strings), one per line. `\n` in a line is written
/// `\\n`, and `<NUL>`, `<CR>`, `<ESC>` stand for those bytes.
pub fn lines(target: &str) -> Vec<String> {
    lines_of(target, |name| name.ends_with(".txt"))
}

/// The lines of the files of `target`'s directory whose names `pick` chooses.
pub fn lines_of(target: &str, pick: impl Fn(&str) -> bool) -> Vec<String> {
    files(&dir(target))
        .into_iter()
        .filter(|(p, _)| p.file_name().and_then(|n| n.to_str()).is_some_and(&pick))
        .flat_map(|(_, b)| {
            String::from_utf8_lossy(&b)
                .lines()
                .filter(|l| !l.starts_with("# "))
                .map(|l| {
                    l.replace("\\n", "\n")
                        .replace("<NUL>", "\0")
                        .replace("<CR>", "\r")
                        .replace("<ESC>", "\x1b")
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Fragments worth splicing into anything: delimiters, escapes, huge numbers,
/// template braces, path tricks, control and bidi characters.
pub const NASTY: &[&str] = &[
    "",
    ".",
    "..",
    "/",
    "../../etc/passwd",
    "\0",
    "\n",
    "\r\n",
    "\x1b[2J",
    "\u{202e}",
    "\u{feff}",
    "é",
    "🦀",
    "\u{10ffff}",
    "{{",
    "}}",
    "{{goal}}",
    "{{context.",
    "{{scheduleId}}",
    "{{scheduledTime}}",
    "\"",
    "\\",
    "\\u0000",
    "\\ud800",
    "[",
    "]",
    "{",
    "}",
    ",",
    ":",
    "null",
    "-1",
    "0",
    "1e300",
    "-1e300",
    "18446744073709551616",
    "9223372036854775807",
    "NaN",
    "*",
    "*/0",
    "L",
    "W",
    "#",
    "?",
    "-",
    "CRON_TZ=",
    "TZ=",
    "@",
    "%",
    " ",
    "\t",
];

/// A choice among however many things there turn out to be: [`Pick::index`].
/// Not proptest's `Index`, which has no constructor: the byte decoder
/// (`targets::service::decode`) builds these from the fuzzer's bytes.
#[derive(Debug, Clone, Copy)]
pub struct Pick(pub u64);

impl Pick {
    /// A position in `0..len` (`len` > 0).
    pub fn index(&self, len: usize) -> usize {
        assert!(len > 0, "a pick among nothing");
        (self.0 % len as u64) as usize
    }
}

/// Any [`Pick`].
pub fn pick() -> impl Strategy<Value = Pick> {
    any::<u64>().prop_map(Pick)
}

/// One change to a byte string.
#[derive(Debug, Clone)]
pub enum Mutation {
    FlipBit(Pick, u8),
    SetByte(Pick, u8),
    Delete(Pick, Pick),
    Truncate(Pick),
    Duplicate(Pick, Pick),
    Insert(Pick, Vec<u8>),
    InsertNasty(Pick, Pick),
    /// Replaces the tail from one point with the tail of another seed from another.
    Splice(Pick, Pick, Pick),
}

/// One random [`Mutation`].
pub fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (pick(), 0u8..8).prop_map(|(i, b)| Mutation::FlipBit(i, b)),
        2 => (pick(), any::<u8>()).prop_map(|(i, b)| Mutation::SetByte(i, b)),
        2 => (pick(), pick()).prop_map(|(a, b)| Mutation::Delete(a, b)),
        1 => pick().prop_map(Mutation::Truncate),
        1 => (pick(), pick()).prop_map(|(a, b)| Mutation::Duplicate(a, b)),
        2 => (pick(), prop::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(i, b)| Mutation::Insert(i, b)),
        3 => (pick(), pick()).prop_map(|(i, n)| Mutation::InsertNasty(i, n)),
        1 => (pick(), pick(), pick())
            .prop_map(|(a, s, b)| Mutation::Splice(a, s, b)),
    ]
}

/// Applies `m` to `bytes`; `seeds` feed splices.
pub fn apply(bytes: &mut Vec<u8>, m: &Mutation, seeds: &[Vec<u8>]) {
    let at = |i: &Pick, len: usize| if len == 0 { 0 } else { i.index(len + 1) };
    match m {
        Mutation::FlipBit(i, bit) if !bytes.is_empty() => {
            let i = i.index(bytes.len());
            bytes[i] ^= 1 << bit;
        }
        Mutation::SetByte(i, b) if !bytes.is_empty() => {
            let i = i.index(bytes.len());
            bytes[i] = *b;
        }
        Mutation::Delete(a, n) if !bytes.is_empty() => {
            let a = a.index(bytes.len());
            let n = n.index(bytes.len() - a) + 1;
            bytes.drain(a..a + n.min(16.max(n / 4)));
        }
        Mutation::Truncate(i) => {
            let i = at(i, bytes.len());
            bytes.truncate(i);
        }
        Mutation::Duplicate(a, n) if !bytes.is_empty() => {
            let a = a.index(bytes.len());
            let n = n.index(bytes.len() - a) + 1;
            let part = bytes[a..a + n].to_vec();
            let i = a + n;
            bytes.splice(i..i, part);
        }
        Mutation::Insert(i, b) => {
            let i = at(i, bytes.len());
            bytes.splice(i..i, b.iter().copied());
        }
        Mutation::InsertNasty(i, n) => {
            let i = at(i, bytes.len());
            let nasty = NASTY[n.index(NASTY.len())].as_bytes();
            bytes.splice(i..i, nasty.iter().copied());
        }
        Mutation::Splice(a, s, b) if !seeds.is_empty() => {
            let other = &seeds[s.index(seeds.len())];
            let a = at(a, bytes.len());
            let b = at(b, other.len());
            bytes.truncate(a);
            bytes.extend_from_slice(&other[b..]);
        }
        _ => {}
    }
}

/// A seed, with one to eight mutations applied.
pub fn mutated(seeds: Arc<Vec<Vec<u8>>>) -> impl Strategy<Value = Vec<u8>> {
    assert!(!seeds.is_empty(), "a mutated strategy needs seeds");
    (pick(), prop::collection::vec(mutation(), 1..8)).prop_map(move |(i, ms)| {
        let mut bytes = seeds[i.index(seeds.len())].clone();
        for m in &ms {
            apply(&mut bytes, m, &seeds);
        }
        bytes
    })
}

/// Like [`mutated`], as text (invalid UTF-8 replaced).
pub fn mutated_text(seeds: Arc<Vec<Vec<u8>>>) -> impl Strategy<Value = String> {
    mutated(seeds).prop_map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// A seed as it is, chosen from `seeds`.
pub fn seed_text(seeds: Arc<Vec<Vec<u8>>>) -> impl Strategy<Value = String> {
    assert!(!seeds.is_empty(), "a seed strategy needs seeds");
    pick().prop_map(move |i| String::from_utf8_lossy(&seeds[i.index(seeds.len())]).into_owned())
}

/// Strings a field might hold: nasty fragments, corpus lines, arbitrary unicode,
/// control characters, long runs, or a mutation of a corpus line.
pub fn field_text(lines: Arc<Vec<Vec<u8>>>) -> impl Strategy<Value = String> {
    let nasty = pick().prop_map(|i| NASTY[i.index(NASTY.len())].to_string());
    prop_oneof![
        3 => seed_text(lines.clone()),
        2 => nasty,
        2 => ".{0,40}",
        1 => "[\\x00-\\x1f\\x7f]{1,8}",
        1 => (any::<char>(), prop_oneof![Just(129usize), Just(128), Just(70_000), Just(300_000)])
            .prop_map(|(c, n)| c.to_string().repeat(n / c.len_utf8().max(1))),
        2 => mutated_text(lines),
    ]
}

/// Lines as byte seeds, for the mutators.
pub fn as_seeds(lines: &[String]) -> Arc<Vec<Vec<u8>>> {
    Arc::new(lines.iter().map(|l| l.as_bytes().to_vec()).collect())
}
