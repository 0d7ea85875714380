//! Plumbing shared by the client commands: the options every one takes and the
//! connection they lead to, flag value parsers, output (human or `--output json`),
//! how wire messages look, and time formatting.

pub(crate) mod args;
pub(crate) mod global;
pub(crate) mod output;
pub(crate) mod timefmt;
pub(crate) mod view;
