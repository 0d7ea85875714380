//! Railyard history server: keeps every run's event history in redb, hands step
//! tasks to polling workers under signed leases, and fires durable timers.
//!
//! [`RunningServer::start`] is the one entry point; [`RunningServer::shutdown`] is
//! the one place the server stops. On a database several nodes share, [`node`]
//! runs one as the leader or a [`follower`] forwarding to it. The map of the code is in the repository's
//! `ARCHITECTURE.md`.

pub mod follower;
mod grpc;
pub mod http;
mod inproc;
mod metrics;
pub mod net;
pub mod node;
pub mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use railyard_proto::v1::{
    admin_server::AdminServer, batches_server::BatchesServer, capacity_server::CapacityServer,
    history_server::HistoryServer, schedules_server::SchedulesServer, tasks_server::TasksServer,
    triggers_server::TriggersServer,
};
use tokio::sync::watch as shutdown_watch;
use tokio::task::JoinHandle;

use crate::metrics::{RpcLayer, RpcTable};
use railyard_engine::clock::{Clock, SystemClock};
use railyard_engine::registry::{EmbeddedDefinition, WorkflowRegistry};
use railyard_engine::service::{BuildError, Core, CoreParts};
use railyard_engine::token::Keyring;
use railyard_store::Store;

/// Largest gRPC message the server accepts and sends.
pub use railyard_proto::MAX_MESSAGE_BYTES;

/// Everything `railyard server` can be told.
#[derive(Clone)]
pub struct ServerConfig {
    /// Directory of the server's local files: the token keys, the first admin key,
    /// and the redb database unless `store` names another.
    pub data_dir: PathBuf,
    /// The store to serve, opened by the caller (the binary opens a Postgres one);
    /// `None`: the redb database in `data_dir`.
    pub store: Option<Store>,
    /// gRPC listen address (default 127.0.0.1:7400).
    pub grpc_listen: SocketAddr,
    /// HTTP listen address for /healthz and /metrics (default 127.0.0.1:7401).
    pub http_listen: SocketAddr,
    /// Directory of workflow definition files (`*.json`).
    pub workflows_dir: PathBuf,
    /// Definitions built into the binary, loaded after the directory's files (so a
    /// file's id wins) and validated the same way.
    pub embedded_workflows: Vec<EmbeddedDefinition>,
    /// The clock; tests pass a [`railyard_engine::clock::ManualClock`].
    pub clock: Arc<dyn Clock>,
    /// Every request must present an API key (`authorization: Bearer ...`); see
    /// [`railyard_engine::service::caller`]. A server starting with auth on and no admin key writes
    /// one to `<data_dir>/admin.key`.
    pub auth: bool,
    /// Allows listening on a non-loopback address without auth.
    pub insecure: bool,
    /// Connection limits and idle timeout, per listener (gRPC and HTTP).
    pub net: net::NetLimits,
    /// The retention purge: runs per commit, time between sweeps.
    pub purge: railyard_engine::retention::PurgeConfig,
    /// More routes for the HTTP listener, made once both listeners are bound (the
    /// binary mounts the MCP gateway at `/mcp` this way, so this crate knows nothing
    /// of MCP).
    pub http_extension: Option<HttpExtension>,
    /// More routes that do their own authentication (the binary mounts the web console
    /// at `/ui` this way: its sign-in page and assets need no key, and it sends the
    /// signed-in user's key on every gRPC call it makes). Their guard
    /// ([`http::open_extension_guard`]) checks no key, only the client certificate
    /// under mutual TLS.
    pub http_open_extension: Option<HttpExtension>,
    /// Result delivery: the signing secret, the retry budget, timeouts.
    pub delivery: railyard_engine::delivery::DeliverySettings,
    /// TLS on both listeners (mutual TLS on gRPC with a client CA); `None`: plaintext.
    pub tls: Option<tls::TlsFiles>,
    /// Bounds on trees of child runs (`spawn_agent`): depth 3, 10 children a run.
    pub child_limits: railyard_engine::ChildLimits,
    /// Webhook triggers: the configuration's, the body limit, the dedup window.
    pub triggers: TriggerSettings,
    /// Most memory the database's page cache may hold, in bytes (default 64 MiB).
    pub cache_bytes: usize,
    /// Live output: caps per attempt and run, retention, flush interval.
    pub output: railyard_engine::output::OutputSettings,
    /// The server's principles (`server.principles_file`), read at start; `None`:
    /// the built-in `railyard_model::principles::DEFAULT`.
    pub principles_file: Option<PathBuf>,
    /// Bytes of finished steps' checkpoints (their transcripts) a run keeps, the
    /// oldest dropped first past it; 0 keeps none (default 64 MiB).
    pub kept_checkpoint_bytes: u64,
}

