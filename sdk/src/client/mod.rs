//! The typed client: one cheap-to-clone handle over a tonic channel.

mod admin;
mod approvals;
mod batches;
mod output;
mod schedules;
mod triggers;

use std::collections::HashMap;
use std::time::Duration;

use backon::Retryable;
use railyard_proto::PEER_SUBJECT;
use railyard_proto::v1::*;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

use crate::retry::{RetryPolicy, is_transient_grpc, is_transient_grpc_or_timeout};
use crate::tls::TlsOptions;

/// Errors a client call can end in, by what the caller can do about them.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server address is not a valid URL.
    #[error("invalid server address {url:?}: {reason}")]
    BadAddress {
        /// The address as given.
        url: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// The API key cannot be sent (empty, or not printable ASCII).
    #[error("invalid API key: {0}")]
    BadApiKey(String),
    /// A TLS setting cannot be used: a missing or unreadable file, a bad PEM block,
    /// a certificate without its key.
    #[error("TLS: {0}")]
    Tls(String),
    /// The server could not be reached (after retries).
    #[error("server unavailable at {url}: {message}")]
    Unavailable {
        /// The server's URL.
        url: String,
        /// The last try's error.
        message: String,
    },
    /// The request was wrong; the message names the field.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The run, task, schedule or other thing named does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// What a create names exists already.
    #[error("already exists: {0}")]
    AlreadyExists(String),
    /// A stale lease or an illegal state change.
    #[error("failed precondition: {0}")]
    FailedPrecondition(String),
    /// The caller is known but may not do this (or a task token's signature failed).
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// The server does not know who the caller is: credentials missing or refused.
    /// Never retried: the same request would meet the same answer.
    #[error("unauthenticated: {0}")]
    Unauthenticated(String),
    /// A limit of the namespace or the server was reached; the message names it.
    #[error("resource exhausted: {0}")]
    ResourceExhausted(String),
    /// No answer within the call's deadline.
    #[error("deadline exceeded: {0}")]
    DeadlineExceeded(String),
    /// Any other status.
    #[error("{code:?}: {message}")]
    Other {
        /// The status code.
        code: Code,
        /// The status message.
        message: String,
    },
}

impl ClientError {
    /// The gRPC code this error came from, where there was one.
    pub fn code(&self) -> Option<Code> {
        Some(match self {
            Self::BadAddress { .. } | Self::BadApiKey(_) | Self::Tls(_) => return None,
            Self::Unavailable { .. } => Code::Unavailable,
            Self::InvalidArgument(_) => Code::InvalidArgument,
            Self::NotFound(_) => Code::NotFound,
            Self::AlreadyExists(_) => Code::AlreadyExists,
            Self::FailedPrecondition(_) => Code::FailedPrecondition,
            Self::PermissionDenied(_) => Code::PermissionDenied,
            Self::Unauthenticated(_) => Code::Unauthenticated,
            Self::ResourceExhausted(_) => Code::ResourceExhausted,
            Self::DeadlineExceeded(_) => Code::DeadlineExceeded,
            Self::Other { code, .. } => *code,
        })
    }

    /// Whether a later try of the same call may succeed: the server was unreachable,
    /// went away mid-call or did not answer in time (see [`crate::retry`]).
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Unavailable { .. } | Self::DeadlineExceeded(_) => true,
            Self::Other { code, message } => is_transient_grpc_or_timeout(*code, message),
            _ => false,
        }
    }

    /// Maps a status from the server at `url` (for one met mid-stream, say).
    pub fn from_status(url: &str, status: Status) -> Self {
        // A refused handshake comes as UNAVAILABLE; no retry changes it.
        if let Some(reason) = crate::tls::is_tls_failure(&status) {
            return Self::Tls(format!("cannot connect to {url}: {reason}"));
        }
        // Under TLS 1.3 a server checks the client's certificate after the client
        // has finished its side of the handshake, so a refusal (no certificate, or one
        // from another CA) often reaches the call only as the connection closing.
        if url.starts_with("https://")
            && status.code() == Code::Cancelled
            && crate::tls::error_chain(&status).contains("connection closed")
        {
            return Self::Unavailable {
                url: url.to_string(),
                message: "the server closed the connection; over TLS, this is how a server \
                          that requires a client certificate refuses a missing or untrusted one \
                          (check --tls-cert, --tls-key and the server's --tls-client-ca)"
                    .into(),
            };
        }
        let message = status.message().to_string();
        match status.code() {
            Code::Unavailable => Self::Unavailable {
                url: url.to_string(),
                message,
            },
            Code::InvalidArgument => Self::InvalidArgument(message),
            Code::NotFound => Self::NotFound(message),
            Code::AlreadyExists => Self::AlreadyExists(message),
            Code::FailedPrecondition => Self::FailedPrecondition(message),
            Code::PermissionDenied => Self::PermissionDenied(message),
            Code::Unauthenticated => Self::Unauthenticated(message),
            Code::ResourceExhausted => Self::ResourceExhausted(message),
            Code::DeadlineExceeded => Self::DeadlineExceeded(message),
            code => Self::Other { code, message },
        }
    }
}

