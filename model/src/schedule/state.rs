//! A schedule's state machine, pure like the run model: [`Schedule`] holds the
//! spec, action, policies and state, and has one method per input (`due`,
//! `run_closed`, `trigger`, `backfill`, `pause`, `unpause`, `update`). Each checks
//! everything before it changes anything and appends what the writer must do as
//! [`Effect`]s: start a fire's run, request cancellation of a run, terminate runs
//! and start one in the same commit, arm the schedule's next timer.
//!
//! The overlap policies have Temporal's meanings. "Busy" means a run this schedule
//! started is open, or a start is waiting in the buffer:
//!
//! | policy | busy |
//! |---|---|
//! | `SKIP` | the fire is skipped and counted (`skipped_overlap`) |
//! | `BUFFER_ONE` | buffered if the buffer is empty, else skipped and counted |
//! | `BUFFER_ALL` | buffered (at most [`MAX_BUFFER`]; beyond, counted as `buffer_overflow`) |
//! | `CANCEL_OTHER` | cancellation of the open runs is requested; the fire waits in the buffer (replacing what waited there, which is counted as skipped) and starts when they have closed |
//! | `TERMINATE_OTHER` | the open runs are terminated and the fire starts, in one commit |
//! | `ALLOW_ALL` | starts anyway (at most [`MAX_RUNNING`] open; beyond, counted as `buffer_overflow`) |
//!
//! A buffered start runs when the last open run closes, oldest first. Buffered and
//! started fires use up remaining actions; skipped ones do not.

use std::collections::{BTreeMap, VecDeque};

use super::{Fire, ScheduleSpec};
use crate::Millis;
use crate::run::RunStatus;
use crate::text::clip;

/// The catch-up window when none is set: one year, like Temporal's clients.
pub const DEFAULT_CATCHUP_WINDOW_MS: Millis = 365 * 86_400_000;
/// The shortest catch-up window.
pub const MIN_CATCHUP_WINDOW_MS: Millis = 1_000;
/// Most starts waiting in a schedule's buffer.
pub const MAX_BUFFER: usize = 1_000;
/// Most runs of one schedule open at once (under `ALLOW_ALL`).
pub const MAX_RUNNING: usize = 1_000;
/// Recent actions and recent missed fires kept for describe, each.
pub const MAX_RECENT: usize = 20;
/// Most due times one evaluation takes or counts; the rest are taken by the next
/// one, which is armed at once, so a long outage never makes one huge commit.
pub const MAX_DUE_PER_EVALUATION: usize = 1_000;
/// Most fire times one backfill may cover.
pub const MAX_BACKFILL_FIRES: usize = 1_000;
/// Recent request ids remembered for idempotent create and patch.
pub const MAX_REQUEST_IDS: usize = 32;

/// What to do with a fire while the schedule is busy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Overlap {
    /// Skip the fire.
    #[default]
    Skip,
    /// Buffer it if nothing waits yet, else skip it.
    BufferOne,
    /// Buffer it.
    BufferAll,
    /// Request cancellation of the open runs; start when they have closed.
    CancelOther,
    /// Terminate the open runs and start, in one commit.
    TerminateOther,
    /// Start anyway.
    AllowAll,
}

impl Overlap {
    /// The policy's name, as in the API.
    pub fn name(self) -> &'static str {
        match self {
            Self::Skip => "SKIP",
            Self::BufferOne => "BUFFER_ONE",
            Self::BufferAll => "BUFFER_ALL",
            Self::CancelOther => "CANCEL_OTHER",
            Self::TerminateOther => "TERMINATE_OTHER",
            Self::AllowAll => "ALLOW_ALL",
        }
    }

    /// Every policy.
    pub const ALL: [Overlap; 6] = [
        Self::Skip,
        Self::BufferOne,
        Self::BufferAll,
        Self::CancelOther,
        Self::TerminateOther,
        Self::AllowAll,
    ];
}

/// Where a fire came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The spec's own due time.
    Schedule,
    /// A trigger-now request.
    Trigger,
    /// A backfill request.
    Backfill,
}

impl Origin {
    /// `schedule`, `trigger` or `backfill`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Schedule => "schedule",
            Self::Trigger => "trigger",
            Self::Backfill => "backfill",
        }
    }
}

