//! `railyard server` on PostgreSQL: one node of several on the database. It leads
//! when it holds the database's writer lease and follows (forwarding every call to
//! the leader) otherwise, changing role as the lease moves
//! ([`railyard_server::node`]); here is the lease as that loop sees it
//! ([`PgElection`]) and the process around it.

use std::io::Write;
use std::sync::Arc;

use anyhow::{Context, anyhow};
use railyard_server::follower::{Leader, LeaderFuture, LeaderSource};
use railyard_server::node::{Claim, ClaimFuture, Election, NodeConfig, RunningNode};
use railyard_store::Store;
use railyard_store_postgres::{PostgresOptions, Standby};

use super::{ServerSettings, StoreSetting};
use crate::serve::signals::Signals;

/// The database's writer lease, through a standby connection kept for the node's life.
struct PgElection {
    standby: Arc<Standby>,
}

impl LeaderSource for PgElection {
    fn leader(&self) -> LeaderFuture<'_> {
        let standby = self.standby.clone();
        Box::pin(async move {
            let info = tokio::task::spawn_blocking(move || standby.leader())
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?;
            Ok(info.map(|l| Leader {
                node: l.node,
                epoch: l.epoch,
                grpc: l.grpc,
                http: l.http,
                tls: l.tls,
            }))
        })
    }
}

impl Election for PgElection {
    fn node(&self) -> &str {
        self.standby.node()
    }

    fn try_claim(&self) -> ClaimFuture<'_> {
        let standby = self.standby.clone();
        Box::pin(async move {
            let claimed = tokio::task::spawn_blocking(move || standby.try_claim())
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?;
            Ok(claimed.map(|backend| {
                let backend = Arc::new(backend);
                let epoch = backend.lease_epoch();
                let lost = backend.lost();
                let said = backend.clone();
                Claim {
                    store: Store::new(backend.clone()).with_output(Arc::new(backend.output_store())),
                    epoch,
                    lost,
                    advertise: Arc::new(move |grpc: &str, http: &str, tls: bool| {
                        said.advertise(grpc, http, tls).map_err(|e| e.to_string())
                    }),
                }
            }))
        })
    }
}

/// Runs this node on the database at `url` until SIGTERM or Ctrl-C.
pub(super) async fn run(settings: &ServerSettings, url: &str) -> anyhow::Result<()> {
    let defaults = super::postgres_options(settings)?;
    let options = PostgresOptions {
        lease: settings.node_lease,
        lease_renew_every: settings.node_lease / 3,
        // A leader stopped (SIGSTOP) inside a write transaction holds the lease row's
        // lock: the database ends such a transaction once it has been idle as long as
        // the lease, so another node can claim the lease after it expires.
        idle_in_transaction_timeout: settings.node_lease.min(defaults.idle_in_transaction_timeout),
        ..defaults
    };
    let standby = {
        let url = url.to_string();
        tokio::task::spawn_blocking(move || Standby::connect(&url, &options))
            .await
            .context("opening the postgres store")??
    };
    let node_id = standby.node().to_string();
    let election = Arc::new(PgElection {
        standby: Arc::new(standby),
    });
    let config = NodeConfig {
        server: settings.config(),
        advertise_host: settings.advertised_host(),
        peer_ca: settings.peer_ca.clone(),
        claim_every: settings.node_lease / 3,
        stop_grace: settings.shutdown_grace,
    };
    let node = RunningNode::start(config, election).await.with_context(|| {
        format!(
            "cannot start the server (keys dir {}, store {})",
            settings.data_dir.display(),
            settings.store.shown()
        )
    })?;
    settings.log_built_in_demo();
    let mut signals = Signals::new()?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "railyard server listening grpc={} http={} data={} store={} workflows={} auth={} node={} role={}",
            node.grpc_addr,
            node.http_addr,
            settings.data_dir.display(),
            StoreSetting::shown(&settings.store),
            settings.workflows_label(),
            if settings.auth { "on" } else { "off" },
            node_id,
            node.role().as_str(),
        )?;
        out.flush()?;
        // Best effort: a reader that took the listening line and closed stdout must
        // not stop the server.
        let _ = writeln!(
            out,
            "web console: {}",
            crate::serve::console::url(node.http_addr, settings.tls.is_some())
        );
        let _ = out.flush();
    }
    let signal = signals.next().await?;
    tracing::info!(signal, "shutting down; send the signal again to stop at once");
    let grace = settings.shutdown_grace;
    tokio::select! {
        () = node.shutdown() => {
            tracing::info!("server stopped");
            Ok(())
        }
        again = signals.next() => {
            let signal = again?;
            Err(anyhow!("stopped at once on a second {signal}, before in-flight requests finished"))
        }
        () = tokio::time::sleep(grace + grace) => {
            Err(anyhow!("graceful shutdown took longer than {}s; stopped at once", grace.as_secs()))
        }
    }
}
