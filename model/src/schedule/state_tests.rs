//! The schedule state machine under a controlled clock: a small world that applies
//! its effects (runs start, close, get cancelled and terminated) and a timer loop
//! that calls `due` when the armed time comes.

use chrono::DateTime;

use super::state::*;
use super::{ScheduleSpec, SpecDoc};
use crate::Millis;
use crate::run::RunStatus;

const MIN: Millis = 60_000;

fn t(text: &str) -> Millis {
    DateTime::parse_from_rfc3339(text).unwrap().timestamp_millis()
}

fn every(text: &str) -> SpecDoc {
    SpecDoc {
        interval: Some(text.into()),
        ..SpecDoc::default()
    }
}

fn cron(expr: &str, zone: Option<&str>) -> SpecDoc {
    SpecDoc {
        cron: vec![expr.into()],
        time_zone: zone.map(String::from),
        ..SpecDoc::default()
    }
}

/// A schedule and the runs it started, driven like the server drives it.
struct World {
    s: Schedule,
    now: Millis,
    timer: Option<Millis>,
    /// Every run started: (run id, start time).
    started: Vec<(String, Millis)>,
    open: Vec<String>,
    cancel_requested: Vec<String>,
    terminated: Vec<String>,
}

impl World {
    fn new(doc: SpecDoc, overlap: Overlap, now: Millis) -> Self {
        Self::with(
            doc,
            Policies {
                overlap,
                ..Policies::default()
            },
            None,
            now,
        )
    }

    fn with(doc: SpecDoc, policies: Policies, remaining: Option<u64>, now: Millis) -> Self {
        let mut out = Vec::new();
        let s = Schedule::create(
            NewSchedule {
                namespace: "default".into(),
                id: "s".into(),
                spec: ScheduleSpec::new(doc).unwrap(),
                action: Action {
                    attributes: Default::default(),
                    workflow_id: "wf".into(),
                    ..Action::default()
                },
                policies,
                memo: String::new(),
                paused: false,
                note: String::new(),
                remaining,
            },
            now,
            &mut out,
        );
        let mut w = Self {
            s,
            now,
            timer: None,
            started: Vec::new(),
            open: Vec::new(),
            cancel_requested: Vec::new(),
            terminated: Vec::new(),
        };
        w.apply(out);
        w
    }

    fn apply(&mut self, effects: Vec<Effect>) {
        for e in effects {
            match e {
                Effect::Start(f) => self.start(f),
                Effect::RequestCancel { run_id } => self.cancel_requested.push(run_id),
                Effect::TerminateAndStart { terminate, start } => {
                    for id in terminate {
                        self.open.retain(|r| *r != id);
                        self.terminated.push(id.clone());
                        // The close reaches the schedule in the same commit.
                        let mut out = Vec::new();
                        self.s
                            .run_closed(&id, RunStatus::Terminated, "", self.now, &mut out);
                        assert!(out.iter().all(|e| matches!(e, Effect::ArmTimer(_))), "{out:?}");
                    }
                    self.start(start);
                }
                Effect::ArmTimer(at) => self.timer = at,
            }
        }
    }

    fn start(&mut self, f: StartFire) {
        assert!(
            !self.started.iter().any(|(id, _)| *id == f.run_id),
            "{} started twice",
            f.run_id
        );
        self.started.push((f.run_id.clone(), self.now));
        self.open.push(f.run_id);
    }

    /// Moves the clock to `to`, firing the timer whenever it comes.
    fn advance_to(&mut self, to: Millis) {
        while let Some(at) = self.timer.filter(|at| *at <= to) {
            self.now = self.now.max(at);
            let mut out = Vec::new();
            self.s.due(self.now, &mut out);
            self.apply(out);
        }
        self.now = to;
    }

    fn advance(&mut self, by: Millis) {
        self.advance_to(self.now + by);
    }

    fn close(&mut self, run_id: &str, status: RunStatus) {
        self.close_with(run_id, status, "");
    }

