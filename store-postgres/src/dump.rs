//! The PostgreSQL backend's side of a dump (`railyard_store::dump`): every table
//! read a page at a time from one `REPEATABLE READ` transaction
//! ([`PostgresReader`], which claims no writer lease, so it reads beside a running
//! server), and rows written into a [`PostgresBackend`] with one `INSERT ... SELECT
//! FROM unnest(...)` per table and batch, in the backend's fenced write transaction.
//!
//! The statements are made from the dump's table list ([`TABLES`]), whose entries
//! name this backend's tables and columns: a table added there (and in a migration)
//! needs nothing here.

use std::sync::OnceLock;

use railyard_store::StorageError;
use railyard_store::dump::{
    Column, DumpError, DumpSource, DumpTarget, Part, Row, TABLES, Table, Value, ValueKind,
};

use crate::conn::{Db, Param, params};
use crate::txn::col;
use crate::{OpenError, PostgresBackend, PostgresOptions, connect, schema};

/// Rows one page of an export reads, at most.
const PAGE_ROWS: usize = 1000;
/// Value bytes one page reads, at most (a larger row is a page alone).
const PAGE_BYTES: usize = 8 << 20;

/// The statements of one table.
struct TableSql {
    table: &'static Table,
    /// The first page, in key order.
    first: &'static str,
    /// The page after the key given as parameters.
    next: &'static str,
    /// Writes rows given as one array per column, each over a row of the same key.
    upsert: &'static str,
    /// Whether the table holds a row (for namespaces: besides `default`).
    any: &'static str,
    delete: &'static str,
}

/// Made once per process from [`TABLES`]; the driver takes `&'static str`.
fn statements() -> &'static [TableSql] {
    static SQL: OnceLock<Vec<TableSql>> = OnceLock::new();
    SQL.get_or_init(|| TABLES.iter().map(table_sql).collect())
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

fn table_sql(t: &'static Table) -> TableSql {
    let name = t.name;
    let keys: Vec<&str> = t.key.iter().map(|(c, _)| *c).collect();
    let order = keys.join(", ");
    let (value, kind) = t.value;
    let mut cols = keys.clone();
    if kind != ValueKind::None {
        cols.push(value);
    }
    let cols = cols.join(", ");
    let after = (1..=keys.len())
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ");
    // A checkpoint leaves as its whole bytes: the first segment and the appended
    // ones, in order (`reads.rs`); it comes back as one segment, whose digest a
    // reader derives from its bytes (an appending worker then resends it whole once).
    let source = if name == "checkpoints" {
        "(SELECT c.ns, c.run_id, c.bytes || COALESCE((SELECT string_agg(s.bytes, ''::bytea ORDER BY s.seq) \
         FROM checkpoint_segments s WHERE s.ns = c.ns AND s.run_id = c.run_id AND c.segments > 1), ''::bytea) \
         AS bytes FROM checkpoints c) checkpoints"
            .to_string()
    } else if name == "step_checkpoints" {
        "(SELECT c.ns, c.run_id, c.step, c.bytes || COALESCE((SELECT string_agg(s.bytes, ''::bytea ORDER BY s.seq) \
         FROM step_checkpoint_segments s WHERE s.ns = c.ns AND s.run_id = c.run_id AND s.step = c.step \
         AND c.segments > 1), ''::bytea) AS bytes FROM step_checkpoints c) step_checkpoints"
            .to_string()
    } else {
        name.to_string()
    };
    let page = |filter: &str| match kind {
        // A page of at most PAGE_BYTES of values, and at least one row.
        ValueKind::Bytes => format!(
            "SELECT {cols} FROM (SELECT {cols}, sum(octet_length({value})) OVER (ORDER BY {order}) AS upto \
             FROM {source} {filter} ORDER BY {order} LIMIT {PAGE_ROWS}) page \
             WHERE upto - octet_length({value}) < {PAGE_BYTES} ORDER BY {order}"
        ),
        _ => format!("SELECT {cols} FROM {source} {filter} ORDER BY {order} LIMIT {PAGE_ROWS}"),
    };
    let mut arrays: Vec<String> = t
        .key
        .iter()
        .enumerate()
        .map(|(i, (_, c))| {
            let ty = match c {
                Column::Text => "text",
                Column::Int => "bigint",
            };
            format!("${}::{ty}[]", i + 1)
        })
        .collect();
    let conflict = match kind {
        ValueKind::None => "DO NOTHING".to_string(),
        ValueKind::Text => {
            arrays.push(format!("${}::text[]", keys.len() + 1));
            format!("DO UPDATE SET {value} = excluded.{value}")
        }
        ValueKind::Bytes => {
            arrays.push(format!("${}::bytea[]", keys.len() + 1));
            format!("DO UPDATE SET {value} = excluded.{value}")
        }
    };
    let besides = if name == "namespaces" {
        format!(
            " WHERE name <> '{}'",
            railyard_model::namespace::DEFAULT_NAMESPACE
        )
    } else {
        String::new()
    };
    TableSql {
        table: t,
        first: leak(page("")),
        next: leak(page(&format!("WHERE ({order}) > ({after})"))),
        upsert: leak(format!(
            "INSERT INTO {name} ({cols}) SELECT * FROM unnest({}) ON CONFLICT ({order}) {conflict}",
            arrays.join(", ")
        )),
        any: leak(format!("SELECT EXISTS (SELECT 1 FROM {name}{besides})")),
        delete: leak(if name == "checkpoints" {
            "WITH segments AS (DELETE FROM checkpoint_segments) DELETE FROM checkpoints".to_string()
        } else if name == "step_checkpoints" {
            "WITH segments AS (DELETE FROM step_checkpoint_segments) DELETE FROM step_checkpoints".to_string()
        } else {
            format!("DELETE FROM {name}")
        }),
    }
}