/// Webhook trigger settings ([`railyard_engine::service::triggers`]).
#[derive(Debug, Clone)]
pub struct TriggerSettings {
    /// Triggers the configuration defines: written into storage at start (an
    /// earlier configuration's that are gone are deleted), read-only through the API.
    pub config: Vec<railyard_engine::service::triggers::TriggerInput>,
    /// Largest webhook body; a larger one is refused with `413`.
    pub max_body_bytes: usize,
    /// How long a delivery id is remembered, so a repeated delivery answers the
    /// same run (default seven days).
    pub dedup_retention_ms: u64,
    /// Bounds on polled triggers: pollers at once, items and pages per poll.
    pub poll: railyard_engine::poller::PollLimits,
    /// The environment variables API-made triggers may name as secrets, per
    /// namespace (`[secrets]`; [`railyard_engine::secrets`]).
    pub secrets: railyard_engine::secrets::SecretPolicy,
}

impl Default for TriggerSettings {
    fn default() -> Self {
        Self {
            config: Vec::new(),
            max_body_bytes: http::DEFAULT_HOOK_BODY_BYTES,
            dedup_retention_ms: 7 * 86_400_000,
            poll: railyard_engine::poller::PollLimits::default(),
            secrets: Default::default(),
        }
    }
}

/// Makes extra HTTP routes from what only the running server knows.
pub type HttpExtension = Arc<dyn Fn(HttpContext) -> axum::Router + Send + Sync>;

/// What an [`HttpExtension`] is given.
#[derive(Debug, Clone)]
pub struct HttpContext {
    /// The gRPC address to reach this server at (loopback when it listens on all
    /// interfaces).
    pub grpc_addr: SocketAddr,
    /// The HTTP listener's bound address.
    pub http_addr: SocketAddr,
    /// Turns true when the server shuts down; long-lived responses end on it.
    pub shutdown: shutdown_watch::Receiver<bool>,
    /// A gRPC channel to this server's own services, in process ([`inproc`]): no
    /// network hop, whatever the gRPC listener's TLS. Calls through it are
    /// authenticated and authorized like any other; the routes an extension adds
    /// are behind [`http::extension_guard`], which checks the HTTP caller's key and
    /// client certificate and leaves the verified subject in the
    /// [`grpc::peer::PEER_SUBJECT`] header for the extension to pass on.
    pub grpc_channel: tonic::transport::Channel,
    /// Whether the server requires an API key on every request.
    pub auth: bool,
    /// Whether the HTTP listener speaks TLS (cookies it sets are then `Secure`).
    pub tls: bool,
}

impl ServerConfig {
    /// The defaults, with the data in `data_dir` and definitions in `workflows_dir`.
    pub fn new(data_dir: impl Into<PathBuf>, workflows_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            store: None,
            grpc_listen: SocketAddr::from(([127, 0, 0, 1], 7400)),
            http_listen: SocketAddr::from(([127, 0, 0, 1], 7401)),
            workflows_dir: workflows_dir.into(),
            embedded_workflows: Vec::new(),
            clock: Arc::new(SystemClock),
            auth: false,
            insecure: false,
            net: net::NetLimits::default(),
            purge: railyard_engine::retention::PurgeConfig::default(),
            http_extension: None,
            http_open_extension: None,
            delivery: railyard_engine::delivery::DeliverySettings::default(),
            tls: None,
            child_limits: Default::default(),
            triggers: TriggerSettings::default(),
            cache_bytes: railyard_store::redb_backend::DEFAULT_CACHE_BYTES,
            output: railyard_engine::output::OutputSettings::default(),
            principles_file: None,
            kept_checkpoint_bytes: railyard_engine::writer::DEFAULT_KEPT_CHECKPOINT_BYTES,
        }
    }

    /// Refuses a listener on a non-loopback address without auth, unless `insecure`.
    pub fn check_exposure(&self) -> Result<(), StartError> {
        check_exposure(self.auth, self.insecure, [self.grpc_listen, self.http_listen])
    }
}

