//! Who sends a request, and whether they may. A [`Caller`] is built once per request,
//! by [`resolve`], before anything else of the request is looked at: it
//! authenticates the credentials ([`authenticate`]), checks that the key's role
//! allows the [`Operation`] ([`permits`]) in the namespace the request names
//! ([`authorize`]), then that the namespace exists.
//!
//! With auth off (the default, for loopback) every caller is [`Principal::Anonymous`]
//! and nothing is checked but the namespace. With auth on, a request without a
//! usable key is `UNAUTHENTICATED` and a key used outside its role, namespace or
//! task queues is `PERMISSION_DENIED`; either way nothing of the request is done.

use super::Core;
use crate::error::ApiError;
use railyard_model::Rejection;
use railyard_model::auth::{self, ALL_NAMESPACES, ApiKey, Role};
use railyard_model::limits::{self, check_len};

/// The authenticated principal behind a request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Principal {
    /// Auth is off: every caller is anonymous and may do everything.
    Anonymous,
    /// A caller that presented a valid API key.
    Key(KeyPrincipal),
    /// The server acting on its own (a schedule firing, a trigger): never from a
    /// request. See [`internal`].
    Server,
}

/// What an authenticated API key may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPrincipal {
    pub key_id: String,
    /// The namespace the key acts in, or `*` for every namespace.
    pub namespace: String,
    pub role: Role,
    /// Task queues a worker key is limited to (empty: any).
    pub queues: Vec<String>,
    /// When the key expires (`None`: never); a key it makes expires no later.
    pub expires_ms: Option<railyard_model::Millis>,
    /// What its admin wrote about it (part of [`KeyPrincipal::label`]).
    pub description: String,
}

impl KeyPrincipal {
    fn of(key: &ApiKey) -> Self {
        Self {
            key_id: key.key_id.clone(),
            namespace: key.namespace.clone(),
            role: key.role,
            queues: key.queues.clone(),
            expires_ms: key.expires_ms,
            description: key.description.clone(),
        }
    }

    /// Who the key is in history: `key:<key id>`, with the first 64 bytes of its
    /// description in parentheses when it has one. A request cannot choose it.
    pub fn label(&self) -> String {
        match self.description.trim() {
            "" => format!("key:{}", self.key_id),
            d => format!("key:{} ({})", self.key_id, short(d)),
        }
    }

    /// Whether the key acts in `ns`.
    pub fn covers(&self, ns: &str) -> bool {
        self.namespace == ALL_NAMESPACES || self.namespace == ns
    }
}

/// What a request does: what a role is checked against ([`permits`]). A new front
/// end (the `Schedules` service, triggers) passes its own variant to [`resolve`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    StartRun,
    DescribeRun,
    GetHistory,
    WatchRun,
    ListRuns,
    SignalRun,
    CancelRun,
    TerminateRun,
    ListWorkflows,
    GetSessionTree,
    DescribeTaskQueue,
    /// Long-poll a task queue (the queue is checked by [`Caller::check_queue`]).
    PollTask,
    /// Heartbeat, complete or fail a leased step.
    ReportTask,
    /// Every call of the `Schedules` service.
    ManageSchedules,
    /// Pause a run (and its spawned children).
    PauseRun,
    /// Unpause a run (and its spawned children).
    UnpauseRun,
    /// Every call of the `Triggers` service.
    ManageTriggers,
    /// Create, list and revoke API keys.
    ManageApiKeys,
    /// Create, describe, list, update and delete namespaces.
    ManageNamespaces,
    /// Read `/metrics` (every namespace's counters).
    ReadMetrics,
    /// Retry a closed run's failed result delivery (`RedeliverResult`).
    RedeliverResult,
    /// Approve the result a step holds for approval (`ApproveStep`).
    ApproveStep,
    /// Reject the result a step holds for approval (`RejectStep`).
    RejectStep,
    /// Read the whole store as a dump (`ExportStore`; an admin of `*`).
    ExportStore,
    /// Start a new run from an old one's state at a step (`ResetRun`).
    ResetRun,
    /// Start a new run of an old one's workflow version and inputs (`RerunRun`).
    RerunRun,
    /// Every call of the `Batches` service (an admin's: a batch acts on many runs).
    ManageBatches,
    /// Register a workflow definition in the namespace (`RegisterWorkflow`).
    RegisterWorkflow,
}