/// An API key, sent as `authorization: Bearer <key>` with every call. Its `Debug`
/// never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// The key as given (surrounding whitespace, such as a key file's newline, dropped).
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into().trim().to_string())
    }

    /// The key itself, to send or store.
    pub fn expose(&self) -> &str {
        &self.0
    }

    fn header(&self) -> Result<MetadataValue<Ascii>, ClientError> {
        if self.0.is_empty() {
            return Err(ClientError::BadApiKey("it is empty".into()));
        }
        let mut value: MetadataValue<Ascii> = format!("Bearer {}", self.0)
            .parse()
            .map_err(|_| ClientError::BadApiKey("it may hold only printable ASCII".into()))?;
        value.set_sensitive(true);
        Ok(value)
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

impl From<String> for ApiKey {
    fn from(key: String) -> Self {
        Self::new(key)
    }
}

/// Adds the `authorization` header to every call (and, for a client over the
/// server's in-process channel, the caller's certificate subject: see
/// [`Client::with_caller`]).
#[derive(Clone)]
pub struct Authorization(Option<MetadataValue<Ascii>>, Option<MetadataValue<Ascii>>);

impl Interceptor for Authorization {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        if let Some(value) = &self.0 {
            req.metadata_mut().insert("authorization", value.clone());
        }
        if let Some(subject) = &self.1 {
            req.metadata_mut().insert(PEER_SUBJECT, subject.clone());
        }
        Ok(req)
    }
}

/// The channel with the client's credentials added to every call.
type Authed = InterceptedService<Channel, Authorization>;

/// The generated client of one `railyard.v1` service, over a [`Client`]'s channel
/// and with its credentials; made afresh for each try of a call.
trait Stub {
    fn stub(client: &Client) -> Self;
}

/// The service stubs [`Client`] calls through: `stub::History::start_run` and so on.
mod stub {
    use railyard_proto::v1::{
        admin_client::AdminClient, batches_client::BatchesClient, capacity_client::CapacityClient,
        history_client::HistoryClient, schedules_client::SchedulesClient, tasks_client::TasksClient,
        triggers_client::TriggersClient,
    };

    use super::{Authed, Client, Stub};

    macro_rules! stubs {
        ($($name:ident = $generated:ident),* $(,)?) => {$(
            pub(super) type $name = $generated<Authed>;

            impl Stub for $name {
                fn stub(client: &Client) -> Self {
                    $generated::with_interceptor(client.channel.clone(), client.auth.clone())
                        .max_decoding_message_size(railyard_proto::MAX_MESSAGE_BYTES)
                }
            }
        )*};
    }

    stubs!(
        History = HistoryClient,
        Tasks = TasksClient,
        Admin = AdminClient,
        Schedules = SchedulesClient,
        Batches = BatchesClient,
        Triggers = TriggersClient,
        Capacity = CapacityClient,
    );
}

/// `call` within `deadline`; a call that outlasts it ends as `DEADLINE_EXCEEDED`.
async fn timed<T>(
    deadline: Duration,
    call: impl std::future::Future<Output = Result<tonic::Response<T>, Status>>,
) -> Result<tonic::Response<T>, Status> {
    tokio::time::timeout(deadline, call).await.unwrap_or_else(|_| {
        Err(Status::deadline_exceeded(format!(
            "no answer within {deadline:?}"
        )))
    })
}

