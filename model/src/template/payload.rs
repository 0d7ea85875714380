//! Webhook payload templates, on the engine in [`super`]: text with `{{$.path}}`
//! placeholders filled from the delivery's JSON body. A path is `$` followed by
//! `.name`, `[index]` or `["quoted name"]` steps. A string value is inserted as it
//! is; any other value as its compact JSON. Any other `{{...}}` (a prompt's
//! `{{context.KEY}}`) is left as written, for the workflow to fill.
//!
//! Everything is bounded: a template's length and placeholder count at
//! validation, each path's steps, and the rendered output ([`Template::render`]
//! stops past its `max`). A path the payload lacks is an error naming the path, so
//! the webhook can answer `422` and start nothing.

use serde_json::Value;

use super::{Bounded, Count, Fill, Piece, Scanner, Sink, TooLong, render_with};

/// Most placeholders in one template.
pub const MAX_PLACEHOLDERS: usize = 64;
/// Most steps in one path.
pub const MAX_PATH_STEPS: usize = 32;
/// Longest path, in bytes.
pub const MAX_PATH_BYTES: usize = 256;

/// One step of a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// An object's member, by name.
    Key(String),
    /// An array's element, from 0.
    Index(usize),
}

/// A template checked by [`Template::parse`]: its paths are well formed and
/// within the bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    text: String,
    has_paths: bool,
}

/// Why a template cannot render.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// The payload has nothing at this path (the path as the template wrote it).
    #[error("the payload has no value at {0}")]
    Missing(String),
    /// The rendering would pass `max` bytes.
    #[error("{}", TooLong { max: *.0 })]
    TooLong(usize),
}

impl From<TooLong> for RenderError {
    fn from(e: TooLong) -> Self {
        Self::TooLong(e.max)
    }
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

/// Whether a placeholder's name is a path into the payload: this vocabulary's.
fn is_path(name: &str) -> bool {
    name.starts_with('$')
}

impl Template {
    /// Parses a template; the error names the placeholder and the problem.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut paths = Count::new(MAX_PLACEHOLDERS);
        for piece in Scanner::new(text) {
            if let Piece::Placeholder(p) = piece
                && is_path(p.name())
            {
                // Counted before the path is read: past the limit, that is the error.
                paths.take().map_err(|e| e.to_string())?;
                parse_path(p.name())
                    .map_err(|e| format!("placeholder {{{{{}}}}}: {e}", crate::text::clip(p.name())))?;
            }
        }
        Ok(Self {
            text: text.to_string(),
            has_paths: paths.taken() > 0,
        })
    }

    /// Whether the template reads the payload at all.
    pub fn has_paths(&self) -> bool {
        self.has_paths
    }

    /// Fills the template from `payload`, in at most `max` bytes. Any placeholder
    /// other than a path is left as written, for the prompt.
    pub fn render(&self, payload: &Value, max: usize) -> Result<String, RenderError> {
        let mut out = Bounded::new(max);
        render_with(&self.text, &mut out, |p, out| {
            let name = p.name();
            if !is_path(name) {
                return Ok::<_, RenderError>(Fill::Keep);
            }
            // Parsed again (cheap: bounded by MAX_PATH_BYTES); `parse` checked it, so
            // a failure here could only be reported as the path having no value.
            let value = parse_path(name)
                .ok()
                .and_then(|steps| lookup(payload, &steps))
                .ok_or_else(|| RenderError::Missing(name.to_string()))?;
            out.push_value(value)?;
            Ok(Fill::Filled)
        })?;
        Ok(out.into_string())
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