    fn close_with(&mut self, run_id: &str, status: RunStatus, failure: &str) {
        assert!(self.open.iter().any(|r| r == run_id), "{run_id} is not open");
        self.open.retain(|r| r != run_id);
        let mut out = Vec::new();
        self.s.run_closed(run_id, status, failure, self.now, &mut out);
        self.apply(out);
    }

    fn last_open(&self) -> String {
        self.open.last().cloned().expect("a run is open")
    }

    /// Run ids started, as their due times' minutes past midnight 2026-01-01.
    fn started_dues(&self) -> Vec<String> {
        self.started
            .iter()
            .map(|(id, _)| id.trim_start_matches("s-").to_string())
            .collect()
    }

    fn missed(&self) -> Vec<(Millis, MissReason)> {
        self.s.recent_missed.iter().map(|m| (m.due, m.reason)).collect()
    }
}

fn base() -> Millis {
    t("2026-01-01T00:00:00Z")
}

fn id_at(ms: Millis) -> String {
    super::Fire::new("s", ms).unwrap().run_id()
}

// ---- SKIP ----

#[test]
fn skip_runs_outlasting_one_two_and_many_intervals() {
    let mut w = World::new(every("every 1m"), Overlap::Skip, base());
    assert_eq!(w.timer, Some(base() + MIN));
    w.advance(MIN);
    assert_eq!(w.open, vec![id_at(base() + MIN)]);
    // Outlasts one interval: the 2-minute fire is skipped.
    w.advance(MIN + 30_000);
    let first = w.last_open();
    w.close(&first, RunStatus::Completed);
    assert_eq!(w.missed(), vec![(base() + 2 * MIN, MissReason::SkippedOverlap)]);
    // The next due time starts again.
    w.advance_to(base() + 3 * MIN);
    assert_eq!(w.open, vec![id_at(base() + 3 * MIN)]);
    // Outlasts two intervals.
    w.advance_to(base() + 5 * MIN + 1);
    let second = w.last_open();
    w.close(&second, RunStatus::Completed);
    // Outlasts many.
    w.advance_to(base() + 6 * MIN);
    w.advance_to(base() + 16 * MIN + 1);
    assert_eq!(w.open, vec![id_at(base() + 6 * MIN)]);
    assert_eq!(
        w.started.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>(),
        vec![
            id_at(base() + MIN),
            id_at(base() + 3 * MIN),
            id_at(base() + 6 * MIN)
        ]
    );
    assert_eq!(w.s.counters.skipped_overlap, 1 + 2 + 10);
    assert_eq!(w.s.counters.taken, 3);
    assert_eq!(
        w.s.recent_actions.iter().map(|a| a.status).collect::<Vec<_>>(),
        vec![RunStatus::Completed, RunStatus::Completed, RunStatus::Running]
    );
}

#[test]
fn completion_failure_and_cancellation_of_the_running_run_free_the_schedule() {
    for status in [
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Canceled,
        RunStatus::TimedOut,
    ] {
        let mut w = World::new(every("every 1m"), Overlap::Skip, base());
        w.advance(MIN);
        let run = w.last_open();
        w.close(&run, status);
        assert!(w.open.is_empty());
        w.advance(MIN);
        assert_eq!(w.open, vec![id_at(base() + 2 * MIN)], "{status:?}");
        assert_eq!(w.s.recent_actions[0].status, status);
        assert!(!w.s.paused, "no pauseOnFailure: never paused");
        assert_eq!(w.s.counters.skipped_overlap, 0);
    }
}

// ---- BUFFER_ONE ----

