//! The redo log: `<data-dir>/wal/`, segment files named by the sequence number of
//! their first entry (`00000000000000000001.seg`), each an 8-byte magic then entries.
//! An entry is one batch's write set ([`super::logged::WriteSet`]): a 16-byte head
//! (payload length u32, CRC-32C of sequence number and payload u32, sequence number
//! u64, little-endian) then the payload. An append is one write and one
//! `fdatasync`; the batch is answered after it.
//!
//! A new segment is started only after a checkpoint (every older segment is then
//! wholly applied to redb and deleted), so the log is at most one segment between
//! checkpoints. Reading stops at the first entry that is short, fails its checksum
//! or breaks the sequence: a crash mid-append, never answered; the last segment is
//! truncated there.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[cfg(any(test, feature = "testing"))]
use super::faults::DiskFaults;

const MAGIC: &[u8; 8] = b"RYREDO01";
const HEAD: usize = 16;
/// No entry is larger (a length past it is a torn or corrupt head).
pub(crate) const MAX_ENTRY: usize = 1 << 30;

/// When to checkpoint, and how large the log may grow when it cannot.
#[derive(Debug, Clone, Copy)]
pub struct LogLimits {
    /// Checkpoint after this many entries...
    pub checkpoint_entries: u64,
    /// ...or this many bytes of log...
    pub checkpoint_bytes: u64,
    /// ...or when the oldest unchecked entry is this old (checked at each write).
    pub checkpoint_interval: Duration,
    /// Writes are refused while the log is larger than this and no checkpoint
    /// succeeds.
    pub max_bytes: u64,
}

impl Default for LogLimits {
    fn default() -> Self {
        Self {
            checkpoint_entries: 2048,
            checkpoint_bytes: 64 << 20,
            checkpoint_interval: Duration::from_secs(30),
            max_bytes: 256 << 20,
        }
    }
}

/// CRC-32C (Castagnoli), slicing by 8.
pub(crate) fn crc32c(mut crc: u32, data: &[u8]) -> u32 {
    const fn tables() -> [[u32; 256]; 8] {
        let mut t = [[0u32; 256]; 8];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 {
                    (c >> 1) ^ 0x82F6_3B78
                } else {
                    c >> 1
                };
                k += 1;
            }
            t[0][i] = c;
            i += 1;
        }
        let mut s = 1;
        while s < 8 {
            let mut i = 0;
            while i < 256 {
                let p = t[s - 1][i];
                t[s][i] = (p >> 8) ^ t[0][(p & 0xff) as usize];
                i += 1;
            }
            s += 1;
        }
        t
    }
    static T: [[u32; 256]; 8] = tables();
    crc = !crc;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let lo = u32::from_le_bytes([c[0], c[1], c[2], c[3]]) ^ crc;
        let hi = u32::from_le_bytes([c[4], c[5], c[6], c[7]]);
        crc = T[7][(lo & 0xff) as usize]
            ^ T[6][((lo >> 8) & 0xff) as usize]
            ^ T[5][((lo >> 16) & 0xff) as usize]
            ^ T[4][(lo >> 24) as usize]
            ^ T[3][(hi & 0xff) as usize]
            ^ T[2][((hi >> 8) & 0xff) as usize]
            ^ T[1][((hi >> 16) & 0xff) as usize]
            ^ T[0][(hi >> 24) as usize];
    }
    for &b in chunks.remainder() {
        crc = (crc >> 8) ^ T[0][((crc ^ u32::from(b)) & 0xff) as usize];
    }
    !crc
}

/// The checksum of an entry.
fn checksum(seq: u64, payload: &[u8]) -> u32 {
    crc32c(crc32c(0, &seq.to_le_bytes()), payload)
}

/// An entry as the log holds it: head and payload.
pub(crate) fn encode_entry(seq: u64, payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(HEAD + payload.len());
    b.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    b.extend_from_slice(&checksum(seq, payload).to_le_bytes());
    b.extend_from_slice(&seq.to_le_bytes());
    b.extend_from_slice(payload);
    b
}

/// One verified entry read back.
#[derive(Debug)]
pub(crate) struct Entry {
    pub seq: u64,
    pub payload: Vec<u8>,
}

/// The entries of one segment's bytes (after the magic), and where the verified
/// ones end: at the first short, corrupt or out-of-sequence entry.
pub(crate) fn parse_entries(bytes: &[u8], first_seq: u64) -> (Vec<Entry>, usize) {
    let mut at = 0;
    let mut out = Vec::new();
    let mut want = first_seq;
    while bytes.len() - at >= HEAD {
        let h = &bytes[at..at + HEAD];
        let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
        let sum = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
        let seq = u64::from_le_bytes(h[8..16].try_into().unwrap_or([0; 8]));
        if len > MAX_ENTRY || bytes.len() - at - HEAD < len || seq != want {
            break;
        }
        let payload = &bytes[at + HEAD..at + HEAD + len];
        if checksum(seq, payload) != sum {
            break;
        }
        out.push(Entry {
            seq,
            payload: payload.to_vec(),
        });
        at += HEAD + len;
        want += 1;
    }
    (out, at)
}

