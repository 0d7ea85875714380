//! `list_files` and `grep`: read-only walks of the workspace that never follow symlinks,
//! never open anything but regular files, and stop at fixed bounds (depth, entries,
//! bytes read).

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use globset::GlobMatcher;
use regex::{Regex, RegexBuilder};
use serde_json::Value;

use super::fs::{Workspace, kind_of, open_regular};
use super::{opt_bool_arg, opt_str_arg, str_arg};

const MAX_ENTRIES: usize = 1000;
const MAX_MATCHES: usize = 200;
const MAX_GREP_FILE: u64 = 4 << 20;
/// Bytes one grep reads in all, across files.
const MAX_GREP_TOTAL: u64 = 64 << 20;
const MAX_LINE: usize = 300;
/// Directory levels a walk goes down.
const MAX_DEPTH: usize = 64;
/// Entries a walk looks at in all (files and directories, listed or not).
const MAX_VISITED: usize = 200_000;

/// Directories whose contents are noise for the model.
const SKIPPED_DIRS: [&str; 3] = [".git", "node_modules", "target"];

pub(super) fn list_files(ws: &Workspace, input: &Value) -> Result<String, String> {
    let rel = opt_str_arg(input, "path")?.unwrap_or(".");
    let recursive = opt_bool_arg(input, "recursive")?.unwrap_or(true);
    let dir = ws.resolve(rel)?;
    if !dir.is_dir() {
        return Err(format!("{rel:?} is not a directory"));
    }
    let mut lines = Vec::new();
    let mut truncated = false;
    walk(&dir, recursive, &mut |path, kind| {
        if lines.len() >= MAX_ENTRIES {
            truncated = true;
            return false;
        }
        let shown = ws.display(path);
        lines.push(match kind {
            Entry::Dir => format!("{shown}/"),
            Entry::SkippedDir => format!("{shown}/ (contents not listed)"),
            Entry::File { len, links: 1 } => format!("{shown} ({len} bytes)"),
            Entry::File { len, links } => {
                format!("{shown} ({len} bytes, {links} hard links: not readable by the file tools)")
            }
            Entry::Symlink(target) => format!("{shown} -> {}", target.display()),
            Entry::Special(kind) => format!("{shown} ({kind}, not readable)"),
        });
        true
    });
    if lines.is_empty() {
        return Ok(format!("({} is empty)", ws.display(&dir)));
    }
    if truncated {
        lines.push(format!(
            "[... listing stopped at {MAX_ENTRIES} entries; list a subdirectory]"
        ));
    }
    Ok(lines.join("\n"))
}

pub(super) fn grep(ws: &Workspace, input: &Value) -> Result<String, String> {
    let pattern = str_arg(input, "pattern")?;
    let rel = opt_str_arg(input, "path")?.unwrap_or(".");
    let insensitive = opt_bool_arg(input, "case_insensitive")?.unwrap_or(false);
    let glob = opt_str_arg(input, "glob")?.map(compile_glob).transpose()?;
    let re: Regex = RegexBuilder::new(pattern)
        .case_insensitive(insensitive)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| format!("invalid regex {pattern:?}: {e}"))?;
    let start = ws.resolve(rel)?;
    let mut files = Vec::new();
    let mut unread = 0usize;
    let meta = std::fs::symlink_metadata(&start).map_err(|_| format!("{rel:?} does not exist"))?;
    if meta.is_dir() {
        walk(&start, true, &mut |path, kind| {
            match kind {
                Entry::File { len, links: 1 } if len <= MAX_GREP_FILE => files.push(path.to_path_buf()),
                Entry::File { links, .. } if links > 1 => unread += 1,
                _ => {}
            }
            files.len() < 50_000
        });
    } else {
        // A named file must be one grep can read; say why not.
        open_regular(&start, rel)?;
        files.push(start.clone());
    }
    let mut out = Vec::new();
    let mut budget = MAX_GREP_TOTAL;
    'files: for file in &files {
        let shown = ws.display(file);
        if let Some(glob) = &glob {
            let name = file.file_name().map(Path::new).unwrap_or(file);
            if !glob.is_match(&shown) && !glob.is_match(name) {
                continue;
            }
        }
        if budget == 0 {
            out.push(format!(
                "[... stopped after reading {} MiB; narrow the path or glob]",
                MAX_GREP_TOTAL >> 20
            ));
            break;
        }
        // Checked again at open: the walk saw the file, but it may have changed since.
        let Ok((f, _)) = open_regular(file, &shown) else {
            unread += 1;
            continue;
        };
        let mut bytes = Vec::new();
        if f.take(MAX_GREP_FILE.min(budget)).read_to_end(&mut bytes).is_err() {
            unread += 1;
            continue;
        }
        budget -= bytes.len() as u64;
        // NUL in the first block means binary; its "lines" would only confuse the model.
        if bytes.iter().take(8192).any(|b| *b == 0) {
            continue;
        }
        let text = String::from_utf8_lossy(&bytes);
        for (n, line) in text.lines().enumerate() {
            if re.is_match(line) {
                if out.len() >= MAX_MATCHES {
                    out.push(format!(
                        "[... stopped at {MAX_MATCHES} matches; narrow the pattern or path]"
                    ));
                    break 'files;
                }
                out.push(format!("{shown}:{}: {}", n + 1, clip(line)));
            }
        }
    }
    if unread > 0 {
        out.push(format!(
            "[{unread} file(s) could not be read as single-link regular files and were skipped]"
        ));
    }
    if out.is_empty() {
        return Ok(format!("no matches for {pattern:?}"));
    }
    Ok(out.join("\n"))
}