#[test]
fn buffer_one_keeps_one_start_and_skips_the_rest() {
    let mut w = World::new(every("every 1m"), Overlap::BufferOne, base());
    w.advance(MIN);
    let first = w.last_open();
    // Outlasts one interval: the 2m fire waits.
    w.advance(MIN);
    assert_eq!(
        w.s.buffer.iter().map(|p| p.due).collect::<Vec<_>>(),
        vec![base() + 2 * MIN]
    );
    // Outlasts many: 3m..6m are skipped.
    w.advance(4 * MIN);
    assert_eq!(w.s.buffer.len(), 1);
    assert_eq!(w.s.counters.skipped_overlap, 4);
    w.advance(30_000);
    w.close(&first, RunStatus::Completed);
    // The buffered start runs at once, under its own due time's run id.
    assert_eq!(w.open, vec![id_at(base() + 2 * MIN)]);
    assert_eq!(w.started.last().unwrap().1, base() + 6 * MIN + 30_000);
    assert!(w.s.buffer.is_empty());
    // Nothing buffered now: the next fire is buffered behind the new run.
    w.advance_to(base() + 7 * MIN);
    assert_eq!(w.s.buffer.len(), 1);
}

// ---- BUFFER_ALL ----

#[test]
fn buffer_all_fills_and_drains_in_order() {
    let mut w = World::new(every("every 1m"), Overlap::BufferAll, base());
    w.advance(MIN);
    w.advance(4 * MIN);
    assert_eq!(
        w.s.buffer.iter().map(|p| p.due).collect::<Vec<_>>(),
        (2..=5).map(|m| base() + m * MIN).collect::<Vec<_>>()
    );
    for m in 1..=5 {
        let run = w.last_open();
        assert_eq!(run, id_at(base() + m * MIN));
        w.close(
            &run,
            if m % 2 == 0 {
                RunStatus::Failed
            } else {
                RunStatus::Completed
            },
        );
    }
    // The 6m fire is still ahead; everything owed has run, in due order.
    assert!(w.open.is_empty());
    assert_eq!(w.started.len(), 5);
    assert_eq!(w.s.counters.skipped_overlap + w.s.counters.buffer_overflow, 0);
}

#[test]
fn buffer_all_overflow_at_the_bound_is_counted() {
    let mut w = World::new(every("every 1s"), Overlap::BufferAll, base());
    w.advance(1_000);
    // 1000 buffered, then 5 more overflow.
    w.advance(1_005_000);
    assert_eq!(w.s.buffer.len(), MAX_BUFFER);
    assert_eq!(w.s.counters.buffer_overflow, 5);
    assert_eq!(
        w.missed().last(),
        Some(&(base() + 1_006_000, MissReason::BufferOverflow))
    );
    // Draining keeps order.
    let run = w.last_open();
    w.close(&run, RunStatus::Completed);
    assert_eq!(w.last_open(), id_at(base() + 2_000));
}

// ---- CANCEL_OTHER ----

#[test]
fn cancel_other_requests_cancellation_and_starts_after_the_close() {
    let mut w = World::new(every("every 1m"), Overlap::CancelOther, base());
    w.advance(MIN);
    let first = w.last_open();
    w.advance(MIN);
    assert_eq!(w.cancel_requested, vec![first.clone()]);
    assert_eq!(w.open, vec![first.clone()], "the new one waits for the close");
    // Another fire before the worker stopped: it replaces the waiting one.
    w.advance(MIN);
    assert_eq!(w.cancel_requested, vec![first.clone(), first.clone()]);
    assert_eq!(
        w.s.buffer.iter().map(|p| p.due).collect::<Vec<_>>(),
        vec![base() + 3 * MIN]
    );
    assert_eq!(w.missed(), vec![(base() + 2 * MIN, MissReason::SkippedOverlap)]);
    w.close(&first, RunStatus::Canceled);
    assert_eq!(w.open, vec![id_at(base() + 3 * MIN)]);
    assert_eq!(w.s.recent_actions[0].status, RunStatus::Canceled);
}

// ---- TERMINATE_OTHER ----