/// The file operations of the log, failing on demand in tests.
#[derive(Clone, Default)]
pub(crate) struct LogDisk {
    #[cfg(any(test, feature = "testing"))]
    pub(crate) faults: Option<DiskFaults>,
}

impl LogDisk {
    fn write_at(&self, file: &File, offset: u64, bytes: &[u8]) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        #[cfg(any(test, feature = "testing"))]
        if let Some(f) = &self.faults {
            let allowed = f.log_write(bytes.len())?;
            if allowed < bytes.len() {
                file.write_all_at(&bytes[..allowed], offset)?;
                return Err(f.log_write_error());
            }
        }
        file.write_all_at(bytes, offset)
    }

    fn sync(&self, file: &File) -> io::Result<()> {
        #[cfg(any(test, feature = "testing"))]
        if let Some(f) = &self.faults {
            f.log_sync()?;
        }
        file.sync_data()
    }

    fn set_len(&self, file: &File, len: u64) -> io::Result<()> {
        #[cfg(any(test, feature = "testing"))]
        if let Some(f) = &self.faults {
            f.log_write(0)?;
        }
        file.set_len(len)
    }
}

/// Syncs a directory, so that the files made or removed in it stay so.
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

fn segment_name(first_seq: u64) -> String {
    format!("{first_seq:020}.seg")
}

/// The segments in `dir`, by first sequence number.
fn segments(dir: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name();
        let Some(seq) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".seg"))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        out.push((seq, e.path()));
    }
    out.sort();
    Ok(out)
}

/// The open log: its active segment, where its verified entries end, and what was
/// appended since the last checkpoint.
pub(crate) struct RedoLog {
    dir: PathBuf,
    disk: LogDisk,
    file: File,
    /// The active segment's path and first sequence number.
    path: PathBuf,
    first_seq: u64,
    /// The end of the last entry known written and synced.
    end: u64,
    /// The sequence number of the next entry.
    next_seq: u64,
    /// Set when an append failed: the bytes past `end` are to be cut before the next.
    dirty: bool,
    pub(crate) limits: LogLimits,
    since_entries: u64,
    since: Option<Instant>,
    /// The bytes of every segment still on disk.
    size: u64,
}

impl RedoLog {
    /// Opens the log in `dir` (making it if missing) and reads every verified entry;
    /// the last segment is truncated after them. The log appends after the last one,
    /// or at `applied + 1` if later.
    pub(crate) fn open(
        dir: &Path,
        disk: LogDisk,
        limits: LogLimits,
        applied: u64,
    ) -> io::Result<(Self, Vec<Entry>)> {
        let made = !dir.exists();
        std::fs::create_dir_all(dir)?;
        if made && let Some(parent) = dir.parent() {
            sync_dir(parent)?;
        }
        let found = segments(dir)?;
        let mut entries = Vec::new();
        let mut size = 0u64;
        let mut last: Option<(u64, PathBuf, u64)> = None;
        for (i, (first, path)) in found.iter().enumerate() {
            let mut bytes = Vec::new();
            File::open(path)?.read_to_end(&mut bytes)?;
            size += bytes.len() as u64;
            if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
                // A segment made but not yet headed when the process stopped.
                if i + 1 == found.len() {
                    last = Some((*first, path.clone(), 0));
                }
                continue;
            }
            let (mut read, end) = parse_entries(&bytes[MAGIC.len()..], *first);
            entries.append(&mut read);
            if i + 1 == found.len() {
                last = Some((*first, path.clone(), (MAGIC.len() + end) as u64));
            }
        }
        let next_seq = entries.last().map_or(0, |e| e.seq + 1).max(applied + 1);
        let (file, path, first_seq, end) = match last {
            Some((first, path, end)) if end > 0 && first <= next_seq => {
                let file = OpenOptions::new().read(true).write(true).open(&path)?;
                if file.metadata()?.len() != end {
                    tracing::warn!(segment = %path.display(), at = end, "redo log: cut a torn entry");
                    size -= file.metadata()?.len() - end;
                    disk.set_len(&file, end)?;
                    disk.sync(&file)?;
                }
                (file, path, first, end)
            }
            _ => {
                let (file, path) = new_segment(dir, &disk, next_seq)?;
                size += MAGIC.len() as u64;
                (file, path, next_seq, MAGIC.len() as u64)
            }
        };
        let log = Self {
            dir: dir.to_path_buf(),
            disk,
            file,
            path,
            first_seq,
            end,
            next_seq,
            dirty: false,
            limits,
            since_entries: entries.iter().filter(|e| e.seq > applied).count() as u64,
            since: None,
            size,
        };
        Ok((log, entries))
    }

    /// Every verified entry on disk, read again (for a replay after a reopen).
    pub(crate) fn entries(&self) -> io::Result<Vec<Entry>> {
        read_entries(&self.dir)
    }

    /// The sequence number the next entry gets.
    pub(crate) fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The bytes of log on disk.
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// Cuts what a failed append left past the last good entry, and syncs that.
    pub(crate) fn repair(&mut self) -> io::Result<()> {
        if self.dirty {
            self.disk.set_len(&self.file, self.end)?;
            self.disk.sync(&self.file)?;
            self.dirty = false;
        }
        Ok(())
    }

    /// Appends `payload` as entry [`next_seq`](Self::next_seq) and syncs it: one
    /// write, one `fdatasync`. On failure nothing of it counts; the next append (or
    /// [`repair`](Self::repair)) cuts it first.
    pub(crate) fn append(&mut self, payload: &[u8]) -> io::Result<u64> {
        self.repair()?;
        if payload.len() > MAX_ENTRY {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a batch of {} bytes is larger than the log takes", payload.len()),
            ));
        }
        let seq = self.next_seq;
        let bytes = encode_entry(seq, payload);
        self.dirty = true;
        self.disk.write_at(&self.file, self.end, &bytes)?;
        self.disk.sync(&self.file)?;
        self.dirty = false;
        self.end += bytes.len() as u64;
        self.size += bytes.len() as u64;
        self.next_seq += 1;
        self.since_entries += 1;
        self.since.get_or_insert_with(Instant::now);
        Ok(seq)
    }

    /// Whether a checkpoint is due.
    pub(crate) fn checkpoint_due(&self) -> bool {
        self.since_entries > 0
            && (self.since_entries >= self.limits.checkpoint_entries
                || self.end >= self.limits.checkpoint_bytes
                || self
                    .since
                    .is_some_and(|t| t.elapsed() >= self.limits.checkpoint_interval))
    }

    /// Whether the log is past its bound.
    pub(crate) fn full(&self) -> bool {
        self.size > self.limits.max_bytes
    }

    /// After a checkpoint of every entry so far: starts a new segment and deletes the
    /// older ones.
    pub(crate) fn checkpointed(&mut self) -> io::Result<()> {
        self.repair()?;
        if self.next_seq != self.first_seq {
            let (file, path) = new_segment(&self.dir, &self.disk, self.next_seq)?;
            self.file = file;
            self.path = path;
            self.first_seq = self.next_seq;
            self.end = MAGIC.len() as u64;
        }
        let mut removed = false;
        for (first, path) in segments(&self.dir)? {
            if first < self.first_seq && path != self.path {
                std::fs::remove_file(&path)?;
                removed = true;
            }
        }
        if removed {
            sync_dir(&self.dir)?;
        }
        self.size = self.end;
        self.since_entries = 0;
        self.since = None;
        Ok(())
    }
}

