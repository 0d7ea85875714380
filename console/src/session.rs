//! Sessions, sign-in and CSRF.
//!
//! A session is a random id in an `HttpOnly`, `SameSite=Strict` cookie (`Secure` under
//! TLS) that maps, in this process's memory only, to the API key its user signed in
//! with, the namespace and role found at sign-in, and a CSRF token. The key never
//! goes back to the browser. At most [`DEFAULT_MAX_SESSIONS`] are held and one unused
//! for [`DEFAULT_IDLE`] is dropped. At the cap the least recently used session goes
//! whose role is not above the new one's (a client key signing in again and again
//! never ends an admin's session; with only admins' left, the client is refused),
//! and one key holds at most [`MAX_PER_KEY`] (its own least recently used goes).
//!
//! Every state-changing form carries the session's CSRF token, compared in constant
//! time ([`Viewer::csrf_matches`]); the sign-in form, before any session exists, carries
//! a double-submit token (a random cookie and the same value in the form). A POST
//! whose `Origin` is another host is refused as well.
//!
//! Without auth (the server's loopback default), a visitor gets an anonymous session
//! on the first page, only for its CSRF token: there is no key, and the server lets
//! anonymous callers do anything, as it does on its API.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use railyard_sdk::{ApiKey, ClientError};
use subtle::ConstantTimeEq;

use crate::Shared;
use crate::api::{Api, Budget};

/// Sessions held at once unless configured.
pub const DEFAULT_MAX_SESSIONS: usize = 1024;
/// Sessions one API key holds at once.
pub const MAX_PER_KEY: usize = 16;
/// A session unused this long is dropped unless configured.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(8 * 3600);
/// The session cookie.
pub const COOKIE: &str = "railyard_session";
/// The sign-in form's double-submit cookie.
pub const SIGNIN_COOKIE: &str = "railyard_signin";
/// The form field that carries the CSRF token.
pub const CSRF_FIELD: &str = "csrf";
/// The header the verified client certificate's subject is passed in (set by the
/// server's guard; any value a client sent is removed before the console sees it).
pub(crate) const PEER_SUBJECT: &str = railyard_proto::PEER_SUBJECT;

/// What a signed-in user may do, as found at sign-in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Reads and acts on runs.
    Client,
    /// Everything, in its namespace: also keys, schedules, triggers.
    Admin,
}

#[derive(Clone)]
struct Session {
    key: Option<ApiKey>,
    namespace: String,
    role: Role,
    csrf: String,
    last_seen: Instant,
}

/// The sessions of this process, bounded and expiring.
pub struct Sessions {
    map: Mutex<HashMap<String, Session>>,
    max: usize,
    idle: Duration,
}

impl Sessions {
    /// At most `max` sessions; one idle for `idle` is dropped.
    pub fn new(max: usize, idle: Duration) -> Self {
        Self {
            map: Mutex::new(HashMap::new()),
            max: max.max(1),
            idle,
        }
    }

    /// Holds a new session and returns its id; `None` when every session held is of
    /// a higher role than `role` and the cap is reached.
    pub(crate) fn create(&self, key: Option<ApiKey>, namespace: String, role: Role) -> Option<String> {
        let id = random_token();
        let now = Instant::now();
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, s| now.duration_since(s.last_seen) < self.idle);
        let same_key = |s: &Session| match (&s.key, &key) {
            (Some(a), Some(b)) => a.expose() == b.expose(),
            _ => false,
        };
        let oldest = |map: &HashMap<String, Session>, pick: &dyn Fn(&Session) -> bool| {
            map.iter()
                .filter(|(_, s)| pick(s))
                .min_by_key(|(_, s)| s.last_seen)
                .map(|(k, _)| k.clone())
        };
        while key.is_some() && map.values().filter(|s| same_key(s)).count() >= MAX_PER_KEY {
            let Some(own) = oldest(&map, &same_key) else { break };
            map.remove(&own);
        }
        while map.len() >= self.max {
            let oldest = oldest(&map, &|s: &Session| s.role <= role)?;
            map.remove(&oldest);
        }
        map.insert(
            id.clone(),
            Session {
                key,
                namespace,
                role,
                csrf: random_token(),
                last_seen: now,
            },
        );
        Some(id)
    }

    fn touch(&self, id: &str) -> Option<Session> {
        let now = Instant::now();
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let session = map.get_mut(id)?;
        if now.duration_since(session.last_seen) >= self.idle {
            map.remove(id);
            return None;
        }
        session.last_seen = now;
        Some(session.clone())
    }

    fn remove(&self, id: &str) {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
    }

    /// Sessions held now (for tests of the bound).
    pub fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// 32 random bytes, hex.
