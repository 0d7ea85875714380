//! What the tables hold: explicit, versioned records, converted to and from the
//! model types here and nowhere else, so that renaming a model field cannot change
//! what is stored, and a newer build reads older rows.
//!
//! Rules for every record: JSON; a `v` field, the version of the record's shape
//! (a row of a newer version than this build knows is refused by name); unknown
//! fields are ignored and missing fields take a default (serde `default`, never
//! `deny_unknown_fields`), so a field may be added or dropped without a new layout.
//! Changing a field's meaning needs a new record version, converted on read.
//!
//! A run's state row names its definition ([`DefinitionKey`]) rather than holding
//! it; definitions are stored once, in the `definitions` table ([`Definitions`]).
//!
//! The encode and decode functions are public for the storage backends outside this
//! crate (`railyard-store-postgres`), which store these same records; nothing else
//! calls them.

#[cfg(test)]
mod agent_tests;
mod api_keys;
#[cfg(test)]
mod approval_tests;
mod approvals;
mod attributes;
mod batches;
mod checkpoints;
mod definitions;
mod deliveries;
#[cfg(test)]
mod event_tests;
mod events;
mod issues;
mod namespaces;
mod schedules;
#[cfg(test)]
mod tests;
mod timers;
mod triggers;
mod workflows;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::StorageError;
use railyard_model::Millis;
use railyard_model::run::{
    ChildOutcome, Lease, ParentClosePolicy, PendingSignal, Phase, RunBudget, RunState, RunStatus, StepRecord,
    Usage, WaitOn, Waiting,
};
use railyard_model::trace::TraceContext;

pub use api_keys::{decode_api_key, encode_api_key};
pub use batches::{decode_batch, decode_batch_item, encode_batch, encode_batch_item};
pub(crate) use checkpoints::{decode_checkpoint_head, encode_checkpoint_head};
pub use definitions::{DefinitionKey, DefinitionLookup, DefinitionRows, Definitions};
pub(crate) use definitions::{DefinitionTableKey, PutRow};
pub use events::{decode_event, encode_event};
pub use namespaces::{decode_namespace, encode_namespace};
pub use schedules::{decode_schedule, encode_schedule};
pub use timers::{decode_timer, encode_timer};
pub use triggers::{
    decode_hook_delivery, decode_key_holder, decode_queued_start, decode_trigger, encode_hook_delivery,
    encode_key_holder, encode_queued_start, encode_trigger,
};
pub use workflows::{decode_registered_workflow, definition_hash, encode_registered_workflow};

/// A stored record: its name in errors and the newest version this build writes.
pub(crate) trait Record: Serialize + DeserializeOwned {
    const WHAT: &'static str;
    const VERSION: u32;
    fn version(&self) -> u32;
}

fn v1() -> u32 {
    1
}

pub(crate) fn corrupt(what: &'static str, problem: impl std::fmt::Display) -> StorageError {
    StorageError::Corrupt {
        what,
        source: problem.to_string().into(),
    }
}

pub(crate) fn encode_record<R: Record>(record: &R) -> Result<Vec<u8>, StorageError> {
    serde_json::to_vec(record).map_err(|e| StorageError::Encode(format!("{} record: {e}", R::WHAT).into()))
}

pub(crate) fn decode_record<R: Record>(bytes: &[u8]) -> Result<R, StorageError> {
    let record: R = serde_json::from_slice(bytes).map_err(|e| corrupt(R::WHAT, e))?;
    if record.version() > R::VERSION {
        return Err(corrupt(
            R::WHAT,
            format!(
                "version {} was written by a newer Railyard (this build reads up to {})",
                record.version(),
                R::VERSION
            ),
        ));
    }
    Ok(record)
}