/// Why a fire started no run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissReason {
    /// The schedule was busy and the policy said skip (or a newer fire replaced it).
    SkippedOverlap,
    /// Due longer ago than the catch-up window when the server got to it.
    MissedCatchupWindow,
    /// The buffer (or the open runs under `ALLOW_ALL`) was full.
    BufferOverflow,
    /// The start itself was refused (the workflow is no longer loaded).
    StartFailed,
}

impl MissReason {
    /// The reason as describe and the metrics show it.
    pub fn name(self) -> &'static str {
        match self {
            Self::SkippedOverlap => "skipped_overlap",
            Self::MissedCatchupWindow => "missed_catchup_window",
            Self::BufferOverflow => "buffer_overflow",
            Self::StartFailed => "start_failed",
        }
    }
}

/// A schedule's policies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policies {
    /// What to do with a fire while the schedule is busy.
    pub overlap: Overlap,
    /// How late a fire may still be taken; older ones are counted as missed.
    pub catchup_window_ms: Millis,
    /// Pause the schedule when a run it started fails.
    pub pause_on_failure: bool,
}

impl Default for Policies {
    fn default() -> Self {
        Self {
            overlap: Overlap::Skip,
            catchup_window_ms: DEFAULT_CATCHUP_WINDOW_MS,
            pause_on_failure: false,
        }
    }
}

/// What a fire starts: a run of `workflow_id`, goal and context values being
/// templates over `{{scheduledTime}}` and `{{scheduleId}}`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Action {
    /// The workflow each fire runs.
    pub workflow_id: String,
    /// Empty: the workflow's own queue.
    pub task_queue: String,
    /// The goal, a template.
    pub goal: String,
    /// The context, each value a template.
    pub context: BTreeMap<String, String>,
    /// Search attributes of each run it starts (name → text, not templates), read
    /// by the namespace's declarations at each fire.
    pub attributes: BTreeMap<String, String>,
    /// The priority of each run it starts, 1 to 5 (0: 3).
    pub priority: u32,
    /// The fairness key of each run it starts (empty: none).
    pub fairness_key: String,
}

/// A fire to take: its due time, the policy it asked for (`None`: the schedule's,
/// resolved when it is taken) and where it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pending {
    /// When it was due.
    pub due: Millis,
    /// The policy it asked for (none: the schedule's).
    pub overlap: Option<Overlap>,
    /// Where it came from.
    pub origin: Origin,
}

/// A fire that started a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionRecord {
    /// When it was due.
    pub due: Millis,
    /// When the run was started.
    pub actual: Millis,
    /// The run it started.
    pub run_id: String,
    /// The run's status as last seen.
    pub status: RunStatus,
    /// Where it came from.
    pub origin: Origin,
}

/// A fire that started no run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissedRecord {
    /// When it was due.
    pub due: Millis,
    /// Why it started no run.
    pub reason: MissReason,
    /// When it was counted.
    pub recorded: Millis,
}

/// Full counts of what the schedule did and did not do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Fires that started a run.
    pub taken: u64,
    /// Fires skipped because the schedule was busy.
    pub skipped_overlap: u64,
    /// Fires older than the catch-up window.
    pub missed_catchup_window: u64,
    /// Fires the full buffer (or the open-run cap) turned away.
    pub buffer_overflow: u64,
    /// Starts that were refused.
    pub start_failed: u64,
}

impl Counters {
    /// The count for `reason`.
    pub fn missed(&self, reason: MissReason) -> u64 {
        match reason {
            MissReason::SkippedOverlap => self.skipped_overlap,
            MissReason::MissedCatchupWindow => self.missed_catchup_window,
            MissReason::BufferOverflow => self.buffer_overflow,
            MissReason::StartFailed => self.start_failed,
        }
    }

    fn bump(&mut self, reason: MissReason) {
        let c = match reason {
            MissReason::SkippedOverlap => &mut self.skipped_overlap,
            MissReason::MissedCatchupWindow => &mut self.missed_catchup_window,
            MissReason::BufferOverflow => &mut self.buffer_overflow,
            MissReason::StartFailed => &mut self.start_failed,
        };
        *c += 1;
    }
}

