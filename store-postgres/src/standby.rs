//! A node standing by on a database another node writes to: it says who leads and
//! where (the writer lease's row, [`crate::lease`]), and claims the lease with the
//! same transaction as an open once the lease is free or expired.

use railyard_store::StorageError;

use crate::conn::{db_error, params};
use crate::lease::{LEADER, new_node_id};
use crate::{Connected, OpenError, PostgresBackend, PostgresOptions, claim, connect};

/// Who holds the database's writer lease, and where it serves.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaderInfo {
    /// The holder's node id.
    pub node: String,
    /// The epoch of its claim.
    pub epoch: i64,
    /// Its gRPC address (`host:port`); empty until it has said
    /// ([`PostgresBackend::advertise`]).
    pub grpc: String,
    /// Its HTTP address (`host:port`); empty until it has said.
    pub http: String,
    /// Whether its listeners speak TLS.
    pub tls: bool,
    /// When its lease expires unless renewed (UTC, the database's clock).
    pub until: String,
    /// In how many seconds that is.
    pub in_secs: f64,
}

/// A connection to a database whose writer lease another node holds (see
/// [`PostgresBackend::open_or_standby`]). It keeps its pool, so it can be asked again
/// and again, and claim as often as the lease comes free.
pub struct Standby {
    connected: Connected,
    node: String,
}

impl Standby {
    pub(crate) fn new(connected: Connected, node: String) -> Self {
        Self { connected, node }
    }

    /// A node on `url` that has claimed nothing yet, with a new node id: checks the
    /// options and the URL and makes the pool, connecting at the first question
    /// ([`Standby::try_claim`] migrates the tables as [`PostgresBackend::open`] does).
    pub fn connect(url: &str, options: &PostgresOptions) -> Result<Self, OpenError> {
        Ok(Self::new(connect(url, options)?, new_node_id()))
    }

    /// This node's id: the one it claims with.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The database's URL, its password replaced.
    pub fn shown_url(&self) -> &str {
        &self.connected.shown
    }

    /// Who leads: the holder of a lease that has not expired; `None` when the lease
    /// is free or expired (no node leads until one claims it). An error means the
    /// database did not answer.
    pub fn leader(&self) -> Result<Option<LeaderInfo>, StorageError> {
        let conn = self.connected.db.begin("BEGIN READ ONLY")?;
        let row = conn.query_opt(LEADER, params![])?;
        conn.commit()?;
        let Some(row) = row else {
            return Ok(None);
        };
        let get = |e| db_error(e);
        Ok(Some(LeaderInfo {
            node: row.try_get(0).map_err(get)?,
            epoch: row.try_get(1).map_err(get)?,
            grpc: row.try_get(2).map_err(get)?,
            http: row.try_get(3).map_err(get)?,
            tls: row.try_get(4).map_err(get)?,
            until: row.try_get(5).map_err(get)?,
            in_secs: row.try_get(6).map_err(get)?,
        }))
    }

    /// Claims the writer lease if it is free or expired (the same transaction as
    /// [`PostgresBackend::open`]: migrations included): the backend holding it, or
    /// `None` while another node holds it.
    pub fn try_claim(&self) -> Result<Option<PostgresBackend>, OpenError> {
        match claim(&self.connected, self.node.clone()) {
            Ok(backend) => Ok(Some(backend)),
            Err(OpenError::Held { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}