/// A row of `t` from a query's columns (the key's, then the value's).
fn to_row(t: &'static Table, r: &tokio_postgres::Row) -> Result<Row, StorageError> {
    let mut key = Vec::with_capacity(t.key.len());
    for (i, (_, c)) in t.key.iter().enumerate() {
        key.push(match c {
            Column::Text => Part::Text(col(r, i)?),
            Column::Int => Part::Int(col(r, i)?),
        });
    }
    let v = t.key.len();
    let value = match t.value.1 {
        ValueKind::None => Value::None,
        ValueKind::Text => Value::Text(col(r, v)?),
        ValueKind::Bytes => Value::Bytes(col(r, v)?),
    };
    Ok(Row { table: t, key, value })
}

/// A key as the parameters of a `next` page.
fn key_params(key: &[Part]) -> Vec<Param> {
    key.iter()
        .map(|p| match p {
            Part::Text(s) => Box::new(s.clone()) as Param,
            Part::Int(n) => Box::new(*n) as Param,
        })
        .collect()
}

/// A PostgreSQL database opened for export: no migration, no writer lease.
pub struct PostgresReader {
    db: Db,
    version: i64,
}

impl PostgresReader {
    /// Connects to `url` and checks that it holds Railyard's tables at the schema
    /// version this build writes (an older schema is migrated by starting a server
    /// on it, not by an export).
    pub fn open(url: &str, options: &PostgresOptions) -> Result<Self, OpenError> {
        let crate::Connected { db, shown, .. } = connect(url, options)?;
        let init = |problem: String| OpenError::Init {
            url: shown.clone(),
            problem,
        };
        let conn = db
            .begin("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .map_err(|e| OpenError::Connect {
                url: shown.clone(),
                problem: e.to_string(),
            })?;
        let has = conn
            .query_opt("SELECT to_regclass('railyard_schema') IS NOT NULL", params![])
            .and_then(|r| r.map(|r| col::<bool>(&r, 0)).transpose())
            .map_err(|e| init(e.to_string()))?;
        if has != Some(true) {
            return Err(init("no Railyard tables there: nothing to export".into()));
        }
        let version = conn
            .query_opt(schema::READ_VERSION, params![])
            .and_then(|r| r.map(|r| col::<i64>(&r, 0)).transpose())
            .map_err(|e| init(e.to_string()))?
            .unwrap_or(0);
        conn.rollback();
        let known = schema::latest();
        if version > known {
            return Err(OpenError::Schema {
                url: shown,
                found: version,
                known,
            });
        }
        if version < known {
            return Err(init(format!(
                "schema version {version}, this build exports version {known}; start `railyard server` of \
                 this version on it once (which migrates it), then export"
            )));
        }
        Ok(Self { db, version })
    }
}