/// Errors that stop the server from starting. Each names the file or address.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot create data directory {path}: {source}")]
    DataDir { path: String, source: std::io::Error },
    #[error(transparent)]
    Store(#[from] railyard_store::redb_backend::OpenError),
    #[error("task token keys: {0}")]
    Keys(#[from] railyard_engine::token::KeyError),
    #[error("cannot read workflows directory {path}: {source}")]
    Workflows { path: String, source: std::io::Error },
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("TLS: {0}")]
    Tls(#[from] tls::TlsError),
    #[error("{0}")]
    Internal(#[from] railyard_engine::error::ApiError),
    #[error("cannot read the stored state: {0}")]
    Storage(#[from] railyard_store::StorageError),
    #[error("cannot start the writer: {0}")]
    Writer(#[from] railyard_engine::WriteError),
    #[error(
        "refusing to listen on {addr} without auth: anyone who reaches it could start runs, and so run code on \
         the workers. Turn auth on (--auth, or auth = true under [server]), listen on a loopback address, \
         or pass --insecure to do it anyway"
    )]
    Exposed { addr: SocketAddr },
    #[error(transparent)]
    Bootstrap(#[from] railyard_engine::service::keys::BootstrapError),
    #[error("triggers in the configuration: {0}")]
    Triggers(railyard_engine::error::ApiError),
    #[error("principles file {path}: {error}")]
    Principles { path: String, error: String },
    #[error("a follower's check of /mcp keys: {0}")]
    KeyCheck(railyard_sdk::ClientError),
}

/// The server's principles file: a regular UTF-8 file within the layer bound, read
/// once at start (runs pin what they composed, so editing it changes only new runs).
fn read_principles(path: &std::path::Path) -> Result<String, StartError> {
    let fail = |error: String| StartError::Principles {
        path: path.display().to_string(),
        error,
    };
    let max = railyard_model::principles::MAX_LAYER_BYTES as u64;
    let text = railyard_files::read_regular_text(path, max).map_err(|e| fail(e.to_string()))?;
    railyard_model::principles::check_text(&text).map_err(fail)?;
    Ok(text)
}

impl From<BuildError> for StartError {
    fn from(e: BuildError) -> Self {
        match e {
            BuildError::Storage(e) => Self::Storage(e),
            BuildError::Writer(e) => Self::Writer(e),
            BuildError::Keys(e) => Self::Keys(e),
        }
    }
}

/// A server that is up and answering.
pub struct RunningServer {
    /// The bound gRPC address (useful when the config asked for port 0).
    pub grpc_addr: SocketAddr,
    /// The bound HTTP address.
    pub http_addr: SocketAddr,
    /// The file the first admin key was written to, when this start made one.
    pub admin_key_file: Option<PathBuf>,
    core: Arc<Core>,
    shutdown: shutdown_watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    writer_thread: std::thread::JoinHandle<()>,
}

impl RunningServer {
    /// Opens storage, loads workflows, rebuilds matching, binds both listeners and
    /// starts serving. Returns once both listeners accept connections.
    pub async fn start(config: ServerConfig) -> Result<Self, StartError> {
        config.check_exposure()?;
        let dir = &config.data_dir;
        // TLS files first: a bad one stops the start before anything is opened.
        let server_tls = config.tls.as_ref().map(tls::ServerTls::load).transpose()?;
        create_private_dir(dir).map_err(|source| StartError::DataDir {
            path: dir.display().to_string(),
            source,
        })?;
        let store = match &config.store {
            Some(store) => store.clone(),
            None => {
                let store = Store::open_with_cache(dir, config.cache_bytes)?;
                tracing::info!(cache_mib = config.cache_bytes >> 20, "database opened");
                store
            }
        };
        let keys = Arc::new(Keyring::open(&store, dir)?);
        let mut workflows =
            WorkflowRegistry::load_dir(&config.workflows_dir).map_err(|source| StartError::Workflows {
                path: config.workflows_dir.display().to_string(),
                source,
            })?;
        for def in &config.embedded_workflows {
            workflows.add_embedded(def);
        }
        if let Some(path) = &config.principles_file {
            workflows.principles = Some(read_principles(path)?);
        }
        for bad in &workflows.invalid {
            tracing::warn!(file = %bad.file.display(), error = %bad.error, "workflow definition rejected");
        }
        tracing::info!(
            count = workflows.valid.len(),
            dir = %config.workflows_dir.display(),
            built_in = config.embedded_workflows.len(),
            "workflows loaded"
        );

        let rpc = Arc::new(RpcTable::new());
        let CoreParts {
            core,
            shutdown,
            writer_thread,
            leases,
            timer_wake,
            deliveries,
        } = Core::builder(store)
            .collector(Box::new(rpc.clone()))
            .clock(config.clock.clone())
            .workflows(workflows)
            .keys(keys.clone())
            .auth(config.auth)
            .child_limits(config.child_limits)
            .delivery(config.delivery.clone())
            .secrets(config.triggers.secrets.clone())
            .output(config.output.clone())
            .kept_checkpoint_bytes(config.kept_checkpoint_bytes)
            .build()?;
        let admin_key_file = if config.auth {
            railyard_engine::service::keys::bootstrap(&core.store, &core.writer, config.clock.now_ms(), dir)
                .await?
        } else {
            None
        };
        let shutdown_rx = core.shutdown.clone();

        let (saved, deleted) =
            railyard_engine::service::triggers::sync_config(&core, config.triggers.config.clone())
                .await
                .map_err(StartError::Triggers)?;
        if saved + deleted > 0 {
            tracing::info!(saved, deleted, "configured triggers written to storage");
        }

        let (grpc_listener, grpc_addr) = bind(config.grpc_listen).await?;
        let (http_listener, http_addr) = bind(config.http_listen).await?;

        let sender = railyard_engine::sender::Sender::new(
            &config.delivery,
            core.writer.clone(),
            config.clock.clone(),
            vec![grpc_addr, http_addr],
        )
        .map_err(|e| StartError::Internal(railyard_engine::error::ApiError::Internal(e.to_string())))?;
        let (in_process, in_process_incoming) = inproc::pair();
        let grpc_routes = grpc_routes(core.clone()).await;
        // The server's own tasks; the one place they stop is `shutdown`.
        let mut tasks = vec![
            sender.spawn(deliveries, shutdown_rx.clone()),
            tokio::spawn(railyard_engine::timers::run(
                core.store.clone(),
                core.writer.clone(),
                leases,
                config.clock.clone(),
                timer_wake,
                shutdown_rx.clone(),
            )),
            tokio::spawn(railyard_engine::retention::run(
                core.store.clone(),
                core.writer.clone(),
                core.metrics.clone(),
                config.clock.clone(),
                config.purge,
                config.output.retention_ms,
                shutdown_rx.clone(),
            )),
            tokio::spawn(railyard_engine::batches::run(
                core.store.clone(),
                core.writer.clone(),
                config.clock.clone(),
                core.batch_wake.clone(),
                shutdown_rx.clone(),
            )),
            tokio::spawn(core.output.clone().run_flusher(shutdown_rx.clone())),
            tokio::spawn(railyard_engine::token::keyring::reload_every(
                keys,
                railyard_engine::token::keyring::RELOAD_EVERY,
                shutdown_rx.clone(),
            )),
            tokio::spawn(purge_hook_deliveries(
                core.clone(),
                config.triggers.dedup_retention_ms,
                shutdown_rx.clone(),
            )),
            tokio::spawn(railyard_engine::service::polls::run(
                core.clone(),
                railyard_engine::service::polls::PollSettings {
                    limits: config.triggers.poll,
                    dedup_retention_ms: config.triggers.dedup_retention_ms,
                    own: vec![grpc_addr, http_addr],
                },
                shutdown_rx.clone(),
            )),
            tokio::spawn(serve_in_process(
                grpc_routes.clone(),
                RpcLayer::new(rpc.clone()),
                in_process_incoming,
                shutdown_rx.clone(),
            )),
            tokio::spawn(serve_grpc(
                grpc_routes,
                RpcLayer::new(rpc),
                net::BoundedListener::new(grpc_listener, config.net, "grpc"),
                config.net,
                server_tls.as_ref().map(|t| t.grpc.clone()),
                shutdown_rx.clone(),
            )),
        ];
        let mutual = server_tls.as_ref().is_some_and(|t| t.mutual);
        let mut routes = http::router(core.clone(), config.triggers.max_body_bytes)
            .merge(http::output::routes(core.clone()).layer(http::extension_guard(core.clone(), mutual)));
        let mut reach = grpc_addr;
        if reach.ip().is_unspecified() {
            reach.set_ip(match reach {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        let context = || HttpContext {
            grpc_addr: reach,
            http_addr,
            shutdown: shutdown_rx.clone(),
            grpc_channel: in_process.channel(),
            auth: config.auth,
            tls: server_tls.is_some(),
        };
        if let Some(extend) = &config.http_extension {
            routes = routes.merge(extend(context()).layer(http::extension_guard(core.clone(), mutual)));
        }
        if let Some(extend) = &config.http_open_extension {
            routes = routes.merge(extend(context()).layer(http::open_extension_guard(mutual)));
        }
        tasks.push(spawn_http(
            http_listener,
            routes,
            config.net,
            server_tls.as_ref().map(|t| t.http.clone()),
            shutdown_rx,
        ));
        let tls_mode = match &server_tls {
            Some(t) if t.mutual => "mutual",
            Some(_) => "on",
            None => "off",
        };
        tracing::info!(grpc = %grpc_addr, http = %http_addr, data = %dir.display(), auth = config.auth, tls = tls_mode, "railyard server started");
        Ok(Self {
            grpc_addr,
            http_addr,
            admin_key_file,
            core,
            shutdown,
            tasks,
            writer_thread,
        })
    }

    /// Stops accepting requests, lets in-flight ones finish, then stops the writer
    /// once its last batch is committed.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
        // The writer thread ends when the last handle to it is gone.
        drop(self.core);
        let writer = self.writer_thread;
        let _ = tokio::task::spawn_blocking(move || writer.join()).await;
        tracing::info!("railyard server stopped");
    }
}

/// Refuses a listener on a non-loopback address without auth, unless `insecure`.
pub(crate) fn check_exposure(auth: bool, insecure: bool, addrs: [SocketAddr; 2]) -> Result<(), StartError> {
    if auth || insecure {
        return Ok(());
    }
    for addr in addrs {
        if !addr.ip().is_loopback() {
            return Err(StartError::Exposed { addr });
        }
    }
    Ok(())
}

/// Serves `routes` on the HTTP listener (TLS when `tls` is given) until shutdown.
pub(crate) fn spawn_http(
    http_listener: tokio::net::TcpListener,
    routes: axum::Router,
    net_limits: net::NetLimits,
    http_tls: Option<tokio_rustls::TlsAcceptor>,
    mut http_shutdown: shutdown_watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let listener = net::BoundedListener::http(http_listener, net_limits, "http");
        let stop = async move {
            let _ = http_shutdown.wait_for(|s| *s).await;
        };
        let served = match http_tls {
            Some(acceptor) => {
                let listener = tls::TlsListener::new(listener, acceptor);
                // The connection's verified client certificate, for the extension guard.
                let routes = routes.into_make_service_with_connect_info::<tls::HttpPeer>();
                axum::serve(listener, routes).with_graceful_shutdown(stop).await
            }
            None => axum::serve(listener, routes).with_graceful_shutdown(stop).await,
        };
        if let Err(e) = served {
            tracing::error!(error = %e, "HTTP listener failed");
        }
    })
}

/// Binds a listener; answers it with its bound address.
pub(crate) async fn bind(addr: SocketAddr) -> Result<(tokio::net::TcpListener, SocketAddr), StartError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| StartError::Bind { addr, source })?;
    Ok((listener, bound))
}

/// Creates the data directory (and any missing parents) readable by its owner only
/// (mode 0700); an existing directory is left as it is.
fn create_private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)
}