#[test]
fn terminate_other_terminates_and_starts_together() {
    let mut w = World::new(every("every 1m"), Overlap::TerminateOther, base());
    w.advance(MIN);
    for m in 2..=4 {
        w.advance(MIN);
        assert_eq!(w.open, vec![id_at(base() + m * MIN)]);
    }
    assert_eq!(
        w.terminated,
        (1..=3).map(|m| id_at(base() + m * MIN)).collect::<Vec<_>>()
    );
    assert_eq!(w.s.running, vec![id_at(base() + 4 * MIN)]);
    assert_eq!(w.s.recent_actions[0].status, RunStatus::Terminated);
    assert_eq!(w.s.counters.taken, 4);
}

// ---- ALLOW_ALL ----

#[test]
fn allow_all_starts_every_fire() {
    let mut w = World::new(every("every 1m"), Overlap::AllowAll, base());
    w.advance(10 * MIN);
    assert_eq!(w.open.len(), 10);
    assert_eq!(w.s.running.len(), 10);
    let third = w.open[2].clone();
    w.close(&third, RunStatus::Completed);
    assert_eq!(w.s.running.len(), 9);
}

// ---- catch-up ----

#[test]
fn catch_up_inside_the_window_takes_the_fires_under_the_policy() {
    // SKIP: the first owed fire starts, the others overlap it.
    let mut w = World::new(every("every 1m"), Overlap::Skip, base());
    // The server was down: the timer is only looked at 5 minutes late.
    w.timer = None;
    w.now = base() + 5 * MIN + 10;
    let mut out = Vec::new();
    w.s.due(w.now, &mut out);
    w.apply(out);
    assert_eq!(w.started_dues(), vec!["2026-01-01T00:01:00.000Z"]);
    assert_eq!(w.s.counters.skipped_overlap, 4);
    assert_eq!(w.timer, Some(base() + 6 * MIN));

    // BUFFER_ALL: all owed fires run, one after another.
    let mut w = World::new(every("every 1m"), Overlap::BufferAll, base());
    let mut out = Vec::new();
    w.now = base() + 5 * MIN;
    w.s.due(w.now, &mut out);
    w.apply(out);
    for _ in 0..5 {
        let run = w.last_open();
        w.close(&run, RunStatus::Completed);
    }
    assert_eq!(w.started.len(), 5);
    assert_eq!(w.s.counters.missed_catchup_window, 0);
}

#[test]
fn catch_up_outside_the_window_counts_missed_fires() {
    let policies = Policies {
        overlap: Overlap::AllowAll,
        catchup_window_ms: 150_000,
        pause_on_failure: false,
    };
    let mut w = World::with(every("every 1m"), policies, None, base());
    let mut out = Vec::new();
    w.now = base() + 10 * MIN;
    w.s.due(w.now, &mut out);
    w.apply(out);
    // 1m..7m are more than 2.5 minutes old; 8m, 9m, 10m are taken.
    assert_eq!(w.s.counters.missed_catchup_window, 7);
    assert_eq!(
        w.missed(),
        (1..=7)
            .map(|m| (base() + m * MIN, MissReason::MissedCatchupWindow))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        w.started_dues(),
        vec![
            "2026-01-01T00:08:00.000Z",
            "2026-01-01T00:09:00.000Z",
            "2026-01-01T00:10:00.000Z"
        ]
    );
}

#[test]
fn a_long_outage_is_evaluated_in_bounded_steps() {
    let policies = Policies {
        overlap: Overlap::Skip,
        catchup_window_ms: 10_000,
        pause_on_failure: false,
    };
    let mut w = World::with(every("every 1s"), policies, None, base());
    let mut out = Vec::new();
    w.now = base() + 2_500_000;
    w.s.due(w.now, &mut out);
    assert_eq!(out, vec![Effect::ArmTimer(Some(w.now))], "more to do, at once");
    w.apply(out);
    w.advance_to(w.now);
    assert_eq!(w.s.counters.missed_catchup_window, 2_489);
    assert_eq!(w.started.len(), 1);
    assert_eq!(w.s.counters.skipped_overlap, 10);
    assert_eq!(w.timer, Some(base() + 2_501_000));
}

// ---- calendars ----