pub(crate) fn random_token() -> String {
    let mut bytes = [0u8; 32];
    // The OS's generator failing is not something a page can recover from; a
    // predictable token would be worse than a failed request.
    if getrandom::fill(&mut bytes).is_err() {
        panic!("the operating system's random number generator failed");
    }
    hex::encode(bytes)
}

pub(crate) fn cookie_value<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

pub(crate) fn set_cookie(name: &str, value: &str, tls: bool, max_age: Option<u64>) -> HeaderValue {
    let mut cookie = format!("{name}={value}; Path=/ui; HttpOnly; SameSite=Strict");
    if tls {
        cookie.push_str("; Secure");
    }
    if let Some(age) = max_age {
        cookie.push_str(&format!("; Max-Age={age}"));
    }
    // Only hex and fixed words: always a valid header value.
    HeaderValue::from_str(&cookie).unwrap_or_else(|_| HeaderValue::from_static("railyard_session=; Path=/ui"))
}

/// The user a request comes from: their key, namespace and role, the page's namespace
/// and their CSRF token. Extracting it sends a signed-out visitor of a server with
/// auth to the sign-in page.
pub struct Viewer {
    key: Option<ApiKey>,
    peer: Option<String>,
    /// The namespace the page is about (`?ns=`, else the session's).
    pub ns: String,
    /// What the user may do.
    pub role: Role,
    /// The session's CSRF token, for the forms the page renders.
    pub csrf: String,
    /// Signed in with a key (as opposed to anonymous on a server without auth).
    pub signed_in: bool,
    /// A new anonymous session's cookie to set with the response.
    new_cookie: Option<HeaderValue>,
    shared: Arc<Shared>,
}

impl Viewer {
    /// A client calling as this user in the page's namespace, within `budget`.
    pub fn api(&self, budget: Budget) -> Result<Api, ClientError> {
        Api::new(
            &self.shared.client,
            self.key.as_ref(),
            self.peer.as_deref(),
            self.ns.clone(),
            budget,
        )
    }

    /// Whether the user may see admin pages and buttons.
    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    /// Whether a submitted form's CSRF token is the session's (compared in constant
    /// time).
    pub fn csrf_matches(&self, submitted: &str) -> bool {
        bool::from(submitted.as_bytes().ct_eq(self.csrf.as_bytes()))
    }

    /// Drops this viewer's session (sign-out).
    pub(crate) fn end_session(&self, headers: &HeaderMap) {
        if let Some(id) = cookie_value(headers, COOKIE) {
            self.shared.sessions.remove(id);
        }
    }

    /// The shared state.
    pub(crate) fn tls(&self) -> bool {
        self.shared.config.tls
    }

    /// Adds the new session's cookie, if any, to `response`.
    pub fn finish(&self, mut response: Response) -> Response {
        if let Some(cookie) = &self.new_cookie {
            response.headers_mut().append(header::SET_COOKIE, cookie.clone());
        }
        response
    }
}

impl FromRequestParts<Arc<Shared>> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, shared: &Arc<Shared>) -> Result<Self, Response> {
        if parts.method == axum::http::Method::POST && !same_origin(&parts.headers) {
            return Err((StatusCode::FORBIDDEN, "a form from another origin is refused\n").into_response());
        }
        let peer = parts
            .headers
            .get(PEER_SUBJECT)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let requested_ns = parts
            .uri
            .query()
            .and_then(|q| query_value(q, "ns"))
            .filter(|ns| !ns.is_empty());
        let existing = cookie_value(&parts.headers, COOKIE).and_then(|id| shared.sessions.touch(id));
        let (session, new_cookie) = match existing {
            Some(s) => (s, None),
            None if shared.config.auth => return Err(Redirect::to("/ui/signin").into_response()),
            None => {
                let id = shared
                    .sessions
                    .create(None, railyard_proto::DEFAULT_NAMESPACE.into(), Role::Admin)
                    .unwrap_or_default();
                let session = shared.sessions.touch(&id).ok_or_else(|| {
                    (StatusCode::SERVICE_UNAVAILABLE, "no session could be held\n").into_response()
                })?;
                (session, Some(set_cookie(COOKIE, &id, shared.config.tls, None)))
            }
        };
        Ok(Viewer {
            signed_in: session.key.is_some(),
            key: session.key,
            peer,
            ns: requested_ns.unwrap_or(session.namespace),
            role: session.role,
            csrf: session.csrf,
            new_cookie,
            shared: shared.clone(),
        })
    }
}