/// A run to start for a fire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartFire {
    /// When it was due.
    pub due: Millis,
    /// The run id to start it as.
    pub run_id: String,
    /// Where it came from.
    pub origin: Origin,
}

/// What the writer must do after an input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Start the fire's run (an existing run of that id counts as started).
    Start(StartFire),
    /// Request cancellation of a run (a closed one is left as it is).
    RequestCancel {
        /// The run.
        run_id: String,
    },
    /// Terminate these runs and start the fire's run, in one commit.
    TerminateAndStart {
        /// The runs to terminate.
        terminate: Vec<String>,
        /// The run to start.
        start: StartFire,
    },
    /// Keep one timer at this time (`None`: no timer), replacing the current one.
    ArmTimer(Option<Millis>),
}

/// Why an input was refused. Nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The schedule has no remaining actions.
    #[error("the schedule has no remaining actions")]
    NoRemainingActions,
    /// A backfill range ends before it starts.
    #[error("backfill[{index}]: start time {start} ms is after end time {end} ms")]
    BackfillReversed {
        /// The range's index in the request.
        index: usize,
        /// Its start time.
        start: Millis,
        /// Its end time.
        end: Millis,
    },
    /// A backfill range ends in the future.
    #[error("backfill[{index}]: end time {end} ms is in the future (now {now} ms); backfill covers the past")]
    BackfillInFuture {
        /// The range's index in the request.
        index: usize,
        /// Its end time.
        end: Millis,
        /// The time now.
        now: Millis,
    },
    /// The backfill ranges hold more than [`MAX_BACKFILL_FIRES`] fire times.
    #[error("backfill: the ranges hold more than {MAX_BACKFILL_FIRES} fire times; backfill a shorter range")]
    BackfillTooMany,
}

/// One schedule: what it is and where it stands.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    /// Its namespace.
    pub namespace: String,
    /// Its id.
    pub id: String,
    /// When it fires.
    pub spec: ScheduleSpec,
    /// What a fire starts.
    pub action: Action,
    /// Its policies.
    pub policies: Policies,
    /// Free text kept with it.
    pub memo: String,
    /// Paused: due times pass without fires.
    pub paused: bool,
    /// Why it is (or was last) paused or unpaused.
    pub note: String,
    /// Actions it may still take (`None`: unlimited).
    pub remaining: Option<u64>,
    /// Every due time at or before this has been taken or counted.
    pub cursor: Millis,
    /// Runs it started that are open, oldest first.
    pub running: Vec<String>,
    /// Starts waiting for the open runs to close, oldest first.
    pub buffer: VecDeque<Pending>,
    /// The last fires that started a run (at most [`MAX_RECENT`]).
    pub recent_actions: VecDeque<ActionRecord>,
    /// The last fires that started none (at most [`MAX_RECENT`]).
    pub recent_missed: VecDeque<MissedRecord>,
    /// Full counts of what it did and did not do.
    pub counters: Counters,
    /// When it was created.
    pub create_ms: Millis,
    /// When it was last changed.
    pub update_ms: Millis,
    /// Recent create and patch request ids, for idempotent retries.
    pub request_ids: VecDeque<String>,
    /// The key of its timer row, kept by the writer (not by the inputs).
    pub timer: Option<(Millis, u64)>,
}

/// What a new schedule is made of.
#[derive(Debug, Clone)]
pub struct NewSchedule {
    /// Its namespace.
    pub namespace: String,
    /// Its id.
    pub id: String,
    /// When it fires.
    pub spec: ScheduleSpec,
    /// What a fire starts.
    pub action: Action,
    /// Its policies.
    pub policies: Policies,
    /// Free text kept with it.
    pub memo: String,
    /// Created paused.
    pub paused: bool,
    /// Why it is paused (empty: no reason given).
    pub note: String,
    /// Actions it may take (none: unlimited).
    pub remaining: Option<u64>,
}

/// A full replacement of what a schedule is (its state stays).
#[derive(Debug, Clone)]
pub struct ScheduleUpdate {
    /// When it fires.
    pub spec: ScheduleSpec,
    /// What a fire starts.
    pub action: Action,
    /// Its policies.
    pub policies: Policies,
    /// Actions it may still take (none: unlimited).
    pub remaining: Option<u64>,
    /// Free text kept with it.
    pub memo: String,
}

