//! Child runs (`spawn_agent`): a step starts children under its task token, the
//! token being the authority (a worker key cannot start runs), and may end its lease
//! to wait for them.

use std::collections::BTreeMap;

use super::{Caller, Core, workflows};
use crate::error::ApiError;
use crate::writer::{ChildSpec, SpawnChildren, Spawned, WaitFor};
use railyard_model::limits::{self, check_bytes, check_context, check_count, check_len, check_name};
use railyard_model::run::ParentClosePolicy;
use railyard_model::token::TokenClaims;

/// Most children one request may start (the per-run limit bounds it further).
pub const MAX_CHILDREN_PER_REQUEST: usize = 100;

/// A child run to start.
#[derive(Debug, Clone, Default)]
pub struct ChildRequest {
    pub workflow_id: String,
    pub goal: String,
    pub context: BTreeMap<String, String>,
    /// `cancel` (or empty), `terminate`, `abandon`.
    pub parent_close_policy: String,
}

/// Children to start under a lease, and whether the step then waits.
#[derive(Debug, Clone, Default)]
pub struct Spawn {
    pub children: Vec<ChildRequest>,
    /// End the lease with the step waiting for the new children and `await_run_ids`.
    pub wait: bool,
    pub await_run_ids: Vec<String>,
    /// The transcript to resume from (with `wait`).
    pub checkpoint: Vec<u8>,
    /// Empty, or the key the children's run ids are derived from: a repeated spawn
    /// answers the run ids of the first and starts none.
    pub request_id: String,
}

/// The run id of child `index` of a spawn keyed by `request_id` in run `parent` of
/// `namespace`: a UUID (version 8) made of the first bytes of their SHA-256, so the
/// same spawn names the same children however often it is sent.
pub fn derived_child_id(namespace: &str, parent: &str, request_id: &str, index: usize) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for part in [namespace, parent, request_id] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    h.update((index as u64).to_le_bytes());
    let digest = h.finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_custom_bytes(bytes).into_uuid().to_string()
}

/// Starts the children (and suspends the step when asked) in one commit; answers
/// the new children's run ids. Past the server's depth or per-run limits the answer
/// is `RESOURCE_EXHAUSTED` with a message meant for the agent's model.
pub async fn spawn(core: &Core, caller: &Caller, claims: TokenClaims, s: Spawn) -> Result<Spawned, ApiError> {
    check_count("children", s.children.len(), MAX_CHILDREN_PER_REQUEST)?;
    check_count("await_run_ids", s.await_run_ids.len(), MAX_CHILDREN_PER_REQUEST)?;
    check_bytes("checkpoint", &s.checkpoint, limits::CHECKPOINT)?;
    if s.children.is_empty() && !s.wait {
        return Err(ApiError::field(
            "children",
            "name at least one child run to start",
        ));
    }
    if s.children.is_empty() && s.await_run_ids.is_empty() {
        return Err(ApiError::field(
            "await_run_ids",
            "a wait needs at least one child run to wait for",
        ));
    }
    if !s.wait && (!s.await_run_ids.is_empty() || !s.checkpoint.is_empty()) {
        return Err(ApiError::field(
            "wait",
            "await_run_ids and checkpoint are only for a request that waits",
        ));
    }
    for (i, id) in s.await_run_ids.iter().enumerate() {
        check_name(&format!("await_run_ids[{i}]"), id)?;
    }
    check_len("request_id", &s.request_id, limits::REQUEST_ID)?;
    limits::check_storable("request_id", &s.request_id)?;
    let mut children = Vec::with_capacity(s.children.len());
    for (i, c) in s.children.into_iter().enumerate() {
        let at = |f: &str| format!("children[{i}].{f}");
        check_name(&at("workflow_id"), &c.workflow_id)?;
        let definition = workflows::get(core, &caller.namespace, &c.workflow_id)?;
        check_len(&at("goal"), &c.goal, limits::GOAL)?;
        check_context(&at("context"), &c.context)?;
        let policy = ParentClosePolicy::parse(&c.parent_close_policy).ok_or_else(|| {
            ApiError::field(
                &at("parent_close_policy"),
                format!(
                    "{} is not one of cancel, terminate, abandon",
                    railyard_model::echo(&c.parent_close_policy)
                ),
            )
        })?;
        let run_id = if s.request_id.is_empty() {
            uuid::Uuid::now_v7().to_string()
        } else {
            derived_child_id(&claims.namespace, &claims.run_id, &s.request_id, i)
        };
        children.push(ChildSpec {
            run_id,
            definition,
            goal: c.goal,
            context: c.context,
            parent_close_policy: policy,
        });
    }
    let wait = s.wait.then_some(WaitFor {
        checkpoint: s.checkpoint,
        await_run_ids: s.await_run_ids,
    });
    let (run_id, step, attempt) = (claims.run_id.clone(), claims.step.clone(), claims.attempt);
    let waits = wait.is_some();
    let spawned = core
        .writer
        .call(SpawnChildren {
            claims,
            identity: caller.identity.clone(),
            children,
            wait,
            limits: core.child_limits,
        })
        .await?;
    tracing::info!(%run_id, %step, attempt, children = ?spawned.child_run_ids, waits, "child runs started");
    Ok(spawned)
}
