//! One node of several on a shared database: it leads (holds the database's writer
//! lease and runs a whole [`RunningServer`]) or follows (a [`RunningFollower`]
//! forwarding to the leader), and changes role as the lease moves.
//!
//! - A follower tries to claim the lease every [`NodeConfig::claim_every`]; once it
//!   has, it stops its follower listeners and starts a `RunningServer` on the same
//!   addresses with the claimed store (a client meanwhile meets a refused
//!   connection, which it retries), then says where it serves ([`Claim::advertise`]).
//! - A leader whose claim is lost ([`Claim::lost`]: another node took the expired
//!   lease while this one was stopped or cut off; its writes already fail, fenced)
//!   shuts its server down and follows.
//!
//! All the claims a server makes (timers, schedule fires, lease expiry, webhook
//! delivery ids, deliveries) stay with the one leader, so exactly-once across nodes
//! follows from the single writer and the fence on every write transaction. The
//! database behind [`Election`] is the binary's (PostgreSQL), this crate knows none.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use railyard_store::Store;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::follower::{FollowerConfig, LeaderSource, RunningFollower};
use crate::{RunningServer, ServerConfig, StartError};

/// A claim on the shared database: this node leads while it holds.
pub struct Claim {
    /// The store, written by this node alone while the claim holds.
    pub store: Store,
    /// The claim's epoch (one more than the last claim's).
    pub epoch: i64,
    /// Turns to `Some(node)` once `node` took the claim from this one.
    pub lost: watch::Receiver<Option<String>>,
    /// Records where this node serves (`grpc`, `http` as `host:port`, TLS on or off)
    /// for the followers; blocking (it writes to the database).
    pub advertise: Advertise,
}

/// Records where a leader serves: `(grpc, http, tls)`; blocking.
pub type Advertise = Arc<dyn Fn(&str, &str, bool) -> Result<(), String> + Send + Sync>;

/// What [`Election::try_claim`] answers: the claim, `None` while another node holds
/// it, or why the database could not be asked.
pub type ClaimFuture<'a> = Pin<Box<dyn Future<Output = Result<Option<Claim>, String>> + Send + 'a>>;

/// Who leads a shared database, and a way to become the leader.
pub trait Election: LeaderSource {
    /// This node's id (the one it claims with).
    fn node(&self) -> &str;
    /// Claims leadership if no node holds it now.
    fn try_claim(&self) -> ClaimFuture<'_>;
}

/// The role a node has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// It holds the claim and runs the engine.
    Leader,
    /// It forwards to the leader.
    Follower,
}

impl Role {
    /// `leader` or `follower`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Leader => "leader",
            Self::Follower => "follower",
        }
    }
}

/// Everything a node is told.
#[derive(Clone)]
pub struct NodeConfig {
    /// The server it runs when it leads (its `store` is the claim's); its listen
    /// addresses and TLS, auth, limits and `/mcp` extension serve the follower too.
    pub server: ServerConfig,
    /// The host the other nodes reach this one at (its listen addresses' ports).
    pub advertise_host: String,
    /// CA certificates (PEM) trusted for the leader's TLS when following.
    pub peer_ca: Option<PathBuf>,
    /// How often a follower tries to claim the lease.
    pub claim_every: Duration,
    /// How long a role's in-flight calls may take to finish when it changes or stops.
    pub stop_grace: Duration,
}

