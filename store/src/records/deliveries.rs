//! The records of result delivery: a run's deliveries (inside its run record) and a
//! namespace's notification subscriptions (inside its namespace record). Both are
//! absent from rows written before delivery existed, and read as none.

use serde::{Deserialize, Serialize};

use railyard_model::Millis;
use railyard_model::namespace::Subscription;
use railyard_model::run::{Delivery, DeliveryStatus, DeliveryTarget, RunStatus};

use super::StatusRecord;

/// One target's delivery of a closed run.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct DeliveryRecord {
    /// `callback` or `subscription:<id>`.
    #[serde(default)]
    target: String,
    #[serde(default)]
    url: String,
    status: DeliveryStatusRecord,
    #[serde(default)]
    attempts: u32,
    #[serde(default)]
    round_base: u32,
    #[serde(default)]
    round_started_ms: Millis,
    #[serde(default)]
    in_flight: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    last_error: String,
    #[serde(default)]
    last_attempt_ms: Option<Millis>,
    #[serde(default)]
    next_attempt_ms: Option<Millis>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
enum DeliveryStatusRecord {
    #[serde(rename = "PENDING")]
    Pending,
    #[serde(rename = "SUCCEEDED")]
    Succeeded,
    #[serde(rename = "FAILED")]
    Failed,
}

impl DeliveryRecord {
    pub(super) fn from_model(d: &Delivery) -> Self {
        Self {
            target: d.target.name(),
            url: d.url.clone(),
            status: match d.status {
                DeliveryStatus::Pending => DeliveryStatusRecord::Pending,
                DeliveryStatus::Succeeded => DeliveryStatusRecord::Succeeded,
                DeliveryStatus::Failed => DeliveryStatusRecord::Failed,
            },
            attempts: d.attempts,
            round_base: d.round_base,
            round_started_ms: d.round_started_ms,
            in_flight: d.in_flight,
            last_error: d.last_error.clone(),
            last_attempt_ms: d.last_attempt_ms,
            next_attempt_ms: d.next_attempt_ms,
        }
    }

    /// The model's delivery; a target name this build does not know is corrupt.
    pub(super) fn into_model(self) -> Result<Delivery, String> {
        let target = DeliveryTarget::parse(&self.target)
            .ok_or_else(|| format!("unknown delivery target {:?}", self.target))?;
        Ok(Delivery {
            target,
            url: self.url,
            status: match self.status {
                DeliveryStatusRecord::Pending => DeliveryStatus::Pending,
                DeliveryStatusRecord::Succeeded => DeliveryStatus::Succeeded,
                DeliveryStatusRecord::Failed => DeliveryStatus::Failed,
            },
            attempts: self.attempts,
            round_base: self.round_base,
            round_started_ms: self.round_started_ms,
            in_flight: self.in_flight,
            last_error: self.last_error,
            last_attempt_ms: self.last_attempt_ms,
            next_attempt_ms: self.next_attempt_ms,
        })
    }
}

/// A namespace's notification subscription.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct SubscriptionRecord {
    #[serde(default)]
    id: String,
    #[serde(default)]
    url: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    workflows: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    outcomes: Vec<StatusRecord>,
    #[serde(default)]
    created_ms: Millis,
    /// The event kinds it is sent (absent in older rows: run.closed only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    events: Vec<String>,
}

impl SubscriptionRecord {
    pub(super) fn from_model(s: &Subscription) -> Self {
        Self {
            id: s.id.clone(),
            url: s.url.clone(),
            workflows: s.workflows.clone(),
            outcomes: s.outcomes.iter().map(|o| StatusRecord::from(*o)).collect(),
            created_ms: s.created_ms,
            events: s.events.clone(),
        }
    }

    pub(super) fn into_model(self) -> Subscription {
        Subscription {
            id: self.id,
            url: self.url,
            workflows: self.workflows,
            outcomes: self.outcomes.into_iter().map(RunStatus::from).collect(),
            created_ms: self.created_ms,
            events: self.events,
        }
    }
}