/// Every verified entry of the log in `dir`, segment by segment, changing nothing.
pub(crate) fn read_entries(dir: &Path) -> io::Result<Vec<Entry>> {
    let mut entries = Vec::new();
    if !dir.exists() {
        return Ok(entries);
    }
    for (first, path) in segments(dir)? {
        let mut bytes = Vec::new();
        File::open(&path)?.read_to_end(&mut bytes)?;
        if bytes.len() >= MAGIC.len() && &bytes[..MAGIC.len()] == MAGIC {
            entries.extend(parse_entries(&bytes[MAGIC.len()..], first).0);
        }
    }
    Ok(entries)
}

/// Makes segment `first_seq` with its magic, synced, and syncs the directory.
fn new_segment(dir: &Path, disk: &LogDisk, first_seq: u64) -> io::Result<(File, PathBuf)> {
    let path = dir.join(segment_name(first_seq));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)?;
    disk.write_at(&file, 0, MAGIC)?;
    disk.sync(&file)?;
    sync_dir(dir)?;
    Ok((file, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_the_standard_check_value() {
        assert_eq!(crc32c(0, b"123456789"), 0xE306_9283);
        let long: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let split = crc32c(crc32c(0, &long[..333]), &long[333..]);
        assert_eq!(split, crc32c(0, &long));
    }

    #[test]
    fn entries_read_back_until_the_first_torn_or_corrupt_one() {
        let mut bytes = Vec::new();
        for seq in 5..9 {
            bytes.extend(encode_entry(seq, format!("entry {seq}").as_bytes()));
        }
        let whole = bytes.len();
        let (entries, end) = parse_entries(&bytes, 5);
        assert_eq!(entries.len(), 4);
        assert_eq!(end, whole);
        // Every cut of the last entry reads the first three.
        let last = encode_entry(8, b"entry 8").len();
        for cut in whole - last..whole {
            let (entries, end) = parse_entries(&bytes[..cut], 5);
            assert_eq!(entries.len(), 3, "cut at {cut}");
            assert_eq!(end, whole - last);
        }
        // A flipped bit in any byte of the last entry is found.
        for at in whole - last..whole {
            let mut bad = bytes.clone();
            bad[at] ^= 0x10;
            assert_eq!(parse_entries(&bad, 5).0.len(), 3, "flip at {at}");
        }
        // An entry out of sequence ends the log.
        assert_eq!(parse_entries(&bytes, 4).0.len(), 0);
    }
}
