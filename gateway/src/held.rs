//! The steps a gateway holds for its agents, each under a lease it keeps alive, and
//! the continue tokens that name them.
//!
//! A continue token is `rct1_` + base64url(`run id \n step id \n attempt \n nonce`),
//! the nonce 128 random bits. It is valid exactly while this gateway process holds
//! that nonce in memory, mapped to the step's raw task token; it is never a wrapper
//! of the task token. So the agent never sees the lease itself, a token dies with
//! the gateway that issued it (a new gateway's `resume_run` takes a fresh lease, and
//! the old token names nothing), a re-issued token retires the one before, and a
//! forged or corrupted one matches nothing. The run and step in clear are only a
//! hint, so a refusal can say which step is current; they grant nothing.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use railyard_proto::v1::{HeartbeatStepTaskRequest, StepTask};
use railyard_sdk::{Client, ClientError};
use tokio::task::JoinHandle;

/// Prefix of every continue token (version 1 of the format).
const PREFIX: &str = "rct1_";
/// Longest continue token accepted for parsing (a run id and a step id are at most
/// 128 bytes each).
const MAX_TOKEN: usize = 512;

/// What a continue token says in clear: a hint, never trusted for access.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TokenHint {
    pub run_id: String,
    pub step_id: String,
    pub attempt: u32,
}

/// Makes a new continue token for a step of a run.
fn new_token(run_id: &str, step_id: &str, attempt: u32) -> String {
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    let raw = format!("{run_id}\n{step_id}\n{attempt}\n{nonce}");
    format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(raw))
}

/// Reads the clear part of a continue token; `None` if it is not one this format makes.
pub(super) fn parse_hint(token: &str) -> Option<TokenHint> {
    if token.len() > MAX_TOKEN {
        return None;
    }
    let bytes = URL_SAFE_NO_PAD.decode(token.strip_prefix(PREFIX)?).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let mut parts = text.split('\n');
    let (run_id, step_id, attempt, nonce) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    // The clear part is echoed in messages: only names as the server allows them.
    let name = |s: &str| {
        !s.is_empty()
            && s.len() <= 128
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.:@".contains(c))
    };
    if parts.next().is_some() || nonce.len() != 32 || !name(run_id) || !name(step_id) {
        return None;
    }
    Some(TokenHint {
        run_id: run_id.to_string(),
        step_id: step_id.to_string(),
        attempt: attempt.parse().ok()?,
    })
}

/// Who a held step belongs to: the credentials of the caller that leased it (the
/// API key and certificate subject an HTTP caller presented; nothing on stdio). Only
/// the same caller may use its continue token, so one caller of `/mcp` cannot
/// complete, re-issue or void another's step.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Owner {
    pub api_key: Option<String>,
    pub peer_subject: Option<String>,
}

/// A step this gateway holds the lease of.
pub(super) struct Held {
    /// The step as leased (its raw task token stays here).
    pub task: StepTask,
    /// The highest signal event id shown to the agent with this step.
    pub shown_signal: u64,
    /// Who leased it.
    pub owner: Owner,
    /// The client it is heartbeated through: its owner's credentials.
    pub client: Client,
    heartbeats: JoinHandle<()>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.heartbeats.abort();
    }
}

/// Why a continue token was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Refused {
    /// Not a continue token at all (corrupted, truncated, made up).
    Malformed,
    /// Well formed but not held here: an earlier step's, a re-issued one's
    /// predecessor, another gateway's, or a forgery.
    NotHeld(TokenHint),
    /// Held, but for another run than the caller said.
    OtherRun(TokenHint),
}

/// The steps held by one gateway process, shared by all its MCP sessions.
#[derive(Clone)]
pub(super) struct Holdings {
    inner: Arc<Mutex<HashMap<String, Held>>>,
    identity: String,
    limit: usize,
}

