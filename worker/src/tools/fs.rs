//! Workspace confinement and the file tools (`read_file`, `write_file`, `edit_file`).
//!
//! Paths are confined by resolving them (symlinks included) inside the workspace. A
//! path cannot tell where a hard link's other names are, so the tools open only
//! regular files with a single link ([`open_regular`], [`open_for_write`]): a hard link
//! `bash` made to a file outside is refused rather than read or written, and a FIFO or
//! device is refused without ever blocking on it.

use std::fs::{File, FileType, Metadata, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use super::{opt_u64_arg, str_arg};

/// Files larger than this are read only in part.
const READ_LIMIT: u64 = 8 << 20;
/// Files larger than this are not edited (the whole file is read and rewritten).
const EDIT_LIMIT: u64 = 8 << 20;

/// Open flags of every file tool: never wait on a FIFO or a device, never follow a
/// symlink swapped in for the resolved path, never take a terminal.
const SAFE_OPEN: i32 = nix::libc::O_NONBLOCK | nix::libc::O_NOFOLLOW | nix::libc::O_NOCTTY;

/// What a non-regular file is, for messages.
pub(super) fn kind_of(ft: FileType) -> &'static str {
    if ft.is_dir() {
        "a directory"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else if ft.is_fifo() {
        "a FIFO (named pipe)"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_file() {
        "a regular file"
    } else {
        "not a regular file"
    }
}

/// Refuses what the file tools must not touch: anything but a regular file, and a file
/// with more than one hard link (its other names may be outside the workspace).
fn check_regular(meta: &Metadata, rel: &str) -> Result<(), String> {
    if !meta.file_type().is_file() {
        return Err(format!(
            "{rel:?} is {}; only regular files can be used",
            kind_of(meta.file_type())
        ));
    }
    if meta.nlink() > 1 {
        return Err(format!(
            "{rel:?} has {} hard links, and a hard-linked file may be a file outside the workspace; \
             refused (copy it to a new file to use it)",
            meta.nlink()
        ));
    }
    Ok(())
}

/// Opens a resolved path for reading if it is a regular file with a single link. The
/// type is checked before opening (so a FIFO is never opened) and again on the open
/// file, which must be the one checked (a swap in between is refused).
pub(super) fn open_regular(path: &Path, rel: &str) -> Result<(File, Metadata), String> {
    let before = std::fs::symlink_metadata(path).map_err(|e| format!("cannot read {rel:?}: {e}"))?;
    check_regular(&before, rel)?;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(SAFE_OPEN)
        .open(path)
        .map_err(|e| format!("cannot read {rel:?}: {e}"))?;
    let meta = file.metadata().map_err(|e| format!("cannot read {rel:?}: {e}"))?;
    check_regular(&meta, rel)?;
    if (meta.dev(), meta.ino()) != (before.dev(), before.ino()) {
        return Err(format!("{rel:?} changed while it was being opened; try again"));
    }
    Ok((file, meta))
}

/// Opens a resolved path for writing, creating it if needed, if it is (or becomes) a
/// regular file with a single link; emptied only once that is checked.
fn open_for_write(path: &Path, rel: &str) -> Result<File, String> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) => check_regular(&meta, rel)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("cannot write {rel:?}: {e}")),
    }
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(SAFE_OPEN)
        .open(path)
        .map_err(|e| format!("cannot write {rel:?}: {e}"))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot write {rel:?}: {e}"))?;
    check_regular(&meta, rel)?;
    file.set_len(0)
        .map_err(|e| format!("cannot write {rel:?}: {e}"))?;
    Ok(file)
}

/// Replaces the content of a resolved path (see [`open_for_write`]).
fn write_regular(path: &Path, rel: &str, content: &[u8]) -> Result<(), String> {
    let mut file = open_for_write(path, rel)?;
    file.write_all(content)
        .map_err(|e| format!("cannot write {rel:?}: {e}"))
}

/// A run's workspace directory; every path a file tool touches must resolve inside it.
#[derive(Debug, Clone)]
pub(super) struct Workspace {
    root: PathBuf,
}

impl Workspace {
    /// Wraps `root`, which must exist; it is canonicalised so prefix checks are exact.
    pub(super) fn new(root: &Path) -> std::io::Result<Self> {
        Ok(Self {
            root: root.canonicalize()?,
        })
    }

