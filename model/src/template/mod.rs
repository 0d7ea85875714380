//! Templates: text with `{{...}}` placeholders, and the one engine that finds and
//! fills them for every kind of template Railyard has.
//!
//! Three vocabularies sit on the engine. Each decides which names it fills and
//! which it leaves, as written, for a later stage:
//! - [`prompt`]: a step's prompt (`{{goal}}`, `{{context.KEY}}`,
//!   `{{steps.ID.result.FIELD}}`), checked when a definition loads and filled when
//!   a step is leased; it fills or refuses every placeholder, since nothing comes
//!   after it.
//! - [`payload`]: a webhook trigger's goal, context and key (`{{$.path}}` into the
//!   delivery's JSON body), leaving any other placeholder for the prompt.
//! - [`fire`]: a schedule's goal and context (`{{scheduledTime}}`,
//!   `{{scheduleId}}`), leaving the rest for the prompt.
//!
//! The rules they share, written once here: a placeholder opens at `{{` and closes
//! at the first `}}` after it, so braces do not nest (`{{ {{goal}} }}` is the one
//! placeholder ` {{goal`, then the text ` }}`); a `{{` with no `}}` after it is text
//! ([`Piece::Unclosed`]; the prompt refuses one, [`Unclosed`]); a position is the
//! byte offset of the placeholder's `{{` (errors call it its "character");
//! [`Count`] bounds how many placeholders a template may fill and [`Bounded`] how
//! long the rendering may grow; a JSON value is written as its text if it is a
//! string and as compact JSON otherwise ([`Sink::push_value`]).
//!
//! [`Scanner`] splits a template into those pieces; [`render_with`] drives it,
//! asking a vocabulary what to do with each placeholder ([`Fill`]) and writing
//! the result into a [`Sink`]: a [`String`], a [`Measure`] (the length only), or a
//! [`Bounded`] string that refuses to pass a byte limit.

pub mod fire;
pub mod payload;
pub mod prompt;

#[cfg(test)]
mod pinned_tests;

use std::convert::Infallible;

use serde_json::Value;

/// One `{{...}}` of a template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placeholder<'t> {
    /// Byte offset of its `{{` in the template: the "character" errors name.
    pub at: usize,
    /// What is between the braces, as written.
    pub inner: &'t str,
    /// The whole placeholder as written, braces included.
    pub written: &'t str,
}

impl<'t> Placeholder<'t> {
    /// The name it gives: what is between the braces without the white space
    /// around it (the prompt and the payload allow `{{ goal }}`).
    pub fn name(&self) -> &'t str {
        self.inner.trim()
    }
}

/// A piece of a template, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'t> {
    /// Text outside placeholders, as written.
    Text(&'t str),
    /// A `{{...}}`.
    Placeholder(Placeholder<'t>),
    /// A `{{` that no `}}` follows, and everything from it to the end: the last
    /// piece, and text unless a vocabulary refuses it.
    Unclosed {
        /// Where the `{{` is, in bytes.
        at: usize,
        /// The text from it to the end.
        text: &'t str,
    },
}

/// Splits a template into [`Piece`]s. Every byte of the template is in exactly
/// one piece handed out, in order, unless [`Scanner::rescan`] hands some out again.
#[derive(Debug, Clone)]
pub struct Scanner<'t> {
    template: &'t str,
    /// Where the next text piece starts.
    text_from: usize,
    /// Where the search for the next `{{` starts (after `text_from` only after a
    /// rescan, whose `{` is text).
    open_from: usize,
    /// The last search for `}}`: where it started and what it found. A rescan
    /// looks for the same `}}` again; remembering it keeps a template of a
    /// megabyte of `{{` from being searched once per brace.
    close: Option<(usize, Option<usize>)>,
    /// A placeholder found behind text, handed out after the text.
    pending: Option<Piece<'t>>,
    /// The `{{` of the placeholder handed out last, while it may still be rescanned.
    last: Option<usize>,
}