fn push_bounded<T>(q: &mut VecDeque<T>, item: T, max: usize) {
    q.push_back(item);
    while q.len() > max {
        q.pop_front();
    }
}

impl Schedule {
    /// A new schedule at `now`: it takes due times after `now` only. Arms its
    /// first timer (none while paused).
    pub fn create(n: NewSchedule, now: Millis, out: &mut Vec<Effect>) -> Self {
        let s = Self {
            namespace: n.namespace,
            id: n.id,
            spec: n.spec,
            action: n.action,
            policies: n.policies,
            memo: n.memo,
            paused: n.paused,
            note: n.note,
            remaining: n.remaining,
            cursor: now,
            running: Vec::new(),
            buffer: VecDeque::new(),
            recent_actions: VecDeque::new(),
            recent_missed: VecDeque::new(),
            counters: Counters::default(),
            create_ms: now,
            update_ms: now,
            request_ids: VecDeque::new(),
            timer: None,
        };
        s.arm(out);
        s
    }

    /// When the next due time comes, jitter included: `None` when paused, out of
    /// actions, or past the spec's end.
    pub fn next_fire(&self) -> Option<Millis> {
        if self.paused || self.remaining == Some(0) {
            return None;
        }
        let due = self.spec.next_after(self.cursor)?;
        Some(due + self.spec.jitter_for(&self.id, due))
    }

    /// Up to `n` coming fire times, jitter included, in due order (empty while paused).
    pub fn next_fires(&self, n: usize) -> Vec<Millis> {
        if self.paused {
            return Vec::new();
        }
        self.spec
            .upcoming_limited(self.cursor, n, self.remaining)
            .into_iter()
            .map(|due| due + self.spec.jitter_for(&self.id, due))
            .collect()
    }

    /// Whether a start is open or waiting.
    pub fn busy(&self) -> bool {
        !self.running.is_empty() || !self.buffer.is_empty()
    }

    fn arm(&self, out: &mut Vec<Effect>) {
        out.push(Effect::ArmTimer(self.next_fire()));
    }

    /// Remembers a request id; true when it was seen before (the request was applied).
    pub fn seen_request(&mut self, request_id: &str) -> bool {
        if request_id.is_empty() {
            return false;
        }
        if self.request_ids.iter().any(|r| r == request_id) {
            return true;
        }
        push_bounded(&mut self.request_ids, request_id.to_string(), MAX_REQUEST_IDS);
        false
    }

    /// The timer came: takes every due time whose (jittered) time has come, in
    /// order. One older than the catch-up window is counted as missed instead.
    /// Paused or out of actions, nothing is taken. Re-arms the timer.
    pub fn due(&mut self, now: Millis, out: &mut Vec<Effect>) {
        if self.paused || self.remaining == Some(0) {
            self.arm(out);
            return;
        }
        let window = self.policies.catchup_window_ms;
        let mut evaluated = 0;
        while let Some(due) = self.spec.next_after(self.cursor) {
            if due + self.spec.jitter_for(&self.id, due) > now || self.remaining == Some(0) {
                break;
            }
            if evaluated == MAX_DUE_PER_EVALUATION {
                // The rest in the next evaluation, right away.
                out.push(Effect::ArmTimer(Some(now)));
                return;
            }
            evaluated += 1;
            self.cursor = due;
            if now.saturating_sub(due) > window {
                self.miss(due, MissReason::MissedCatchupWindow, now);
                continue;
            }
            self.take(
                Pending {
                    due,
                    overlap: None,
                    origin: Origin::Schedule,
                },
                now,
                out,
            );
        }
        self.arm(out);
    }

    /// A run this schedule started has closed with `status` (`failure` says why,
    /// when it failed). Updates its recent action; under `pauseOnFailure`, a failed
    /// or timed-out run pauses the schedule with a note naming it; when no run is
    /// left open, the oldest buffered start runs.
    pub fn run_closed(
        &mut self,
        run_id: &str,
        status: RunStatus,
        failure: &str,
        now: Millis,
        out: &mut Vec<Effect>,
    ) {
        for a in self.recent_actions.iter_mut().filter(|a| a.run_id == run_id) {
            a.status = status;
        }
        let Some(at) = self.running.iter().position(|r| r == run_id) else {
            return;
        };
        self.running.remove(at);
        if self.policies.pause_on_failure
            && matches!(status, RunStatus::Failed | RunStatus::TimedOut)
            && !self.paused
        {
            self.paused = true;
            self.note = if failure.is_empty() {
                format!("paused on failure: run {run_id} {}", status.name())
            } else {
                format!(
                    "paused on failure: run {run_id} {}: {}",
                    status.name(),
                    clip(failure)
                )
            };
            self.update_ms = now;
            self.arm(out);
        }
        self.drain(now, out);
    }