impl Operation {
    /// What the operation does, for "may not ..." messages.
    pub fn describe(self) -> &'static str {
        match self {
            Self::StartRun => "start runs",
            Self::DescribeRun => "describe runs",
            Self::GetHistory => "read run histories",
            Self::WatchRun => "watch runs",
            Self::ListRuns => "list runs",
            Self::SignalRun => "signal runs",
            Self::CancelRun => "cancel runs",
            Self::TerminateRun => "terminate runs",
            Self::ListWorkflows => "list workflows",
            Self::GetSessionTree => "read session trees",
            Self::DescribeTaskQueue => "describe task queues",
            Self::PollTask => "poll task queues",
            Self::ReportTask => "report on step tasks",
            Self::ManageSchedules => "manage schedules",
            Self::PauseRun => "pause runs",
            Self::UnpauseRun => "unpause runs",
            Self::ManageTriggers => "manage triggers",
            Self::ManageApiKeys => "manage API keys",
            Self::ManageNamespaces => "manage namespaces",
            Self::ReadMetrics => "read metrics",
            Self::RedeliverResult => "redeliver run results",
            Self::ApproveStep => "approve steps",
            Self::RejectStep => "reject steps",
            Self::ExportStore => "export the store",
            Self::ResetRun => "reset runs",
            Self::RerunRun => "rerun runs",
            Self::ManageBatches => "manage batch operations",
            Self::RegisterWorkflow => "register workflows",
        }
    }

    /// The identity recorded when the request names none.
    fn default_identity(self) -> &'static str {
        match self {
            Self::PollTask => "unknown-worker",
            Self::ReportTask => "worker",
            _ => "client",
        }
    }
}

/// Whether a key of `role` may do `op` (in a namespace it covers). The one
/// authorization table: `worker` polls and reports on tasks; `client` starts, reads
/// and steers runs; `developer` does what a client does and registers workflows;
/// `admin` does everything.
pub fn permits(role: Role, op: Operation) -> bool {
    use Operation::*;
    match role {
        Role::Admin => true,
        Role::Developer => op == RegisterWorkflow || permits(Role::Client, op),
        Role::Client => matches!(
            op,
            StartRun
                | DescribeRun
                | GetHistory
                | WatchRun
                | ListRuns
                | SignalRun
                | CancelRun
                | TerminateRun
                | ListWorkflows
                | GetSessionTree
                | DescribeTaskQueue
                | PauseRun
                | UnpauseRun
                | RedeliverResult
                | ApproveStep
                | RejectStep
                | ResetRun
                | RerunRun
        ),
        // DescribeRun too: a worker whose completion's answer was lost checks the
        // run to tell a landed completion from a refused one.
        Role::Worker => matches!(op, PollTask | ReportTask | DescribeRun),
    }
}

/// The credentials a request came with, as the transport found them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Credentials {
    /// No `authorization` header.
    #[default]
    None,
    /// `authorization: Bearer <this>`.
    Bearer(String),
    /// An `authorization` header that is not `Bearer <key>`.
    Malformed,
}

impl Credentials {
    /// Reads an `authorization` header's value (`None`: no header; `Err`: not text).
    pub fn from_header(value: Option<Result<&str, ()>>) -> Self {
        let Some(value) = value else {
            return Self::None;
        };
        let Ok(value) = value else {
            return Self::Malformed;
        };
        match value.split_once(' ') {
            Some((scheme, key)) if scheme.eq_ignore_ascii_case("bearer") && !key.trim().is_empty() => {
                Self::Bearer(key.trim().to_string())
            }
            _ => Self::Malformed,
        }
    }
}

/// What a request says about its caller, as received.
#[derive(Debug, Clone, Default)]
pub struct CallerInput {
    /// The namespace the request names (empty: `default`). For a lease holder, the
    /// one its task token names.
    pub namespace: String,
    /// The identity the caller gives itself (empty: the operation's default).
    pub identity: String,
    pub credentials: Credentials,
    /// The subject of the client certificate the caller proved under mutual TLS. Once
    /// the credentials are authenticated, it is the caller's identity, whatever the
    /// request names.
    pub peer_subject: Option<String>,
}