impl<'t> Scanner<'t> {
    /// A scanner at the start of `template`.
    pub fn new(template: &'t str) -> Self {
        Self {
            template,
            text_from: 0,
            open_from: 0,
            close: None,
            pending: None,
            last: None,
        }
    }

    /// Takes back the placeholder just handed out: its first `{` becomes text and
    /// scanning goes on from the character after it, so a placeholder written
    /// inside it (`{{ x {{scheduleId}}`) is found. Does nothing unless the last
    /// piece handed out was a placeholder.
    pub fn rescan(&mut self) {
        if let Some(at) = self.last.take() {
            self.text_from = at;
            // `{` is one byte, so this is a character boundary.
            self.open_from = at + 1;
        }
    }

    /// The first `}}` at or after `from`.
    fn close_after(&mut self, from: usize) -> Option<usize> {
        if let Some((searched, found)) = self.close
            && searched <= from
            && found.is_none_or(|c| from <= c)
        {
            return found;
        }
        let found = self.template[from..].find("}}").map(|i| from + i);
        self.close = Some((from, found));
        found
    }

    fn found(&mut self) -> Option<Piece<'t>> {
        let len = self.template.len();
        let Some(open) = self.template[self.open_from..]
            .find("{{")
            .map(|i| self.open_from + i)
        else {
            let text = &self.template[self.text_from..];
            self.text_from = len;
            self.open_from = len;
            return (!text.is_empty()).then_some(Piece::Text(text));
        };
        let piece = match self.close_after(open + 2) {
            None => Piece::Unclosed {
                at: open,
                text: &self.template[open..],
            },
            Some(close) => Piece::Placeholder(Placeholder {
                at: open,
                inner: &self.template[open + 2..close],
                written: &self.template[open..close + 2],
            }),
        };
        let text = &self.template[self.text_from..open];
        let end = match piece {
            Piece::Placeholder(p) => open + p.written.len(),
            _ => len,
        };
        self.text_from = end;
        self.open_from = end;
        if text.is_empty() {
            Some(piece)
        } else {
            self.pending = Some(piece);
            Some(Piece::Text(text))
        }
    }
}

impl<'t> Iterator for Scanner<'t> {
    type Item = Piece<'t>;

    fn next(&mut self) -> Option<Piece<'t>> {
        let piece = match self.pending.take() {
            Some(piece) => Some(piece),
            None => self.found(),
        };
        self.last = match piece {
            Some(Piece::Placeholder(p)) => Some(p.at),
            _ => None,
        };
        piece
    }
}

/// What a vocabulary did with one placeholder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    /// Its value is written to the sink (nothing, for one that renders empty).
    Filled,
    /// Left as written, for a later stage; scanning goes on after its `}}`.
    Keep,
    /// Left as written but looked into ([`Scanner::rescan`]): for a vocabulary
    /// whose names are filled wherever they are written, as a plain search for
    /// `{{name}}` would find them.
    Rescan,
}

/// Fills `template` into `out`, asking `fill` what to do with each placeholder:
/// text and an unclosed `{{` are written as they are, a placeholder as `fill`
/// decides. Stops at the first error, from `fill` or from the sink.
pub fn render_with<'t, S: Sink, E: From<S::Error>>(
    template: &'t str,
    out: &mut S,
    mut fill: impl FnMut(Placeholder<'t>, &mut S) -> Result<Fill, E>,
) -> Result<(), E> {
    let mut scan = Scanner::new(template);
    // Not a `for` loop: a rescan needs the scanner while the loop runs.
    while let Some(piece) = scan.next() {
        match piece {
            Piece::Text(text) | Piece::Unclosed { text, .. } => out.push_text(text)?,
            Piece::Placeholder(p) => match fill(p, out)? {
                Fill::Filled => {}
                Fill::Keep => out.push_text(p.written)?,
                Fill::Rescan => scan.rescan(),
            },
        }
    }
    Ok(())
}