    /// The canonical root.
    pub(super) fn root(&self) -> &PathBuf {
        &self.root
    }

    /// Resolves a path the model gave to a real path inside the workspace. Refuses
    /// absolute paths, `..` that climbs above the root, and symlinks (anywhere on the
    /// path) that lead outside. The target itself need not exist.
    pub(super) fn resolve(&self, rel: &str) -> Result<PathBuf, String> {
        if rel.trim().is_empty() {
            return Err("the path is empty".into());
        }
        if rel.contains('\0') {
            return Err("the path contains a NUL byte".into());
        }
        let path = Path::new(rel);
        let mut candidate = self.root.clone();
        let mut depth = 0usize;
        for component in path.components() {
            match component {
                Component::CurDir => {}
                Component::Normal(part) => {
                    candidate.push(part);
                    depth += 1;
                }
                Component::ParentDir if depth > 0 => {
                    candidate.pop();
                    depth -= 1;
                }
                Component::ParentDir => {
                    return Err(format!(
                        "path {rel:?} escapes the workspace; use a path inside it"
                    ));
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(format!(
                        "absolute paths are not allowed ({rel:?}); use a path relative to the workspace root"
                    ));
                }
            }
        }
        // Canonicalise the deepest part that exists (a symlink counts, even a dangling one),
        // so a link anywhere on the way is followed before the prefix check.
        let mut existing = candidate.clone();
        while existing.symlink_metadata().is_err() {
            if !existing.pop() {
                break;
            }
        }
        let real = existing
            .canonicalize()
            .map_err(|e| format!("cannot resolve {rel:?}: {e} (a broken symlink?)"))?;
        if !real.starts_with(&self.root) {
            return Err(format!(
                "path {rel:?} resolves outside the workspace (through a symlink); refused"
            ));
        }
        // Joining an empty rest would add a trailing slash ("file/"), so skip it.
        match candidate.strip_prefix(&existing) {
            Ok(rest) if !rest.as_os_str().is_empty() => Ok(real.join(rest)),
            _ => Ok(real),
        }
    }

    /// `abs` relative to the root, for messages ("." for the root itself).
    pub(super) fn display(&self, abs: &Path) -> String {
        match abs.strip_prefix(&self.root) {
            Ok(p) if p.as_os_str().is_empty() => ".".into(),
            Ok(p) => p.display().to_string(),
            Err(_) => abs.display().to_string(),
        }
    }
}

pub(super) fn read_file(ws: &Workspace, input: &Value, cap: usize) -> Result<String, String> {
    let rel = str_arg(input, "path")?;
    let offset = opt_u64_arg(input, "offset")?.unwrap_or(1).max(1) as usize;
    let limit = opt_u64_arg(input, "limit")?.map(|l| l as usize);
    let path = ws.resolve(rel)?;
    if path.is_dir() {
        return Err(format!("{rel:?} is a directory; use list_files"));
    }
    let (file, meta) = open_regular(&path, rel)?;
    let mut bytes = Vec::new();
    file.take(READ_LIMIT)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {rel:?}: {e}"))?;
    let text = String::from_utf8_lossy(&bytes);
    if text.is_empty() {
        return Ok(format!("({rel} is empty)"));
    }
    let selected: String = if offset > 1 || limit.is_some() {
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        if offset > lines.len() {
            return Err(format!(
                "offset {offset} is past the end of {rel:?} ({} lines)",
                lines.len()
            ));
        }
        let end = limit.map_or(lines.len(), |l| (offset - 1 + l).min(lines.len()));
        lines[offset - 1..end].concat()
    } else {
        text.into_owned()
    };
    let mut out = truncate(&selected, cap, "use offset and limit to read further");
    if meta.len() > READ_LIMIT {
        out.push_str(&format!(
            "\n[only the first {READ_LIMIT} bytes of this {}-byte file were read]",
            meta.len()
        ));
    }
    Ok(out)
}

