//! The tables, and their forward-only migrations.
//!
//! `railyard_schema` holds one row: the schema version, the number of migrations
//! applied. Opening applies the missing ones in order, in one transaction with the
//! version's update (PostgreSQL's DDL is transactional: a failed migration changes
//! nothing), and refuses a database whose version is newer than this build knows.
//!
//! Keys are columns whose primary key follows the redb backend's key order, so every
//! range read is an `ORDER BY` on the primary key. Text keys are `COLLATE "C"`: byte
//! order, as redb compares them, whatever the database's default collation. Values
//! are the versioned JSON records of `railyard_store::records`, as `bytea`: the bytes
//! redb stores, unchanged (a definition's key is the hash of its record's bytes).
//! Sequence numbers come from the writer: no `SERIAL` or sequences.

/// Migration `n` (from 1) brings a database from version `n - 1` to `n`. Never
/// edit one that has shipped: add the next.
pub(crate) const MIGRATIONS: &[&str] = &[
    V1,
    V2,
    LEADER_ADDRESSES,
    TOKEN_KEYS,
    CHECKPOINT_SEGMENTS,
    RUN_OUTPUT,
    RUN_TERMS,
    BATCHES,
    RUN_WORDS,
    STEP_CHECKPOINTS,
    WORKFLOWS,
];

/// The version [`RUN_WORDS`] brings: opening a database from before it adds the
/// terms of the runs it holds (`txn::backfill_terms`).
pub(crate) const RUN_WORDS_VERSION: i64 = 9;

/// The schema version this build reads and writes.
pub(crate) fn latest() -> i64 {
    MIGRATIONS.len() as i64
}

/// Creates the version table if it is missing (outside the migrating transaction,
/// so that reading the version never fails on a new database).
pub(crate) const CREATE_VERSION_TABLE: &str = "CREATE TABLE IF NOT EXISTS railyard_schema (
    id integer PRIMARY KEY CHECK (id = 1),
    version bigint NOT NULL
)";

pub(crate) const READ_VERSION: &str = "SELECT version FROM railyard_schema WHERE id = 1";

pub(crate) const WRITE_VERSION: &str = "INSERT INTO railyard_schema (id, version) VALUES (1, $1)
    ON CONFLICT (id) DO UPDATE SET version = excluded.version";

/// The `default` namespace, as the redb backend makes it: an empty record.
pub(crate) const DEFAULT_NAMESPACE: &str = "INSERT INTO namespaces (name, record) VALUES ($1, $2)
    ON CONFLICT (name) DO NOTHING";

/// Version 3: the leader's addresses on the writer lease's row (`crate::lease`): where the
/// holder serves gRPC and HTTP (`host:port`, empty until it says) and whether they
/// speak TLS, so the nodes standing by can forward to it.
const LEADER_ADDRESSES: &str = r#"
ALTER TABLE writer_lease
    ADD COLUMN grpc_addr text NOT NULL DEFAULT '',
    ADD COLUMN http_addr text NOT NULL DEFAULT '',
    ADD COLUMN tls boolean NOT NULL DEFAULT false;
"#;

/// Version 4: the task-token signing keys (`crate::keys`), shared by every server on the
/// database: `n` orders them (the highest signs, every one verifies), `kid` is the
/// id a token names (`k<n>`). The first is made by the opening that creates the
/// table; a rotation adds the next.
const TOKEN_KEYS: &str = r#"
CREATE TABLE token_keys (
    n bigint PRIMARY KEY,
    kid text COLLATE "C" NOT NULL UNIQUE,
    secret bytea NOT NULL,
    added_at timestamptz NOT NULL DEFAULT now()
);
"#;

/// Version 9: each step's checkpoint, kept after its step ends as its transcript
/// (`crate::checkpoints`): the head and first segment by (run, step index), the other
/// segments by (run, step index, seq), as `checkpoints` and `checkpoint_segments`
/// are by run (which keep the checkpoint an older release was writing).
const STEP_CHECKPOINTS: &str = r#"
CREATE TABLE step_checkpoints (
    ns text COLLATE "C" NOT NULL,
    run_id text COLLATE "C" NOT NULL,
    step bigint NOT NULL,
    bytes bytea NOT NULL,
    len bigint,
    digest bytea,
    segments integer NOT NULL DEFAULT 1,
    merged integer NOT NULL DEFAULT 1,
    PRIMARY KEY (ns, run_id, step)
);
CREATE TABLE step_checkpoint_segments (
    ns text COLLATE "C" NOT NULL,
    run_id text COLLATE "C" NOT NULL,
    step bigint NOT NULL,
    seq integer NOT NULL,
    bytes bytea NOT NULL,
    PRIMARY KEY (ns, run_id, step, seq)
);
"#;

