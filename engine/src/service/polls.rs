//! Polled triggers: the server task that polls each trigger with a source when it
//! is due ([`run`]; the leader's alone, so with several nodes one node polls), and
//! what a poll's items become: each that passes the filters and has an event the
//! trigger counts is rendered with the trigger's templates and started through
//! the same start as a webhook delivery, and the cursor and status are committed
//! with those starts in one writer command ([`RecordPoll`]).
//!
//! At most `max_pollers` polls are in flight at once, and at most half of them for
//! one namespace's triggers or to one API (scheme, host and port), so an API that
//! never answers, or one namespace's many triggers, cannot hold every slot; a
//! request that has no answer within `first_byte_timeout` ends the poll. A slot that
//! frees goes to the namespaces in turn ([`fair_order`]).
//!
//! When to poll comes from the server's `Clock`: a trigger is due at its
//! `next_poll_ms` (at once when made or changed: the API wakes the task), then
//! every `every`, or later after errors (doubling, at most an hour) or when a
//! rate limit says so.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use railyard_model::Millis;
use railyard_model::limits;
use railyard_model::trigger::Trigger;
use railyard_model::trigger::poll::{self, MAX_ERROR, PollState, event_keys, item, matches};
use serde_json::Value;
use tokio::task::JoinSet;

use super::runs::{self, StartRun};
use super::triggers::{HookError, render, render_key};
use super::{Caller, Core, caller};
use crate::delivery::destination::Destinations;
use crate::error::ApiError;
use crate::poller::{self, Fetched, PollLimits};
use crate::writer::{DeliverHook, PollRecorded, PolledItem, RecordPoll};

/// How often the task looks for triggers when none is due sooner (the API wakes
/// it for new ones).
const IDLE_RESCAN_MS: Millis = 60_000;
/// An `updated` event older than the dedup window less this is not counted: its
/// key may be forgotten already.
const WINDOW_MARGIN_MS: Millis = 3_600_000;

/// The poller's settings.
#[derive(Debug, Clone)]
pub struct PollSettings {
    pub limits: PollLimits,
    /// How long an `updated` event's key is remembered (the webhook dedup window).
    pub dedup_retention_ms: u64,
    /// The server's listen addresses: never polled.
    pub own: Vec<std::net::SocketAddr>,
}

/// What a poll in flight holds: its trigger, and its share of the namespace's
/// and the API's slots.
struct Busy {
    key: (String, String),
    host: String,
}