#[test]
fn daylight_saving_in_a_named_zone() {
    // 02:30 New York does not exist on 2026-03-08; 01:30 happens twice on 2026-11-01.
    let mut w = World::new(
        cron("30 2 * * *", Some("America/New_York")),
        Overlap::AllowAll,
        t("2026-03-06T12:00:00Z"),
    );
    w.advance_to(t("2026-03-10T12:00:00Z"));
    assert_eq!(
        w.started_dues(),
        vec![
            "2026-03-07T07:30:00.000Z",
            "2026-03-09T06:30:00.000Z",
            "2026-03-10T06:30:00.000Z"
        ]
    );
    let mut w = World::new(
        cron("30 1 * * *", Some("America/New_York")),
        Overlap::AllowAll,
        t("2026-10-31T12:00:00Z"),
    );
    w.advance_to(t("2026-11-02T12:00:00Z"));
    assert_eq!(
        w.started_dues(),
        vec!["2026-11-01T05:30:00.000Z", "2026-11-02T06:30:00.000Z"]
    );
}

#[test]
fn cron_with_seconds() {
    let mut w = World::new(cron("*/15 * * * * *", None), Overlap::AllowAll, base());
    w.advance(MIN);
    assert_eq!(
        w.started_dues(),
        vec![
            "2026-01-01T00:00:15.000Z",
            "2026-01-01T00:00:30.000Z",
            "2026-01-01T00:00:45.000Z",
            "2026-01-01T00:01:00.000Z"
        ]
    );
}

#[test]
fn interval_with_offset() {
    let mut w = World::new(every("every 15m offset 2m"), Overlap::AllowAll, base());
    w.advance(40 * MIN);
    assert_eq!(
        w.started_dues(),
        vec![
            "2026-01-01T00:02:00.000Z",
            "2026-01-01T00:17:00.000Z",
            "2026-01-01T00:32:00.000Z"
        ]
    );
}

#[test]
fn end_time_stops_the_schedule() {
    let mut doc = every("every 1m");
    doc.end_time = Some("2026-01-01T00:03:00Z".into());
    let mut w = World::new(doc, Overlap::AllowAll, base());
    w.advance(10 * MIN);
    assert_eq!(w.started.len(), 3);
    assert_eq!(w.timer, None, "no timer after the end");
}

#[test]
fn remaining_actions_limit_counts_buffered_starts_and_not_skipped_ones() {
    let mut w = World::with(every("every 1m"), Policies::default(), Some(2), base());
    w.advance(MIN);
    w.advance(3 * MIN); // 2m..4m skipped: no action used
    assert_eq!(w.s.remaining, Some(1));
    let run = w.last_open();
    w.close(&run, RunStatus::Completed);
    w.advance(MIN);
    assert_eq!(w.s.remaining, Some(0));
    assert_eq!(w.timer, None);
    w.advance(10 * MIN);
    assert_eq!(w.started.len(), 2);
    let before = w.s.clone();
    let mut out = Vec::new();
    assert_eq!(
        w.s.trigger(None, w.now, &mut out),
        Err(Refusal::NoRemainingActions)
    );
    assert_eq!(w.s, before, "a refusal changes nothing");
    assert!(out.is_empty());

    let policies = Policies {
        overlap: Overlap::BufferAll,
        ..Policies::default()
    };
    let mut w = World::with(every("every 1m"), policies, Some(3), base());
    w.advance(10 * MIN);
    assert_eq!(
        (w.started.len(), w.s.buffer.len(), w.s.remaining),
        (1, 2, Some(0))
    );
    for _ in 0..3 {
        let run = w.last_open();
        w.close(&run, RunStatus::Completed);
    }
    assert_eq!(w.started.len(), 3);
}

