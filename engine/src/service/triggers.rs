//! Triggers: create, describe, list, update and delete (the `Triggers` API, admin
//! only), the configuration's triggers written into storage at start
//! ([`sync_config`]), and a webhook delivery ([`deliver`], what
//! `POST /hooks/{namespace}/{trigger}` does). Every field is checked here,
//! naming it; a delivery's templates are rendered here, so a missing payload path
//! starts nothing.

use railyard_model::Rejection;
use std::collections::BTreeMap;

use serde_json::Value;

use super::caller::Principal;
use super::runs::{self, StartRun};
use super::{Caller, Core, caller, workflows};
use railyard_model::auth::ALL_NAMESPACES;
use railyard_model::echo;
use railyard_model::limits::{self, check_context, check_count, check_len, check_name};

use crate::error::ApiError;
use crate::signature::{self, VerifyError};
use crate::writer::{
    CreateTrigger, DeleteTrigger, DeliverHook, Delivered, SyncConfigTriggers, UpdateTrigger, WriteError,
};
use railyard_model::template::payload::{RenderError, Template};
use railyard_model::trace::TraceContext;
use railyard_model::trigger::poll::{self, Events, PollSource, SourceKind};
use railyard_model::trigger::{MAX_DELIVERY_ID, MAX_KEY_BYTES, Mode, Source, Trigger};
use railyard_store::StorageError;

/// Longest goal or context template, in bytes.
pub const MAX_TEMPLATE: usize = 16 * 1024;
/// Most context entries on a trigger.
pub const MAX_CONTEXT_TEMPLATES: usize = 32;
/// Longest header name a trigger may name.
pub const MAX_HEADER_NAME: usize = 128;
/// Longest description.
pub const MAX_DESCRIPTION: usize = 4096;
/// Triggers in a listing page when the request names no size.
pub const DEFAULT_LIST_PAGE: usize = 100;
/// Most triggers in one listing page.
pub const MAX_LIST_PAGE: usize = 1000;

/// What a trigger is, as a request (or the configuration) gives it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TriggerInput {
    /// Where the configuration defines it (the API takes the namespace from the
    /// request; empty: `default`).
    pub namespace: String,
    pub id: String,
    #[serde(alias = "workflow")]
    pub workflow_id: String,
    pub task_queue: String,
    pub goal: String,
    pub context: BTreeMap<String, String>,
    /// Search attributes of the runs it starts: name → template over the payload.
    pub attributes: BTreeMap<String, String>,
    pub callback_url: String,
    pub signature_secret: String,
    pub signature_header: String,
    pub bearer_token: String,
    pub dedup_header: String,
    pub concurrency_key: String,
    /// `parallel` (empty: the default), `serial` or `replace`.
    pub mode: String,
    pub description: String,
    /// A polled source instead of a webhook (`None`: a webhook trigger).
    pub poll: Option<PollInput>,
}

/// What a polled trigger polls, as a request (or the configuration) gives it
/// ([`railyard_model::trigger::poll::PollSource`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PollInput {
    /// `github-issues`, `github-pulls` or `gitlab-merge-requests`.
    pub source: String,
    /// `owner/name` (GitHub) or the project's path (GitLab).
    pub repo: String,
    /// The API's base URL (empty: api.github.com or gitlab.com).
    pub base_url: String,
    /// `$ENV_NAME` of the API token.
    pub token: String,
    pub labels: Vec<String>,
    pub state: String,
    pub author: String,
    /// `new` (the default), `labeled`, `updated`.
    pub events: Vec<String>,
    /// A duration (`60s`, `5m`; empty: 60 s).
    pub every: String,
}

/// A page of triggers.
#[derive(Debug, Clone)]
pub struct TriggerListing {
    pub triggers: Vec<Trigger>,
    /// Empty when this is the last page.
    pub next_page_token: String,
}

fn check_id(id: &str) -> Result<(), ApiError> {
    Ok(check_name("trigger_id", id)?)
}

fn check_template(field: &str, text: &str) -> Result<Template, ApiError> {
    check_len(field, text, MAX_TEMPLATE)?;
    Template::parse(text).map_err(|e| ApiError::field(field, e))
}