/// Where a rendering is written.
pub trait Sink {
    /// Why it takes no more.
    type Error;

    /// Appends `text`, or refuses it whole.
    fn push_text(&mut self, text: &str) -> Result<(), Self::Error>;

    /// Appends a JSON value: a string as its text, anything else as compact JSON.
    fn push_value(&mut self, value: &Value) -> Result<(), Self::Error> {
        match value {
            Value::String(s) => self.push_text(s),
            other => self.push_text(&other.to_string()),
        }
    }
}

/// The rendering itself, unbounded (for templates whose output is bounded by
/// their input, checked where they are written).
impl Sink for String {
    type Error = Infallible;

    fn push_text(&mut self, text: &str) -> Result<(), Infallible> {
        self.push_str(text);
        Ok(())
    }
}

/// The length in bytes a rendering would have, without building it: a template
/// that names a long value many times is measured before anything that large
/// exists. Saturates rather than wrapping.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Measure(pub usize);

impl Sink for Measure {
    type Error = Infallible;

    fn push_text(&mut self, text: &str) -> Result<(), Infallible> {
        self.0 = self.0.saturating_add(text.len());
        Ok(())
    }
}

/// A rendering of at most `max` bytes: a piece that would pass it is refused,
/// and a JSON value is never written out further than what is left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bounded {
    text: String,
    max: usize,
}

impl Bounded {
    /// An empty rendering that takes at most `max` bytes.
    pub fn new(max: usize) -> Self {
        Self {
            text: String::new(),
            max,
        }
    }

    /// What was rendered.
    pub fn into_string(self) -> String {
        self.text
    }

    fn room(&self) -> usize {
        self.max - self.text.len()
    }
}

impl Sink for Bounded {
    type Error = TooLong;

    fn push_text(&mut self, text: &str) -> Result<(), TooLong> {
        if text.len() > self.room() {
            // The limit named is the whole rendering's, not what was left of it.
            return Err(TooLong { max: self.max });
        }
        self.text.push_str(text);
        Ok(())
    }

    fn push_value(&mut self, value: &Value) -> Result<(), TooLong> {
        match value {
            Value::String(s) => self.push_text(s),
            other => {
                let json = bounded_json(other, self.room()).ok_or(TooLong { max: self.max })?;
                self.push_text(&json)
            }
        }
    }
}

/// `v` as compact JSON, or `None` past `max` bytes, without writing more than that.
fn bounded_json(v: &Value, max: usize) -> Option<String> {
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
    serde_json::to_writer(&mut w, v).ok()?;
    String::from_utf8(w.buf).ok()
}

/// How many placeholders a template fills, refusing one past a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Count {
    taken: usize,
    max: usize,
}

impl Count {
    /// None taken yet, at most `max`.
    pub fn new(max: usize) -> Self {
        Self { taken: 0, max }
    }

    /// Takes one more, refused past the limit.
    pub fn take(&mut self) -> Result<(), TooMany> {
        if self.taken == self.max {
            return Err(TooMany { max: self.max });
        }
        self.taken += 1;
        Ok(())
    }

    /// How many were taken.
    pub fn taken(&self) -> usize {
        self.taken
    }
}

/// A `{{` with no `}}` after it, where a vocabulary refuses one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("unclosed '{{{{' at character {at}")]
pub struct Unclosed {
    /// Byte offset of the `{{`.
    pub at: usize,
}

/// A template with more placeholders than its vocabulary takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("more than {max} placeholders")]
pub struct TooMany {
    /// The vocabulary's limit.
    pub max: usize,
}