impl Holdings {
    /// An empty set, heartbeating as `identity`, holding at most `limit` steps.
    pub(super) fn new(identity: String, limit: usize) -> Self {
        Self {
            inner: Arc::default(),
            identity,
            limit,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many steps are held.
    pub(super) fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether another step may be held.
    pub(super) fn has_room(&self) -> bool {
        self.len() < self.limit
    }

    /// Holds a step freshly leased by `owner` through `client`, starts its
    /// heartbeats (through the same client), returns its continue token.
    pub(super) fn hold(&self, task: StepTask, client: Client, owner: Owner) -> String {
        let token = new_token(&task.run_id, &task.step_id, task.attempt);
        let shown_signal = task.signals.iter().map(|s| s.event_id).max().unwrap_or(0);
        self.insert(token.clone(), task, shown_signal, owner, client);
        token
    }

    /// Takes the step a token names out of the set (stopping its heartbeats unless
    /// it is put back). `run_id`, when given, must be the token's run; a step held for
    /// another owner is not held as far as `owner` is concerned.
    pub(super) fn take(
        &self,
        token: &str,
        run_id: Option<&str>,
        owner: &Owner,
    ) -> Result<(String, Held), Refused> {
        let mut held = self.lock();
        // The entry is checked and removed through one borrow of the map, under one lock.
        let entry = match held.entry(token.to_string()) {
            Entry::Occupied(entry) if entry.get().owner == *owner => entry,
            _ => return Err(parse_hint(token).map_or(Refused::Malformed, Refused::NotHeld)),
        };
        let task = &entry.get().task;
        if let Some(run_id) = run_id
            && task.run_id != run_id
        {
            let hint = TokenHint {
                run_id: task.run_id.clone(),
                step_id: task.step_id.clone(),
                attempt: task.attempt,
            };
            return Err(Refused::OtherRun(hint));
        }
        Ok(entry.remove_entry())
    }

    /// The lease token and client of the step `token` names, left held: for calls
    /// that do not end the step (`report_issue`).
    pub(super) fn lease_of(&self, token: &str, owner: &Owner) -> Result<(String, Client), Refused> {
        match self.lock().get(token) {
            Some(h) if h.owner == *owner => Ok((h.task.task_token.clone(), h.client.clone())),
            _ => Err(parse_hint(token).map_or(Refused::Malformed, Refused::NotHeld)),
        }
    }

    /// Puts back a step taken by [`take`](Self::take) whose report did not go through
    /// (the server was unreachable): the same token stays valid, heartbeats resume.
    pub(super) fn put_back(&self, token: String, held: Held) {
        let task = held.task.clone();
        let shown_signal = held.shown_signal;
        let (owner, client) = (held.owner.clone(), held.client.clone());
        drop(held);
        self.insert(token, task, shown_signal, owner, client);
    }

    /// Holds `task` under `token` for `owner` and starts heartbeating its lease
    /// through `client`.
    fn insert(&self, token: String, task: StepTask, shown_signal: u64, owner: Owner, client: Client) {
        let heartbeats = tokio::spawn(keep_alive(
            self.clone(),
            client.clone(),
            token.clone(),
            task.task_token.clone(),
            heartbeat_interval(task.heartbeat_timeout_ms),
        ));
        let held = Held {
            task,
            shown_signal,
            owner,
            client,
            heartbeats,
        };
        self.lock().insert(token, held);
    }

    /// The token under which this gateway holds `run_id`'s step for `owner`, if it does.
    pub(super) fn token_of_run(&self, run_id: &str, owner: &Owner) -> Option<String> {
        self.lock()
            .iter()
            .find(|(_, h)| h.task.run_id == run_id && h.owner == *owner)
            .map(|(t, _)| t.clone())
    }

    /// Retires `old` and holds the same lease under a new token (for `resume_run` on
    /// a step this gateway already holds). `None` if `old` is no longer held.
    pub(super) fn reissue(&self, old: &str) -> Option<(String, StepTask)> {
        let mut held = self.lock();
        let entry = held.remove(old)?;
        let token = new_token(&entry.task.run_id, &entry.task.step_id, entry.task.attempt);
        let task = entry.task.clone();
        held.insert(token.clone(), entry);
        Some((token, task))
    }

    /// Forgets a token whose lease is gone (its heartbeat was refused).
    fn forget(&self, token: &str) {
        if let Some(held) = self.lock().remove(token) {
            tracing::warn!(run_id = %held.task.run_id, step = %held.task.step_id, "the step's lease was lost; its continue token is void");
        }
    }
}

/// Heartbeats at a third of the step's heartbeat timeout, so two may be lost before
/// the lease expires; steps without one are heartbeated every 30 s (harmless, and it
/// notices a lost lease).
pub(super) fn heartbeat_interval(heartbeat_timeout_ms: u32) -> Duration {
    if heartbeat_timeout_ms == 0 {
        return Duration::from_secs(30);
    }
    Duration::from_millis(u64::from(heartbeat_timeout_ms) / 3)
        .clamp(Duration::from_millis(100), Duration::from_secs(30))
}

/// Keeps one lease alive until the step is taken out of the set (which aborts this
/// task) or the server says the lease is gone.
async fn keep_alive(holdings: Holdings, client: Client, token: String, task_token: String, every: Duration) {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let req = HeartbeatStepTaskRequest {
            task_token: task_token.clone(),
            identity: holdings.identity.clone(),
            ..Default::default()
        };
        match client.heartbeat_step_task(req).await {
            Ok(_) => {}
            Err(
                ClientError::FailedPrecondition(_)
                | ClientError::NotFound(_)
                | ClientError::PermissionDenied(_),
            ) => {
                holdings.forget(&token);
                return;
            }
            // Unreachable for now: keep trying; the lease may outlive the outage.
            Err(e) => tracing::warn!(error = %e, "heartbeat failed; retrying"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_carry_a_hint_and_differ_every_time() {
        let a = new_token("run-1", "plan", 2);
        let b = new_token("run-1", "plan", 2);
        assert_ne!(a, b);
        let hint = parse_hint(&a).unwrap();
        assert_eq!(
            hint,
            TokenHint {
                run_id: "run-1".into(),
                step_id: "plan".into(),
                attempt: 2
            }
        );
    }

    #[test]
    fn corrupted_tokens_are_not_tokens() {
        let good = new_token("run-1", "plan", 1);
        let mut cut = good.clone();
        cut.truncate(good.len() - 3);
        for bad in [
            "",
            "rct1_",
            "hello",
            &good[1..],
            &cut,
            &format!("{good}!"),
            &new_token("run 1", "plan", 1),
            &new_token(&"r".repeat(129), "plan", 1),
            &"x".repeat(MAX_TOKEN + 1),
        ] {
            assert_eq!(parse_hint(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn heartbeats_come_at_a_third_of_the_timeout_within_bounds() {
        assert_eq!(heartbeat_interval(0), Duration::from_secs(30));
        assert_eq!(heartbeat_interval(3_000), Duration::from_secs(1));
        assert_eq!(heartbeat_interval(90), Duration::from_millis(100));
        assert_eq!(heartbeat_interval(600_000), Duration::from_secs(30));
    }
}