/// Version 5: checkpoints that grow by appended segments: `checkpoints` keeps the first segment
/// (a checkpoint written whole, as before) and gains the head (the whole's length,
/// its digest, its segment count, how many from the first are compacted; a row from before has none: one segment, its
/// length that of its bytes, its digest derived from them); segment `seq` (from 2)
/// is a row of `checkpoint_segments`.
const CHECKPOINT_SEGMENTS: &str = r#"
ALTER TABLE checkpoints
    ADD COLUMN len bigint,
    ADD COLUMN digest bytea,
    ADD COLUMN segments integer NOT NULL DEFAULT 1,
    ADD COLUMN merged integer NOT NULL DEFAULT 1;
CREATE TABLE checkpoint_segments (
    ns text COLLATE "C" NOT NULL,
    run_id text COLLATE "C" NOT NULL,
    seq integer NOT NULL,
    bytes bytea NOT NULL,
    PRIMARY KEY (ns, run_id, seq)
);
"#;

/// Version 2: the writer lease (`crate::lease`): one row, the node writing to the
/// database, its epoch (one more per claim) and when its lease expires, in database
/// time. The row is made by the first claim.
const V2: &str = r#"
CREATE TABLE writer_lease (
    id integer PRIMARY KEY CHECK (id = 1),
    node text NOT NULL,
    epoch bigint NOT NULL,
    expires_at timestamptz NOT NULL
);
"#;

/// Version 1: the tables of redb's layout 3, one table per redb table except `runs`,
/// which redb keys by (namespace, run id, slot) and is here three tables (state row,
/// events, checkpoint).
const V1: &str = r#"
CREATE TABLE runs (
    ns text COLLATE "C" NOT NULL,
    run_id text COLLATE "C" NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (ns, run_id)
);
CREATE TABLE events (
    ns text COLLATE "C" NOT NULL,
    run_id text COLLATE "C" NOT NULL,
    event_id bigint NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (ns, run_id, event_id)
);
CREATE TABLE checkpoints (
    ns text COLLATE "C" NOT NULL,
    run_id text COLLATE "C" NOT NULL,
    bytes bytea NOT NULL,
    PRIMARY KEY (ns, run_id)
);
CREATE TABLE open_runs (
    ns text COLLATE "C" NOT NULL,
    run_id text COLLATE "C" NOT NULL,
    PRIMARY KEY (ns, run_id)
);
CREATE TABLE tasks (
    ns text COLLATE "C" NOT NULL,
    queue text COLLATE "C" NOT NULL,
    seq bigint NOT NULL,
    run_id text NOT NULL,
    PRIMARY KEY (ns, queue, seq)
);
CREATE TABLE timers (
    due_ms bigint NOT NULL,
    seq bigint NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (due_ms, seq)
);
CREATE TABLE idempotency (
    ns text COLLATE "C" NOT NULL,
    key text COLLATE "C" NOT NULL,
    run_id text NOT NULL,
    PRIMARY KEY (ns, key)
);
CREATE TABLE runs_by_start (
    ns text COLLATE "C" NOT NULL,
    start_ms bigint NOT NULL,
    run_id text COLLATE "C" NOT NULL,
    PRIMARY KEY (ns, start_ms, run_id)
);
CREATE TABLE runs_by_close (
    ns text COLLATE "C" NOT NULL,
    close_ms bigint NOT NULL,
    run_id text COLLATE "C" NOT NULL,
    PRIMARY KEY (ns, close_ms, run_id)
);
CREATE TABLE children (
    ns text COLLATE "C" NOT NULL,
    parent_id text COLLATE "C" NOT NULL,
    child_id text COLLATE "C" NOT NULL,
    PRIMARY KEY (ns, parent_id, child_id)
);
CREATE TABLE namespaces (
    name text COLLATE "C" NOT NULL PRIMARY KEY,
    record bytea NOT NULL
);
CREATE TABLE definitions (
    workflow_id text COLLATE "C" NOT NULL,
    version text COLLATE "C" NOT NULL,
    hash text COLLATE "C" NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (workflow_id, version, hash)
);
CREATE TABLE schedules (
    ns text COLLATE "C" NOT NULL,
    schedule_id text COLLATE "C" NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (ns, schedule_id)
);
CREATE TABLE api_keys (
    key_id text COLLATE "C" NOT NULL PRIMARY KEY,
    record bytea NOT NULL
);
CREATE TABLE triggers (
    ns text COLLATE "C" NOT NULL,
    trigger_id text COLLATE "C" NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (ns, trigger_id)
);
CREATE TABLE hook_deliveries (
    ns text COLLATE "C" NOT NULL,
    trigger_id text COLLATE "C" NOT NULL,
    delivery_id text COLLATE "C" NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (ns, trigger_id, delivery_id)
);
CREATE TABLE hook_delivery_times (
    received_ms bigint NOT NULL,
    ns text COLLATE "C" NOT NULL,
    trigger_id text COLLATE "C" NOT NULL,
    delivery_id text COLLATE "C" NOT NULL,
    PRIMARY KEY (received_ms, ns, trigger_id, delivery_id)
);
CREATE TABLE trigger_keys (
    ns text COLLATE "C" NOT NULL,
    trigger_id text COLLATE "C" NOT NULL,
    key text COLLATE "C" NOT NULL,
    run_id text NOT NULL,
    PRIMARY KEY (ns, trigger_id, key)
);
CREATE TABLE trigger_queue (
    ns text COLLATE "C" NOT NULL,
    trigger_id text COLLATE "C" NOT NULL,
    key text COLLATE "C" NOT NULL,
    seq bigint NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (ns, trigger_id, key, seq)
);
CREATE TABLE trigger_runs (
    ns text COLLATE "C" NOT NULL,
    run_id text COLLATE "C" NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (ns, run_id)
);
"#;

