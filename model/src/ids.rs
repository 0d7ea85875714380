//! Identifier rules, defined once. The API's request checks (`service::limits`) and
//! workflow definition validation (`workflow::validate`) both use them, so an id a
//! definition may use is one the API accepts, and a context key a prompt template may
//! name is one a client or a step can set.
//!
//! Each front end words its own message (the API names the request field, a
//! definition names the JSON path); the rule itself lives only here.

/// Longest name (run id, workflow id, step id, task queue, signal name ...), in bytes.
pub const MAX_NAME: usize = 128;
/// Longest context key, in bytes.
pub const MAX_CONTEXT_KEY: usize = 128;
/// The characters besides ASCII letters and digits a name may hold.
pub const NAME_PUNCTUATION: &str = "-_.:@";
/// [`NAME_PUNCTUATION`] as the messages spell it.
pub const NAME_CHARACTERS: &str = "letters, digits and - _ . : @";

/// Why a value is not a valid name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameError {
    /// The name is empty.
    Empty,
    /// Longer than [`MAX_NAME`]; `len` is its length in bytes.
    TooLong {
        /// Its length, in bytes.
        len: usize,
    },
    /// Holds a character outside ASCII letters, digits and [`NAME_PUNCTUATION`].
    BadCharacter,
    /// Only dots: `.` and `..` name directories, and a run id names its workspace.
    Dots,
}

/// The rule for every name-like identifier: run ids (and parent run ids), workflow
/// ids, step ids, task queue names, signal names, error types and note kinds.
/// Non-empty, at most [`MAX_NAME`] bytes, only ASCII letters, digits and
/// [`NAME_PUNCTUATION`], so a name is safe in a path, a log line, a metric label and
/// a page token.
pub fn check_name(value: &str) -> Result<(), NameError> {
    if value.is_empty() {
        return Err(NameError::Empty);
    }
    if value.len() > MAX_NAME {
        return Err(NameError::TooLong { len: value.len() });
    }
    if !value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || NAME_PUNCTUATION.contains(c))
    {
        return Err(NameError::BadCharacter);
    }
    if value.bytes().all(|b| b == b'.') {
        return Err(NameError::Dots);
    }
    Ok(())
}

/// Why a value is not a valid artifact path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArtifactError {
    /// The path is empty.
    Empty,
    /// Starts at the root (`/x`, `\x`, `C:x`): an artifact is relative to the workspace.
    Absolute,
    /// Has a `..` component, which could leave the workspace.
    ParentDir,
    /// Holds a control character (a newline, an escape sequence, NUL).
    ControlCharacter,
}

impl std::fmt::Display for ArtifactError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Empty => "must not be empty",
            Self::Absolute => "must be a path relative to the workspace, not an absolute one",
            Self::ParentDir => "must stay inside the workspace (no `..` component)",
            Self::ControlCharacter => "must not hold control characters",
        })
    }
}

/// The rule for an artifact a step reports: a path relative to the run's workspace
/// that stays inside it, without control characters. Workers and consoles turn
/// artifacts into paths, so `../../etc/passwd` is refused where it comes in.
pub fn check_artifact_path(path: &str) -> Result<(), ArtifactError> {
    if path.is_empty() {
        return Err(ArtifactError::Empty);
    }
    if path.chars().any(char::is_control) {
        return Err(ArtifactError::ControlCharacter);
    }
    let bytes = path.as_bytes();
    let drive = bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':';
    if path.starts_with('/') || path.starts_with('\\') || drive {
        return Err(ArtifactError::Absolute);
    }
    if path.split(['/', '\\']).any(|c| c == "..") {
        return Err(ArtifactError::ParentDir);
    }
    Ok(())
}

/// The rule for a context key: 1 to [`MAX_CONTEXT_KEY`] bytes of any text. Keys come
/// from clients and from models' `context_updates`, so their characters are not
/// restricted; a template names one as `{{context.KEY}}`.
pub fn is_context_key(key: &str) -> bool {
    !key.is_empty() && key.len() <= MAX_CONTEXT_KEY
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in ["a", "run-1_x.y:z@w", "A9", &"x".repeat(MAX_NAME)] {
            assert_eq!(check_name(ok), Ok(()), "{ok}");
        }
        assert_eq!(check_name(""), Err(NameError::Empty));
        assert_eq!(
            check_name(&"x".repeat(MAX_NAME + 1)),
            Err(NameError::TooLong { len: MAX_NAME + 1 })
        );
        for bad in [" ", "a b", "a/b", "é", "a\n", "a!"] {
            assert_eq!(check_name(bad), Err(NameError::BadCharacter), "{bad:?}");
        }
        for dots in [".", "..", "..."] {
            assert_eq!(check_name(dots), Err(NameError::Dots), "{dots:?}");
        }
        assert_eq!(check_name(".a."), Ok(()));
    }

    #[test]
    fn artifact_paths_stay_inside_the_workspace() {
        for ok in ["a.md", "out/report.md", "./x", "a..b", "..a/b"] {
            assert_eq!(check_artifact_path(ok), Ok(()), "{ok}");
        }
        assert_eq!(check_artifact_path(""), Err(ArtifactError::Empty));
        for abs in ["/etc/passwd", "\\\\server\\x", "C:\\x", "c:x"] {
            assert_eq!(check_artifact_path(abs), Err(ArtifactError::Absolute), "{abs}");
        }
        for up in ["../../etc/passwd", "a/../../b", "..", "a\\..\\b"] {
            assert_eq!(check_artifact_path(up), Err(ArtifactError::ParentDir), "{up}");
        }
        for ctl in ["a\nb", "\u{1b}[2J", "a\0"] {
            assert_eq!(
                check_artifact_path(ctl),
                Err(ArtifactError::ControlCharacter),
                "{ctl:?}"
            );
        }
    }

    #[test]
    fn context_keys() {
        assert!(is_context_key("k"));
        assert!(is_context_key("any text: é / x"));
        assert!(is_context_key(&"k".repeat(MAX_CONTEXT_KEY)));
        assert!(!is_context_key(""));
        assert!(!is_context_key(&"k".repeat(MAX_CONTEXT_KEY + 1)));
    }
}