fn check_secret(core: &Core, source: Source, ns: &str, field: &str, value: &str) -> Result<(), ApiError> {
    if value.is_empty() {
        return Ok(());
    }
    core.secrets
        .check(source, ns, value)
        .map(|_| ())
        .map_err(|e| ApiError::field(field, e))
}

fn check_header(field: &str, value: &str) -> Result<(), ApiError> {
    if value.is_empty() {
        return Ok(());
    }
    check_len(field, value, MAX_HEADER_NAME)?;
    http::HeaderName::from_bytes(value.as_bytes())
        .map(|_| ())
        .map_err(|_| ApiError::field(field, format!("{} is not an HTTP header name", echo(value))))
}

/// Checks a trigger's fields (naming the one that is wrong) and makes the
/// trigger, in namespace `ns`, defined in `source` (what secrets it may name).
pub fn check(core: &Core, ns: &str, source: Source, r: TriggerInput) -> Result<Trigger, ApiError> {
    check_id(&r.id)?;
    check_name("workflow_id", &r.workflow_id)?;
    if let Err(e) = workflows::get(core, ns, &r.workflow_id) {
        let ApiError::Rejected(Rejection::NotFound(_)) = e else {
            return Err(e);
        };
        return Err(ApiError::field(
            "workflow_id",
            format!(
                "workflow {} is neither loaded nor registered (known: {})",
                echo(&r.workflow_id),
                workflows::known(core, ns)?
            ),
        ));
    }
    if !r.task_queue.is_empty() {
        check_name("task_queue", &r.task_queue)?;
    }
    check_template("goal", &r.goal)?;
    check_count("context", r.context.len(), MAX_CONTEXT_TEMPLATES)?;
    check_context("context", &r.context)?;
    for (k, v) in &r.context {
        check_template(&format!("context[{}]", echo(k)), v)?;
    }
    check_count(
        "attributes",
        r.attributes.len(),
        railyard_model::attributes::MAX_RUN_ATTRIBUTES,
    )?;
    let declared = super::attributes::declared(core, ns)?;
    for (k, v) in &r.attributes {
        if !declared.contains_key(k) {
            return Err(ApiError::field(
                "attributes",
                format!(
                    "{} is not a search attribute the namespace declares (railyard namespace attribute add)",
                    echo(k)
                ),
            ));
        }
        check_template(&format!("attributes[{k}]"), v)?;
    }
    if !r.callback_url.is_empty() {
        // The same rules as a run's callback URL (the runs it starts carry it).
        railyard_model::run::delivery::url::check("callback_url", &r.callback_url)?;
        super::subscriptions::check_destination(core, "callback_url", &r.callback_url)?;
    }
    check_secret(core, source, ns, "signature_secret", &r.signature_secret)?;
    check_secret(core, source, ns, "bearer_token", &r.bearer_token)?;
    check_header("signature_header", &r.signature_header)?;
    check_header("dedup_header", &r.dedup_header)?;
    check_template("concurrency_key", &r.concurrency_key)?;
    let mode = match r.mode.as_str() {
        "" => Mode::Parallel,
        m => Mode::parse(m).ok_or_else(|| {
            ApiError::field("mode", format!("{} is not parallel, serial or replace", echo(m)))
        })?,
    };
    if mode != Mode::Parallel && r.concurrency_key.is_empty() {
        return Err(ApiError::field(
            "mode",
            format!("{} needs a concurrency_key", mode.name()),
        ));
    }
    check_len("description", &r.description, MAX_DESCRIPTION)?;
    let poll = r.poll.map(|p| check_poll(core, source, ns, p)).transpose()?;
    if poll.is_some()
        && let Some(field) = [
            ("signature_secret", &r.signature_secret),
            ("signature_header", &r.signature_header),
            ("bearer_token", &r.bearer_token),
            ("dedup_header", &r.dedup_header),
        ]
        .into_iter()
        .find(|(_, v)| !v.is_empty())
        .map(|(f, _)| f)
    {
        return Err(ApiError::field(
            field,
            "a polled trigger takes no webhook deliveries, so it has no webhook settings",
        ));
    }
    if poll.is_none() && core.auth && r.signature_secret.is_empty() && r.bearer_token.is_empty() {
        return Err(ApiError::field(
            "signature_secret",
            "this server requires auth: a trigger needs a signature_secret or a bearer_token, \
             or anyone could start its workflow",
        ));
    }
    Ok(Trigger {
        namespace: ns.to_string(),
        id: r.id,
        workflow_id: r.workflow_id,
        task_queue: r.task_queue,
        goal: r.goal,
        context: r.context,
        attributes: r.attributes,
        callback_url: r.callback_url,
        signature_secret: r.signature_secret,
        signature_header: r.signature_header,
        bearer_token: r.bearer_token,
        dedup_header: r.dedup_header,
        concurrency_key: r.concurrency_key,
        mode,
        description: r.description,
        poll,
        source,
        ..Trigger::default()
    })
}