/// Live output (`crate::output`), apart from the history: `run_output` holds each
/// run's chunks by offset, `run_output_heads` each run's head (next offset, the
/// bytes its caps count) with the time of its last write, indexed for the
/// retention purge.
const RUN_OUTPUT: &str = r#"
CREATE TABLE run_output (
    ns text COLLATE "C" NOT NULL,
    run_id text COLLATE "C" NOT NULL,
    "offset" bigint NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (ns, run_id, "offset")
);
CREATE TABLE run_output_heads (
    ns text COLLATE "C" NOT NULL,
    run_id text COLLATE "C" NOT NULL,
    last_ms bigint NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (ns, run_id)
);
CREATE INDEX run_output_heads_by_last ON run_output_heads (last_ms, ns, run_id);
"#;

/// The index terms of runs (`railyard_model::query::index_terms`: `Status=<name>`,
/// `WorkflowId=<id>`), ordered by start time under each term, so that a status- or
/// workflow-filtered listing reads only the runs under its term. The runs already
/// stored get theirs here, from their records (`status`, `workflow_id` and
/// `start_ms` of the run record, version 1); the writer keeps them after.
pub(crate) const RUN_TERMS: &str = r#"
CREATE TABLE run_terms (
    ns text COLLATE "C" NOT NULL,
    term text COLLATE "C" NOT NULL,
    start_ms bigint NOT NULL,
    run_id text COLLATE "C" NOT NULL,
    PRIMARY KEY (ns, term, start_ms, run_id)
);
INSERT INTO run_terms (ns, term, start_ms, run_id)
SELECT r.ns, t.term, (j.doc ->> 'start_ms')::bigint, r.run_id
FROM runs r
CROSS JOIN LATERAL (SELECT convert_from(r.record, 'UTF8')::jsonb AS doc) j
CROSS JOIN LATERAL (VALUES
    ('Status=' || (j.doc ->> 'status')),
    ('WorkflowId=' || COALESCE(j.doc ->> 'workflow_id', ''))
) AS t(term)
ON CONFLICT DO NOTHING;
"#;

/// Batch operations (`railyard_model::batch`): a batch's header by namespace and id,
/// the runs it matched at start by index, and the running batches (what the leader's
/// batch task reads).
const BATCHES: &str = r#"
CREATE TABLE batches (
    ns text COLLATE "C" NOT NULL,
    batch_id text COLLATE "C" NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (ns, batch_id)
);
CREATE TABLE batch_items (
    ns text COLLATE "C" NOT NULL,
    batch_id text COLLATE "C" NOT NULL,
    idx bigint NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (ns, batch_id, idx)
);
CREATE TABLE running_batches (
    ns text COLLATE "C" NOT NULL,
    batch_id text COLLATE "C" NOT NULL,
    PRIMARY KEY (ns, batch_id)
);
"#;

/// The words of runs' text search attributes join `run_terms` (`@name:x=<word>`:
/// `railyard_model::query::index_terms`; the goal is not indexed). No table
/// changes; the opening transaction that applies this adds every stored run's terms
/// (`txn::backfill_terms`, in Rust: the words are split as the model splits them),
/// committed with the version, so a crash leaves neither.
const RUN_WORDS: &str = "SELECT 1;";

/// Version 11: definitions registered from code (`History.RegisterWorkflow`), by
/// namespace and workflow id; each record names its `definitions` row.
const WORKFLOWS: &str = r#"
CREATE TABLE workflows (
    ns text COLLATE "C" NOT NULL,
    workflow_id text COLLATE "C" NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (ns, workflow_id)
);
"#;