/// A rendering that would pass its byte limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("renders to more than {max} bytes")]
pub struct TooLong {
    /// The limit, in bytes.
    pub max: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(t: &str) -> Vec<Piece<'_>> {
        Scanner::new(t).collect()
    }

    fn ph(at: usize, written: &str) -> Piece<'_> {
        Piece::Placeholder(Placeholder {
            at,
            inner: &written[2..written.len() - 2],
            written,
        })
    }

    #[test]
    fn scans_text_placeholders_and_an_unclosed_brace() {
        assert_eq!(pieces(""), vec![]);
        assert_eq!(pieces("ab"), vec![Piece::Text("ab")]);
        assert_eq!(
            pieces("é{{ x }}}{{y"),
            vec![
                Piece::Text("é"),
                ph(2, "{{ x }}"),
                Piece::Text("}"),
                Piece::Unclosed { at: 10, text: "{{y" }
            ]
        );
        // Braces do not nest: the first `}}` closes.
        assert_eq!(pieces("{{ {{a}} }}"), vec![ph(0, "{{ {{a}}"), Piece::Text(" }}")]);
        assert_eq!(pieces("{{}}{{}}"), vec![ph(0, "{{}}"), ph(4, "{{}}")]);
        assert_eq!(
            Placeholder {
                at: 0,
                inner: "\t a ",
                written: ""
            }
            .name(),
            "a"
        );
    }

    #[test]
    fn a_rescan_looks_inside_the_placeholder() {
        let mut scan = Scanner::new("{{ x {{a}}!");
        assert_eq!(scan.next(), Some(ph(0, "{{ x {{a}}")));
        scan.rescan();
        assert_eq!(scan.next(), Some(Piece::Text("{{ x ")));
        assert_eq!(scan.next(), Some(ph(5, "{{a}}")));
        assert_eq!(scan.next(), Some(Piece::Text("!")));
        assert_eq!(scan.next(), None);
        // After text, a rescan does nothing.
        scan.rescan();
        assert_eq!(scan.next(), None);
        let mut scan = Scanner::new("{{{a}}");
        assert_eq!(scan.next(), Some(ph(0, "{{{a}}")));
        scan.rescan();
        assert_eq!(scan.next(), Some(Piece::Text("{")));
        assert_eq!(scan.next(), Some(ph(1, "{{a}}")));
    }

    #[test]
    fn renders_by_what_the_vocabulary_decides() {
        let fill = |p: Placeholder, out: &mut String| -> Result<Fill, Infallible> {
            Ok(match p.name() {
                "a" => {
                    out.push('A');
                    Fill::Filled
                }
                "k" => Fill::Keep,
                _ => Fill::Rescan,
            })
        };
        let mut out = String::new();
        let Ok(()) = render_with("{{a}} {{ k }} {{x {{a}} {{", &mut out, fill);
        assert_eq!(out, "A {{ k }} {{x A {{");
    }

    #[test]
    fn sinks_measure_and_bound() {
        let mut s = String::new();
        let Ok(()) = s.push_value(&serde_json::json!("text"));
        let Ok(()) = s.push_value(&serde_json::json!({"k": [1, 2]}));
        assert_eq!(s, r#"text{"k":[1,2]}"#);
        let mut m = Measure::default();
        let Ok(()) = m.push_value(&serde_json::json!({"a": [1, "é"]}));
        assert_eq!(m.0, r#"{"a":[1,"é"]}"#.len());
        let mut b = Bounded::new(6);
        assert_eq!(b.push_text("abc"), Ok(()));
        assert_eq!(b.push_value(&serde_json::json!([12])), Err(TooLong { max: 6 }));
        assert_eq!(b.push_value(&serde_json::json!([1])), Ok(()));
        assert_eq!(b.push_text(""), Ok(()));
        assert_eq!(b.push_text("x"), Err(TooLong { max: 6 }));
        assert_eq!(b.into_string(), "abc[1]");
        let mut c = Count::new(1);
        assert_eq!(c.take(), Ok(()));
        assert_eq!(c.take(), Err(TooMany { max: 1 }));
        assert_eq!(c.taken(), 1);
        assert_eq!(Unclosed { at: 3 }.to_string(), "unclosed '{{' at character 3");
    }
}