#[test]
fn jitter_delays_the_fire_deterministically() {
    let mut doc = every("every 1h");
    doc.jitter_seconds = Some(600);
    let mut w = World::new(doc, Overlap::Skip, base());
    let jitter = w.s.spec.jitter_for("s", base() + 60 * MIN);
    assert_eq!(w.timer, Some(base() + 60 * MIN + jitter));
    w.advance_to(base() + 60 * MIN + jitter - 1);
    assert!(w.started.is_empty());
    let mut out = Vec::new();
    w.s.due(w.now, &mut out);
    assert_eq!(out, vec![Effect::ArmTimer(Some(base() + 60 * MIN + jitter))]);
    w.advance(1);
    assert_eq!(
        w.started,
        vec![(id_at(base() + 60 * MIN), base() + 60 * MIN + jitter)]
    );
}

// ---- pauseOnFailure, pause, update ----

#[test]
fn pause_on_failure_pauses_with_a_note_naming_the_run() {
    for (status, pauses) in [
        (RunStatus::Failed, true),
        (RunStatus::TimedOut, true),
        (RunStatus::Canceled, false),
        (RunStatus::Terminated, false),
        (RunStatus::Completed, false),
    ] {
        let policies = Policies {
            overlap: Overlap::BufferOne,
            pause_on_failure: true,
            ..Policies::default()
        };
        let mut w = World::with(every("every 1m"), policies, None, base());
        w.advance(MIN);
        let run = w.last_open();
        w.advance(MIN); // one buffered
        w.close_with(&run, status, "step b: tool bash exited 2");
        assert_eq!(w.s.paused, pauses, "{status:?}");
        if pauses {
            assert_eq!(
                w.s.note,
                format!(
                    "paused on failure: run {run} {}: step b: tool bash exited 2",
                    status.name()
                )
            );
            assert_eq!(w.timer, None);
            assert!(w.open.is_empty(), "the buffered start waits for the unpause");
            w.advance(5 * MIN);
            assert_eq!(w.started.len(), 1);
            let mut out = Vec::new();
            w.s.unpause("fixed", w.now, &mut out);
            w.apply(out);
            assert_eq!(w.open, vec![id_at(base() + 2 * MIN)]);
            assert_eq!(w.timer, Some(base() + 8 * MIN));
        } else {
            assert_eq!(w.open, vec![id_at(base() + 2 * MIN)]);
        }
    }
}

#[test]
fn pause_takes_nothing_and_unpause_does_not_catch_up_the_pause() {
    let mut w = World::new(every("every 1m"), Overlap::AllowAll, base());
    let mut out = Vec::new();
    w.s.pause("maintenance", w.now, &mut out);
    w.apply(out);
    assert_eq!(w.timer, None);
    assert!(w.s.next_fires(3).is_empty());
    w.advance(10 * MIN + 30_000);
    let mut out = Vec::new();
    w.s.unpause("done", w.now, &mut out);
    w.apply(out);
    assert_eq!((w.s.paused, w.s.note.as_str()), (false, "done"));
    w.advance(MIN);
    assert_eq!(w.started_dues(), vec!["2026-01-01T00:11:00.000Z"]);
    assert_eq!(
        w.s.counters.missed_catchup_window + w.s.counters.skipped_overlap,
        0
    );
}

#[test]
fn update_replaces_the_spec_from_now_and_keeps_the_state() {
    let mut w = World::new(every("every 1m"), Overlap::Skip, base());
    w.advance(3 * MIN);
    let counters = w.s.counters;
    let mut out = Vec::new();
    w.s.update(
        ScheduleUpdate {
            spec: ScheduleSpec::new(every("every 10m")).unwrap(),
            action: w.s.action.clone(),
            policies: Policies {
                overlap: Overlap::AllowAll,
                ..Policies::default()
            },
            remaining: None,
            memo: "ten".into(),
        },
        w.now,
        &mut out,
    );
    w.apply(out);
    assert_eq!(w.timer, Some(base() + 10 * MIN));
    assert_eq!(w.s.counters, counters);
    assert_eq!(w.s.next_fires(2), vec![base() + 10 * MIN, base() + 20 * MIN]);
}

// ---- trigger, backfill ----

