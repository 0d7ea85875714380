//! A follower node: it serves the same listeners as a [`crate::RunningServer`] but
//! runs no engine. Several server nodes share one PostgreSQL database this way
//! (Temporal's shard ownership, with one shard): one node leads (it holds the
//! database's writer lease and runs the whole engine); every other node forwards each
//! call to it.
//!
//! - gRPC ([`grpc`]): every `railyard.v1.*` call, unary or streaming, goes to the
//!   leader's gRPC address as it came, metadata included (API keys are checked by
//!   the leader). Health and reflection answer locally.
//! - HTTP ([`http`]): `/hooks/...` is forwarded to the leader's HTTP address;
//!   `/healthz` and `/metrics` answer locally; `/mcp` (the binary's extension) runs
//!   here, its gateway calling the forwarding routes through an in-process channel,
//!   so each tool call goes to the leader.
//!
//! Who leads comes from a [`LeaderSource`] (the database's writer lease), asked at
//! start, every [`FollowerConfig::refresh`] and at once after a call could not reach
//! the leader. With no leader known, or one that cannot be reached, a call is
//! answered `UNAVAILABLE` (HTTP 503) naming the leader tried, never held past its
//! deadline.

mod grpc;
mod http;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

use crate::metrics::{NodeMetrics, RpcLayer, RpcTable};
use crate::{HttpExtension, StartError, inproc, net, tls};

/// The node that leads: who, and where to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    /// Its node id (random, made at its start).
    pub node: String,
    /// The writer lease's epoch it holds.
    pub epoch: i64,
    /// Its gRPC address, `host:port`; empty while it has not said yet (it is starting).
    pub grpc: String,
    /// Its HTTP address, `host:port`; empty while it has not said yet.
    pub http: String,
    /// Whether its listeners speak TLS.
    pub tls: bool,
}

/// What [`LeaderSource::leader`] answers: the leader, `None` when no node leads (the
/// lease is free or expired), or why it could not be asked (the database does not
/// answer).
pub type LeaderFuture<'a> = Pin<Box<dyn Future<Output = Result<Option<Leader>, String>> + Send + 'a>>;

/// Where a follower learns who leads.
pub trait LeaderSource: Send + Sync + 'static {
    /// The current leader.
    fn leader(&self) -> LeaderFuture<'_>;
}

/// A [`LeaderSource`] that always names the same leader (tests, and a fixed setup).
#[derive(Debug, Clone)]
pub struct FixedLeader(pub Option<Leader>);

impl LeaderSource for FixedLeader {
    fn leader(&self) -> LeaderFuture<'_> {
        let leader = self.0.clone();
        Box::pin(async move { Ok(leader) })
    }
}

/// Everything a follower is told.
#[derive(Clone)]
pub struct FollowerConfig {
    /// This node's id, shown by `/healthz`.
    pub node: String,
    /// gRPC listen address.
    pub grpc_listen: SocketAddr,
    /// HTTP listen address.
    pub http_listen: SocketAddr,
    /// API keys required (checked by the leader; `/mcp` asks it about a key before
    /// the request reaches the gateway).
    pub auth: bool,
    /// Allows listening on a non-loopback address without auth.
    pub insecure: bool,
    /// Connection limits, per listener.
    pub net: net::NetLimits,
    /// TLS on both listeners; `None`: plaintext. Mutual TLS cannot be forwarded (the
    /// client's certificate ends at this node), so a client CA is refused.
    pub tls: Option<tls::TlsFiles>,
    /// CA certificates (PEM) trusted for the leader's TLS, beside the system's roots.
    pub peer_ca: Option<PathBuf>,
    /// Largest webhook body forwarded; a larger one is refused with `413` here.
    pub hook_body_bytes: usize,
    /// The binary's routes (`/mcp`), as on a [`crate::ServerConfig`].
    pub http_extension: Option<HttpExtension>,
    /// The binary's routes that do their own authentication (`/ui`), as on a
    /// [`crate::ServerConfig`].
    pub http_open_extension: Option<HttpExtension>,
    /// Who leads.
    pub leader: Arc<dyn LeaderSource>,
    /// This node's gRPC address as it would advertise it leading (`host:port`): a
    /// lease naming it is an earlier run of this node.
    pub advertise_grpc: Option<String>,
    /// How often the leader is asked again (it changes on failover).
    pub refresh: Duration,
}

