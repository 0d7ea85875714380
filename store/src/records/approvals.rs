//! Records of approvals: the proposal a waiting run row holds (`WaitOn::Approval`)
//! and the three history rows (`StepAwaitingApproval`, `StepApproved`,
//! `StepRejected`). All fields are new to this release, so every one defaults.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use railyard_model::Millis;
use railyard_model::run::{EventKind, Proposal, StepDone};

/// A completion held for approval, in a run row's `waiting` phase.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct ProposalRecord {
    #[serde(default)]
    notes: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    artifacts: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    context_updates: BTreeMap<String, String>,
    /// The structured result as JSON text (empty: none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    result: String,
    #[serde(default)]
    proposed_by: String,
}

impl ProposalRecord {
    pub(super) fn from_model(p: &Proposal) -> Self {
        Self {
            notes: p.done.notes.clone(),
            artifacts: p.done.artifacts.clone(),
            context_updates: p.done.context_updates.clone(),
            result: p.done.result.clone(),
            proposed_by: p.proposed_by.clone(),
        }
    }

    pub(super) fn into_model(self) -> Proposal {
        Proposal {
            done: StepDone {
                notes: self.notes,
                artifacts: self.artifacts,
                context_updates: self.context_updates,
                result: self.result,
            },
            proposed_by: self.proposed_by,
        }
    }
}

/// `StepAwaitingApproval`.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct AwaitingRecord {
    #[serde(default)]
    step_id: String,
    #[serde(default)]
    attempt: u32,
    #[serde(default)]
    notes: String,
    #[serde(default)]
    artifacts: Vec<String>,
    #[serde(default)]
    context_updates: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    result: String,
    #[serde(default)]
    deadline_ms: Option<Millis>,
}

/// `StepApproved` (`text`: the note) and `StepRejected` (`text`: the feedback).
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct AnswerRecord {
    #[serde(default)]
    step_id: String,
    #[serde(default)]
    attempt: u32,
    #[serde(default)]
    text: String,
}

/// The record of one approval event.
pub(super) enum ApprovalRecord {
    Awaiting(AwaitingRecord),
    Approved(AnswerRecord),
    Rejected(AnswerRecord),
}

/// The record of an approval event; `None` for any other event.
pub(super) fn encode(kind: &EventKind) -> Option<ApprovalRecord> {
    use ApprovalRecord as K;
    Some(match kind {
        EventKind::StepAwaitingApproval {
            step_id,
            attempt,
            notes,
            artifacts,
            context_updates,
            result,
            deadline_ms,
        } => K::Awaiting(AwaitingRecord {
            step_id: step_id.clone(),
            attempt: *attempt,
            notes: notes.clone(),
            artifacts: artifacts.clone(),
            context_updates: context_updates.clone(),
            result: result.clone(),
            deadline_ms: *deadline_ms,
        }),
        EventKind::StepApproved {
            step_id,
            attempt,
            note,
        } => K::Approved(AnswerRecord {
            step_id: step_id.clone(),
            attempt: *attempt,
            text: note.clone(),
        }),
        EventKind::StepRejected {
            step_id,
            attempt,
            feedback,
        } => K::Rejected(AnswerRecord {
            step_id: step_id.clone(),
            attempt: *attempt,
            text: feedback.clone(),
        }),
        _ => return None,
    })
}

/// The `StepAwaitingApproval` event of its record.
pub(super) fn decode_awaiting(r: AwaitingRecord) -> EventKind {
    EventKind::StepAwaitingApproval {
        step_id: r.step_id,
        attempt: r.attempt,
        notes: r.notes,
        artifacts: r.artifacts,
        context_updates: r.context_updates,
        result: r.result,
        deadline_ms: r.deadline_ms,
    }
}

/// The `StepApproved` (`approved`) or `StepRejected` event of its record.
pub(super) fn decode_answer(r: AnswerRecord, approved: bool) -> EventKind {
    if approved {
        EventKind::StepApproved {
            step_id: r.step_id,
            attempt: r.attempt,
            note: r.text,
        }
    } else {
        EventKind::StepRejected {
            step_id: r.step_id,
            attempt: r.attempt,
            feedback: r.text,
        }
    }
}