pub(super) fn write_file(ws: &Workspace, input: &Value) -> Result<String, String> {
    let rel = str_arg(input, "path")?;
    let content = str_arg(input, "content")?;
    let path = ws.resolve(rel)?;
    if path.is_dir() {
        return Err(format!("{rel:?} is a directory"));
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create the directories of {rel:?}: {e}"))?;
    }
    write_regular(&path, rel, content.as_bytes())?;
    Ok(format!("wrote {} bytes to {}", content.len(), ws.display(&path)))
}

pub(super) fn edit_file(ws: &Workspace, input: &Value) -> Result<String, String> {
    let rel = str_arg(input, "path")?;
    let old = str_arg(input, "old_string")?;
    let new = str_arg(input, "new_string")?;
    if old.is_empty() {
        return Err("`old_string` is empty; use write_file to create or overwrite a file".into());
    }
    let path = ws.resolve(rel)?;
    let (file, meta) = open_regular(&path, rel)?;
    if meta.len() > EDIT_LIMIT {
        return Err(format!(
            "{rel:?} is {} bytes, over the {EDIT_LIMIT}-byte limit of edit_file",
            meta.len()
        ));
    }
    let mut text = String::new();
    file.take(EDIT_LIMIT)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read {rel:?}: {e}"))?;
    match text.matches(old).count() {
        0 => Err(format!(
            "`old_string` was not found in {rel:?}; read the file and copy the text exactly"
        )),
        1 => {
            let edited = text.replacen(old, new, 1);
            write_regular(&path, rel, edited.as_bytes())?;
            Ok(format!(
                "edited {}: replaced 1 occurrence ({} → {} bytes)",
                ws.display(&path),
                text.len(),
                edited.len()
            ))
        }
        n => Err(format!(
            "`old_string` occurs {n} times in {rel:?}; include more surrounding text so it is unique"
        )),
    }
}

/// Cuts `s` to `cap` bytes (on a char boundary) with a marker saying how much was left out.
pub(crate) fn truncate(s: &str, cap: usize, hint: &str) -> String {
    if s.len() <= cap {
        return s.to_string();
    }
    let kept = railyard_model::text::prefix(s, cap);
    format!(
        "{kept}\n[... truncated: {} more bytes; {hint}]",
        s.len() - kept.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn resolve_confines() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        assert_eq!(ws.resolve("a/../b.txt").unwrap(), ws.root().join("b.txt"));
        assert_eq!(ws.resolve(".").unwrap(), *ws.root());
        assert!(ws.resolve("../x").unwrap_err().contains("escapes"));
        assert!(ws.resolve("a/../../x").unwrap_err().contains("escapes"));
        assert!(ws.resolve("/etc/passwd").unwrap_err().contains("absolute"));
        assert!(ws.resolve("").is_err());
    }

    #[test]
    fn edit_requires_unique_match() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        write_file(&ws, &json!({"path": "d/f.txt", "content": "one two two"})).unwrap();
        let missing = edit_file(
            &ws,
            &json!({"path": "d/f.txt", "old_string": "three", "new_string": "x"}),
        );
        assert!(missing.unwrap_err().contains("not found"));
        let twice = edit_file(
            &ws,
            &json!({"path": "d/f.txt", "old_string": "two", "new_string": "x"}),
        );
        assert!(twice.unwrap_err().contains("2 times"));
        edit_file(
            &ws,
            &json!({"path": "d/f.txt", "old_string": "one", "new_string": "1"}),
        )
        .unwrap();
        let read = read_file(&ws, &json!({"path": "d/f.txt"}), 1024).unwrap();
        assert_eq!(read, "1 two two");
    }

    #[test]
    fn read_with_offset_limit_and_cap() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        write_file(&ws, &json!({"path": "f", "content": "a\nb\nc\nd\n"})).unwrap();
        assert_eq!(
            read_file(&ws, &json!({"path": "f", "offset": 2, "limit": 2}), 100).unwrap(),
            "b\nc\n"
        );
        let capped = read_file(&ws, &json!({"path": "f"}), 3).unwrap();
        assert!(
            capped.starts_with("a\nb") && capped.contains("truncated: 5 more bytes"),
            "{capped}"
        );
        assert!(read_file(&ws, &json!({"path": "f", "offset": 9}), 100).is_err());
        assert!(
            read_file(&ws, &json!({"path": 3}), 100)
                .unwrap_err()
                .contains("must be a string")
        );
    }
}