impl DumpSource for PostgresReader {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    fn layout(&self) -> u64 {
        u64::try_from(self.version).unwrap_or_default()
    }

    fn rows(&self, visit: &mut dyn FnMut(Row) -> Result<(), DumpError>) -> Result<(), DumpError> {
        let conn = self
            .db
            .begin("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")?;
        for sql in statements() {
            let mut last: Option<Vec<Part>> = None;
            loop {
                let rows = match &last {
                    None => conn.query(sql.first, params![])?,
                    Some(key) => conn.query(sql.next, key_params(key))?,
                };
                let Some(end) = rows.last() else {
                    break;
                };
                last = Some(to_row(sql.table, end)?.key);
                for r in &rows {
                    visit(to_row(sql.table, r)?)?;
                }
            }
        }
        conn.rollback();
        Ok(())
    }
}

/// The arrays of an `upsert`: one per key column, then the value's.
fn columns(t: &Table, rows: &[&Row]) -> Result<Vec<Param>, StorageError> {
    let mut out: Vec<Param> = Vec::with_capacity(t.key.len() + 1);
    for (i, (_, c)) in t.key.iter().enumerate() {
        out.push(match c {
            Column::Text => Box::new(
                rows.iter()
                    .map(|r| r.text(i).map(str::to_string))
                    .collect::<Result<Vec<String>, _>>()?,
            ),
            Column::Int => Box::new(rows.iter().map(|r| r.int(i)).collect::<Result<Vec<i64>, _>>()?),
        });
    }
    match t.value.1 {
        ValueKind::None => {}
        ValueKind::Text => out.push(Box::new(
            rows.iter()
                .map(|r| r.value_text().map(str::to_string))
                .collect::<Result<Vec<String>, _>>()?,
        )),
        ValueKind::Bytes => out.push(Box::new(
            rows.iter().map(|r| r.bytes().to_vec()).collect::<Vec<_>>(),
        )),
    }
    Ok(out)
}

impl DumpTarget for PostgresBackend {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    fn derived(&self, row: &Row) -> Result<Vec<Row>, StorageError> {
        if row.table.name != "runs" {
            return Ok(Vec::new());
        }
        let (start_ms, terms) = railyard_store::records::run_index_terms(row.bytes())?;
        railyard_store::dump::run_terms_rows(row.text(0)?, row.text(1)?, start_ms, terms)
    }

    fn is_empty(&self) -> Result<bool, StorageError> {
        let conn = self.begin("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")?;
        for sql in statements() {
            let any = conn
                .query_opt(sql.any, params![])?
                .map(|r| col::<bool>(&r, 0))
                .transpose()?;
            if any == Some(true) {
                return Ok(false);
            }
        }
        conn.rollback();
        Ok(true)
    }

    fn clear(&self) -> Result<(), StorageError> {
        self.transaction(&mut |tx| {
            for sql in statements() {
                tx.conn().execute(sql.delete, params![])?;
            }
            tx.conn().execute(
                schema::DEFAULT_NAMESPACE,
                params![
                    railyard_model::namespace::DEFAULT_NAMESPACE.to_string(),
                    b"{}".to_vec()
                ],
            )?;
            Ok(())
        })
    }

    fn load(&self, rows: &[Row]) -> Result<(), StorageError> {
        self.transaction(&mut |tx| {
            for sql in statements() {
                let of: Vec<&Row> = rows.iter().filter(|r| r.table.name == sql.table.name).collect();
                if !of.is_empty() {
                    tx.conn().execute(sql.upsert, columns(sql.table, &of)?)?;
                }
            }
            Ok(())
        })
    }
}