fn compile_glob(glob: &str) -> Result<GlobMatcher, String> {
    globset::Glob::new(glob)
        .map(|g| g.compile_matcher())
        .map_err(|e| format!("invalid glob {glob:?}: {e}"))
}

fn clip(line: &str) -> String {
    railyard_model::text::cut(line, MAX_LINE, "…")
}

enum Entry {
    Dir,
    SkippedDir,
    File {
        len: u64,
        links: u64,
    },
    Symlink(PathBuf),
    /// A FIFO, socket or device: listed, never opened.
    Special(&'static str),
}

/// Depth-first, sorted, symlinks reported but never followed, at most [`MAX_DEPTH`]
/// levels and [`MAX_VISITED`] entries. `visit` returns false to stop.
fn walk(dir: &Path, recursive: bool, visit: &mut dyn FnMut(&Path, Entry) -> bool) -> bool {
    let mut visited = 0usize;
    walk_in(dir, recursive, 0, &mut visited, visit)
}

fn walk_in(
    dir: &Path,
    recursive: bool,
    depth: usize,
    visited: &mut usize,
    visit: &mut dyn FnMut(&Path, Entry) -> bool,
) -> bool {
    let Ok(read) = std::fs::read_dir(dir) else {
        return true;
    };
    let room = MAX_VISITED.saturating_sub(*visited);
    let mut entries: Vec<_> = read.filter_map(Result::ok).take(room).collect();
    *visited += entries.len();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        // DirEntry::metadata does not follow symlinks.
        let Ok(meta) = entry.metadata() else { continue };
        let ft = meta.file_type();
        let keep_going = if ft.is_symlink() {
            let target = std::fs::read_link(&path).unwrap_or_default();
            visit(&path, Entry::Symlink(target))
        } else if ft.is_dir() {
            let skipped = SKIPPED_DIRS.iter().any(|s| entry.file_name() == *s) || depth + 1 >= MAX_DEPTH;
            if skipped {
                visit(&path, Entry::SkippedDir)
            } else {
                visit(&path, Entry::Dir)
                    && (!recursive || walk_in(&path, recursive, depth + 1, visited, visit))
            }
        } else if ft.is_file() {
            visit(
                &path,
                Entry::File {
                    len: meta.len(),
                    links: meta.nlink(),
                },
            )
        } else {
            visit(&path, Entry::Special(kind_of(ft)))
        };
        if !keep_going || *visited >= MAX_VISITED {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn list_and_grep() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        std::fs::create_dir_all(dir.path().join("docs")).unwrap();
        std::fs::write(dir.path().join("docs/a.md"), "Hello\nworld\n").unwrap();
        std::fs::write(dir.path().join("b.txt"), "hello there\n").unwrap();
        std::fs::write(dir.path().join("bin"), b"hello\0").unwrap();
        let listing = list_files(&ws, &json!({})).unwrap();
        assert_eq!(
            listing,
            "b.txt (12 bytes)\nbin (6 bytes)\ndocs/\ndocs/a.md (12 bytes)"
        );
        let flat = list_files(&ws, &json!({"recursive": false})).unwrap();
        assert!(!flat.contains("a.md"));

        let hits = grep(&ws, &json!({"pattern": "hello", "case_insensitive": true})).unwrap();
        assert_eq!(hits, "b.txt:1: hello there\ndocs/a.md:1: Hello");
        let md = grep(&ws, &json!({"pattern": "o", "glob": "*.md"})).unwrap();
        assert_eq!(md, "docs/a.md:1: Hello\ndocs/a.md:2: world");
        assert!(
            grep(&ws, &json!({"pattern": "("}))
                .unwrap_err()
                .contains("invalid regex")
        );
        assert!(grep(&ws, &json!({"pattern": "x", "path": "../"})).is_err());
    }
}
