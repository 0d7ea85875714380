//! The writer's tables as the redo log sees them: [`LoggedTx`] opens a table of the
//! write transaction as a [`LoggedTable`], which writes through to redb and records
//! each put and delete (table name, key and value bytes, exactly as redb stores them)
//! into the batch's [`WriteSet`]. The log holds that write set; recovery applies it
//! again through [`replay`], which finds each table's key and value types in a
//! registry filled by every [`LoggedTx::open_table`] (the tables made at open all
//! are, before any replay). Nothing here knows a table: a new one is logged as it is
//! opened.

use std::borrow::Borrow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::{Bound, RangeBounds};
use std::sync::{OnceLock, RwLock};

use redb::{
    AccessGuard, Key, Range, ReadableTable, ReadableTableMetadata, Table, TableDefinition, TableStats, Value,
    WriteTransaction,
};

use crate::error::StorageError;
use crate::records::PutRow;

const PUT: u8 = 1;
const DELETE: u8 = 2;

/// The puts and deletes of one batch, encoded as the log holds them: per operation
/// a kind byte, the table name (u16 length), the key (u32 length) and, for a put,
/// the value (u32 length), lengths little-endian.
#[derive(Default)]
pub(crate) struct WriteSet {
    bytes: RefCell<Vec<u8>>,
    ops: std::cell::Cell<u64>,
}

impl WriteSet {
    fn record(&self, table: &str, key: &[u8], value: Option<&[u8]>) {
        let mut b = self.bytes.borrow_mut();
        b.push(if value.is_some() { PUT } else { DELETE });
        b.extend_from_slice(&(table.len() as u16).to_le_bytes());
        b.extend_from_slice(table.as_bytes());
        b.extend_from_slice(&(key.len() as u32).to_le_bytes());
        b.extend_from_slice(key);
        if let Some(v) = value {
            b.extend_from_slice(&(v.len() as u32).to_le_bytes());
            b.extend_from_slice(v);
        }
        self.ops.set(self.ops.get() + 1);
    }

    /// Whether the batch changed nothing.
    pub(crate) fn is_empty(&self) -> bool {
        self.ops.get() == 0
    }

    /// The encoded operations.
    pub(crate) fn take(&self) -> Vec<u8> {
        std::mem::take(&mut self.bytes.borrow_mut())
    }
}

/// One operation of a logged write set.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Op<'a> {
    pub table: &'a str,
    pub key: &'a [u8],
    /// `None` for a delete.
    pub value: Option<&'a [u8]>,
}

/// Decodes a write set; `None` if it is malformed (which a verified checksum rules
/// out but for a bug).
pub(crate) fn decode(mut b: &[u8]) -> Option<Vec<Op<'_>>> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        if b.len() < n {
            return None;
        }
        let (head, rest) = b.split_at(n);
        *b = rest;
        Some(head)
    }
    fn len32(b: &mut &[u8]) -> Option<usize> {
        Some(u32::from_le_bytes(take(b, 4)?.try_into().ok()?) as usize)
    }
    let mut ops = Vec::new();
    while !b.is_empty() {
        let kind = take(&mut b, 1)?[0];
        let n = u16::from_le_bytes(take(&mut b, 2)?.try_into().ok()?) as usize;
        let table = std::str::from_utf8(take(&mut b, n)?).ok()?;
        let n = len32(&mut b)?;
        let key = take(&mut b, n)?;
        let value = match kind {
            PUT => {
                let n = len32(&mut b)?;
                Some(take(&mut b, n)?)
            }
            DELETE => None,
            _ => return None,
        };
        ops.push(Op { table, key, value });
    }
    Some(ops)
}

type ReplayFn = fn(&WriteTransaction, &str, &[u8], Option<&[u8]>) -> Result<(), StorageError>;

fn registry() -> &'static RwLock<HashMap<String, ReplayFn>> {
    static TABLES: OnceLock<RwLock<HashMap<String, ReplayFn>>> = OnceLock::new();
    TABLES.get_or_init(Default::default)
}

fn register<K: Key + 'static, V: Value + 'static>(name: &str) {
    if registry()
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .contains_key(name)
    {
        return;
    }
    registry()
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .insert(name.to_string(), replay_typed::<K, V>);
}

fn replay_typed<K: Key + 'static, V: Value + 'static>(
    tx: &WriteTransaction,
    name: &str,
    key: &[u8],
    value: Option<&[u8]>,
) -> Result<(), StorageError> {
    let mut t = tx.open_table(TableDefinition::<K, V>::new(name))?;
    match value {
        Some(v) => {
            t.insert(K::from_bytes(key), V::from_bytes(v))?;
        }
        None => {
            t.remove(K::from_bytes(key))?;
        }
    }
    Ok(())
}

/// Whether replay knows the table `name`.
#[cfg(test)]
pub(crate) fn known(name: &str) -> bool {
    registry()
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .contains_key(name)
}

/// Applies one logged operation to `tx`, with the types its table was opened with.
pub(crate) fn replay(tx: &WriteTransaction, op: &Op<'_>) -> Result<(), StorageError> {
    let f = registry()
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(op.table)
        .copied();
    let Some(f) = f else {
        return Err(StorageError::Corrupt {
            what: "redo log",
            source: format!(
                "the log writes table {:?}, which this build does not know",
                op.table
            )
            .into(),
        });
    };
    f(tx, op.table, op.key, op.value)
}

/// The write transaction, opening its tables as [`LoggedTable`]s.
#[derive(Clone, Copy)]
pub(crate) struct LoggedTx<'t> {
    tx: &'t WriteTransaction,
    log: &'t WriteSet,
}