/// A run's state row.
#[derive(Debug, Serialize, Deserialize)]
struct RunRecord {
    #[serde(default = "v1")]
    v: u32,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    run_id: String,
    #[serde(default)]
    workflow_id: String,
    definition: DefinitionKey,
    status: StatusRecord,
    #[serde(default)]
    goal: String,
    #[serde(default)]
    context: BTreeMap<String, String>,
    #[serde(default)]
    parent_run_id: String,
    #[serde(default)]
    request_id: String,
    #[serde(default)]
    callback_url: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    task_queue: String,
    /// The schedule that started the run (absent in older rows: none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    schedule_id: String,
    #[serde(default)]
    start_ms: Millis,
    #[serde(default)]
    close_ms: Option<Millis>,
    #[serde(default)]
    last_event_id: u64,
    #[serde(default)]
    current_step: usize,
    phase: PhaseRecord,
    #[serde(default)]
    steps: Vec<StepStateRecord>,
    #[serde(default)]
    lease_counter: u64,
    #[serde(default)]
    cancel_requested: bool,
    #[serde(default)]
    failure: String,
    #[serde(default)]
    pending_signals: Vec<SignalRecord>,
    /// Child-run fields (absent in older rows: a root run with no children).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    parent_step_id: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    depth: u32,
    /// `cancel`, `terminate` or `abandon` (absent: `cancel`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    parent_close_policy: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    children_started: u32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    resume_input: Vec<String>,
    /// Absent in older rows: not paused.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    paused: bool,
    /// Absent in older rows: nothing used.
    #[serde(default, skip_serializing_if = "UsageRecord::is_zero")]
    usage: UsageRecord,
    /// Absent in older rows (and when unset): no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_cost_usd: Option<f64>,
    /// Result deliveries of the closed run (absent in older rows: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    deliveries: Vec<deliveries::DeliveryRecord>,
    /// The W3C `traceparent` the run was started with, whose trace its spans join.
    /// Absent in older rows, and whenever the run's trace is the one derived from its
    /// namespace and id (`TraceContext::derived`, with no parent span), which is
    /// then derived again on read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    traceparent: Option<String>,
    /// The first issues its agents reported (absent in older rows: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    issues: Vec<issues::IssueRecord>,
    /// Its search attributes (absent in older rows: none).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    attributes: attributes::RunAttributesRecord,
    /// The principles pinned when it started (absent in older rows: none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    principles: String,
    /// The run this one was reset or rerun from (absent: none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    reset_from: String,
    /// The latest run reset or rerun from this one (absent: none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    reset_to: String,
    /// Its priority, 1 to 5 (absent in older rows: 3).
    #[serde(default = "default_priority", skip_serializing_if = "is_default_priority")]
    priority: u8,
    /// Its fairness key (absent in older rows: none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    fairness_key: String,
    /// Its fairness weight (absent in older rows: 1).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    fairness_weight: u32,
    /// Its concurrency key (absent in older rows: none, its fairness key counts).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    concurrency_key: String,
}

fn default_priority() -> u8 {
    railyard_model::flow::DEFAULT_PRIORITY
}

fn is_default_priority(p: &u8) -> bool {
    *p == railyard_model::flow::DEFAULT_PRIORITY
}

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Token counts and their estimated cost, in run rows and history rows alike.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub(crate) struct UsageRecord {
    #[serde(default)]
    input: u64,
    #[serde(default)]
    output: u64,
    #[serde(default)]
    cache_read: u64,
    #[serde(default)]
    cache_write: u64,
    #[serde(default)]
    cost_usd: f64,
}

impl UsageRecord {
    fn is_zero(&self) -> bool {
        self.to_model().is_zero()
    }

    pub(crate) fn from_model(u: &Usage) -> Self {
        Self {
            input: u.input,
            output: u.output,
            cache_read: u.cache_read,
            cache_write: u.cache_write,
            cost_usd: u.cost_usd,
        }
    }

    pub(crate) fn to_model(self) -> Usage {
        Usage {
            input: self.input,
            output: self.output,
            cache_read: self.cache_read,
            cache_write: self.cache_write,
            // A stored NaN or negative cost (never written by this build) counts as 0.
            cost_usd: if self.cost_usd.is_finite() {
                self.cost_usd.max(0.0)
            } else {
                0.0
            },
        }
    }
}