/// Checks a polled source's fields, naming the one that is wrong (`poll.repo`).
fn check_poll(core: &Core, source: Source, ns: &str, p: PollInput) -> Result<PollSource, ApiError> {
    if !p.base_url.is_empty() {
        // The rules of a delivery's destination: the token goes there.
        super::subscriptions::check_destination(core, "poll.base_url", &p.base_url)?;
    }
    let kind = SourceKind::parse(&p.source).ok_or_else(|| {
        let known: Vec<_> = SourceKind::ALL.iter().map(|k| k.name()).collect();
        ApiError::field(
            "poll.source",
            format!("{} is not one of {}", echo(&p.source), known.join(", ")),
        )
    })?;
    check_secret(core, source, ns, "poll.token", &p.token)?;
    let events = Events::parse(&p.events).map_err(|e| ApiError::field("poll.events", e))?;
    let every_ms = if p.every.is_empty() {
        poll::DEFAULT_EVERY_MS
    } else {
        let d = railyard_model::duration::parse(&p.every)
            .map_err(|e| ApiError::field("poll.every", format!("{}: {e}", echo(&p.every))))?;
        u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
    };
    let src = PollSource {
        kind,
        repo: p.repo,
        base_url: p.base_url,
        token: p.token,
        labels: p.labels,
        state: p.state,
        author: p.author,
        events,
        every_ms,
    };
    src.check()?;
    Ok(src)
}

/// A polled source as a request gives it (the inverse of [`check_poll`]).
pub fn poll_input(p: &PollSource) -> PollInput {
    PollInput {
        source: p.kind.name().to_string(),
        repo: p.repo.clone(),
        base_url: p.base_url.clone(),
        token: p.token.clone(),
        labels: p.labels.clone(),
        state: p.state.clone(),
        author: p.author.clone(),
        events: p.events.names(),
        every: if p.every_ms.is_multiple_of(1000) {
            format!("{}s", p.every_ms / 1000)
        } else {
            format!("{}ms", p.every_ms)
        },
    }
}

/// Refuses a request that sets or changes where a polled trigger sends its token
/// (`poll.base_url`) or which token (`poll.token`), unless its caller is an admin
/// of every namespace (`*`) or auth is off: a namespace's admin could otherwise
/// send a secret the operator declared to a server of their own.
fn check_poll_change(caller: &Caller, old: Option<&Trigger>, new: &Trigger) -> Result<(), ApiError> {
    let Principal::Key(k) = &caller.principal else {
        return Ok(());
    };
    if k.namespace == ALL_NAMESPACES {
        return Ok(());
    }
    let Some(p) = &new.poll else { return Ok(()) };
    let before = old.and_then(|o| o.poll.as_ref());
    let changed = |field: &str, now: &str, then: Option<&str>| {
        if !now.is_empty() && then != Some(now) {
            return Err(ApiError::Rejected(Rejection::PermissionDenied(format!(
                "{field}: setting or changing a polled trigger's token or API URL takes an admin \
                 key of every namespace (*); API key {} is of namespace {}",
                k.key_id,
                echo(&k.namespace)
            ))));
        }
        Ok(())
    };
    changed("poll.base_url", &p.base_url, before.map(|b| b.base_url.as_str()))?;
    changed("poll.token", &p.token, before.map(|b| b.token.as_str()))?;
    Ok(())
}

