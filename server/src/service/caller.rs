//! Who sends a request. A [`Caller`] is built once per request, by [`resolve`], before
//! anything else of the request is looked at: authentication plugs in here.

use super::Core;
use super::limits::{self, check_len};
use crate::error::ApiError;

/// The authenticated principal behind a request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Principal {
    /// No authentication is configured: every caller is anonymous. Auth adds the
    /// principals its credentials prove, and [`resolve`] refuses missing or unknown
    /// credentials with [`ApiError::Unauthenticated`].
    Anonymous,
}

/// What a caller is doing; it sets the identity recorded when the request names none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Starting, reading or steering runs.
    Client,
    /// Polling a task queue.
    Poller,
    /// Reporting on a lease it holds (heartbeat, complete, fail).
    LeaseHolder,
}

impl Role {
    fn default_identity(self) -> &'static str {
        match self {
            Self::Client => "client",
            Self::Poller => "unknown-worker",
            Self::LeaseHolder => "worker",
        }
    }
}

/// What a request says about its caller, as received.
#[derive(Debug, Clone, Default)]
pub struct CallerInput {
    /// The namespace the request names (empty: `default`). For a lease holder, the
    /// one its task token names.
    pub namespace: String,
    /// The identity the caller gives itself (empty: its role's default).
    pub identity: String,
    /// The subject of the client certificate the caller proved under mutual TLS. It
    /// is the caller's identity, whatever the request names.
    pub peer_subject: Option<String>,
}

/// A request's caller, checked: its namespace exists and its identity is bounded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub namespace: String,
    /// Recorded in the events the request causes.
    pub identity: String,
    pub principal: Principal,
}

/// The one place a request's caller is established.
pub fn resolve(core: &Core, input: CallerInput, role: Role) -> Result<Caller, ApiError> {
    let namespace = namespace(core, &input.namespace)?;
    check_len("identity", &input.identity, limits::IDENTITY)?;
    let identity = if let Some(subject) = input.peer_subject {
        subject
    } else if input.identity.is_empty() {
        role.default_identity().to_string()
    } else {
        input.identity
    };
    Ok(Caller {
        namespace,
        identity,
        principal: Principal::Anonymous,
    })
}

/// The namespace a request names (`default` when empty), if it exists.
fn namespace(core: &Core, ns: &str) -> Result<String, ApiError> {
    let ns = if ns.is_empty() {
        railyard_proto::DEFAULT_NAMESPACE
    } else {
        ns
    };
    if core.namespaces.contains(ns) {
        Ok(ns.to_string())
    } else {
        Err(ApiError::NotFound(format!("namespace {ns:?} does not exist")))
    }
}
