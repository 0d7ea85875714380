//! Railyard history server: keeps every run's event history in redb, hands step
//! tasks to polling workers under signed leases, and fires durable timers.
//!
//! [`RunningServer::start`] is the one entry point; [`RunningServer::shutdown`] is
//! the one place the server stops. The map of the code is in the repository's
//! `ARCHITECTURE.md`.

pub mod clock;
pub mod error;
pub mod grpc;
pub mod http;
pub mod ids;
pub mod matching;
pub mod metrics;
pub mod model;
pub mod schedule;
pub mod service;
pub mod store;
pub mod timers;
pub mod tls;
pub mod token;
pub mod watch;
pub mod workflow;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use railyard_proto::v1::{
    history_server::HistoryServer, schedules_server::SchedulesServer, tasks_server::TasksServer,
};
use tokio::sync::{Notify, watch as shutdown_watch};
use tokio::task::JoinHandle;

use crate::clock::{Clock, SystemClock};
use crate::matching::{Matching, TaskRef};
use crate::metrics::{Metrics, StateSources};
use crate::service::Core;
use crate::store::Store;
use crate::store::writer::{Hooks, Writer};
use crate::timers::LeaseDeadlines;
use crate::token::TokenKeys;
use crate::watch::Watchers;
use crate::workflow::{EmbeddedDefinition, WorkflowRegistry};

/// Largest gRPC message the server accepts.
const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// Everything `railyard server` can be told.
#[derive(Clone)]
pub struct ServerConfig {
    /// Directory holding the redb database and the token keys.
    pub data_dir: PathBuf,
    /// gRPC listen address (default 127.0.0.1:7400).
    pub grpc_listen: SocketAddr,
    /// HTTP listen address for /healthz and /metrics (default 127.0.0.1:7401).
    pub http_listen: SocketAddr,
    /// Directory of workflow definition files (`*.json`).
    pub workflows_dir: PathBuf,
    /// Definitions built into the binary, loaded after the directory's files (so a
    /// file's id wins) and validated the same way.
    pub embedded_workflows: Vec<EmbeddedDefinition>,
    /// The clock; tests pass a [`clock::ManualClock`].
    pub clock: Arc<dyn Clock>,
    /// TLS on both listeners (mutual TLS on gRPC with a client CA); `None`: plaintext.
    pub tls: Option<tls::TlsFiles>,
}

impl ServerConfig {
    /// The defaults, with the data in `data_dir` and definitions in `workflows_dir`.
    pub fn new(data_dir: impl Into<PathBuf>, workflows_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            grpc_listen: SocketAddr::from(([127, 0, 0, 1], 7400)),
            http_listen: SocketAddr::from(([127, 0, 0, 1], 7401)),
            workflows_dir: workflows_dir.into(),
            embedded_workflows: Vec::new(),
            clock: Arc::new(SystemClock),
            tls: None,
        }
    }
}