/// A request's caller, checked: authenticated, allowed, its namespace exists and
/// its identity is bounded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub namespace: String,
    /// Recorded in the events the request causes.
    pub identity: String,
    pub principal: Principal,
}

impl Caller {
    /// Refuses a task queue outside a worker key's queues (`PERMISSION_DENIED`).
    pub fn check_queue(&self, queue: &str) -> Result<(), ApiError> {
        match &self.principal {
            Principal::Key(k) if !k.queues.is_empty() && !k.queues.iter().any(|q| q == queue) => {
                Err(ApiError::Rejected(Rejection::PermissionDenied(format!(
                    "API key {} may use only task queues [{}], not {:?}",
                    k.key_id,
                    k.queues.join(", "),
                    short(queue)
                ))))
            }
            _ => Ok(()),
        }
    }
}

impl Caller {
    /// Refuses a run none of whose steps is on a worker key's queues
    /// (`PERMISSION_DENIED`): such a key describes only its runs, the ones it could
    /// have leased a step of (a key without queues: every run of its namespace).
    pub fn check_run_queues(&self, run: &railyard_model::run::RunState) -> Result<(), ApiError> {
        let Principal::Key(k) = &self.principal else {
            return Ok(());
        };
        if k.queues.is_empty() {
            return Ok(());
        }
        let def = &run.definition;
        let on_its_queues = def
            .steps
            .iter()
            .any(|s| k.queues.iter().any(|q| q == s.queue(def, &run.task_queue)));
        if on_its_queues {
            Ok(())
        } else {
            Err(ApiError::Rejected(Rejection::PermissionDenied(format!(
                "API key {} may describe only runs with a step on its task queues [{}]",
                k.key_id,
                k.queues.join(", ")
            ))))
        }
    }
}

/// The one place a request's caller is established.
pub fn resolve(core: &Core, input: CallerInput, op: Operation) -> Result<Caller, ApiError> {
    let principal = authenticate(core, &input.credentials)?;
    resolve_as(
        core,
        principal,
        input.namespace,
        input.identity,
        input.peer_subject,
        op,
    )
}

/// [`resolve`] for a principal already authenticated (a lease holder's, whose
/// namespace comes from its task token, checked in between).
///
/// The identity recorded in history is who the caller proved to be: the subject of a
/// verified client certificate, else, under auth, the key ([`KeyPrincipal::label`]).
/// Only without either is it the identity the request names, which then proves
/// nothing (auth is off). Under auth a named identity is still checked for length,
/// but not recorded: a key cannot write `server` or `admin:alice` into history.
pub fn resolve_as(
    core: &Core,
    principal: Principal,
    namespace: String,
    claimed: String,
    peer_subject: Option<String>,
    op: Operation,
) -> Result<Caller, ApiError> {
    let ns = namespace_name(&namespace);
    authorize(&principal, ns, op)?;
    let namespace = existing_namespace(core, ns)?;
    check_len("identity", &claimed, limits::IDENTITY)?;
    let identity = match (peer_subject, &principal) {
        (Some(subject), _) => subject,
        (None, Principal::Key(k)) => k.label(),
        (None, _) if claimed.is_empty() => op.default_identity().to_string(),
        (None, _) => claimed,
    };
    Ok(Caller {
        namespace,
        identity,
        principal,
    })
}

/// The caller for what the server does on its own behalf (a schedule's fire, a
/// trigger): no credentials, namespace checked.
pub fn internal(core: &Core, namespace: &str, identity: &str) -> Result<Caller, ApiError> {
    Ok(Caller {
        namespace: existing_namespace(core, namespace_name(namespace))?,
        identity: identity.to_string(),
        principal: Principal::Server,
    })
}