impl<'t> LoggedTx<'t> {
    pub(crate) fn new(tx: &'t WriteTransaction, log: &'t WriteSet) -> Self {
        Self { tx, log }
    }

    /// Opens (or creates) the table `def`, its writes recorded in the write set.
    pub(crate) fn open_table<K: Key + 'static, V: Value + 'static>(
        &self,
        def: TableDefinition<K, V>,
    ) -> Result<LoggedTable<'t, K, V>, redb::TableError> {
        use redb::TableHandle;
        register::<K, V>(def.name());
        Ok(LoggedTable {
            name: def.name().to_string(),
            table: self.tx.open_table(def)?,
            log: self.log,
        })
    }
}

/// A table of the write transaction whose puts and deletes are logged; it reads as
/// redb's own table does.
pub(crate) struct LoggedTable<'t, K: Key + 'static, V: Value + 'static> {
    name: String,
    table: Table<'t, K, V>,
    log: &'t WriteSet,
}

impl<K: Key + 'static, V: Value + 'static> LoggedTable<'_, K, V> {
    /// Puts `value` at `key`.
    pub(crate) fn insert<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> Result<(), redb::StorageError> {
        let (key, value) = (key.borrow(), value.borrow());
        self.table.insert(key, value)?;
        self.log.record(
            &self.name,
            K::as_bytes(key).as_ref(),
            Some(V::as_bytes(value).as_ref()),
        );
        Ok(())
    }

    /// Deletes the row at `key`, if there is one.
    pub(crate) fn remove<'k>(&mut self, key: impl Borrow<K::SelfType<'k>>) -> Result<(), redb::StorageError> {
        let key = key.borrow();
        if self.table.remove(key)?.is_some() {
            self.log.record(&self.name, K::as_bytes(key).as_ref(), None);
        }
        Ok(())
    }

    /// Deletes every row in `range` for which `keep` is false.
    pub(crate) fn retain_in<'a, KR>(
        &mut self,
        range: impl RangeBounds<KR> + 'a,
        mut keep: impl for<'f> FnMut(K::SelfType<'f>, V::SelfType<'f>) -> bool,
    ) -> Result<(), redb::StorageError>
    where
        KR: Borrow<K::SelfType<'a>> + 'a,
    {
        let mut gone = Vec::new();
        for row in self.table.range(range)? {
            let (k, v) = row?;
            let bytes = K::as_bytes(&k.value()).as_ref().to_vec();
            if !keep(k.value(), v.value()) {
                gone.push(bytes);
            }
        }
        for key in gone {
            self.table.remove(K::from_bytes(&key))?;
            self.log.record(&self.name, &key, None);
        }
        Ok(())
    }
}

impl<K: Key + 'static, V: Value + 'static> PutRow<K, V> for LoggedTable<'_, K, V> {
    fn put<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> Result<(), redb::StorageError> {
        self.insert(key, value)
    }
}

impl<K: Key + 'static, V: Value + 'static> ReadableTableMetadata for LoggedTable<'_, K, V> {
    fn stats(&self) -> Result<TableStats, redb::StorageError> {
        self.table.stats()
    }

    fn len(&self) -> Result<u64, redb::StorageError> {
        self.table.len()
    }
}

impl<K: Key + 'static, V: Value + 'static> ReadableTable<K, V> for LoggedTable<'_, K, V> {
    fn get<'a>(
        &self,
        key: impl Borrow<K::SelfType<'a>>,
    ) -> Result<Option<AccessGuard<'_, V>>, redb::StorageError> {
        self.table.get(key)
    }

    fn range<'a, KR>(&self, range: impl RangeBounds<KR> + 'a) -> Result<Range<'_, K, V>, redb::StorageError>
    where
        KR: Borrow<K::SelfType<'a>> + 'a,
    {
        self.table.range(range)
    }

    fn first(&self) -> Result<Option<(AccessGuard<'_, K>, AccessGuard<'_, V>)>, redb::StorageError> {
        self.table.first()
    }

    fn last(&self) -> Result<Option<(AccessGuard<'_, K>, AccessGuard<'_, V>)>, redb::StorageError> {
        self.table.last()
    }

    fn lower_bound<'a>(
        &self,
        bound: Bound<impl Borrow<K::SelfType<'a>>>,
    ) -> Result<redb::Cursor<'_, K, V>, redb::StorageError> {
        self.table.lower_bound(bound)
    }

    fn upper_bound<'a>(
        &self,
        bound: Bound<impl Borrow<K::SelfType<'a>>>,
    ) -> Result<redb::Cursor<'_, K, V>, redb::StorageError> {
        self.table.upper_bound(bound)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_set_decodes_to_its_operations() {
        let ws = WriteSet::default();
        assert!(ws.is_empty());
        ws.record("runs", b"k1", Some(b"v1"));
        ws.record("tasks", b"", None);
        ws.record("t", b"k", Some(b""));
        let bytes = ws.take();
        let ops = decode(&bytes).unwrap();
        assert_eq!(
            ops,
            [
                Op {
                    table: "runs",
                    key: b"k1",
                    value: Some(b"v1")
                },
                Op {
                    table: "tasks",
                    key: b"",
                    value: None
                },
                Op {
                    table: "t",
                    key: b"k",
                    value: Some(b"")
                },
            ]
        );
        assert!(decode(&bytes[..bytes.len() - 1]).is_none());
        assert!(decode(&[9, 0, 0]).is_none());
    }
}
