//! A schedule fire's templates, on the engine in [`super`]: a schedule's goal and
//! context values may use `{{scheduledTime}}` and `{{scheduleId}}`, filled when the
//! fire starts its run. Any other `{{...}}` (a prompt's `{{context.KEY}}`) is left
//! as written, for the workflow to fill.
//!
//! The names are matched exactly as written, with no white space inside the
//! braces, and wherever they are written, even inside other braces
//! (`{{ x {{scheduleId}}`): a fire fills what a plain search for `{{scheduleId}}`
//! finds, as it always has.

use std::convert::Infallible;

use super::{Fill, Sink, render_with};

/// What a fire fills its templates with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FireValues<'a> {
    /// `{{scheduledTime}}`: the due time, RFC 3339 UTC.
    pub scheduled_time: &'a str,
    /// `{{scheduleId}}`.
    pub schedule_id: &'a str,
}

/// `template` with `{{scheduledTime}}` and `{{scheduleId}}` filled and everything
/// else as written. The output is bounded by the template's length and the
/// values' (a fire's values are short: see `schedule::Fire::render`).
pub fn render(template: &str, values: &FireValues) -> String {
    let mut out = String::new();
    let Ok(()) = render_with(template, &mut out, |p, out| {
        let value = match p.inner {
            "scheduledTime" => values.scheduled_time,
            "scheduleId" => values.schedule_id,
            _ => return Ok::<_, Infallible>(Fill::Rescan),
        };
        out.push_text(value)?;
        Ok(Fill::Filled)
    });
    out
}