/// Errors that stop the server from starting. Each names the file or address.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot create data directory {path}: {source}")]
    DataDir { path: String, source: std::io::Error },
    #[error(transparent)]
    Store(#[from] store::OpenError),
    #[error("task token keys: {0}")]
    Keys(#[from] token::KeyError),
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
    Internal(#[from] error::ApiError),
}

/// A server that is up and answering.
pub struct RunningServer {
    /// The bound gRPC address (useful when the config asked for port 0).
    pub grpc_addr: SocketAddr,
    /// The bound HTTP address.
    pub http_addr: SocketAddr,
    core: Arc<Core>,
    shutdown: shutdown_watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    writer_thread: std::thread::JoinHandle<()>,
}

impl RunningServer {
    /// Opens storage, loads workflows, rebuilds matching, binds both listeners and
    /// starts serving. Returns once both listeners accept connections.
    pub async fn start(config: ServerConfig) -> Result<Self, StartError> {
        let dir = &config.data_dir;
        // TLS files first: a bad one stops the start before anything is opened.
        let server_tls = config.tls.as_ref().map(tls::ServerTls::load).transpose()?;
        std::fs::create_dir_all(dir).map_err(|source| StartError::DataDir {
            path: dir.display().to_string(),
            source,
        })?;
        let store = Store::open(dir)?;
        let keys = TokenKeys::load_or_create(dir)?;
        let mut workflows =
            WorkflowRegistry::load_dir(&config.workflows_dir).map_err(|source| StartError::Workflows {
                path: config.workflows_dir.display().to_string(),
                source,
            })?;
        for def in &config.embedded_workflows {
            workflows.add_embedded(def);
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

        let matching = Arc::new(Matching::default());
        let ready = store.ready_tasks()?;
        tracing::info!(ready = ready.len(), "matching rebuilt from storage");
        for t in ready {
            matching.push(TaskRef {
                namespace: t.namespace,
                queue: t.queue,
                task_seq: t.task_seq,
                run_id: t.run_id,
            });
        }
        let leases = Arc::new(LeaseDeadlines::default());
        for (due, ns, run_id, lease) in store.lease_deadlines()? {
            leases.set(&ns, &run_id, Some((due, lease)));
        }
        tracing::info!(leases = leases.len(), "lease deadlines rebuilt from storage");
        let watchers = Arc::new(Watchers::default());
        let open_runs_store = store.clone();
        let schedules_store = store.clone();
        let workflows = Arc::new(workflows);
        let metrics = Arc::new(Metrics::with_state(StateSources {
            matching: matching.clone(),
            leases: leases.clone(),
            open_runs: Box::new(move || open_runs_store.open_run_counts()),
            schedules: Box::new(move || schedules_store.schedule_counts()),
        }));
        let timer_wake = Arc::new(Notify::new());
        let hooks = Hooks {
            matching: matching.clone(),
            watchers: watchers.clone(),
            timer_wake: timer_wake.clone(),
            leases: leases.clone(),
            metrics: metrics.clone(),
            clock: config.clock.clone(),
            workflows: workflows.clone(),
        };
        let (writer, writer_thread) = Writer::spawn(store.clone(), hooks)?;
        let namespaces: HashSet<String> = store.namespaces()?.into_iter().collect();
        let (shutdown, shutdown_rx) = shutdown_watch::channel(false);
        let core = Arc::new(Core {
            store: store.clone(),
            writer: writer.clone(),
            matching,
            watchers,
            metrics: metrics.clone(),
            clock: config.clock.clone(),
            keys,
            workflows,
            namespaces,
            shutdown: shutdown_rx.clone(),
        });

        let grpc_listener = tokio::net::TcpListener::bind(config.grpc_listen)
            .await
            .map_err(|source| StartError::Bind {
                addr: config.grpc_listen,
                source,
            })?;
        let http_listener = tokio::net::TcpListener::bind(config.http_listen)
            .await
            .map_err(|source| StartError::Bind {
                addr: config.http_listen,
                source,
            })?;
        let grpc_addr = grpc_listener.local_addr().map_err(|source| StartError::Bind {
            addr: config.grpc_listen,
            source,
        })?;
        let http_addr = http_listener.local_addr().map_err(|source| StartError::Bind {
            addr: config.http_listen,
            source,
        })?;

        let mut tasks = Vec::new();
        tasks.push(tokio::spawn(timers::run(
            store,
            writer,
            leases,
            config.clock.clone(),
            timer_wake,
            shutdown_rx.clone(),
        )));
        tasks.push(tokio::spawn(serve_grpc(
            core.clone(),
            grpc_listener,
            server_tls.as_ref().map(|t| t.grpc.clone()),
            shutdown_rx.clone(),
        )));
        let mut http_shutdown = shutdown_rx;
        let http_tls = server_tls.as_ref().map(|t| t.http.clone());
        tasks.push(tokio::spawn(async move {
            let router = http::router(metrics);
            let stop = async move {
                let _ = http_shutdown.wait_for(|s| *s).await;
            };
            let served = match http_tls {
                Some(acceptor) => {
                    let listener = tls::TlsListener::new(http_listener, acceptor);
                    axum::serve(listener, router).with_graceful_shutdown(stop).await
                }
                None => {
                    axum::serve(http_listener, router)
                        .with_graceful_shutdown(stop)
                        .await
                }
            };
            if let Err(e) = served {
                tracing::error!(error = %e, "HTTP listener failed");
            }
        }));
        let tls_mode = match &server_tls {
            Some(t) if t.mutual => "mutual",
            Some(_) => "on",
            None => "off",
        };
        tracing::info!(grpc = %grpc_addr, http = %http_addr, data = %dir.display(), tls = tls_mode, "railyard server started");
        Ok(Self {
            grpc_addr,
            http_addr,
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

async fn serve_grpc(
    core: Arc<Core>,
    listener: tokio::net::TcpListener,
    tls: Option<tonic::transport::ServerTlsConfig>,
    mut shutdown: shutdown_watch::Receiver<bool>,
) {
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
    let reflection = match tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(railyard_proto::v1::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
    {
        Ok(r) => Some(r),
        Err(e) => {
            tracing::error!(error = %e, "reflection service unavailable");
            None
        }
    };
    let history = HistoryServer::new(grpc::history::HistoryService { core: core.clone() })
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let schedules = SchedulesServer::new(grpc::schedules::SchedulesService { core: core.clone() })
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let rpc_layer = core.metrics.rpc_layer();
    let tasks = TasksServer::new(grpc::tasks::TasksService { core })
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    // `Server::tcp_nodelay` does not apply to a listener we bring; without it every
    // small answer waits on Nagle's algorithm.
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    let mut builder = tonic::transport::Server::builder();
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
        .layer(rpc_layer)
        .add_service(health_service)
        .add_optional_service(reflection)
        .add_service(history)
        .add_service(tasks)
        .add_service(schedules)
        .serve_with_incoming_shutdown(incoming, async move {
            let _ = shutdown.wait_for(|s| *s).await;
        })
        .await;
    if let Err(e) = result {
        tracing::error!(error = %e, "gRPC listener failed");
    }
}