#[test]
fn trigger_uses_its_own_policy_or_the_schedules() {
    let mut w = World::new(every("every 1h"), Overlap::Skip, base());
    let mut out = Vec::new();
    let started = w.s.trigger(None, w.now, &mut out).unwrap();
    assert_eq!(started, Some(id_at(base())));
    w.apply(out);
    w.advance(1);
    // Busy: under SKIP the trigger is skipped; with ALLOW_ALL it starts.
    let mut out = Vec::new();
    assert_eq!(w.s.trigger(None, w.now, &mut out).unwrap(), None);
    assert_eq!(w.missed(), vec![(base() + 1, MissReason::SkippedOverlap)]);
    assert_eq!(
        w.s.trigger(Some(Overlap::AllowAll), w.now + 1, &mut out).unwrap(),
        Some(id_at(base() + 2))
    );
    w.apply(out);
    assert_eq!(w.open.len(), 2);
    assert_eq!(w.s.recent_actions.back().unwrap().origin, Origin::Trigger);
}

#[test]
fn backfill_takes_past_fire_times_in_order_buffered_by_default() {
    let mut w = World::new(every("every 1h"), Overlap::Skip, base() + 24 * 60 * MIN);
    let mut out = Vec::new();
    let n =
        w.s.backfill(
            &[(base() + 60 * MIN, base() + 4 * 60 * MIN, None)],
            w.now,
            &mut out,
        )
        .unwrap();
    assert_eq!(n, 4);
    w.apply(out);
    for _ in 0..4 {
        let run = w.last_open();
        w.close(&run, RunStatus::Completed);
    }
    assert_eq!(
        w.started_dues(),
        vec![
            "2026-01-01T01:00:00.000Z",
            "2026-01-01T02:00:00.000Z",
            "2026-01-01T03:00:00.000Z",
            "2026-01-01T04:00:00.000Z"
        ]
    );
    assert!(w.s.recent_actions.iter().all(|a| a.origin == Origin::Backfill));

    // Overlapping ranges take a due time once.
    let mut out = Vec::new();
    let ranges = [
        (
            base() + 5 * 60 * MIN,
            base() + 6 * 60 * MIN,
            Some(Overlap::AllowAll),
        ),
        (
            base() + 6 * 60 * MIN,
            base() + 7 * 60 * MIN,
            Some(Overlap::AllowAll),
        ),
    ];
    assert_eq!(w.s.backfill(&ranges, w.now, &mut out).unwrap(), 3);
}

#[test]
fn backfill_refusals_change_nothing() {
    let mut w = World::new(every("every 1m"), Overlap::Skip, base() + 10_000 * MIN);
    let before = w.s.clone();
    let now = w.now;
    let mut out = Vec::new();
    assert!(matches!(
        w.s.backfill(&[(base() + 2 * MIN, base() + MIN, None)], now, &mut out),
        Err(Refusal::BackfillReversed { index: 0, .. })
    ));
    assert!(matches!(
        w.s.backfill(
            &[(base(), base() + MIN, None), (base(), now + 1, None)],
            now,
            &mut out
        ),
        Err(Refusal::BackfillInFuture { index: 1, .. })
    ));
    assert_eq!(
        w.s.backfill(&[(base(), base() + 2_000 * MIN, None)], now, &mut out),
        Err(Refusal::BackfillTooMany)
    );
    assert!(out.is_empty());
    assert_eq!(w.s, before);
}

#[test]
fn a_refused_start_is_counted_and_its_action_given_back() {
    let mut w = World::with(every("every 1m"), Policies::default(), Some(5), base());
    w.advance(MIN);
    let run = w.last_open();
    w.open.clear();
    let mut out = Vec::new();
    w.s.start_failed(&run, base() + MIN, w.now, &mut out);
    w.apply(out);
    assert_eq!(w.s.remaining, Some(5));
    assert_eq!(w.s.counters.start_failed, 1);
    assert_eq!(w.s.counters.taken, 0);
    assert!(w.s.running.is_empty());
}