impl FollowerConfig {
    /// The defaults (loopback ports 7400 and 7401, no auth, no TLS), following `leader`.
    pub fn new(node: impl Into<String>, leader: Arc<dyn LeaderSource>) -> Self {
        Self {
            node: node.into(),
            grpc_listen: SocketAddr::from(([127, 0, 0, 1], 7400)),
            http_listen: SocketAddr::from(([127, 0, 0, 1], 7401)),
            auth: false,
            insecure: false,
            net: net::NetLimits::default(),
            tls: None,
            peer_ca: None,
            hook_body_bytes: crate::http::DEFAULT_HOOK_BODY_BYTES,
            http_extension: None,
            http_open_extension: None,
            leader,
            advertise_grpc: None,
            refresh: DEFAULT_REFRESH,
        }
    }
}

/// How often a follower asks who leads, by default.
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(2);
/// How long opening a connection to the leader may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// HTTP/2 pings to the leader: a leader that stopped answering (SIGSTOP, a lost
/// machine) fails the calls on its connection after about this long.
const KEEPALIVE: Duration = Duration::from_secs(5);
/// Longest a question to the [`LeaderSource`] may take.
const ASK_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a forwarded webhook may take at the leader.
const HOOK_TIMEOUT: Duration = Duration::from_secs(30);

/// The leader a follower forwards to, with its connections.
pub(crate) struct Target {
    pub(crate) leader: Leader,
    /// Lazy: it connects on its first call, and again after its connection ends.
    pub(crate) channel: Channel,
    /// The lease names this node's own address: an earlier run of it (killed, and
    /// this one started on its port) that is gone. Nothing is forwarded (it would
    /// come back here); the lease is taken over when it ends.
    pub(crate) earlier_self: bool,
}

/// The counters of `/metrics`.
#[derive(Default)]
pub(crate) struct Counters {
    /// Calls forwarded, by kind (`grpc`, `http`).
    forwarded: Family<[(&'static str, &'static str); 1], Counter>,
    /// Calls that could not be forwarded, by kind.
    failed: Family<[(&'static str, &'static str); 1], Counter>,
}

impl Counters {
    pub(crate) fn forwarded(&self, kind: &'static str) {
        self.forwarded.get_or_create(&[("kind", kind)]).inc();
    }

    pub(crate) fn failed(&self, kind: &'static str) {
        self.failed.get_or_create(&[("kind", kind)]).inc();
    }
}

/// What the forwarding routes share.
pub(crate) struct Forwarding {
    node: String,
    source: Arc<dyn LeaderSource>,
    current: Mutex<Option<Arc<Target>>>,
    /// The last question to the source failed: the database does not answer.
    database_error: Mutex<Option<String>>,
    /// Asks the source again at once.
    ask: Notify,
    peer_ca: Option<Vec<u8>>,
    /// This node's own gRPC address as a leader would advertise it, when known.
    own_grpc: Option<String>,
    /// For webhooks.
    http: reqwest::Client,
    pub(crate) counters: Counters,
}