/// How the client connects and retries.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// Sent with every call when the server runs with auth on.
    pub api_key: Option<ApiKey>,
    /// Time allowed to establish the connection.
    pub connect_timeout: Duration,
    /// Deadline of one ordinary call (long polls add their own wait to it).
    pub request_timeout: Duration,
    /// How many times a call that met a transient error (`UNAVAILABLE`, a dropped
    /// connection) is tried in all.
    pub max_attempts: u32,
    /// Shortest first pause between attempts; the base doubles each time, with jitter
    /// (see [`RetryPolicy`]).
    pub initial_backoff: Duration,
    /// No pause between attempts is this long.
    pub max_backoff: Duration,
    /// TLS settings; used with `https://` URLs (and refused with `http://` ones).
    pub tls: TlsOptions,
}

impl ConnectOptions {
    /// The retry policy these options describe.
    pub fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_attempts: self.max_attempts.max(1),
            initial_backoff: self.initial_backoff,
            max_backoff: self.max_backoff,
        }
    }
}

impl Default for ConnectOptions {
    fn default() -> Self {
        Self {
            api_key: None,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            max_attempts: 8,
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
            tls: TlsOptions::default(),
        }
    }
}

/// A connection to a Railyard server. Clone it freely: clones share the channel.
#[derive(Clone)]
pub struct Client {
    url: String,
    channel: Channel,
    auth: Authorization,
    opts: ConnectOptions,
}

impl Client {
    /// Connects lazily to `url` with default options; the first call dials.
    pub async fn connect(url: &str) -> Result<Self, ClientError> {
        Self::connect_with(url, ConnectOptions::default()).await
    }

    /// Connects lazily to `url`; unreachable servers surface on the first call,
    /// after the retries of [`ConnectOptions::max_attempts`].
    pub async fn connect_with(url: &str, opts: ConnectOptions) -> Result<Self, ClientError> {
        Self::lazy(url, opts)
    }

