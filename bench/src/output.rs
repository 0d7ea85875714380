//! Printing the figures: the binary's `--output` mode, lines and JSON on stdout. A
//! closed pipe (`railyard bench | head`) is an error returned, never a panic.
//!
//! Every line is the bench's own text: settings, figures and names it chose, none
//! written by a client, so nothing needs escaping before it reaches a terminal.

use std::fmt::Display;
use std::io::{self, Write};

/// How the bench prints its figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Aligned text for people, ending with a Markdown table where there is one.
    Human,
    /// One JSON document with every figure.
    Json,
}

impl Output {
    /// Whether JSON was asked for.
    pub(crate) fn is_json(self) -> bool {
        self == Self::Json
    }
}

/// Prints one line to stdout.
pub(crate) fn line(text: impl Display) -> io::Result<()> {
    let mut out = io::stdout().lock();
    writeln!(out, "{text}")
}

/// Prints a JSON value, pretty, to stdout.
pub(crate) fn json(value: &serde_json::Value) -> io::Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(io::Error::other)?;
    line(text)
}