    /// The start of `run_id` was refused (its workflow is gone): the fire is
    /// counted as `start_failed` instead of taken, and its action given back.
    pub fn start_failed(&mut self, run_id: &str, due: Millis, now: Millis, out: &mut Vec<Effect>) {
        self.running.retain(|r| r != run_id);
        self.recent_actions.retain(|a| a.run_id != run_id);
        self.counters.taken = self.counters.taken.saturating_sub(1);
        if let Some(r) = &mut self.remaining {
            *r += 1;
        }
        self.miss(due, MissReason::StartFailed, now);
        self.drain(now, out);
    }

    /// Trigger now: a fire due `now`, under `overlap` (the schedule's when `None`).
    /// Returns the run id when it started at once.
    pub fn trigger(
        &mut self,
        overlap: Option<Overlap>,
        now: Millis,
        out: &mut Vec<Effect>,
    ) -> Result<Option<String>, Refusal> {
        if self.remaining == Some(0) {
            return Err(Refusal::NoRemainingActions);
        }
        let before = out.len();
        self.take(
            Pending {
                due: now,
                overlap,
                origin: Origin::Trigger,
            },
            now,
            out,
        );
        self.arm(out);
        Ok(out[before..].iter().find_map(|e| match e {
            Effect::Start(s) | Effect::TerminateAndStart { start: s, .. } => Some(s.run_id.clone()),
            _ => None,
        }))
    }

    /// The spec's due times in each inclusive range `(start, end, overlap)`, taken
    /// in order as if the schedule had run then, under the range's policy
    /// (`BUFFER_ALL` when `None`), ignoring pause, jitter and the catch-up window.
    /// Returns how many fires were taken (stopping when actions run out).
    pub fn backfill(
        &mut self,
        ranges: &[(Millis, Millis, Option<Overlap>)],
        now: Millis,
        out: &mut Vec<Effect>,
    ) -> Result<usize, Refusal> {
        let mut fires = Vec::new();
        for (index, &(start, end, overlap)) in ranges.iter().enumerate() {
            if start > end {
                return Err(Refusal::BackfillReversed { index, start, end });
            }
            if end > now {
                return Err(Refusal::BackfillInFuture { index, end, now });
            }
            let room = MAX_BACKFILL_FIRES + 1 - fires.len();
            let times = self.spec.upcoming(start.saturating_sub(1), room);
            for due in times.into_iter().take_while(|&t| t <= end) {
                // Overlapping ranges name a due time once.
                if !fires.iter().any(|&(d, _)| d == due) {
                    fires.push((due, overlap.unwrap_or(Overlap::BufferAll)));
                }
            }
            if fires.len() > MAX_BACKFILL_FIRES {
                return Err(Refusal::BackfillTooMany);
            }
        }
        let mut taken = 0;
        for (due, overlap) in fires {
            if self.remaining == Some(0) {
                break;
            }
            taken += 1;
            self.take(
                Pending {
                    due,
                    overlap: Some(overlap),
                    origin: Origin::Backfill,
                },
                now,
                out,
            );
        }
        self.arm(out);
        Ok(taken)
    }

    /// Pauses: no due time is taken (or counted) until unpaused.
    pub fn pause(&mut self, note: &str, now: Millis, out: &mut Vec<Effect>) {
        self.paused = true;
        self.note = note.to_string();
        self.update_ms = now;
        self.arm(out);
    }

    /// Unpauses: due times from now on are taken (those that passed while paused
    /// are not), and a waiting buffered start runs if nothing is open.
    pub fn unpause(&mut self, note: &str, now: Millis, out: &mut Vec<Effect>) {
        if self.paused {
            self.cursor = self.cursor.max(now);
        }
        self.paused = false;
        self.note = note.to_string();
        self.update_ms = now;
        self.drain(now, out);
        self.arm(out);
    }

