//! Webhook payload templates: text with `{{$.path}}` placeholders filled from the
//! delivery's JSON body. A path is `$` followed by `.name`, `[index]` or
//! `["quoted name"]` steps. A string value is inserted as it is; any other value
//! as its compact JSON. Any other `{{...}}` (a prompt's `{{context.KEY}}`) is left
//! as written, for the workflow to fill.
//!
//! Everything is bounded: a template's length and placeholder count at
//! validation, each path's steps, and the rendered output ([`render`] stops past
//! its `max`). A path the payload lacks is an error naming the path, so the
//! webhook can answer `422` and start nothing.

use serde_json::Value;

/// Most placeholders in one template.
pub const MAX_PLACEHOLDERS: usize = 64;
/// Most steps in one path.
pub const MAX_PATH_STEPS: usize = 32;
/// Longest path, in bytes.
pub const MAX_PATH_BYTES: usize = 256;

/// One step of a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Key(String),
    Index(usize),
}

/// A piece of a parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    /// The path as written (for errors), and its steps.
    Path(String, Vec<Step>),
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pieces: Vec<Piece>,
}

/// Why a template cannot render.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// The payload has nothing at this path (the path as the template wrote it).
    #[error("the payload has no value at {0}")]
    Missing(String),
    /// The rendering would pass `max` bytes.
    #[error("renders to more than {0} bytes")]
    TooLong(usize),
}

/// Parses a `$...` path; the error says what is wrong and where.
pub fn parse_path(path: &str) -> Result<Vec<Step>, String> {
    if path.len() > MAX_PATH_BYTES {
        return Err(format!("path is {} bytes; at most {MAX_PATH_BYTES}", path.len()));
    }
    let Some(mut rest) = path.strip_prefix('$') else {
        return Err("a path starts with `$`".into());
    };
    let mut steps = Vec::new();
    while !rest.is_empty() {
        if steps.len() == MAX_PATH_STEPS {
            return Err(format!("more than {MAX_PATH_STEPS} steps"));
        }
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let name = &r[..end];
            if name.is_empty() {
                return Err(format!("empty name at byte {}", path.len() - r.len()));
            }
            steps.push(Step::Key(name.to_string()));
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix("[\"") {
            let end = r
                .find("\"]")
                .ok_or_else(|| format!("unclosed [\" at byte {}", path.len() - rest.len()))?;
            steps.push(Step::Key(r[..end].to_string()));
            rest = &r[end + 2..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r
                .find(']')
                .ok_or_else(|| format!("unclosed [ at byte {}", path.len() - rest.len()))?;
            let index = r[..end]
                .parse::<usize>()
                .map_err(|_| format!("index {:?} is not a number", crate::text::clip(&r[..end])))?;
            steps.push(Step::Index(index));
            rest = &r[end + 1..];
        } else {
            return Err(format!(
                "expected `.name`, `[index]` or `[\"name\"]` at byte {}",
                path.len() - rest.len()
            ));
        }
    }
    Ok(steps)
}

impl Template {
    /// Parses a template; the error names the placeholder and the problem.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut pieces = Vec::new();
        let mut rest = text;
        let mut paths = 0;
        while let Some(start) = rest.find("{{") {
            let after = &rest[start + 2..];
            let Some(end) = after.find("}}") else {
                break; // not a placeholder: left as text
            };
            let inner = after[..end].trim();
            if inner.starts_with('$') {
                paths += 1;
                if paths > MAX_PLACEHOLDERS {
                    return Err(format!("more than {MAX_PLACEHOLDERS} placeholders"));
                }
                let steps = parse_path(inner)
                    .map_err(|e| format!("placeholder {{{{{}}}}}: {e}", crate::text::clip(inner)))?;
                pieces.push(Piece::Text(rest[..start].to_string()));
                pieces.push(Piece::Path(inner.to_string(), steps));
            } else {
                pieces.push(Piece::Text(rest[..start + 2 + end + 2].to_string()));
            }
            rest = &after[end + 2..];
        }
        pieces.push(Piece::Text(rest.to_string()));
        pieces.retain(|p| !matches!(p, Piece::Text(t) if t.is_empty()));
        Ok(Self { pieces })
    }

    /// Whether the template reads the payload at all.
    pub fn has_paths(&self) -> bool {
        self.pieces.iter().any(|p| matches!(p, Piece::Path(..)))
    }

    /// Fills the template from `payload`, in at most `max` bytes.
    pub fn render(&self, payload: &Value, max: usize) -> Result<String, RenderError> {
        let mut out = String::new();
        for piece in &self.pieces {
            let text = match piece {
                Piece::Text(t) => std::borrow::Cow::Borrowed(t.as_str()),
                Piece::Path(shown, steps) => {
                    let v = lookup(payload, steps).ok_or_else(|| RenderError::Missing(shown.clone()))?;
                    match v {
                        Value::String(s) => std::borrow::Cow::Borrowed(s.as_str()),
                        // The error names the template's limit, not what was left of it.
                        other => std::borrow::Cow::Owned(
                            bounded_json(other, max - out.len()).map_err(|_| RenderError::TooLong(max))?,
                        ),
                    }
                }
            };
            if out.len() + text.len() > max {
                return Err(RenderError::TooLong(max));
            }
            out.push_str(&text);
        }
        Ok(out)
    }
}