/// Forgets webhook delivery ids older than the retention window: once a minute,
/// in batches of [`PURGE_BATCH`] (one short transaction each), until none is left.
async fn purge_hook_deliveries(
    core: Arc<Core>,
    retention_ms: u64,
    mut shutdown: shutdown_watch::Receiver<bool>,
) {
    loop {
        loop {
            let before = core
                .clock
                .now_ms()
                .saturating_sub(i64::try_from(retention_ms).unwrap_or(i64::MAX));
            match core
                .writer
                .call(railyard_engine::writer::PurgeHookDeliveries {
                    before,
                    max: PURGE_BATCH,
                })
                .await
            {
                Ok(n) if n == PURGE_BATCH => continue,
                Ok(n) => {
                    if n > 0 {
                        tracing::debug!(purged = n, "old webhook delivery ids forgotten");
                    }
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "purging old webhook delivery ids failed");
                    break;
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_secs(60)) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

/// Delivery ids forgotten per transaction.
const PURGE_BATCH: usize = 1000;

/// The gRPC services, health and reflection: served on the gRPC listener and on the
/// in-process channel alike.
pub(crate) async fn grpc_routes(core: Arc<Core>) -> tonic::service::Routes {
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<HistoryServer<grpc::history::HistoryService>>()
        .await;
    health_reporter
        .set_serving::<TasksServer<grpc::tasks::TasksService>>()
        .await;
    health_reporter
        .set_serving::<SchedulesServer<grpc::schedules::SchedulesService>>()
        .await;
    health_reporter
        .set_serving::<AdminServer<grpc::admin::AdminService>>()
        .await;
    health_reporter
        .set_serving::<TriggersServer<grpc::triggers::TriggersService>>()
        .await;
    health_reporter
        .set_serving::<BatchesServer<grpc::batches::BatchesService>>()
        .await;
    health_reporter
        .set_serving::<CapacityServer<grpc::capacity::CapacityService>>()
        .await;
    let history = HistoryServer::new(grpc::history::HistoryService { core: core.clone() })
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let schedules = SchedulesServer::new(grpc::schedules::SchedulesService { core: core.clone() })
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let admin = AdminServer::new(grpc::admin::AdminService { core: core.clone() })
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let triggers = TriggersServer::new(grpc::triggers::TriggersService { core: core.clone() })
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let batches = BatchesServer::new(grpc::batches::BatchesService { core: core.clone() })
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let capacity = CapacityServer::new(grpc::capacity::CapacityService { core: core.clone() })
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let tasks = TasksServer::new(grpc::tasks::TasksService { core })
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let routes = tonic::service::Routes::new(health_service)
        .add_service(history)
        .add_service(tasks)
        .add_service(schedules)
        .add_service(admin)
        .add_service(triggers)
        .add_service(batches)
        .add_service(capacity);
    add_reflection(routes)
}

/// `routes` with the reflection services added (both versions: grpcurl speaks v1;
/// Python's grpcio reflection client, Postman and grpcui still speak v1alpha).
pub(crate) fn add_reflection(mut routes: tonic::service::Routes) -> tonic::service::Routes {
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(railyard_proto::v1::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let unavailable = |e: tonic_reflection::server::Error| {
        tracing::error!(error = %e, "reflection service unavailable");
    };
    if let Ok(r) = reflection().build_v1().map_err(unavailable) {
        routes = routes.add_service(r);
    }
    if let Ok(r) = reflection().build_v1alpha().map_err(unavailable) {
        routes = routes.add_service(r);
    }
    routes
}

/// Serves `routes` on the in-process connections ([`inproc`]) until shutdown. No
/// [`grpc::peer::PeerLayer`]: only this process makes these connections, so the
/// caller's certificate subject in the metadata is the gateway's, taken from its
/// verified HTTP caller.
pub(crate) async fn serve_in_process(
    routes: tonic::service::Routes,
    rpc: RpcLayer,
    incoming: tokio::sync::mpsc::Receiver<tokio::io::DuplexStream>,
    mut shutdown: shutdown_watch::Receiver<bool>,
) {
    use tokio_stream::StreamExt;
    let incoming = tokio_stream::wrappers::ReceiverStream::new(incoming).map(Ok::<_, std::io::Error>);
    let result = tonic::transport::Server::builder()
        .layer(rpc)
        .add_routes(routes)
        .serve_with_incoming_shutdown(incoming, async move {
            let _ = shutdown.wait_for(|s| *s).await;
        })
        .await;
    if let Err(e) = result {
        tracing::error!(error = %e, "in-process gRPC server failed");
    }
}

pub(crate) async fn serve_grpc(
    routes: tonic::service::Routes,
    rpc: RpcLayer,
    listener: net::BoundedListener,
    limits: net::NetLimits,
    tls: Option<tonic::transport::ServerTlsConfig>,
    mut shutdown: shutdown_watch::Receiver<bool>,
) {
    // The listener sets TCP_NODELAY (`Server::tcp_nodelay` does not apply to a
    // listener we bring), limits connections and closes idle ones; the pings keep a
    // live peer from looking idle.
    let mut builder = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(limits.keepalive_interval()))
        .http2_keepalive_timeout(Some(limits.keepalive_interval()));
    if let Some(tls) = tls {
        builder = match builder.tls_config(tls) {
            Ok(b) => b,
            Err(e) => {
                // Checked at start (`ServerTls::load`), so this is not expected.
                tracing::error!(error = %e, "gRPC TLS configuration failed");
                return;
            }
        };
    }
    let result = builder
        .layer(grpc::peer::PeerLayer)
        .layer(rpc)
        .add_routes(routes)
        .serve_with_incoming_shutdown(listener.into_stream(), async move {
            let _ = shutdown.wait_for(|s| *s).await;
        })
        .await;
    if let Err(e) = result {
        tracing::error!(error = %e, "gRPC listener failed");
    }
}