    /// Replaces spec, action, policies, the remaining actions and memo; the state
    /// stays. The new spec's due times are taken from now on.
    pub fn update(&mut self, u: ScheduleUpdate, now: Millis, out: &mut Vec<Effect>) {
        self.spec = u.spec;
        self.action = u.action;
        self.policies = u.policies;
        self.remaining = u.remaining;
        self.memo = u.memo;
        self.cursor = self.cursor.max(now);
        self.update_ms = now;
        self.arm(out);
    }

    /// Takes one fire under its policy.
    fn take(&mut self, p: Pending, now: Millis, out: &mut Vec<Effect>) {
        let policy = p.overlap.unwrap_or(self.policies.overlap);
        if policy == Overlap::AllowAll {
            if self.running.len() >= MAX_RUNNING {
                self.miss(p.due, MissReason::BufferOverflow, now);
            } else {
                self.use_action();
                let start = self.start(p, now);
                out.push(Effect::Start(start));
            }
            return;
        }
        if !self.busy() {
            self.use_action();
            let start = self.start(p, now);
            out.push(Effect::Start(start));
            return;
        }
        match policy {
            Overlap::Skip => self.miss(p.due, MissReason::SkippedOverlap, now),
            Overlap::BufferOne if !self.buffer.is_empty() => {
                self.miss(p.due, MissReason::SkippedOverlap, now)
            }
            Overlap::BufferAll if self.buffer.len() >= MAX_BUFFER => {
                self.miss(p.due, MissReason::BufferOverflow, now)
            }
            Overlap::BufferOne | Overlap::BufferAll => {
                self.use_action();
                self.buffer.push_back(p);
            }
            Overlap::CancelOther => {
                self.displace_buffer(now);
                for run_id in &self.running {
                    out.push(Effect::RequestCancel {
                        run_id: run_id.clone(),
                    });
                }
                self.use_action();
                self.buffer.push_back(p);
                // Paused with nothing open, the wait is for the unpause.
            }
            Overlap::TerminateOther => {
                self.displace_buffer(now);
                let terminate = std::mem::take(&mut self.running);
                self.use_action();
                let start = self.start(p, now);
                out.push(Effect::TerminateAndStart { terminate, start });
            }
            Overlap::AllowAll => {}
        }
    }

    /// Buffered starts replaced by a newer fire count as skipped, and give back
    /// their action.
    fn displace_buffer(&mut self, now: Millis) {
        for old in std::mem::take(&mut self.buffer) {
            if let Some(r) = &mut self.remaining {
                *r += 1;
            }
            self.miss(old.due, MissReason::SkippedOverlap, now);
        }
    }

    /// Starts the oldest buffered start when no run is open and not paused.
    fn drain(&mut self, now: Millis, out: &mut Vec<Effect>) {
        if self.paused || !self.running.is_empty() {
            return;
        }
        if let Some(p) = self.buffer.pop_front() {
            let start = self.start(p, now);
            out.push(Effect::Start(start));
        }
    }

    fn use_action(&mut self) {
        if let Some(r) = &mut self.remaining {
            *r = r.saturating_sub(1);
        }
    }

    /// Records a start (its action already used).
    fn start(&mut self, p: Pending, now: Millis) -> StartFire {
        let run_id = Fire::new(&self.id, p.due)
            .map(|f| f.run_id())
            .unwrap_or_else(|_| format!("{}-{}", self.id, p.due));
        if !self.running.contains(&run_id) {
            self.running.push(run_id.clone());
        }
        self.counters.taken += 1;
        push_bounded(
            &mut self.recent_actions,
            ActionRecord {
                due: p.due,
                actual: now,
                run_id: run_id.clone(),
                status: RunStatus::Running,
                origin: p.origin,
            },
            MAX_RECENT,
        );
        StartFire {
            due: p.due,
            run_id,
            origin: p.origin,
        }
    }

    fn miss(&mut self, due: Millis, reason: MissReason, now: Millis) {
        self.counters.bump(reason);
        push_bounded(
            &mut self.recent_missed,
            MissedRecord {
                due,
                reason,
                recorded: now,
            },
            MAX_RECENT,
        );
    }
}