/// Creates a trigger (`ALREADY_EXISTS` if its id is taken in the namespace).
pub async fn create(core: &Core, caller: &Caller, r: TriggerInput) -> Result<Trigger, ApiError> {
    let trigger = check(core, &caller.namespace, Source::Api, r)?;
    check_poll_change(caller, None, &trigger)?;
    let t = core.writer.call(CreateTrigger { trigger }).await?;
    // A polled trigger is due at once.
    core.poll_wake.notify_one();
    Ok(t)
}

/// A trigger (`NOT_FOUND` when there is none).
pub fn describe(core: &Core, caller: &Caller, trigger_id: &str) -> Result<Trigger, ApiError> {
    check_id(trigger_id)?;
    let ns = &caller.namespace;
    core.store
        .trigger(ns, trigger_id)?
        .ok_or_else(|| crate::writer::trigger_not_found(ns, trigger_id).into())
}

/// A page of the namespace's triggers, in id order. The page token is the last
/// id of the previous page.
pub fn list(
    core: &Core,
    caller: &Caller,
    page_size: u32,
    page_token: &str,
) -> Result<TriggerListing, ApiError> {
    if !page_token.is_empty() {
        check_name("page_token", page_token)
            .map_err(|_| ApiError::field("page_token", "not a token this server gave"))?;
    }
    let size = match page_size as usize {
        0 => DEFAULT_LIST_PAGE,
        n => n.min(MAX_LIST_PAGE),
    };
    let mut triggers = core.store.triggers(&caller.namespace, page_token, size + 1)?;
    let next_page_token = if triggers.len() > size {
        triggers.truncate(size);
        triggers.last().map(|t| t.id.clone()).unwrap_or_default()
    } else {
        String::new()
    };
    Ok(TriggerListing {
        triggers,
        next_page_token,
    })
}

/// Replaces what an API-made trigger is (a configured one is read-only).
pub async fn update(core: &Core, caller: &Caller, r: TriggerInput) -> Result<Trigger, ApiError> {
    let trigger = check(core, &caller.namespace, Source::Api, r)?;
    let old = core.store.trigger(&caller.namespace, &trigger.id)?;
    check_poll_change(caller, old.as_ref(), &trigger)?;
    let t = core.writer.call(UpdateTrigger { trigger }).await?;
    core.poll_wake.notify_one();
    Ok(t)
}

/// Deletes an API-made trigger (a configured one is read-only).
pub async fn delete(core: &Core, caller: &Caller, trigger_id: &str) -> Result<(), ApiError> {
    check_id(trigger_id)?;
    core.writer
        .call(DeleteTrigger {
            ns: caller.namespace.clone(),
            trigger_id: trigger_id.to_string(),
        })
        .await
        .map_err(ApiError::from)?;
    core.hook_refusals.forget(&caller.namespace, trigger_id);
    Ok(())
}

/// The trigger's refused (and duplicate) deliveries lately, oldest first.
pub fn refusals(core: &Core, t: &Trigger) -> Vec<super::hook_refusals::Refusal> {
    core.hook_refusals.of(&t.namespace, &t.id)
}

/// Writes the configuration's triggers into storage, replacing those an earlier
/// configuration wrote; answers (saved, deleted). The error names the trigger.
pub async fn sync_config(core: &Core, triggers: Vec<TriggerInput>) -> Result<(usize, usize), ApiError> {
    let mut checked = Vec::with_capacity(triggers.len());
    for (i, r) in triggers.into_iter().enumerate() {
        let ns = if r.namespace.is_empty() {
            railyard_model::namespace::DEFAULT_NAMESPACE.to_string()
        } else {
            r.namespace.clone()
        };
        let id = r.id.clone();
        let t = check(core, &ns, Source::Config, r).map_err(|e| {
            ApiError::Rejected(Rejection::InvalidArgument(format!(
                "triggers[{i}] ({}): {e}",
                echo(&id)
            )))
        })?;
        if checked
            .iter()
            .any(|c: &Trigger| c.namespace == t.namespace && c.id == t.id)
        {
            return Err(ApiError::Rejected(Rejection::InvalidArgument(format!(
                "triggers[{i}]: trigger {} is defined twice in namespace {ns:?}",
                echo(&id)
            ))));
        }
        checked.push(t);
    }
    core.writer
        .call(SyncConfigTriggers { triggers: checked })
        .await
        .map_err(ApiError::from)
}