impl Record for RunRecord {
    const WHAT: &'static str = "run";
    const VERSION: u32 = 1;
    fn version(&self) -> u32 {
        self.v
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
enum StatusRecord {
    #[serde(rename = "RUNNING")]
    Running,
    #[serde(rename = "COMPLETED")]
    Completed,
    #[serde(rename = "FAILED")]
    Failed,
    #[serde(rename = "CANCELED")]
    Canceled,
    #[serde(rename = "TERMINATED")]
    Terminated,
    #[serde(rename = "TIMED_OUT")]
    TimedOut,
}

impl From<RunStatus> for StatusRecord {
    fn from(s: RunStatus) -> Self {
        match s {
            RunStatus::Running => Self::Running,
            RunStatus::Completed => Self::Completed,
            RunStatus::Failed => Self::Failed,
            RunStatus::Canceled => Self::Canceled,
            RunStatus::Terminated => Self::Terminated,
            RunStatus::TimedOut => Self::TimedOut,
        }
    }
}

impl From<StatusRecord> for RunStatus {
    fn from(s: StatusRecord) -> Self {
        match s {
            StatusRecord::Running => Self::Running,
            StatusRecord::Completed => Self::Completed,
            StatusRecord::Failed => Self::Failed,
            StatusRecord::Canceled => Self::Canceled,
            StatusRecord::Terminated => Self::Terminated,
            StatusRecord::TimedOut => Self::TimedOut,
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind")]
enum PhaseRecord {
    #[serde(rename = "scheduled")]
    Scheduled {
        #[serde(default)]
        queue: String,
        #[serde(default)]
        task_seq: u64,
    },
    #[serde(rename = "started")]
    Started { lease: LeaseRecord },
    #[serde(rename = "backing_off")]
    BackingOff {
        #[serde(default)]
        until_ms: Millis,
    },
    #[serde(rename = "closed")]
    Closed,
    #[serde(rename = "waiting")]
    Waiting {
        on: WaitOnRecord,
        #[serde(default)]
        since_ms: Millis,
        #[serde(default)]
        deadline_ms: Option<Millis>,
        #[serde(default)]
        wait_id: u64,
    },
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind")]
enum WaitOnRecord {
    #[serde(rename = "children")]
    Children {
        #[serde(default)]
        run_ids: Vec<String>,
        #[serde(default)]
        done: Vec<ChildOutcomeRecord>,
    },
    #[serde(rename = "unpause")]
    Unpause,
    /// A completion held for approval (absent before approvals).
    #[serde(rename = "approval")]
    Approval {
        #[serde(default)]
        proposal: approvals::ProposalRecord,
    },
    /// A step parked for a provider's rate limit (absent before rate-limit parking).
    #[serde(rename = "rate_limit")]
    RateLimit {
        #[serde(default)]
        key: String,
    },
}

#[derive(Debug, Serialize, Deserialize)]
struct ChildOutcomeRecord {
    #[serde(default)]
    run_id: String,
    status: StatusRecord,
    #[serde(default)]
    notes: String,
    #[serde(default)]
    artifacts: Vec<String>,
    /// The child's structured result as JSON text (absent in older rows: none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    result: String,
}

impl ChildOutcomeRecord {
    fn from_model(c: &ChildOutcome) -> Self {
        Self {
            run_id: c.run_id.clone(),
            status: c.status.into(),
            notes: c.notes.clone(),
            artifacts: c.artifacts.clone(),
            result: c.result.clone(),
        }
    }

    fn into_model(self) -> ChildOutcome {
        ChildOutcome {
            run_id: self.run_id,
            status: self.status.into(),
            notes: self.notes,
            artifacts: self.artifacts,
            result: self.result,
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct LeaseRecord {
    #[serde(default)]
    seq: u64,
    #[serde(default)]
    worker: String,
    #[serde(default)]
    started_ms: Millis,
    #[serde(default)]
    close_deadline_ms: Millis,
    #[serde(default)]
    heartbeat_timeout_ms: Option<Millis>,
    #[serde(default)]
    heartbeat_deadline_ms: Option<Millis>,
}

#[derive(Debug, Serialize, Deserialize)]
struct StepStateRecord {
    #[serde(default)]
    state: String,
    #[serde(default)]
    attempt: u32,
    #[serde(default)]
    notes: String,
    #[serde(default)]
    artifacts: Vec<String>,
    #[serde(default)]
    worker: String,
    #[serde(default)]
    last_failure: String,
    /// The completion's structured result, as JSON text (absent in older rows: none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    result: String,
    /// Refusals recorded for the current attempt (absent in older rows: none).
    #[serde(default, skip_serializing_if = "is_zero")]
    result_refusals: u32,
    /// Absent in older rows: nothing used.
    #[serde(default, skip_serializing_if = "UsageRecord::is_zero")]
    usage: UsageRecord,
    #[serde(default, skip_serializing_if = "UsageRecord::is_zero")]
    attempt_usage: UsageRecord,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    model: String,
    /// Issues reported over all attempts (absent in older rows: none).
    #[serde(default, skip_serializing_if = "is_zero")]
    issues: u32,
    /// Issues recorded for the current attempt (absent in older rows: none).
    #[serde(default, skip_serializing_if = "is_zero")]
    attempt_issues: u32,
    /// Mid-step attribute changes of the current attempt (absent in older rows: none).
    #[serde(default, skip_serializing_if = "is_zero")]
    attempt_attribute_updates: u32,
    /// Carried over from the run this one was reset from (absent: not).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    carried: bool,
}

#[derive(Debug, Serialize, Deserialize)]
struct SignalRecord {
    #[serde(default)]
    event_id: u64,
    #[serde(default)]
    name: String,
    #[serde(default)]
    payload_json: String,
}

impl RunRecord {
    fn from_model(r: &RunState, definition: DefinitionKey) -> Self {
        Self {
            v: Self::VERSION,
            namespace: r.namespace.clone(),
            run_id: r.run_id.clone(),
            workflow_id: r.workflow_id.clone(),
            definition,
            status: r.status.into(),
            goal: r.goal.clone(),
            context: r.context.clone(),
            parent_run_id: r.parent_run_id.clone(),
            request_id: r.request_id.clone(),
            callback_url: r.callback_url.clone(),
            task_queue: r.task_queue.clone(),
            schedule_id: r.schedule_id.clone(),
            start_ms: r.start_ms,
            close_ms: r.close_ms,
            last_event_id: r.last_event_id,
            current_step: r.current_step,
            phase: match &r.phase {
                Phase::Scheduled { queue, task_seq } => PhaseRecord::Scheduled {
                    queue: queue.clone(),
                    task_seq: *task_seq,
                },
                Phase::Started(l) => PhaseRecord::Started {
                    lease: LeaseRecord {
                        seq: l.seq,
                        worker: l.worker.clone(),
                        started_ms: l.started_ms,
                        close_deadline_ms: l.close_deadline_ms,
                        heartbeat_timeout_ms: l.heartbeat_timeout_ms,
                        heartbeat_deadline_ms: l.heartbeat_deadline_ms,
                    },
                },
                Phase::BackingOff { until_ms } => PhaseRecord::BackingOff { until_ms: *until_ms },
                Phase::Closed => PhaseRecord::Closed,
                Phase::Waiting(w) => PhaseRecord::Waiting {
                    on: match &w.on {
                        WaitOn::Children { run_ids, done } => WaitOnRecord::Children {
                            run_ids: run_ids.clone(),
                            done: done.iter().map(ChildOutcomeRecord::from_model).collect(),
                        },
                        WaitOn::Unpause => WaitOnRecord::Unpause,
                        WaitOn::Approval(p) => WaitOnRecord::Approval {
                            proposal: approvals::ProposalRecord::from_model(p),
                        },
                        WaitOn::RateLimit { key } => WaitOnRecord::RateLimit { key: key.clone() },
                    },
                    since_ms: w.since_ms,
                    deadline_ms: w.deadline_ms,
                    wait_id: w.wait_id,
                },
            },
            steps: r
                .steps
                .iter()
                .map(|s| StepStateRecord {
                    state: s.state.clone(),
                    attempt: s.attempt,
                    notes: s.notes.clone(),
                    artifacts: s.artifacts.clone(),
                    worker: s.worker.clone(),
                    last_failure: s.last_failure.clone(),
                    result: s.result.clone(),
                    result_refusals: s.result_refusals,
                    usage: UsageRecord::from_model(&s.usage),
                    attempt_usage: UsageRecord::from_model(&s.attempt_usage),
                    model: s.model.clone(),
                    issues: s.issues,
                    attempt_issues: s.attempt_issues,
                    attempt_attribute_updates: s.attempt_attribute_updates,
                    carried: s.carried,
                })
                .collect(),
            lease_counter: r.lease_counter,
            cancel_requested: r.cancel_requested,
            failure: r.failure.clone(),
            pending_signals: r
                .pending_signals
                .iter()
                .map(|s| SignalRecord {
                    event_id: s.event_id,
                    name: s.name.clone(),
                    payload_json: s.payload_json.clone(),
                })
                .collect(),
            parent_step_id: r.parent_step_id.clone(),
            depth: r.depth,
            parent_close_policy: match r.parent_close_policy {
                ParentClosePolicy::Cancel => String::new(),
                p => p.name().into(),
            },
            children_started: r.children_started,
            resume_input: r.resume_input.clone(),
            paused: r.paused,
            usage: UsageRecord::from_model(&r.usage),
            max_tokens: r.budget.max_tokens,
            max_cost_usd: r.budget.max_cost_usd,
            deliveries: r
                .deliveries
                .iter()
                .map(deliveries::DeliveryRecord::from_model)
                .collect(),
            // A run's trace either came with a caller's span or is derived.
            traceparent: r.trace.traceparent(),
            issues: r.issues.iter().map(issues::IssueRecord::from_model).collect(),
            attributes: attributes::run_to_record(&r.attributes),
            principles: r.principles.clone(),
            reset_from: r.reset_from.clone(),
            reset_to: r.reset_to.clone(),
            priority: r.flow.priority,
            fairness_key: r.flow.fairness_key.clone(),
            fairness_weight: r.flow.weight,
            concurrency_key: r.flow.concurrency_key.clone(),
        }
    }

    fn into_model(
        self,
        definition: Arc<railyard_model::workflow::WorkflowDef>,
    ) -> Result<RunState, StorageError> {
        // The model indexes steps by position: a row that disagrees with its
        // definition is refused here rather than panicking later.
        let steps = definition.steps.len();
        let in_flight = !matches!(self.phase, PhaseRecord::Closed);
        if self.steps.len() != steps || self.current_step > steps || (in_flight && self.current_step >= steps)
        {
            return Err(corrupt(
                "run",
                format!(
                    "run {:?} has {} step records and current step {} ({}), its definition {} steps",
                    self.run_id,
                    self.steps.len(),
                    self.current_step,
                    if in_flight { "in flight" } else { "closed" },
                    steps
                ),
            ));
        }
        let deliveries = self
            .deliveries
            .into_iter()
            .map(deliveries::DeliveryRecord::into_model)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| corrupt("run", format!("run {:?}: {e}", self.run_id)))?;
        let trace = match &self.traceparent {
            Some(tp) => {
                TraceContext::parse(tp).map_err(|e| corrupt("run", format!("run {:?}: {e}", self.run_id)))?
            }
            None => TraceContext::derived(&self.namespace, &self.run_id),
        };
        Ok(RunState {
            namespace: self.namespace,
            run_id: self.run_id,
            workflow_id: self.workflow_id,
            definition,
            status: self.status.into(),
            goal: self.goal,
            context: self.context,
            parent_run_id: self.parent_run_id,
            request_id: self.request_id,
            callback_url: self.callback_url,
            task_queue: self.task_queue,
            schedule_id: self.schedule_id,
            start_ms: self.start_ms,
            close_ms: self.close_ms,
            last_event_id: self.last_event_id,
            current_step: self.current_step,
            phase: match self.phase {
                PhaseRecord::Scheduled { queue, task_seq } => Phase::Scheduled { queue, task_seq },
                PhaseRecord::Started { lease: l } => Phase::Started(Lease {
                    seq: l.seq,
                    worker: l.worker,
                    started_ms: l.started_ms,
                    close_deadline_ms: l.close_deadline_ms,
                    heartbeat_timeout_ms: l.heartbeat_timeout_ms,
                    heartbeat_deadline_ms: l.heartbeat_deadline_ms,
                }),
                PhaseRecord::BackingOff { until_ms } => Phase::BackingOff { until_ms },
                PhaseRecord::Closed => Phase::Closed,
                PhaseRecord::Waiting {
                    on,
                    since_ms,
                    deadline_ms,
                    wait_id,
                } => Phase::Waiting(Waiting {
                    on: match on {
                        WaitOnRecord::Children { run_ids, done } => WaitOn::Children {
                            run_ids,
                            done: done.into_iter().map(ChildOutcomeRecord::into_model).collect(),
                        },
                        WaitOnRecord::Unpause => WaitOn::Unpause,
                        WaitOnRecord::Approval { proposal } => {
                            WaitOn::Approval(Box::new(proposal.into_model()))
                        }
                        WaitOnRecord::RateLimit { key } => WaitOn::RateLimit { key },
                    },
                    since_ms,
                    deadline_ms,
                    wait_id,
                }),
            },
            steps: self
                .steps
                .into_iter()
                .map(|s| StepRecord {
                    state: s.state,
                    attempt: s.attempt,
                    notes: s.notes,
                    artifacts: s.artifacts,
                    worker: s.worker,
                    last_failure: s.last_failure,
                    result: s.result,
                    result_refusals: s.result_refusals,
                    usage: s.usage.to_model(),
                    attempt_usage: s.attempt_usage.to_model(),
                    model: s.model,
                    issues: s.issues,
                    attempt_issues: s.attempt_issues,
                    attempt_attribute_updates: s.attempt_attribute_updates,
                    carried: s.carried,
                })
                .collect(),
            lease_counter: self.lease_counter,
            cancel_requested: self.cancel_requested,
            failure: self.failure,
            pending_signals: self
                .pending_signals
                .into_iter()
                .map(|s| PendingSignal {
                    event_id: s.event_id,
                    name: s.name,
                    payload_json: s.payload_json,
                })
                .collect(),
            parent_step_id: self.parent_step_id,
            depth: self.depth,
            parent_close_policy: ParentClosePolicy::parse(&self.parent_close_policy).ok_or_else(|| {
                corrupt(
                    "run",
                    format!("unknown parent close policy {:?}", self.parent_close_policy),
                )
            })?,
            children_started: self.children_started,
            resume_input: self.resume_input,
            paused: self.paused,
            usage: self.usage.to_model(),
            budget: RunBudget {
                max_tokens: self.max_tokens,
                max_cost_usd: self.max_cost_usd,
            },
            deliveries,
            trace,
            issues: self
                .issues
                .into_iter()
                .map(issues::IssueRecord::into_model)
                .collect(),
            principles: self.principles,
            reset_from: self.reset_from,
            reset_to: self.reset_to,
            attributes: attributes::run_from_record(self.attributes),
            flow: railyard_model::flow::Flow {
                // A row out of range (never written by this build) reads as the nearest.
                priority: self.priority.clamp(1, 5),
                fairness_key: self.fairness_key,
                weight: self.fairness_weight.clamp(1, railyard_model::flow::MAX_WEIGHT),
                concurrency_key: self.concurrency_key,
            },
        })
    }
}

/// Encodes a run's state row. Its definition must be stored already (see
/// [`Definitions::store`]); the row names it.
pub fn encode_run(run: &RunState, defs: &Definitions) -> Result<Vec<u8>, StorageError> {
    encode_record(&RunRecord::from_model(run, defs.key_of(&run.definition)?))
}

/// Decodes a run's state row, its definition from the cache (or `definitions` once).
pub fn decode_run(
    bytes: &[u8],
    defs: &Definitions,
    definitions: &impl DefinitionRows,
) -> Result<RunState, StorageError> {
    let record: RunRecord = decode_record(bytes)?;
    let definition = defs.resolve(&record.definition, definitions)?;
    record.into_model(definition)
}

/// A run's start time and index terms (`railyard_model::query::index_terms`) from its
/// stored row, without its definition: for rebuilding `run_terms` from `runs` rows
/// (a dump's import).
pub fn run_index_terms(bytes: &[u8]) -> Result<(Millis, Vec<String>), StorageError> {
    let record: RunRecord = decode_record(bytes)?;
    Ok((
        record.start_ms,
        railyard_model::query::index_terms_of(
            RunStatus::from(record.status),
            &record.workflow_id,
            &attributes::run_from_record(record.attributes),
        ),
    ))
}