/// A node that is up, in one role or the other.
pub struct RunningNode {
    /// The bound gRPC address (the same in both roles).
    pub grpc_addr: SocketAddr,
    /// The bound HTTP address.
    pub http_addr: SocketAddr,
    /// The admin key file a leader's first start wrote, if it did.
    pub admin_key_file: Option<PathBuf>,
    role: watch::Receiver<Role>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// The role being played, with what it runs.
enum Playing {
    Leader(RunningServer, Claim),
    Follower(RunningFollower),
    /// Neither could start (a listener could not be bound, say): tried again at the
    /// next turn.
    Idle,
}

/// What the loop keeps between roles.
struct Node {
    config: NodeConfig,
    election: Arc<dyn Election>,
    role: watch::Sender<Role>,
}

impl RunningNode {
    /// Claims the lease if it is free (else follows) and starts that role; returns
    /// once its listeners accept connections. A failure of this first start is
    /// returned; later ones are logged and tried again.
    pub async fn start(config: NodeConfig, election: Arc<dyn Election>) -> Result<Self, StartError> {
        let first = election.try_claim().await.map_err(|e| {
            StartError::Internal(railyard_engine::error::ApiError::Unavailable(format!(
                "cannot ask the database who leads: {e}"
            )))
        })?;
        let (role, role_rx) = watch::channel(Role::Follower);
        let mut node = Node {
            config,
            election,
            role,
        };
        let (playing, admin_key_file) = match first {
            Some(claim) => {
                let (server, admin) = node.lead(claim).await?;
                (server, admin)
            }
            None => (node.follow().await?, None),
        };
        let (grpc_addr, http_addr) = match &playing {
            Playing::Leader(s, _) => (s.grpc_addr, s.http_addr),
            Playing::Follower(f) => (f.grpc_addr, f.http_addr),
            Playing::Idle => unreachable!("the first start returns its error"),
        };
        // Each later role binds the same ports.
        node.config.server.grpc_listen = grpc_addr;
        node.config.server.http_listen = http_addr;
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(node.run(playing, stop_rx));
        Ok(Self {
            grpc_addr,
            http_addr,
            admin_key_file,
            role: role_rx,
            stop,
            task,
        })
    }

    /// The role this node has now.
    pub fn role(&self) -> Role {
        *self.role.borrow()
    }

    /// A receiver of the node's role, for waiting on a change.
    pub fn roles(&self) -> watch::Receiver<Role> {
        self.role.clone()
    }

    /// Stops the role being played (gracefully, up to the stop grace) and the loop;
    /// a leader gives its claim up.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

impl Node {
    fn node(&self) -> &str {
        self.election.node()
    }

    /// Starts the server on `claim`'s store and says where it serves.
    async fn lead(&mut self, claim: Claim) -> Result<(Playing, Option<PathBuf>), StartError> {
        let mut config = self.config.server.clone();
        config.store = Some(claim.store.clone());
        let server = RunningServer::start(config).await?;
        let tls = self.config.server.tls.is_some();
        let host = host_for_address(&self.config.advertise_host);
        let grpc = format!("{host}:{}", server.grpc_addr.port());
        let http = format!("{host}:{}", server.http_addr.port());
        let advertise = claim.advertise.clone();
        let said = {
            let (grpc, http) = (grpc.clone(), http.clone());
            tokio::task::spawn_blocking(move || advertise(&grpc, &http, tls)).await
        };
        match said {
            Ok(Ok(())) => {}
            // The loop hears of a lost claim on its own channel.
            Ok(Err(e)) => {
                tracing::warn!(node = %self.node(), error = %e, "cannot say where this leader serves")
            }
            Err(e) => tracing::warn!(node = %self.node(), error = %e, "cannot say where this leader serves"),
        }
        tracing::info!(node = %self.node(), epoch = claim.epoch, role = "leader", grpc = %grpc, http = %http,
            "this node leads: it holds the database's writer lease");
        self.role.send_replace(Role::Leader);
        let admin = server.admin_key_file.clone();
        Ok((Playing::Leader(server, claim), admin))
    }