/// One decoded query parameter.
pub(crate) fn query_value(query: &str, name: &str) -> Option<String> {
    serde_urlencoded_pairs(query)
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
}

fn serde_urlencoded_pairs(query: &str) -> Vec<(String, String)> {
    axum::extract::Query::<Vec<(String, String)>>::try_from_uri(
        &format!("/?{query}")
            .parse()
            .unwrap_or_else(|_| axum::http::Uri::from_static("/")),
    )
    .map(|q| q.0)
    .unwrap_or_default()
}

/// Whether a POST's `Origin` (when sent) names the host it was sent to.
pub(crate) fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let origin_host = origin.split_once("://").map_or("", |(_, rest)| rest);
    !host.is_empty() && origin_host == host
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_are_bounded_and_the_least_recently_used_goes() {
        let sessions = Sessions::new(3, Duration::from_secs(3600));
        let first = sessions.create(None, "default".into(), Role::Admin).unwrap();
        let second = sessions.create(None, "default".into(), Role::Admin).unwrap();
        sessions.create(None, "default".into(), Role::Admin).unwrap();
        assert!(sessions.touch(&first).is_some());
        sessions.create(None, "default".into(), Role::Admin).unwrap();
        assert_eq!(sessions.len(), 3);
        assert!(
            sessions.touch(&second).is_none(),
            "the least recently used is dropped"
        );
        assert!(sessions.touch(&first).is_some());
    }

    #[test]
    fn a_client_key_signing_in_again_and_again_never_ends_an_admins_session() {
        let sessions = Sessions::new(20, Duration::from_secs(3600));
        let admin = sessions
            .create(Some(ApiKey::new("ry_admin")), "default".into(), Role::Admin)
            .unwrap();
        let mut clients = Vec::new();
        for i in 0..1100 {
            let key = ApiKey::new(if i % 2 == 0 { "ry_client" } else { "ry_other" });
            clients.push(sessions.create(Some(key), "default".into(), Role::Client));
        }
        assert!(
            sessions.touch(&admin).is_some(),
            "the admin's session was evicted"
        );
        assert_eq!(sessions.len(), 20);
        // Below the cap, each key holds at most its own share, the newest.
        let roomy = Sessions::new(100, Duration::from_secs(3600));
        let mut last = None;
        for _ in 0..40 {
            last = roomy.create(Some(ApiKey::new("ry_client")), "default".into(), Role::Client);
        }
        assert_eq!(roomy.len(), MAX_PER_KEY);
        assert!(roomy.touch(&last.unwrap()).is_some());
        assert!(
            clients
                .last()
                .unwrap()
                .as_ref()
                .is_some_and(|id| sessions.touch(id).is_some())
        );
        // Full of admins: a client is refused, an admin takes the oldest admin's place.
        let full = Sessions::new(2, Duration::from_secs(3600));
        let first = full.create(Some(ApiKey::new("ry_a")), "default".into(), Role::Admin);
        full.create(Some(ApiKey::new("ry_b")), "default".into(), Role::Admin);
        assert_eq!(
            full.create(Some(ApiKey::new("ry_c")), "default".into(), Role::Client),
            None
        );
        assert!(
            full.create(Some(ApiKey::new("ry_d")), "default".into(), Role::Admin)
                .is_some()
        );
        assert!(full.touch(&first.unwrap()).is_none());
    }

    #[test]
    fn an_idle_session_expires() {
        let sessions = Sessions::new(3, Duration::ZERO);
        let id = sessions.create(None, "default".into(), Role::Admin).unwrap();
        assert!(sessions.touch(&id).is_none());
    }

    #[test]
    fn origin_must_name_the_host() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:7401"));
        assert!(same_origin(&h));
        h.insert(header::ORIGIN, HeaderValue::from_static("http://127.0.0.1:7401"));
        assert!(same_origin(&h));
        h.insert(header::ORIGIN, HeaderValue::from_static("http://evil.example"));
        assert!(!same_origin(&h));
    }
}
