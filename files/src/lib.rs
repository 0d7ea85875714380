//! Reading a file that someone else may control (a config file, a workflow
//! definition, a key file) without hanging on it or running out of memory.
//!
//! [`read_regular_file`] is the one way to do it: the path's metadata is checked
//! before it is opened, the open does not block (so a FIFO that appears in between is
//! not waited on), the open file's metadata is checked again, and at most the limit
//! plus one byte is read. A FIFO, a device (`/dev/zero` behind a symlink), a socket or
//! a directory is refused at once, naming what it is.

#![warn(missing_docs)]

use std::io::Read;
use std::path::Path;

/// Why a file was not read. The message never includes the path: callers name it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadFileError {
    /// Missing, unreadable, or failed while reading.
    #[error("cannot read: {0}")]
    Io(String),
    /// Not a regular file: what it is instead (`a FIFO`, `a device`, ...).
    #[error("not a regular file ({0})")]
    NotRegular(&'static str),
    /// Larger than the limit.
    #[error("{len} bytes, more than the limit of {max}")]
    TooLarge {
        /// The file's size in bytes (or the limit plus one, when it grew while read).
        len: u64,
        /// The limit, in bytes.
        max: u64,
    },
    /// Not UTF-8 text ([`read_regular_text`] only).
    #[error("not UTF-8 text")]
    NotUtf8,
}

impl ReadFileError {
    /// Whether the file does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Io(m) if m.starts_with(NOT_FOUND))
    }
}

const NOT_FOUND: &str = "not found: ";

fn io(e: std::io::Error) -> ReadFileError {
    if e.kind() == std::io::ErrorKind::NotFound {
        ReadFileError::Io(format!("{NOT_FOUND}{e}"))
    } else {
        ReadFileError::Io(e.to_string())
    }
}

/// Reads `path`, a regular file of at most `max` bytes, without blocking on it.
pub fn read_regular_file(path: &Path, max: u64) -> Result<Vec<u8>, ReadFileError> {
    let check = |meta: &std::fs::Metadata| -> Result<(), ReadFileError> {
        if !meta.is_file() {
            return Err(ReadFileError::NotRegular(kind_of(meta)));
        }
        if meta.len() > max {
            return Err(ReadFileError::TooLarge { len: meta.len(), max });
        }
        Ok(())
    };
    check(&std::fs::metadata(path).map_err(io)?)?;
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path).map_err(io)?;
    // The path may have been swapped for something else since the first look.
    check(&file.metadata().map_err(io)?)?;
    let mut bytes = Vec::new();
    file.take(max + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > max {
        return Err(ReadFileError::TooLarge {
            len: bytes.len() as u64,
            max,
        });
    }
    Ok(bytes)
}

/// [`read_regular_file`], as UTF-8 text.
pub fn read_regular_text(path: &Path, max: u64) -> Result<String, ReadFileError> {
    String::from_utf8(read_regular_file(path, max)?).map_err(|_| ReadFileError::NotUtf8)
}

/// What a non-regular file is, in words.
pub fn kind_of(meta: &std::fs::Metadata) -> &'static str {
    let t = meta.file_type();
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_socket() {
            return "a socket";
        }
        if t.is_block_device() || t.is_char_device() {
            return "a device";
        }
    }
    if t.is_dir() {
        "a directory"
    } else if t.is_file() {
        "a regular file"
    } else {
        "not a file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_regular_file_within_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, "hello").unwrap();
        assert_eq!(read_regular_text(&p, 5).unwrap(), "hello");
        assert_eq!(
            read_regular_file(&p, 4),
            Err(ReadFileError::TooLarge { len: 5, max: 4 })
        );
        assert!(
            read_regular_file(&dir.path().join("missing"), 4)
                .unwrap_err()
                .is_not_found()
        );
        assert_eq!(
            read_regular_file(dir.path(), 4),
            Err(ReadFileError::NotRegular("a directory"))
        );
    }

    #[cfg(unix)]
    #[test]
    fn refuses_fifos_and_devices_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(read_regular_file(&fifo, 10)).unwrap());
        let got = rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("reading a FIFO blocked");
        assert_eq!(got, Err(ReadFileError::NotRegular("a FIFO")));
        let zero = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        assert_eq!(
            read_regular_file(&zero, 10),
            Err(ReadFileError::NotRegular("a device"))
        );
    }
}
