//! Writing results to stdout: the `--output` mode, plain lines, JSON, and aligned tables.
//!
//! Everything goes through [`line()`] / [`json`] so that a closed pipe
//! (`railyard run history X | head`) ends the command quietly instead of panicking.
//!
//! Human output shows fields that clients and models wrote (goals, notes, failures,
//! signal payloads), so every human printer goes through [`escape`]: a goal holding
//! `ESC[2J` and a newline cannot clear the screen or print a line of its own (a fake
//! `status COMPLETED`). [`line()`], [`Table`] and [`print_fields`] apply it; JSON output
//! is escaped by JSON itself.

use std::borrow::Cow;
use std::fmt::Display;
use std::io::{self, Write};

/// How client commands print their results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Output {
    /// Aligned text for people (timestamps in RFC 3339, UTC).
    Human,
    /// Machine-readable JSON (field names as in the proto, snake_case).
    Json,
}

impl Output {
    /// Whether JSON was asked for.
    pub(crate) fn is_json(self) -> bool {
        self == Self::Json
    }
}

/// Whether a character must not reach a terminal as it is: control characters (C0,
/// DEL, C1, which include newlines and escape sequences) and the invisible marks that
/// reorder text (bidirectional overrides and isolates).
fn is_unsafe(c: char) -> bool {
    c.is_control() || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every unsafe character written as an escape (`\n`, `\r`, `\t`,
/// `\u{1b}`), so it prints as one line of visible characters. The one helper every
/// human printer uses.
pub(crate) fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if is_unsafe(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Prints one line to stdout, [escaped](escape).
pub(crate) fn line(text: impl Display) -> io::Result<()> {
    let text = text.to_string();
    raw_line(&escape(&text))
}

/// Prints text the CLI made itself (pretty JSON) as it is.
fn raw_line(text: &str) -> io::Result<()> {
    let mut out = io::stdout().lock();
    writeln!(out, "{text}")
}

/// Prints a JSON value, pretty, to stdout.
pub(crate) fn json(value: &serde_json::Value) -> io::Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(io::Error::other)?;
    raw_line(&text)
}

/// `object` (a JSON object) pretty-printed, with one more field `key` whose value is
/// printed compact, on one line: a large, deeply nested value (a workflow
/// definition) pretty-printed grows many times over in indentation.
pub(crate) fn pretty_with_compact(
    object: &serde_json::Value,
    key: &str,
    compact: &serde_json::Value,
) -> io::Result<String> {
    let head = serde_json::to_string_pretty(object).map_err(io::Error::other)?;
    let value = serde_json::to_string(compact).map_err(io::Error::other)?;
    let key = serde_json::to_string(key).map_err(io::Error::other)?;
    let body = head.strip_suffix('}').map(str::trim_end).unwrap_or("{");
    let sep = if body == "{" { "" } else { "," };
    Ok(format!("{body}{sep}\n  {key}: {value}\n}}"))
}

/// Prints [`pretty_with_compact`].
pub(crate) fn json_with_compact(
    object: &serde_json::Value,
    key: &str,
    compact: &serde_json::Value,
) -> io::Result<()> {
    raw_line(&pretty_with_compact(object, key, compact)?)
}

/// Prints a JSON value on one line (for JSON-lines streams), and flushes.
pub(crate) fn json_line(value: &serde_json::Value) -> io::Result<()> {
    let mut out = io::stdout().lock();
    serde_json::to_writer(&mut out, value).map_err(io::Error::other)?;
    writeln!(out)?;
    out.flush()
}

/// Cuts `text` to its first line and at most `max` characters, marking a cut with `…`.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    let first = text.lines().next().unwrap_or("");
    let multi = first.len() < text.trim_end().len();
    if first.chars().count() <= max && !multi {
        return first.to_string();
    }
    format!("{}…", railyard_text::prefix_chars(first, max.saturating_sub(1)))
}

/// A table of text with a header row, printed with columns aligned by two spaces.
#[derive(Debug, Default)]
pub(crate) struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers.
    pub(crate) fn new<S: Into<String>>(headers: impl IntoIterator<Item = S>) -> Self {
        Self {
            headers: headers.into_iter().map(cell).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells print empty, extra cells are kept. Cells are
    /// [escaped](escape) before the columns are measured.
    pub(crate) fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows.push(cells.into_iter().map(cell).collect());
    }

    /// Renders the table, one string per line, trailing spaces trimmed.
    pub(crate) fn render(&self) -> Vec<String> {
        let columns = self
            .rows
            .iter()
            .map(Vec::len)
            .chain([self.headers.len()])
            .max()
            .unwrap_or(0);
        let mut widths = vec![0; columns];
        for row in std::iter::once(&self.headers).chain(&self.rows) {
            for (i, cell) in row.iter().enumerate() {
                widths[i] = widths[i].max(width(cell));
            }
        }
        std::iter::once(&self.headers)
            .chain(&self.rows)
            .map(|row| {
                let mut text = String::new();
                for (i, width) in widths.iter().enumerate() {
                    let cell = row.get(i).map(String::as_str).unwrap_or("");
                    if i > 0 {
                        text.push_str("  ");
                    }
                    pad_into(&mut text, cell, *width);
                }
                text.trim_end().to_string()
            })
            .collect()
    }

    /// Prints the table to stdout.
    pub(crate) fn print(&self) -> io::Result<()> {
        for text in self.render() {
            line(text)?;
        }
        Ok(())
    }
}

fn cell<S: Into<String>>(text: S) -> String {
    let text = text.into();
    match escape(&text) {
        Cow::Borrowed(_) => text,
        Cow::Owned(escaped) => escaped,
    }
}

/// How many columns `text` takes on a terminal: a wide (CJK) character two, a
/// combining mark none.
pub(crate) fn width(text: &str) -> usize {
    unicode_width::UnicodeWidthStr::width(text)
}

/// Appends `text` to `out`, padded with spaces to `columns` terminal columns.
fn pad_into(out: &mut String, text: &str, columns: usize) {
    out.push_str(text);
    out.extend(std::iter::repeat_n(' ', columns.saturating_sub(width(text))));
}

/// `label  value` lines with the labels padded to one width, values [escaped](escape).
pub(crate) fn field_lines(fields: &[(&str, String)]) -> Vec<String> {
    let columns = fields.iter().map(|(k, _)| width(k)).max().unwrap_or(0);
    fields
        .iter()
        .map(|(label, value)| {
            let mut text = String::new();
            pad_into(&mut text, label, columns);
            text.push_str("  ");
            text.push_str(&escape(value));
            text.trim_end().to_string()
        })
        .collect()
}

/// Prints `label  value` pairs with the labels padded to one width.
pub(crate) fn print_fields(fields: &[(&str, String)]) -> io::Result<()> {
    for text in field_lines(fields) {
        line(text)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compact_field_stays_on_one_line_and_the_whole_parses() {
        // Nested 60 deep (two levels each): pretty-printed, indentation grows it.
        let mut deep = serde_json::json!("leaf");
        for _ in 0..60 {
            deep = serde_json::json!({ "steps": [deep] });
        }
        let text =
            pretty_with_compact(&serde_json::json!({"run": {"id": "r1"}}), "definition", &deep).unwrap();
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back["definition"], deep);
        assert_eq!(back["run"]["id"], "r1");
        let line = text.lines().find(|l| l.contains("\"definition\"")).unwrap();
        assert_eq!(
            line.len(),
            "  \"definition\": ".len() + serde_json::to_string(&deep).unwrap().len()
        );
        assert!(text.len() < 2 * serde_json::to_string(&deep).unwrap().len() + 100);
        let empty = pretty_with_compact(&serde_json::json!({}), "k", &serde_json::json!(1)).unwrap();
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&empty).unwrap(),
            serde_json::json!({"k": 1})
        );
    }

    #[test]
    fn table_aligns_columns() {
        let mut t = Table::new(["RUN", "STATUS", "GOAL"]);
        t.row(["r-1", "RUNNING", "write a haiku"]);
        t.row(["run-22", "COMPLETED", ""]);
        t.row(["r-3", "FAILED"]);
        assert_eq!(
            t.render(),
            vec![
                "RUN     STATUS     GOAL",
                "r-1     RUNNING    write a haiku",
                "run-22  COMPLETED",
                "r-3     FAILED",
            ]
        );
    }

    #[test]
    fn table_counts_characters_not_bytes() {
        let mut t = Table::new(["A", "B"]);
        t.row(["é…", "x"]);
        assert_eq!(t.render(), vec!["A   B", "é…  x"]);
    }

    #[test]
    fn control_characters_are_escaped_in_every_human_printer() {
        let goal = "\u{1b}[2J\u{1b}[H\nstatus     COMPLETED\r\u{9b}31m\u{202e}txt.exe";
        let shown = escape(goal);
        assert_eq!(
            shown,
            "\\u{1b}[2J\\u{1b}[H\\nstatus     COMPLETED\\r\\u{9b}31m\\u{202e}txt.exe"
        );
        assert!(!shown.chars().any(is_unsafe));
        assert!(matches!(escape("plain é text"), Cow::Borrowed(_)));

        let lines = field_lines(&[("status", "RUNNING".into()), ("goal", goal.into())]);
        assert_eq!(lines.len(), 2);
        assert!(lines.iter().all(|l| !l.chars().any(is_unsafe)), "{lines:?}");
        assert!(!lines[1].contains('\n'));

        let mut t = Table::new(["RUN", "GOAL"]);
        t.row(["r1".to_string(), goal.to_string()]);
        let rendered = t.render();
        assert_eq!(rendered.len(), 2);
        assert!(rendered.iter().all(|l| !l.chars().any(is_unsafe)), "{rendered:?}");
    }

    #[test]
    fn table_measures_terminal_columns() {
        let mut t = Table::new(["GOAL", "STATUS"]);
        // Two wide characters take four columns; "e" with a combining acute one.
        t.row(["日本", "RUNNING"]);
        t.row(["cafe\u{301}", "FAILED"]);
        t.row(["abcde", "COMPLETED"]);
        assert_eq!(
            t.render(),
            [
                "GOAL   STATUS",
                "日本   RUNNING",
                "cafe\u{301}   FAILED",
                "abcde  COMPLETED",
            ]
        );
        assert_eq!(width("日本"), 4);
        assert_eq!(width("cafe\u{301}"), 4);
    }

    #[test]
    fn truncates() {
        assert_eq!(truncate("short", 10), "short");
        assert_eq!(truncate("exactly10!", 10), "exactly10!");
        assert_eq!(truncate("this is too long", 10), "this is t…");
        assert_eq!(truncate("line one\nline two", 40), "line one…");
        assert_eq!(truncate("trailing newline\n", 40), "trailing newline");
        assert_eq!(truncate("", 5), "");
    }
}