/// Who the credentials prove the caller is. With auth off, anyone is
/// [`Principal::Anonymous`] (credentials are not looked at); with auth on, a key that
/// is missing, malformed, unknown, wrong, revoked or expired is `UNAUTHENTICATED`.
pub fn authenticate(core: &Core, credentials: &Credentials) -> Result<Principal, ApiError> {
    if !core.auth {
        return Ok(Principal::Anonymous);
    }
    let unauthenticated = |m: String| Err(ApiError::Unauthenticated(m));
    let presented = match credentials {
        Credentials::None => {
            return unauthenticated(
                "no API key: this server requires `authorization: Bearer <api key>` \
                 (railyard: --api-key or RAILYARD_API_KEY)"
                    .into(),
            );
        }
        Credentials::Malformed => {
            return unauthenticated("the authorization header is not `Bearer <api key>`".into());
        }
        Credentials::Bearer(key) => key,
    };
    let key_id = match auth::key_id_of(presented) {
        Ok(id) => id,
        Err(e) => return unauthenticated(format!("malformed API key: {e}")),
    };
    let key = match core.store.api_key(key_id)? {
        Some(key) if key.verifies(presented) => key,
        _ => {
            return unauthenticated(format!(
                "unknown API key {key_id} (no such key, or a wrong secret)"
            ));
        }
    };
    if let Some(at) = key.revoked_ms {
        return unauthenticated(format!("API key {key_id} was revoked at {}", time(at)));
    }
    if let Some(at) = key.expires_ms
        && core.clock.now_ms() >= at
    {
        return unauthenticated(format!("API key {key_id} expired at {}", time(at)));
    }
    Ok(Principal::Key(KeyPrincipal::of(&key)))
}

/// Whether `principal` may do `op` in namespace `ns` (`PERMISSION_DENIED` naming
/// what is wrong). [`Principal::Anonymous`] and [`Principal::Server`] may do anything.
pub fn authorize(principal: &Principal, ns: &str, op: Operation) -> Result<(), ApiError> {
    let Principal::Key(k) = principal else {
        return Ok(());
    };
    if !permits(k.role, op) {
        return Err(ApiError::Rejected(Rejection::PermissionDenied(format!(
            "API key {} has role {}, which may not {}",
            k.key_id,
            k.role.name(),
            op.describe()
        ))));
    }
    if !k.covers(ns) {
        return Err(ApiError::Rejected(Rejection::PermissionDenied(format!(
            "API key {} is for namespace {:?}, not {:?}",
            k.key_id,
            k.namespace,
            short(ns)
        ))));
    }
    Ok(())
}

/// The namespace a request names (`default` when empty).
pub fn namespace_name(ns: &str) -> &str {
    if ns.is_empty() {
        railyard_model::namespace::DEFAULT_NAMESPACE
    } else {
        ns
    }
}

/// `ns`, if it exists.
pub fn existing_namespace(core: &Core, ns: &str) -> Result<String, ApiError> {
    if core.namespaces.contains(ns) {
        Ok(ns.to_string())
    } else {
        // A name no namespace can have (too long, a character no name holds) is the
        // request's fault, and says which rule it breaks.
        limits::check_name("namespace", ns)?;
        Err(ApiError::Rejected(Rejection::NotFound(format!(
            "namespace {} does not exist",
            railyard_model::echo(ns)
        ))))
    }
}

/// At most the first 64 bytes of what a client sent, for an error message.
pub fn short(text: &str) -> &str {
    railyard_model::text::prefix(text, 64)
}

/// A stored time, in RFC 3339 UTC.
pub fn time(ms: railyard_model::Millis) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| format!("{ms} ms"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_developer_does_what_a_client_does_and_registers_workflows() {
        use Operation::*;
        for op in [StartRun, ListWorkflows, SignalRun, ResetRun, DescribeRun] {
            assert!(permits(Role::Developer, op), "{op:?}");
        }
        for op in [
            ManageApiKeys,
            ManageSchedules,
            ManageTriggers,
            ManageNamespaces,
            ManageBatches,
            PollTask,
        ] {
            assert_eq!(permits(Role::Developer, op), permits(Role::Client, op), "{op:?}");
        }
        assert!(permits(Role::Developer, RegisterWorkflow));
        assert!(permits(Role::Admin, RegisterWorkflow));
        assert!(!permits(Role::Client, RegisterWorkflow));
        assert!(!permits(Role::Worker, RegisterWorkflow));
    }
}
