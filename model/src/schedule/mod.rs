//! Schedules: when a schedule fires ([`spec`]), what one fire is called and
//! starts with ([`Fire`]), and the state machine of a schedule under its policies
//! ([`state`]). Pure and clock-free: every time is passed in as [`Millis`], so the
//! writer evaluates schedules against the server's clock.
//!
//! Storage (`store/records/schedules.rs`), the writer's schedule commands, the
//! `Schedules` service and the fire path build on this (see
//! `docs/schedules.md`).

pub mod cron;
pub mod interval;
pub mod spec;
pub mod state;

#[cfg(test)]
mod crontab_tests;
#[cfg(test)]
mod state_tests;
#[cfg(test)]
mod tests;

use chrono::{DateTime, Utc};

pub use cron::{CronField, CronProblem};
pub use interval::IntervalProblem;
pub use spec::{ScheduleSpec, SpecDoc, SpecError};
pub use state::{Effect, Origin, Overlap, Policies, Schedule};

use crate::Millis;
use crate::ids::{MAX_NAME, NAME_CHARACTERS, NameError, check_name};
use crate::template::fire::FireValues;

/// The last instant a schedule may fire: 9999-12-31T23:59:59.999Z, so every due
/// time has a four-digit year in a run id.
pub const MAX_TIME: Millis = 253_402_300_799_999;

/// Length of what a fire's run id adds to the schedule id:
/// `-2026-03-22T09:00:00.000Z`.
pub const RUN_ID_SUFFIX_LEN: usize = 25;

/// Longest schedule id, in bytes: a fire's run id (the id, `-`, and the due time
/// to the millisecond) must still be a valid run id of at most [`MAX_NAME`] bytes.
pub const MAX_SCHEDULE_ID: usize = MAX_NAME - RUN_ID_SUFFIX_LEN;

/// Why a schedule id or a fire was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FireError {
    /// The schedule id is empty.
    #[error("schedule id is empty")]
    EmptyScheduleId,
    #[error(
        "schedule id is {len} bytes; at most {MAX_SCHEDULE_ID}, so that a fire's run id \
         (the id and {RUN_ID_SUFFIX_LEN} bytes of due time) stays within {MAX_NAME}"
    )]
    /// The schedule id is too long.
    ScheduleIdTooLong {
        /// Its length, in bytes.
        len: usize,
    },
    /// The schedule id holds a character names may not.
    #[error("schedule id may hold only {NAME_CHARACTERS}")]
    ScheduleIdCharacter,
    /// A due time outside the years 1970 to 9999.
    #[error("due time {0} ms is outside 1970-01-01 to 9999-12-31")]
    DueOutOfRange(Millis),
}

/// The rule for a schedule id: a name (`ids::check_name`) of at most
/// [`MAX_SCHEDULE_ID`] bytes.
pub fn check_schedule_id(id: &str) -> Result<(), FireError> {
    match check_name(id) {
        Err(NameError::Empty) => Err(FireError::EmptyScheduleId),
        Err(NameError::BadCharacter | NameError::Dots) => Err(FireError::ScheduleIdCharacter),
        Err(NameError::TooLong { len }) => Err(FireError::ScheduleIdTooLong { len }),
        Ok(()) if id.len() > MAX_SCHEDULE_ID => Err(FireError::ScheduleIdTooLong { len: id.len() }),
        Ok(()) => Ok(()),
    }
}

/// One fire of a schedule: the schedule and the (nominal, unjittered) time it was
/// due. Its run id and rendered templates depend on nothing else, so the same fire
/// always yields the same run, and starting it twice is refused as a duplicate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fire {
    schedule_id: String,
    due: Millis,
    due_time: DateTime<Utc>,
}

impl Fire {
    /// The fire of `schedule_id` due at `due`.
    pub fn new(schedule_id: &str, due: Millis) -> Result<Self, FireError> {
        check_schedule_id(schedule_id)?;
        let due_time = DateTime::from_timestamp_millis(due)
            .filter(|_| (0..=MAX_TIME).contains(&due))
            .ok_or(FireError::DueOutOfRange(due))?;
        Ok(Self {
            schedule_id: schedule_id.to_string(),
            due,
            due_time,
        })
    }

    /// When the fire was due.
    pub fn due(&self) -> Millis {
        self.due
    }

    /// The run id of this fire: `<schedule id>-<due time, RFC 3339 UTC to the
    /// millisecond>`, like `nightly-2026-03-22T09:00:00.000Z`. The suffix has a
    /// fixed length, so distinct (schedule, due time) pairs never share a run id.
    pub fn run_id(&self) -> String {
        format!(
            "{}-{}",
            self.schedule_id,
            self.due_time.format("%Y-%m-%dT%H:%M:%S%.3fZ")
        )
    }

    /// The due time as `{{scheduledTime}}` renders it: RFC 3339 UTC, with
    /// milliseconds only when there are any (`2026-03-22T09:00:00Z`).
    pub fn scheduled_time(&self) -> String {
        self.due_time.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
    }

    /// `template` with `{{scheduledTime}}` and `{{scheduleId}}` filled
    /// ([`crate::template::fire`]); any other `{{...}}` (a prompt's
    /// `{{context.KEY}}`) is left for the workflow to fill.
    /// The result is at most eight times the template's length (the 14 bytes of
    /// `{{scheduleId}}` become at most [`MAX_SCHEDULE_ID`]), so a bounded goal
    /// stays bounded.
    pub fn render(&self, template: &str) -> String {
        crate::template::fire::render(
            template,
            &FireValues {
                scheduled_time: &self.scheduled_time(),
                schedule_id: &self.schedule_id,
            },
        )
    }
}