/// Why a webhook delivery is refused; each is one HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// 404.
    #[error("{0}")]
    NotFound(String),
    /// 401: the signature or token does not verify.
    #[error("{0}")]
    Unauthorized(VerifyError),
    /// 415: the body is declared as something other than JSON.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// 400: the body is not JSON, or a header is unusable.
    #[error("{0}")]
    BadRequest(String),
    /// 422: a template names a path the payload does not have, or renders too long.
    #[error("{0}")]
    Unprocessable(String),
    /// Anything else, as the API would answer it.
    #[error(transparent)]
    Api(#[from] ApiError),
}

impl HookError {
    /// What kind of refusal it is, in a word or two (what the HTTP status says).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::NotFound(_) => "not found",
            Self::Unauthorized(_) => "unauthorized",
            Self::UnsupportedMediaType(_) => "unsupported media type",
            Self::BadRequest(_) => "bad request",
            Self::Unprocessable(_) => "unprocessable",
            Self::Api(_) => "refused",
        }
    }
}

impl From<StorageError> for HookError {
    fn from(e: StorageError) -> Self {
        Self::Api(e.into())
    }
}

impl From<WriteError> for HookError {
    fn from(e: WriteError) -> Self {
        Self::Api(e.into())
    }
}

/// The delivery as the webhook route hands it over.
pub struct HookRequest<'a> {
    pub namespace: &'a str,
    pub trigger_id: &'a str,
    /// Reads a header by name (`None` when absent or not text).
    pub header: &'a (dyn Fn(&str) -> Option<String> + Sync),
    pub content_type: Option<&'a str>,
    pub body: &'a [u8],
}

pub fn render(field: &str, t: &str, payload: &Value, max: usize) -> Result<String, HookError> {
    let template =
        Template::parse(t).map_err(|e| ApiError::Internal(format!("stored {field} template: {e}")))?;
    template.render(payload, max).map_err(|e| match e {
        RenderError::Missing(path) => HookError::Unprocessable(format!(
            "{field}: the payload has no value at {}; nothing was started",
            echo(&path)
        )),
        RenderError::TooLong(max) => HookError::Unprocessable(format!(
            "{field}: renders to more than {max} bytes; nothing was started"
        )),
    })
}

/// The concurrency key of `t` for `payload` (empty: the trigger has none). A key
/// is stored as text, so one holding a NUL character is refused (`422`).
pub fn render_key(t: &Trigger, payload: &Value) -> Result<String, HookError> {
    if t.concurrency_key.is_empty() {
        return Ok(String::new());
    }
    let key = render("concurrency_key", &t.concurrency_key, payload, MAX_KEY_BYTES)?;
    if key.contains('\0') {
        return Err(HookError::Unprocessable(
            "concurrency_key: renders a NUL character, which the server does not store; nothing was started"
                .into(),
        ));
    }
    Ok(key)
}