impl Forwarding {
    /// The leader known now, if any.
    pub(crate) fn target(&self) -> Option<Arc<Target>> {
        self.current.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Asks the source again soon (a call could not reach the leader).
    pub(crate) fn ask_again(&self) {
        self.ask.notify_one();
    }

    pub(crate) fn database_error(&self) -> Option<String> {
        self.database_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(crate) fn node(&self) -> &str {
        &self.node
    }

    pub(crate) fn http_client(&self) -> &reqwest::Client {
        &self.http
    }

    /// Asks the source who leads and keeps the answer (a new channel when the
    /// leader or its address changed).
    async fn refresh(&self) {
        let answer = match tokio::time::timeout(ASK_TIMEOUT, self.source.leader()).await {
            Ok(answer) => answer,
            Err(_) => Err(format!("no answer within {} s", ASK_TIMEOUT.as_secs())),
        };
        let leader = match answer {
            Ok(leader) => {
                *self.database_error.lock().unwrap_or_else(|p| p.into_inner()) = None;
                leader
            }
            Err(e) => {
                tracing::warn!(node = %self.node, error = %e, "cannot learn who leads; keeping the last answer");
                *self.database_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                return;
            }
        };
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if current.as_ref().map(|t| &t.leader) == leader.as_ref() {
            return;
        }
        let next = match leader {
            None => None,
            Some(leader) if leader.grpc.is_empty() => Some(Arc::new(Target {
                channel: Endpoint::from_static("http://leader.invalid").connect_lazy(),
                leader,
                earlier_self: false,
            })),
            Some(leader) if self.own_grpc.as_deref() == Some(leader.grpc.as_str()) => {
                tracing::warn!(node = %self.node, leader = %leader.node, grpc = %leader.grpc,
                    "the writer lease names this node's own address: an earlier run of it, gone; taking it over when it ends");
                Some(Arc::new(Target {
                    channel: Endpoint::from_static("http://leader.invalid").connect_lazy(),
                    leader,
                    earlier_self: true,
                }))
            }
            Some(leader) => match self.channel(&leader) {
                Ok(channel) => Some(Arc::new(Target {
                    leader,
                    channel,
                    earlier_self: false,
                })),
                Err(e) => {
                    tracing::error!(node = %self.node, leader = %leader.node, grpc = %leader.grpc, error = %e,
                        "cannot make a channel to the leader");
                    None
                }
            },
        };
        match &next {
            Some(t) => tracing::info!(
                node = %self.node,
                leader = %t.leader.node,
                epoch = t.leader.epoch,
                grpc = %t.leader.grpc,
                http = %t.leader.http,
                "following a new leader"
            ),
            None => tracing::info!(node = %self.node, "no node leads now"),
        }
        *current = next;
    }

    fn channel(&self, leader: &Leader) -> Result<Channel, String> {
        let scheme = if leader.tls { "https" } else { "http" };
        let mut endpoint = Endpoint::from_shared(format!("{scheme}://{}", leader.grpc))
            .map_err(|e| format!("address {}: {e}", leader.grpc))?
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(KEEPALIVE)
            .keep_alive_timeout(KEEPALIVE)
            .keep_alive_while_idle(true);
        if leader.tls {
            let mut config = ClientTlsConfig::new().with_native_roots();
            if let Some(ca) = &self.peer_ca {
                config = config.ca_certificate(Certificate::from_pem(ca));
            }
            endpoint = endpoint.tls_config(config).map_err(|e| e.to_string())?;
        }
        Ok(endpoint.connect_lazy())
    }
}

/// A follower that is up and forwarding.
pub struct RunningFollower {
    /// The bound gRPC address.
    pub grpc_addr: SocketAddr,
    /// The bound HTTP address.
    pub http_addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl RunningFollower {
    /// Asks who leads, binds both listeners and starts forwarding. Returns once both
    /// listeners accept connections.
    pub async fn start(config: FollowerConfig) -> Result<Self, StartError> {
        crate::check_exposure(
            config.auth,
            config.insecure,
            [config.grpc_listen, config.http_listen],
        )?;
        if let Some(files) = &config.tls
            && let Some(ca) = &files.client_ca
        {
            return Err(StartError::Tls(tls::TlsError::Invalid {
                what: "--tls-client-ca",
                path: ca.display().to_string(),
                reason: "a follower cannot pass a client certificate on to the leader; mutual TLS \
                         needs a single server"
                    .into(),
            }));
        }
        let server_tls = config.tls.as_ref().map(tls::ServerTls::load).transpose()?;
        let peer_ca = config
            .peer_ca
            .as_ref()
            .map(|p| railyard_sdk::tls::read_pem("--peer-ca", p))
            .transpose()
            .map_err(|e| StartError::Tls(e.into()))?;
        let mut http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(HOOK_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none());
        if let Some(ca) = &peer_ca {
            let certs = reqwest::Certificate::from_pem_bundle(ca).map_err(|e| {
                StartError::Tls(tls::TlsError::Invalid {
                    what: "--peer-ca",
                    path: config.peer_ca.clone().unwrap_or_default().display().to_string(),
                    reason: e.to_string(),
                })
            })?;
            for cert in certs {
                http = http.add_root_certificate(cert);
            }
        }
        let http = http
            .build()
            .map_err(|e| StartError::Internal(railyard_engine::error::ApiError::Internal(e.to_string())))?;
        let counters = Counters::default();
        let role = Family::<[(&'static str, &'static str); 1], Gauge>::default();
        role.get_or_create(&[("role", "follower")]).set(1);
        let rpc = Arc::new(RpcTable::new());
        let metrics = Arc::new(NodeMetrics::new(rpc.clone(), |r| {
            r.register(
                "railyard_node_role",
                "This node's role on its shared database (1 for the role it has)",
                role.clone(),
            );
            r.register(
                "railyard_follower_forwarded",
                "Calls this follower forwarded to the leader, by kind (grpc, http)",
                counters.forwarded.clone(),
            );
            r.register(
                "railyard_follower_forward_failures",
                "Calls this follower could not forward to the leader, by kind (grpc, http)",
                counters.failed.clone(),
            );
        }));
        let forwarding = Arc::new(Forwarding {
            node: config.node.clone(),
            source: config.leader.clone(),
            current: Mutex::new(None),
            database_error: Mutex::new(None),
            ask: Notify::new(),
            peer_ca,
            own_grpc: config.advertise_grpc.clone(),
            http,
            counters,
        });
        forwarding.refresh().await;

        let (grpc_listener, grpc_addr) = crate::bind(config.grpc_listen).await?;
        let (http_listener, http_addr) = crate::bind(config.http_listen).await?;
        let (shutdown, shutdown_rx) = watch::channel(false);
        let routes = grpc::routes(forwarding.clone()).await;
        let (in_process, in_process_incoming) = inproc::pair();
        let mut tasks = vec![
            tokio::spawn(keep_asking(
                forwarding.clone(),
                config.refresh,
                shutdown_rx.clone(),
            )),
            tokio::spawn(crate::serve_in_process(
                routes.clone(),
                RpcLayer::new(rpc.clone()),
                in_process_incoming,
                shutdown_rx.clone(),
            )),
            tokio::spawn(crate::serve_grpc(
                routes,
                RpcLayer::new(rpc),
                net::BoundedListener::new(grpc_listener, config.net, "grpc"),
                config.net,
                server_tls.as_ref().map(|t| t.grpc.clone()),
                shutdown_rx.clone(),
            )),
        ];
        let mut router = http::router(forwarding.clone(), metrics, config.hook_body_bytes);
        let mut reach = grpc_addr;
        if reach.ip().is_unspecified() {
            reach.set_ip(match reach {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        let context = || crate::HttpContext {
            grpc_addr: reach,
            http_addr,
            shutdown: shutdown_rx.clone(),
            grpc_channel: in_process.channel(),
            auth: config.auth,
            tls: server_tls.is_some(),
        };
        if let Some(extend) = &config.http_extension {
            let keys = match config.auth {
                false => None,
                true => Some(Arc::new(
                    http::KeyCheck::new(in_process.channel()).map_err(StartError::KeyCheck)?,
                )),
            };
            router = router.merge(
                extend(context()).layer(axum::middleware::from_fn(move |req, next| {
                    http::extension_guard(keys.clone(), req, next)
                })),
            );
        }
        if let Some(extend) = &config.http_open_extension {
            router =
                router.merge(extend(context()).layer(axum::middleware::from_fn(http::open_extension_guard)));
        }
        tasks.push(crate::spawn_http(
            http_listener,
            router,
            config.net,
            server_tls.as_ref().map(|t| t.http.clone()),
            shutdown_rx,
        ));
        tracing::info!(node = %config.node, grpc = %grpc_addr, http = %http_addr, role = "follower",
            "railyard follower started");
        Ok(Self {
            grpc_addr,
            http_addr,
            shutdown,
            tasks,
        })
    }

    /// Stops accepting, lets in-flight calls finish for up to `grace`, then ends
    /// them; the listeners are closed when this returns.
    pub async fn shutdown(self, grace: Duration) {
        let _ = self.shutdown.send(true);
        let deadline = tokio::time::Instant::now() + grace;
        for mut task in self.tasks {
            if tokio::time::timeout_at(deadline, &mut task).await.is_err() {
                task.abort();
                let _ = task.await;
            }
        }
        tracing::info!("railyard follower stopped");
    }
}

/// Asks who leads every `every`, and at once when a call could not reach the leader
/// (at most once a second then).
async fn keep_asking(forwarding: Arc<Forwarding>, every: Duration, mut shutdown: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = forwarding.ask.notified() => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
        forwarding.refresh().await;
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1).min(every)) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}