    async fn follow(&mut self) -> Result<Playing, StartError> {
        let s = &self.config.server;
        let mut config = FollowerConfig::new(self.node().to_string(), self.election.clone());
        config.grpc_listen = s.grpc_listen;
        config.http_listen = s.http_listen;
        config.auth = s.auth;
        config.insecure = s.insecure;
        config.net = s.net;
        config.tls = s.tls.clone();
        config.peer_ca = self.config.peer_ca.clone();
        // A fixed port only: with port 0 no earlier run can have advertised it.
        config.advertise_grpc = (s.grpc_listen.port() != 0).then(|| {
            format!(
                "{}:{}",
                host_for_address(&self.config.advertise_host),
                s.grpc_listen.port()
            )
        });
        config.hook_body_bytes = s.triggers.max_body_bytes;
        config.http_extension = s.http_extension.clone();
        config.http_open_extension = s.http_open_extension.clone();
        config.refresh = self.config.claim_every.min(crate::follower::DEFAULT_REFRESH);
        let follower = RunningFollower::start(config).await?;
        tracing::info!(node = %self.node(), role = "follower", "this node follows: another node leads");
        self.role.send_replace(Role::Follower);
        Ok(Playing::Follower(follower))
    }

    async fn run(mut self, mut playing: Playing, mut stop: watch::Receiver<bool>) {
        loop {
            playing = match playing {
                Playing::Leader(server, claim) => {
                    let mut lost = claim.lost.clone();
                    let lost_to = tokio::select! {
                        to = lost.wait_for(|l| l.is_some()) => {
                            Some(to.map(|l| l.clone().unwrap_or_default()).unwrap_or_default())
                        }
                        _ = stop.wait_for(|s| *s).map(|_| ()) => None,
                    };
                    let epoch = claim.epoch;
                    let Some(to) = lost_to else {
                        self.stop_server(server).await;
                        return;
                    };
                    tracing::warn!(node = %self.node(), epoch, to = %to, role = "follower",
                        "this node lost the database's writer lease; its server stops and it follows");
                    self.stop_server(server).await;
                    drop(claim);
                    self.follow_or_idle().await
                }
                other => {
                    tokio::select! {
                        _ = tokio::time::sleep(self.config.claim_every) => {}
                        _ = stop.wait_for(|s| *s).map(|_| ()) => {
                            if let Playing::Follower(f) = other {
                                f.shutdown(self.config.stop_grace).await;
                            }
                            return;
                        }
                    }
                    match self.election.try_claim().await {
                        Ok(Some(claim)) => {
                            tracing::info!(node = %self.node(), epoch = claim.epoch,
                                "claimed the database's writer lease; starting the server");
                            if let Playing::Follower(f) = other {
                                f.shutdown(self.config.stop_grace).await;
                            }
                            match self.lead(claim).await {
                                Ok((leading, _)) => leading,
                                Err(e) => {
                                    // The claim was dropped with the failed start: released.
                                    tracing::error!(node = %self.node(), error = %e,
                                        "cannot start the server after claiming the lease; following");
                                    self.follow_or_idle().await
                                }
                            }
                        }
                        Ok(None) => match other {
                            Playing::Idle => self.follow_or_idle().await,
                            other => other,
                        },
                        Err(e) => {
                            tracing::warn!(node = %self.node(), error = %e, "cannot try to claim the database's writer lease");
                            match other {
                                Playing::Idle => self.follow_or_idle().await,
                                other => other,
                            }
                        }
                    }
                }
            };
        }
    }

    async fn follow_or_idle(&mut self) -> Playing {
        match self.follow().await {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(node = %self.node(), error = %e, "cannot start following; trying again");
                Playing::Idle
            }
        }
    }

    /// Stops a server, waiting at most the stop grace for its in-flight calls (a
    /// long poll or a watch ends at once on shutdown).
    async fn stop_server(&self, server: RunningServer) {
        if tokio::time::timeout(self.config.stop_grace, server.shutdown())
            .await
            .is_err()
        {
            tracing::warn!(node = %self.node(), "the server did not stop within the grace; going on");
        }
    }
}

/// `host` as it goes before `:port` (an IPv6 address in brackets).
pub fn host_for_address(host: &str) -> String {
    if host.parse::<std::net::Ipv6Addr>().is_ok() {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}