/// Polls every polled trigger when it is due, at most `max_pollers` at once,
/// until shutdown.
pub async fn run(core: Arc<Core>, settings: PollSettings, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let settings = Arc::new(settings);
    let destinations = Arc::new(Destinations::new(
        core.delivery.allow_networks.clone(),
        settings.own.clone(),
    ));
    let client = match poller::client(&settings.limits, destinations.clone()) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "cannot build the poller's HTTP client; polled triggers do not poll");
            return;
        }
    };
    let mut inflight = JoinSet::new();
    let mut busy: HashMap<tokio::task::Id, Busy> = HashMap::new();
    let limits = settings.limits;
    loop {
        let now = core.clock.now_ms();
        let mut wake_at = now.saturating_add(IDLE_RESCAN_MS);
        let polling: HashSet<&(String, String)> = busy.values().map(|b| &b.key).collect();
        let mut per_ns: HashMap<String, usize> = HashMap::new();
        let mut per_host: HashMap<String, usize> = HashMap::new();
        for b in busy.values() {
            *per_ns.entry(b.key.0.clone()).or_default() += 1;
            *per_host.entry(b.host.clone()).or_default() += 1;
        }
        let mut start = Vec::new();
        match polled_triggers(&core) {
            Ok(ts) => {
                for t in fair_order(ts) {
                    let key = (t.namespace.clone(), t.id.clone());
                    let due = t.poll_state.next_poll_ms;
                    if polling.contains(&key) {
                        continue;
                    }
                    if due > now {
                        wake_at = wake_at.min(due);
                        continue;
                    }
                    let host = t
                        .poll
                        .as_ref()
                        .map(|p| crate::delivery::slots::origin(p.base_url()))
                        .unwrap_or_default();
                    let (n, h) = (
                        per_ns.get(&t.namespace).copied().unwrap_or(0),
                        per_host.get(&host).copied().unwrap_or(0),
                    );
                    // A trigger without room now is looked at again when a poll ends.
                    if polling.len() + start.len() < limits.max_pollers.max(1)
                        && n < limits.per_namespace()
                        && h < limits.per_host()
                    {
                        *per_ns.entry(t.namespace.clone()).or_default() += 1;
                        *per_host.entry(host.clone()).or_default() += 1;
                        start.push((Busy { key, host }, t));
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot read the polled triggers"),
        }
        for (b, t) in start {
            let (core, client, settings, destinations) = (
                core.clone(),
                client.clone(),
                settings.clone(),
                destinations.clone(),
            );
            let handle =
                inflight.spawn(async move { poll_one(&core, &client, &destinations, &settings, t).await });
            busy.insert(handle.id(), b);
        }
        tokio::select! {
            _ = core.clock.sleep_until(wake_at) => {}
            _ = core.poll_wake.notified() => {}
            Some(done) = inflight.join_next_with_id(), if !inflight.is_empty() => {
                let id = match done {
                    Ok((id, ())) => id,
                    Err(e) => {
                        tracing::error!(error = %e, "a poll ended abnormally");
                        e.id()
                    }
                };
                busy.remove(&id);
            }
            _ = shutdown.wait_for(|s| *s) => {
                // A poll cut short commits nothing; the next leader repeats it.
                inflight.abort_all();
                return;
            }
        }
    }
}

/// `ts` in the order they get free slots: each namespace's by when they are due, the
/// namespaces taking turns (the first of each, then the second of each, ...), so a
/// namespace with many triggers due does not take every slot that frees before
/// another namespace's one.
fn fair_order(ts: Vec<Trigger>) -> Vec<Trigger> {
    let mut by_ns: std::collections::BTreeMap<String, Vec<Trigger>> = Default::default();
    for t in ts {
        by_ns.entry(t.namespace.clone()).or_default().push(t);
    }
    let mut queues: Vec<std::vec::IntoIter<Trigger>> = by_ns
        .into_values()
        .map(|mut v| {
            v.sort_by_key(|t| t.poll_state.next_poll_ms);
            v.into_iter()
        })
        .collect();
    let mut out = Vec::new();
    loop {
        let before = out.len();
        for q in &mut queues {
            out.extend(q.next());
        }
        if out.len() == before {
            return out;
        }
    }
}

/// Every trigger with a source, in every namespace.
fn polled_triggers(core: &Core) -> Result<Vec<Trigger>, ApiError> {
    let mut out = Vec::new();
    core.store.snapshot()?.triggers(None, "", &mut |t| {
        if t.poll.is_some() {
            out.push(t);
        }
        true
    })?;
    Ok(out)
}

/// The token of `t`, read now if the server's secrets allow it (`Ok(None)`: the
/// trigger names none).
fn token_of(core: &Core, t: &Trigger, reference: &str) -> Result<Option<String>, String> {
    if reference.is_empty() {
        return Ok(None);
    }
    let value = core
        .secrets
        .read(t, reference)
        .map_err(|e| format!("the token: {e}"))?;
    String::from_utf8(value)
        .map(Some)
        .map_err(|_| "the token's environment variable is not UTF-8".to_string())
}

/// One poll of `t`: fetch, render, commit. Failures end up in the trigger's status.
async fn poll_one(
    core: &Core,
    client: &reqwest::Client,
    destinations: &Destinations,
    settings: &PollSettings,
    t: Trigger,
) {
    let Some(src) = t.poll.clone() else { return };
    let started = core.clock.now_ms();
    let fetched = match token_of(core, &t, &src.token) {
        Ok(token) => {
            poller::fetch(
                client,
                destinations,
                &src,
                token.as_deref(),
                &t.poll_state,
                &settings.limits,
                started,
            )
            .await
        }
        Err(e) => Fetched {
            error: Some(e),
            ..Fetched::default()
        },
    };
    let now = core.clock.now_ms();
    let mut state = next_state(&t, &fetched, now);
    let updated_after = now
        .saturating_sub(i64::try_from(settings.dedup_retention_ms).unwrap_or(i64::MAX))
        .saturating_add(WINDOW_MARGIN_MS);
    let items = polled_items(core, &t, &src, &fetched, &mut state, updated_after);
    let found = items.len();
    let cmd = RecordPoll {
        ns: t.namespace.clone(),
        trigger_id: t.id.clone(),
        definition_ms: t.updated_ms,
        items,
        state,
    };
    let outcome = if fetched.not_before.is_some() && fetched.error.is_some() {
        "rate_limited"
    } else if fetched.error.is_some() {
        "error"
    } else if fetched.not_modified {
        "not_modified"
    } else {
        "ok"
    };
    core.metrics
        .record_trigger_poll(&t.namespace, &t.id, outcome, found as u64);
    match core.writer.call(cmd).await {
        Ok(PollRecorded {
            started,
            seen_before,
            failed,
        }) => tracing::info!(
            trigger_id = %t.id, namespace = %t.namespace, outcome, pages = fetched.pages,
            items = fetched.items.len(), started = started.len(), seen_before, failed,
            error = fetched.error.as_deref().unwrap_or(""), "trigger polled"
        ),
        Err(e) => {
            tracing::warn!(trigger_id = %t.id, namespace = %t.namespace, error = %e, "a poll could not be recorded")
        }
    }
}

/// The items of `fetched` that pass the filters and have an event not seen
/// before, each with its start (counting the ones that pass in `state`).
fn polled_items(
    core: &Core,
    t: &Trigger,
    src: &poll::PollSource,
    fetched: &Fetched,
    state: &mut PollState,
    updated_after: Millis,
) -> Vec<PolledItem> {
    let identity = format!("trigger:{}", t.id);
    let caller = caller::internal(core, &t.namespace, &identity);
    let snapshot = core.store.snapshot();
    let mut items = Vec::new();
    for v in &fetched.items {
        let Some(it) = item(src.kind, v) else { continue };
        if !matches(src, &it) {
            continue;
        }
        state.items_seen += 1;
        let keys = event_keys(src, &it, t.poll_state.baseline_ms, updated_after);
        if keys.is_empty() {
            continue;
        }
        // What the snapshot already knows is not rendered again (the command
        // checks again, in its transaction).
        if let Ok(s) = &snapshot
            && keys
                .iter()
                .all(|k| matches!(s.hook_delivery(&t.namespace, &t.id, &k.key), Ok(Some(_))))
        {
            continue;
        }
        let start = match &caller {
            Ok(c) => start_of(core, c, t, v).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        items.push(PolledItem {
            item: format!("#{}", it.id),
            keys,
            start,
        });
    }
    items
}

/// The trigger's cursor and status after `fetched`.
fn next_state(t: &Trigger, fetched: &Fetched, now: Millis) -> PollState {
    let every = t.poll.as_ref().map_or(poll::DEFAULT_EVERY_MS, |p| p.every_ms);
    let mut s = t.poll_state.clone();
    s.polls += 1;
    s.last_poll_ms = now;
    let kind = t.poll.as_ref().map(|p| p.kind).unwrap_or_default();
    // The cursor: the latest change taken (the listing is oldest first, so a poll
    // cut short by its bounds goes on from there).
    if let Some(latest) = fetched
        .items
        .iter()
        .filter_map(|v| item(kind, v))
        .max_by_key(|it| it.updated_ms)
    {
        s.since = latest.updated_at;
    }
    if let Some((url, etag)) = &fetched.etag {
        s.etag_url = url.clone();
        s.etag = etag.clone();
    }
    let wait = match &fetched.error {
        Some(e) => {
            s.errors = s.errors.saturating_add(1);
            s.last_error = railyard_model::text::prefix(e, MAX_ERROR).to_string();
            s.last_error_ms = now;
            poll::backoff_ms(every, s.errors)
        }
        None => {
            s.errors = 0;
            every
        }
    };
    let mut next = now.saturating_add(i64::try_from(wait).unwrap_or(i64::MAX));
    if let Some(nb) = fetched.not_before {
        next = next.max(nb).min(now.saturating_add(poll::MAX_BACKOFF_MS as i64));
    }
    s.next_poll_ms = next;
    s
}

/// An item's start, as a delivery of its JSON would be.
fn start_of(core: &Core, caller: &Caller, t: &Trigger, payload: &Value) -> Result<DeliverHook, HookError> {
    let goal = render("goal", &t.goal, payload, limits::GOAL)?;
    let mut context = std::collections::BTreeMap::new();
    for (k, v) in &t.context {
        let field = format!("context[{}]", railyard_model::echo(k));
        context.insert(k.clone(), render(&field, v, payload, limits::CONTEXT_VALUE)?);
    }
    let key = render_key(t, payload)?;
    let start = runs::prepare(
        core,
        caller,
        StartRun {
            workflow_id: t.workflow_id.clone(),
            goal,
            context,
            callback_url: t.callback_url.clone(),
            task_queue: t.task_queue.clone(),
            ..StartRun::default()
        },
    )?;
    Ok(DeliverHook {
        trigger_id: t.id.clone(),
        delivery_id: String::new(),
        key,
        mode: t.mode,
        workflow_id: t.workflow_id.clone(),
        start,
    })
}