/// A webhook delivery: verifies it, renders the trigger's templates from the
/// payload, and starts (or queues, or deduplicates) the run through the same
/// start as `StartRun`.
pub async fn deliver(core: &Core, r: HookRequest<'_>) -> Result<Delivered, HookError> {
    let unknown = || {
        HookError::NotFound(format!(
            "no trigger {} in namespace {}",
            echo(r.trigger_id),
            echo(r.namespace)
        ))
    };
    if check_name("namespace", r.namespace).is_err() || check_id(r.trigger_id).is_err() {
        return Err(unknown());
    }
    let identity = format!("trigger:{}", r.trigger_id);
    let caller = match caller::internal(core, r.namespace, &identity) {
        Ok(c) => c,
        Err(ApiError::Rejected(Rejection::NotFound(_))) => return Err(unknown()),
        Err(e) => return Err(e.into()),
    };
    let t = core
        .store
        .trigger(&caller.namespace, r.trigger_id)?
        .ok_or_else(unknown)?;
    if let Some(p) = &t.poll {
        return Err(HookError::NotFound(format!(
            "trigger {} polls {} {}; it takes no webhook deliveries",
            echo(r.trigger_id),
            p.kind.name(),
            echo(&p.repo)
        )));
    }
    // From here the trigger exists: a refusal, or a duplicate, is remembered
    // (`hook_refusals`: in memory, bounded per trigger).
    let received_ms = core.clock.now_ms();
    let delivery_id = (r.header)(t.dedup_header()).unwrap_or_default();
    let remember = |kind: &'static str, reason: String| {
        core.hook_refusals.record(
            &t.namespace,
            &t.id,
            super::hook_refusals::Refusal {
                received_ms,
                delivery_id: delivery_id.clone(),
                kind,
                reason,
            },
        );
    };
    match accept(core, &caller, &t, &r).await {
        Ok(d) => {
            if d.duplicate {
                remember("duplicate", format!("answered with run {}", d.run_id));
            }
            Ok(d)
        }
        Err(e) => {
            remember(e.kind(), e.to_string());
            Err(e)
        }
    }
}

/// A delivery to trigger `t`: verified, rendered and started.
async fn accept(
    core: &Core,
    caller: &Caller,
    t: &Trigger,
    r: &HookRequest<'_>,
) -> Result<Delivered, HookError> {
    if let Err(e) = signature::verify(&core.secrets, t, r.header, r.body) {
        tracing::warn!(trigger_id = %t.id, namespace = %t.namespace, error = %e, "webhook delivery refused");
        return Err(HookError::Unauthorized(e));
    }
    if let Some(ct) = r.content_type {
        let essence = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        if essence != "application/json" && !essence.ends_with("+json") {
            return Err(HookError::UnsupportedMediaType(format!(
                "the body must be JSON (Content-Type application/json), not {}",
                echo(ct)
            )));
        }
    }
    let payload: Value = serde_json::from_slice(r.body)
        .map_err(|e| HookError::BadRequest(format!("the body is not JSON: {e}")))?;
    let delivery_id = (r.header)(t.dedup_header()).unwrap_or_default();
    if delivery_id.len() > MAX_DELIVERY_ID {
        return Err(HookError::BadRequest(format!(
            "the {} header is {} bytes; at most {MAX_DELIVERY_ID}",
            t.dedup_header(),
            delivery_id.len()
        )));
    }
    let goal = render("goal", &t.goal, &payload, limits::GOAL)?;
    let mut context = BTreeMap::new();
    for (k, v) in &t.context {
        let field = format!("context[{}]", echo(k));
        context.insert(k.clone(), render(&field, v, &payload, limits::CONTEXT_VALUE)?);
    }
    let mut attributes = BTreeMap::new();
    for (k, v) in &t.attributes {
        let field = format!("attributes[{}]", echo(k));
        let text = render(
            &field,
            v,
            &payload,
            railyard_model::attributes::MAX_ATTRIBUTE_VALUE_BYTES,
        )?;
        attributes.insert(k.clone(), text);
    }
    let key = render_key(t, &payload)?;
    let start = runs::prepare(
        core,
        caller,
        StartRun {
            workflow_id: t.workflow_id.clone(),
            goal,
            context,
            callback_url: t.callback_url.clone(),
            task_queue: t.task_queue.clone(),
            attributes,
            // W3C Trace Context: an invalid header is ignored, as the spec asks.
            trace: (r.header)("traceparent").and_then(|v| TraceContext::parse(&v).ok()),
            ..StartRun::default()
        },
    )?;
    let delivered = core
        .writer
        .call(DeliverHook {
            trigger_id: t.id.clone(),
            delivery_id: delivery_id.clone(),
            key,
            mode: t.mode,
            workflow_id: t.workflow_id.clone(),
            start,
        })
        .await?;
    tracing::info!(
        trigger_id = %t.id, namespace = %t.namespace, run_id = %delivered.run_id,
        delivery = %echo(&delivery_id), duplicate = delivered.duplicate, queued = delivered.queued,
        "webhook delivered"
    );
    Ok(delivered)
}