    /// [`Client::connect_with`] outside async code: nothing is dialled until the first call.
    pub fn lazy(url: &str, opts: ConnectOptions) -> Result<Self, ClientError> {
        let bad = |reason: String| ClientError::BadAddress {
            url: url.to_string(),
            reason,
        };
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(bad("expected a URL such as http://127.0.0.1:7400".into()));
        }
        let mut endpoint = Endpoint::from_shared(url.to_string())
            .map_err(|e| bad(e.to_string()))?
            .connect_timeout(opts.connect_timeout)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(20))
            .keep_alive_while_idle(true);
        let auth = Authorization(opts.api_key.as_ref().map(ApiKey::header).transpose()?, None);
        if url.starts_with("https://") {
            let tls = opts
                .tls
                .client_config()
                .map_err(|e| ClientError::Tls(e.to_string()))?;
            endpoint = endpoint
                .tls_config(tls)
                .map_err(|e| ClientError::Tls(crate::tls::error_chain(&e)))?;
        } else if opts.tls.is_set() {
            return Err(bad("TLS settings were given: use an https:// URL".into()));
        }
        Ok(Self {
            url: url.to_string(),
            channel: endpoint.connect_lazy(),
            auth,
            opts,
        })
    }

    /// A client over a channel made elsewhere (the server's in-process channel, say);
    /// `label` stands for the server's URL in messages. TLS options do not apply.
    pub fn over_channel(label: &str, channel: Channel, opts: ConnectOptions) -> Result<Self, ClientError> {
        let auth = Authorization(opts.api_key.as_ref().map(ApiKey::header).transpose()?, None);
        Ok(Self {
            url: label.to_string(),
            channel,
            auth,
            opts,
        })
    }

    /// This client (sharing its channel) calling as someone else: with `api_key`
    /// instead of its own, and, when `peer_subject` is given, sending it as the
    /// caller's certificate subject ([`railyard_proto::PEER_SUBJECT`]). Over a network the
    /// server strips that entry and takes the subject from the TLS connection; only
    /// its in-process channel believes it (the MCP gateway on the server's HTTP
    /// listener passes on the subject of the certificate its HTTP caller proved).
    pub fn with_caller(
        &self,
        api_key: Option<&ApiKey>,
        peer_subject: Option<&str>,
    ) -> Result<Self, ClientError> {
        let subject = peer_subject
            .map(|s| {
                s.parse::<MetadataValue<Ascii>>().map_err(|_| {
                    ClientError::InvalidArgument("a peer subject may hold only printable ASCII".into())
                })
            })
            .transpose()?;
        let mut opts = self.opts.clone();
        opts.api_key = api_key.cloned();
        Ok(Self {
            url: self.url.clone(),
            channel: self.channel.clone(),
            auth: Authorization(api_key.map(ApiKey::header).transpose()?, subject),
            opts,
        })
    }

    /// The server URL this client talks to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Runs the unary call `rpc` of the service stub `S` with `req`, retrying
    /// transient failures ([`is_transient_grpc`]) by the options' [`RetryPolicy`]
    /// (backoff with jitter), each try within the request timeout.
    /// Every call this is used for is safe to repeat: starts and signals carry a
    /// request id, reads are reads, and a repeated completion is refused unchanged.
    async fn call<S: Stub, R: Clone, T>(
        &self,
        rpc: impl AsyncFn(&mut S, R) -> Result<tonic::Response<T>, Status>,
        req: R,
    ) -> Result<T, ClientError> {
        self.call_noting(Duration::ZERO, rpc, req).await.0
    }

    /// [`call`](Self::call) for a long poll: each try may take `wait` longer.
    async fn call_waiting<S: Stub, R: Clone, T>(
        &self,
        wait: Duration,
        rpc: impl AsyncFn(&mut S, R) -> Result<tonic::Response<T>, Status>,
        req: R,
    ) -> Result<T, ClientError> {
        self.call_noting(wait, rpc, req).await.0
    }

    /// [`call`](Self::call) for a delete: `NOT_FOUND` after a retry counts as done,
    /// since the try whose answer was lost may have deleted it.
    async fn call_delete<S: Stub, R: Clone, T>(
        &self,
        rpc: impl AsyncFn(&mut S, R) -> Result<tonic::Response<T>, Status>,
        req: R,
    ) -> Result<(), ClientError> {
        match self.call_noting(Duration::ZERO, rpc, req).await {
            (Ok(_), _) => Ok(()),
            (Err(ClientError::NotFound(_)), true) => Ok(()),
            (Err(e), _) => Err(e),
        }
    }

    /// The retrying call behind [`call`](Self::call): each try within the request
    /// timeout plus `wait`; answers also whether a try failed transiently and another
    /// was made (so a later refusal may be the first try's own effect).
    async fn call_noting<S: Stub, R: Clone, T>(
        &self,
        wait: Duration,
        rpc: impl AsyncFn(&mut S, R) -> Result<tonic::Response<T>, Status>,
        req: R,
    ) -> (Result<T, ClientError>, bool) {
        let deadline = self.opts.request_timeout + wait;
        let (rpc, req) = (&rpc, &req);
        let attempt = || {
            let (mut stub, req) = (S::stub(self), req.clone());
            async move { timed(deadline, rpc(&mut stub, req)).await }
        };
        let mut retried = false;
        let outcome = attempt
            .retry(self.opts.retry_policy().builder())
            .when(|s: &Status| is_transient_grpc(s.code(), s.message()))
            .notify(|s: &Status, pause: Duration| {
                retried = true;
                tracing::debug!(code = ?s.code(), error = %s.message(), retry_in = ?pause, "server unavailable; retrying");
            })
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| ClientError::from_status(&self.url, status));
        (outcome, retried)
    }

    /// One try of `rpc` within the request timeout, never repeated: for calls that a
    /// repeat after a lost answer could apply twice.
    async fn call_once<S: Stub, R, T>(
        &self,
        rpc: impl AsyncFn(&mut S, R) -> Result<tonic::Response<T>, Status>,
        req: R,
    ) -> Result<T, ClientError> {
        let mut stub = S::stub(self);
        timed(self.opts.request_timeout, rpc(&mut stub, req))
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| ClientError::from_status(&self.url, status))
    }

    /// One try of `rpc` without a deadline, never repeated: opening a stream, which
    /// lasts as long as it runs.
    async fn call_untimed<S: Stub, R, T>(
        &self,
        rpc: impl AsyncFn(&mut S, R) -> Result<tonic::Response<T>, Status>,
        req: R,
    ) -> Result<T, ClientError> {
        rpc(&mut S::stub(self), req)
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| ClientError::from_status(&self.url, status))
    }

    /// Starts a run of `workflow_id` and returns its run id. A request id is generated,
    /// so retries inside this call never start two runs.
    pub async fn start_run(
        &self,
        namespace: &str,
        workflow_id: &str,
        goal: &str,
        context: HashMap<String, String>,
    ) -> Result<String, ClientError> {
        let req = StartRunRequest {
            namespace: namespace.into(),
            workflow_id: workflow_id.into(),
            goal: goal.into(),
            context,
            ..Default::default()
        };
        Ok(self.start_run_with(req).await?.run_id)
    }

    /// Starts a run from a full request; fills in a request id when it has none.
    pub async fn start_run_with(&self, mut req: StartRunRequest) -> Result<StartRunResponse, ClientError> {
        if req.request_id.is_empty() {
            req.request_id = uuid::Uuid::new_v4().to_string();
        }
        self.call(stub::History::start_run, req).await
    }

    /// A run: its status, steps and result.
    pub async fn describe_run(
        &self,
        namespace: &str,
        run_id: &str,
    ) -> Result<DescribeRunResponse, ClientError> {
        let req = DescribeRunRequest {
            namespace: namespace.into(),
            run_id: run_id.into(),
        };
        self.call(stub::History::describe_run, req).await
    }

    /// A page of a run's history (a long poll when the request waits for new events).
    pub async fn get_history(&self, req: GetHistoryRequest) -> Result<GetHistoryResponse, ClientError> {
        let wait = Duration::from_millis(req.wait_timeout_ms.into());
        self.call_waiting(wait, stub::History::get_history, req).await
    }

    /// Every event of a run, following pages.
    pub async fn full_history(
        &self,
        namespace: &str,
        run_id: &str,
    ) -> Result<Vec<HistoryEvent>, ClientError> {
        let mut events = Vec::new();
        let mut from = 1;
        loop {
            let page = self
                .get_history(GetHistoryRequest {
                    namespace: namespace.into(),
                    run_id: run_id.into(),
                    from_event_id: from,
                    ..Default::default()
                })
                .await?;
            let got = page.events.len() as u64;
            events.extend(page.events);
            if got == 0 || page.next_event_id == 0 {
                return Ok(events);
            }
            from = page.next_event_id.max(from + got);
        }
    }

    /// A live stream of a run's events from `from_event_id`; it ends when the run closes.
    pub async fn watch_run(
        &self,
        namespace: &str,
        run_id: &str,
        from_event_id: u64,
    ) -> Result<tonic::Streaming<HistoryEvent>, ClientError> {
        let req = WatchRunRequest {
            namespace: namespace.into(),
            run_id: run_id.into(),
            from_event_id,
        };
        self.call_untimed(stub::History::watch_run, req).await
    }

    /// A page of the runs a query matches.
    pub async fn list_runs(&self, req: ListRunsRequest) -> Result<ListRunsResponse, ClientError> {
        self.call(stub::History::list_runs, req).await
    }

    /// How many runs a query matches (`History.CountRuns`), grouped when asked.
    pub async fn count_runs(&self, req: CountRunsRequest) -> Result<CountRunsResponse, ClientError> {
        self.call(stub::History::count_runs, req).await
    }

    /// Sends a signal to a run. A request id is generated when the request has none, so
    /// a retry inside this call delivers it once.
    pub async fn signal_run(&self, mut req: SignalRunRequest) -> Result<(), ClientError> {
        if req.request_id.is_empty() {
            req.request_id = uuid::Uuid::new_v4().to_string();
        }
        self.call(stub::History::signal_run, req).await.map(|_| ())
    }

    /// Cancels a run (`CANCELED`), with the request's reason.
    pub async fn cancel_run(&self, req: CancelRunRequest) -> Result<(), ClientError> {
        self.call(stub::History::cancel_run, req).await.map(|_| ())
    }

    /// Terminates a run (`TERMINATED`), with the request's reason.
    pub async fn terminate_run(&self, req: TerminateRunRequest) -> Result<(), ClientError> {
        self.call(stub::History::terminate_run, req).await.map(|_| ())
    }

    /// Resets a run: a new run from its state at a step (`ResetRunRequest`). A request
    /// without a request id gets one, so that a retry after a lost answer answers the
    /// run the first attempt made instead of making a second.
    pub async fn reset_run(&self, mut req: ResetRunRequest) -> Result<ResetRunResponse, ClientError> {
        if req.request_id.is_empty() {
            req.request_id = uuid::Uuid::new_v4().to_string();
        }
        self.call(stub::History::reset_run, req).await
    }

    /// Reruns a run: a new run of its workflow version from the first step
    /// (`RerunRunRequest`); retried like [`Client::reset_run`].
    pub async fn rerun_run(&self, mut req: RerunRunRequest) -> Result<ResetRunResponse, ClientError> {
        if req.request_id.is_empty() {
            req.request_id = uuid::Uuid::new_v4().to_string();
        }
        self.call(stub::History::rerun_run, req).await
    }

    /// Pauses a run and the open runs it spawned; answers whether it changed.
    pub async fn pause_run(&self, req: PauseRunRequest) -> Result<bool, ClientError> {
        self.call(stub::History::pause_run, req).await.map(|r| r.changed)
    }

    /// Unpauses a run and the open runs it spawned; answers whether it changed.
    pub async fn unpause_run(&self, req: UnpauseRunRequest) -> Result<bool, ClientError> {
        self.call(stub::History::unpause_run, req)
            .await
            .map(|r| r.changed)
    }

    /// The workflows a namespace serves, and the definition files that failed validation.
    pub async fn list_workflows(&self, namespace: &str) -> Result<ListWorkflowsResponse, ClientError> {
        let req = ListWorkflowsRequest {
            namespace: namespace.into(),
        };
        self.call(stub::History::list_workflows, req).await
    }

    /// Registers a workflow definition (its JSON, as a definition file holds it) in
    /// `namespace` (empty: `default`); the server validates it as it does a file.
    /// Idempotent by content, so retried like a read: the same definition again
    /// answers `changed: false` (as does a retry whose first try's answer was lost
    /// after it registered). A changed definition is what new runs of its id start
    /// with; runs already started keep theirs.
    pub async fn register_workflow(
        &self,
        namespace: &str,
        definition_json: impl Into<String>,
    ) -> Result<RegisterWorkflowResponse, ClientError> {
        let req = RegisterWorkflowRequest {
            namespace: namespace.into(),
            definition_json: definition_json.into(),
        };
        self.call(stub::History::register_workflow, req).await
    }

    /// A run and the runs it spawned, as a tree.
    pub async fn get_session_tree(
        &self,
        namespace: &str,
        run_id: &str,
    ) -> Result<GetSessionTreeResponse, ClientError> {
        let req = GetSessionTreeRequest {
            namespace: namespace.into(),
            run_id: run_id.into(),
        };
        self.call(stub::History::get_session_tree, req).await
    }

    /// A page of the checkpoint of a run's step in flight (`GetStepCheckpoint`).
    pub async fn get_step_checkpoint(
        &self,
        req: railyard_proto::v1::GetStepCheckpointRequest,
    ) -> Result<railyard_proto::v1::GetStepCheckpointResponse, ClientError> {
        self.call(stub::History::get_step_checkpoint, req).await
    }

    /// Long-polls a task queue for a step; `None` when the wait passed with nothing to do.
    pub async fn poll_step_task(&self, req: PollStepTaskRequest) -> Result<Option<StepTask>, ClientError> {
        let wait = Duration::from_millis(req.wait_timeout_ms.into());
        Ok(self
            .call_waiting(wait, stub::Tasks::poll_step_task, req)
            .await?
            .task)
    }

    /// Sends one heartbeat request as it is (see [`crate::StepWorker::heartbeat`]).
    pub async fn heartbeat_step_task(
        &self,
        req: HeartbeatStepTaskRequest,
    ) -> Result<HeartbeatStepTaskResponse, ClientError> {
        self.call(stub::Tasks::heartbeat_step_task, req).await
    }

    /// Completes a step; the answer carries the next step when `take_next` asked for it.
    pub async fn complete_step_task(
        &self,
        req: CompleteStepTaskRequest,
    ) -> Result<CompleteStepTaskResponse, ClientError> {
        self.call(stub::Tasks::complete_step_task, req).await
    }

    /// Starts child runs under a step's lease (and, with `wait`, ends the lease with
    /// the step waiting for them). With a `request_id` a repeat answers the same
    /// children, so the call is retried like a heartbeat; without one it is tried
    /// once: a repeat after a lost answer could start the children twice, so a
    /// failure is the caller's to judge (the agent reads it as a tool error).
    pub async fn spawn_child_runs(
        &self,
        req: SpawnChildRunsRequest,
    ) -> Result<SpawnChildRunsResponse, ClientError> {
        if req.request_id.is_empty() {
            self.call_once(stub::Tasks::spawn_child_runs, req).await
        } else {
            self.call(stub::Tasks::spawn_child_runs, req).await
        }
    }

    /// Records an issue the agent of a leased step reports, without ending the step
    /// (`Tasks.ReportIssue`). Tried once, like `spawn_child_runs`: a repeat after a
    /// lost answer would record the issue twice.
    pub async fn report_issue(&self, req: ReportIssueRequest) -> Result<ReportIssueResponse, ClientError> {
        self.call_once(stub::Tasks::report_issue, req).await
    }

    /// Sets search attributes of the run whose step a task token leases, mid-step
    /// (`Tasks.UpsertSearchAttributes`). Retried like a heartbeat: setting the same
    /// values again changes nothing.
    pub async fn upsert_search_attributes(
        &self,
        req: railyard_proto::v1::UpsertSearchAttributesRequest,
    ) -> Result<railyard_proto::v1::UpsertSearchAttributesResponse, ClientError> {
        self.call(stub::Tasks::upsert_search_attributes, req).await
    }

    /// Asks for capacity under a rate-limit key before a model call
    /// (`Capacity.AcquireCapacity`): go, or ask again at `retry_at_unix_ms`. Retried:
    /// a repeat after a lost answer takes one more request from the bucket at most.
    pub async fn acquire_capacity(
        &self,
        req: railyard_proto::v1::AcquireCapacityRequest,
    ) -> Result<railyard_proto::v1::AcquireCapacityResponse, ClientError> {
        self.call(stub::Capacity::acquire_capacity, req).await
    }

    /// Reports a provider's 429 with its reset time (`Capacity.ReportRateLimited`):
    /// the key waits until then for the whole fleet. Retried: reporting again
    /// changes nothing.
    pub async fn report_rate_limited(
        &self,
        req: railyard_proto::v1::ReportRateLimitedRequest,
    ) -> Result<railyard_proto::v1::ReportRateLimitedResponse, ClientError> {
        self.call(stub::Capacity::report_rate_limited, req).await
    }

    /// Reports a step's failure; the answer says whether another attempt follows.
    pub async fn fail_step_task(
        &self,
        req: FailStepTaskRequest,
    ) -> Result<FailStepTaskResponse, ClientError> {
        self.call(stub::Tasks::fail_step_task, req).await
    }

    /// A task queue's pollers and backlog.
    pub async fn describe_task_queue(
        &self,
        namespace: &str,
        task_queue: &str,
    ) -> Result<DescribeTaskQueueResponse, ClientError> {
        let req = DescribeTaskQueueRequest {
            namespace: namespace.into(),
            task_queue: task_queue.into(),
        };
        self.call(stub::Tasks::describe_task_queue, req).await
    }
}

/// An answer that lacks what it must hold.
fn missing() -> ClientError {
    ClientError::Other {
        code: Code::Internal,
        message: "the server's answer is missing its result".into(),
    }
}
