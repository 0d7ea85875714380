//! Writing results to stdout: the `--output` mode, plain lines, JSON, and aligned tables.
//!
//! Everything goes through [`line`] / [`json`] so that a closed pipe
//! (`railyard run history X | head`) ends the command quietly instead of panicking.

use std::fmt::Display;
use std::io::{self, Write};

/// How client commands print their results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// Aligned text for people (timestamps in RFC 3339, UTC).
    Human,
    /// Machine-readable JSON (field names as in the proto, snake_case).
    Json,
}

impl Output {
    /// Whether JSON was asked for.
    pub fn is_json(self) -> bool {
        self == Self::Json
    }
}

/// Prints one line to stdout.
pub fn line(text: impl Display) -> io::Result<()> {
    let mut out = io::stdout().lock();
    writeln!(out, "{text}")
}

/// Prints a JSON value, pretty, to stdout.
pub fn json(value: &serde_json::Value) -> io::Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(io::Error::other)?;
    line(text)
}

/// Prints a JSON value on one line (for JSON-lines streams), and flushes.
pub fn json_line(value: &serde_json::Value) -> io::Result<()> {
    let mut out = io::stdout().lock();
    serde_json::to_writer(&mut out, value).map_err(io::Error::other)?;
    writeln!(out)?;
    out.flush()
}

/// Cuts `text` to its first line and at most `max` characters, marking a cut with `…`.
pub fn truncate(text: &str, max: usize) -> String {
    let first = text.lines().next().unwrap_or("");
    let multi = first.len() < text.trim_end().len();
    if first.chars().count() <= max && !multi {
        return first.to_string();
    }
    let keep: String = first.chars().take(max.saturating_sub(1)).collect();
    format!("{keep}…")
}

/// A table of text with a header row, printed with columns aligned by two spaces.
#[derive(Debug, Default)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers.
    pub fn new<S: Into<String>>(headers: impl IntoIterator<Item = S>) -> Self {
        Self {
            headers: headers.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells print empty, extra cells are kept.
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    /// Renders the table, one string per line, trailing spaces trimmed.
    pub fn render(&self) -> Vec<String> {
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
                widths[i] = widths[i].max(cell.chars().count());
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
                    text.push_str(cell);
                    let pad = width - cell.chars().count();
                    text.extend(std::iter::repeat_n(' ', pad));
                }
                text.trim_end().to_string()
            })
            .collect()
    }

    /// Prints the table to stdout.
    pub fn print(&self) -> io::Result<()> {
        for text in self.render() {
            line(text)?;
        }
        Ok(())
    }
}

/// Prints `label  value` pairs with the labels padded to one width.
pub fn print_fields(fields: &[(&str, String)]) -> io::Result<()> {
    let width = fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (label, value) in fields {
        line(format!("{label:<width$}  {value}").trim_end())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn truncates() {
        assert_eq!(truncate("short", 10), "short");
        assert_eq!(truncate("exactly10!", 10), "exactly10!");
        assert_eq!(truncate("this is too long", 10), "this is t…");
        assert_eq!(truncate("line one\nline two", 40), "line one…");
        assert_eq!(truncate("trailing newline\n", 40), "trailing newline");
        assert_eq!(truncate("", 5), "");
    }
}