/// The value at `steps`, if the payload has one.
pub fn lookup<'v>(payload: &'v Value, steps: &[Step]) -> Option<&'v Value> {
    let mut v = payload;
    for s in steps {
        v = match (s, v) {
            (Step::Key(k), Value::Object(m)) => m.get(k)?,
            (Step::Index(i), Value::Array(a)) => a.get(*i)?,
            _ => return None,
        };
    }
    Some(v)
}

/// `v` as compact JSON, refused past `max` bytes without writing more than that.
fn bounded_json(v: &Value, max: usize) -> Result<String, RenderError> {
    struct Limited {
        buf: Vec<u8>,
        max: usize,
    }
    impl std::io::Write for Limited {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            if self.buf.len() + b.len() > self.max {
                return Err(std::io::Error::other("too long"));
            }
            self.buf.extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut w = Limited { buf: Vec::new(), max };
    serde_json::to_writer(&mut w, v).map_err(|_| RenderError::TooLong(max))?;
    String::from_utf8(w.buf).map_err(|_| RenderError::TooLong(max))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn renders_paths_and_leaves_other_placeholders() {
        let t = Template::parse(
            "PR {{$.pull_request.title}} #{{ $.number }} by {{$.users[1][\"login name\"]}} {{context.x}}",
        )
        .unwrap();
        let p =
            json!({"pull_request": {"title": "Fix it"}, "number": 7, "users": [{}, {"login name": "ada"}]});
        assert_eq!(t.render(&p, 1000).unwrap(), "PR Fix it #7 by ada {{context.x}}");
        assert!(t.has_paths());
        assert!(!Template::parse("plain {{goal}}").unwrap().has_paths());
    }

    #[test]
    fn a_missing_path_is_named() {
        let t = Template::parse("{{$.repository.full_name}}").unwrap();
        assert_eq!(
            t.render(&json!({"repository": {}}), 100),
            Err(RenderError::Missing("$.repository.full_name".into()))
        );
        assert_eq!(
            t.render(&json!({"repository": "x"}), 100),
            Err(RenderError::Missing("$.repository.full_name".into()))
        );
    }

    #[test]
    fn output_is_bounded() {
        let t = Template::parse("{{$.a}}{{$.a}}").unwrap();
        let p = json!({"a": "x".repeat(60)});
        assert_eq!(t.render(&p, 100), Err(RenderError::TooLong(100)));
        let p = json!({"a": [1, 2, 3]});
        assert_eq!(t.render(&p, 100).unwrap(), "[1,2,3][1,2,3]");
        let big = json!({"a": vec!["y".repeat(10); 100]});
        assert_eq!(t.render(&big, 100), Err(RenderError::TooLong(100)));
        // Found by the fuzz target: the limit named is the template's, also when a
        // JSON value passes what an earlier piece left of it.
        let t = Template::parse("abcdefgh{{$.a}}").unwrap();
        assert_eq!(t.render(&json!({"a": [1]}), 9), Err(RenderError::TooLong(9)));
    }

    #[test]
    fn bad_paths_are_refused_with_the_problem() {
        for (text, want) in [
            ("{{$.}}", "empty name"),
            ("{{$x}}", "expected"),
            ("{{$[a]}}", "not a number"),
            ("{{$[\"a}}", "unclosed"),
        ] {
            let e = Template::parse(text).unwrap_err();
            assert!(e.contains(want), "{text}: {e}");
        }
        let many = "{{$.a}}".repeat(MAX_PLACEHOLDERS + 1);
        assert!(Template::parse(&many).unwrap_err().contains("placeholders"));
    }
}
