//! The step journal's format (`docs/step-journal.md`), shared by every SDK: a
//! checkpoint of JSON lines, the header `{"journal":"railyard/1"}` and then one record
//! a line, told by its `k` (`run`, `state`, `spawn`; others are kept and skipped).
//!
//! Pure: [`Journal::read`] parses a task's checkpoint, [`Journal::record`] formats
//! a record and [`Journal::push`] adds it once written. [`crate::Step`] sends it.

use std::collections::HashMap;

use serde::Serialize;
use serde_json::Value;

/// The journal's first line, without its newline.
pub const HEADER: &str = r#"{"journal":"railyard/1"}"#;

/// The largest checkpoint the server stores (8 MiB).
pub const MAX_CHECKPOINT: usize = 8 * 1024 * 1024;

/// A value the journal refuses: nothing is written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The value is not JSON (serde_json refused it, or a float is not finite).
    #[error("journal entry {entry}: the value is not JSON: {reason}")]
    NotJson {
        /// The entry, as `run "name" #seq`, `state` or `spawn "name" #seq`.
        entry: String,
        /// Why.
        reason: String,
    },
    /// The record would make the checkpoint pass [`MAX_CHECKPOINT`].
    #[error(
        "journal entry {entry}: the checkpoint would be {size} bytes, over the {MAX_CHECKPOINT}-byte limit"
    )]
    TooLarge {
        /// The entry, as for [`RecordError::NotJson`].
        entry: String,
        /// The checkpoint's size with the record.
        size: usize,
    },
}

/// One entry the journal holds, as a record to write.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "k", rename_all = "lowercase")]
pub enum Record {
    /// `step.run(name)`'s `seq`-th call returned `value`.
    Run {
        /// The name given to `run`.
        name: String,
        /// The call's 0-based index among the step's `run` calls of `name`.
        seq: u64,
        /// What it returned.
        value: Value,
    },
    /// The step's state, as saved.
    State {
        /// The state.
        value: Value,
    },
    /// `step.spawn(name)`'s `seq`-th call started the children `run_ids`.
    Spawn {
        /// The name given to `spawn`.
        name: String,
        /// The call's 0-based index among the step's `spawn` calls of `name`.
        seq: u64,
        /// The children's run ids, in the order requested.
        run_ids: Vec<String>,
    },
    /// The `seq`-th wait of `name` ended with these outcomes:
    /// `{"children": [...], "stillRunning": [...]}` ([`outcomes_in`]).
    Outcomes {
        /// The name given to the wait.
        name: String,
        /// The call's 0-based index among the step's waits of `name`.
        seq: u64,
        /// The children's outcomes and those still running.
        value: Value,
    },
}

impl Record {
    /// How errors name it: `run "name" #seq`, `state`, `spawn "name" #seq`.
    pub fn entry(&self) -> String {
        match self {
            Self::Run { name, seq, .. } => format!("run {name:?} #{seq}"),
            Self::State { .. } => "state".into(),
            Self::Spawn { name, seq, .. } => format!("spawn {name:?} #{seq}"),
            Self::Outcomes { name, seq, .. } => format!("outcomes {name:?} #{seq}"),
        }
    }
}

/// A step's journal: the records read from its task's checkpoint and those written
/// since, as bytes (the checkpoint to send) and by name and seq.
#[derive(Debug, Clone, Default)]
pub struct Journal {
    /// The header and the valid records (empty: no journal yet).
    bytes: Vec<u8>,
    runs: HashMap<(String, u64), Value>,
    spawns: HashMap<(String, u64), Vec<String>>,
    outcomes: HashMap<(String, u64), Value>,
    state: Option<Value>,
    /// The checkpoint read was this journal byte for byte: writes may append to it.
    appendable: bool,
}

impl Journal {
    /// An empty journal (nothing written yet).
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads a task's checkpoint: the header, then records up to the first line that
    /// is not a complete JSON object. A checkpoint that does not start with the
    /// header (none, or another format) is an empty journal.
    pub fn read(checkpoint: &[u8]) -> Self {
        let mut j = Self::new();
        let mut lines = checkpoint.split_inclusive(|&b| b == b'\n');
        let header = [HEADER.as_bytes(), b"\n"].concat();
        if lines.next() != Some(header.as_slice()) {
            return j;
        }
        j.bytes = header;
        for line in lines {
            let Some(body) = line.strip_suffix(b"\n") else {
                break; // the last line was cut
            };
            let Ok(Value::Object(mut o)) = serde_json::from_slice::<Value>(body) else {
                break;
            };
            let name = o.get("name").and_then(Value::as_str).map(str::to_string);
            let seq = o.get("seq").and_then(Value::as_u64);
            match (o.get("k").and_then(Value::as_str), name, seq) {
                (Some("run"), Some(name), Some(seq)) => {
                    let value = o.remove("value").unwrap_or(Value::Null);
                    j.runs.insert((name, seq), value);
                }
                (Some("outcomes"), Some(name), Some(seq)) => {
                    let value = o.remove("value").unwrap_or(Value::Null);
                    j.outcomes.insert((name, seq), value);
                }
                (Some("state"), _, _) => j.state = Some(o.remove("value").unwrap_or(Value::Null)),
                (Some("spawn"), Some(name), Some(seq)) => {
                    let ids = o.get("run_ids").and_then(Value::as_array).map(|ids| {
                        ids.iter()
                            .filter_map(|id| id.as_str().map(str::to_string))
                            .collect()
                    });
                    if let Some(ids) = ids {
                        j.spawns.insert((name, seq), ids);
                    }
                }
                // A newer SDK's record (or one missing its fields): kept, skipped.
                _ => {}
            }
            j.bytes.extend_from_slice(line);
        }
        j.appendable = j.bytes.len() == checkpoint.len();
        j
    }

    /// The journal as a checkpoint: the header and every record (empty: nothing yet).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Whether the checkpoint it was read from is this journal exactly, so the next
    /// write may append to it; otherwise (no journal, a foreign checkpoint, an invalid
    /// tail) the next write sends the journal whole, replacing it.
    pub fn appendable(&self) -> bool {
        self.appendable
    }

    /// The value journaled for the `seq`-th `run` of `name`.
    pub fn run(&self, name: &str, seq: u64) -> Option<&Value> {
        self.runs.get(&(name.to_string(), seq))
    }

    /// The children the `seq`-th `spawn` of `name` started.
    pub fn spawned(&self, name: &str, seq: u64) -> Option<&[String]> {
        self.spawns.get(&(name.to_string(), seq)).map(Vec::as_slice)
    }

    /// The outcomes the `seq`-th wait of `name` ended with.
    pub fn outcomes(&self, name: &str, seq: u64) -> Option<&Value> {
        self.outcomes.get(&(name.to_string(), seq))
    }

    /// The last saved state.
    pub fn state(&self) -> Option<&Value> {
        self.state.as_ref()
    }

    /// Checks `value` and makes it a JSON value: refused when serde_json refuses it
    /// or it holds a float that is not finite (which serde_json would write as null).
    pub fn value<T: Serialize + ?Sized>(
        entry: impl FnOnce() -> String,
        value: &T,
    ) -> Result<Value, RecordError> {
        let not_json = |reason: String| RecordError::NotJson {
            entry: entry(),
            reason,
        };
        if let Err(e) = value.serialize(finite::Check) {
            return Err(not_json(e.0));
        }
        serde_json::to_value(value).map_err(|e| not_json(e.to_string()))
    }

    /// The checkpoint with `record` added (the header first when there is no journal
    /// yet), refused when it would pass [`MAX_CHECKPOINT`]. Nothing changes until
    /// [`Journal::push`].
    pub fn record(&self, record: &Record) -> Result<Vec<u8>, RecordError> {
        let line = serde_json::to_vec(record).map_err(|e| RecordError::NotJson {
            entry: record.entry(),
            reason: e.to_string(),
        })?;
        let mut bytes = Vec::with_capacity(self.bytes.len().max(HEADER.len() + 1) + line.len() + 1);
        if self.bytes.is_empty() {
            bytes.extend_from_slice(HEADER.as_bytes());
            bytes.push(b'\n');
        } else {
            bytes.extend_from_slice(&self.bytes);
        }
        bytes.extend_from_slice(&line);
        bytes.push(b'\n');
        if bytes.len() > MAX_CHECKPOINT {
            return Err(RecordError::TooLarge {
                entry: record.entry(),
                size: bytes.len(),
            });
        }
        Ok(bytes)
    }

    /// Takes `record` as written: `bytes` is what [`Journal::record`] made of it and
    /// the server acknowledged. The journal is appendable from then on.
    pub fn push(&mut self, record: Record, bytes: Vec<u8>) {
        match record {
            Record::Run { name, seq, value } => {
                self.runs.insert((name, seq), value);
            }
            Record::State { value } => self.state = Some(value),
            Record::Spawn { name, seq, run_ids } => {
                self.spawns.insert((name, seq), run_ids);
            }
            Record::Outcomes { name, seq, value } => {
                self.outcomes.insert((name, seq), value);
            }
        }
        self.bytes = bytes;
        self.appendable = true;
    }
}

/// The outcomes of the children `ids` in a task's resume messages: the first message
/// (a line of text, then a JSON object with `children` and `stillRunning`) that
/// covers every id, as `{"children": [...], "stillRunning": [...]}`, each in the order
/// of `ids`. None when no message covers them (the step was not resumed from that
/// wait).
pub fn outcomes_in(messages: &[String], ids: &[String]) -> Option<Value> {
    messages.iter().find_map(|message| {
        let body = message.split_once('\n')?.1;
        let Ok(Value::Object(value)) = serde_json::from_str::<Value>(body) else {
            return None;
        };
        let children = value.get("children")?.as_array()?;
        let running: Vec<&str> = value
            .get("stillRunning")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let child = |id: &str| {
            children
                .iter()
                .find(|c| c.get("childRunId").and_then(Value::as_str) == Some(id))
        };
        if !ids
            .iter()
            .all(|id| child(id).is_some() || running.contains(&id.as_str()))
        {
            return None;
        }
        let found: Vec<Value> = ids.iter().filter_map(|id| child(id).cloned()).collect();
        let still: Vec<Value> = ids
            .iter()
            .filter(|id| running.contains(&id.as_str()))
            .map(|id| Value::String(id.clone()))
            .collect();
        Some(serde_json::json!({ "children": found, "stillRunning": still }))
    })
}

/// A serializer that only looks for floats that are not finite.
mod finite {
    use serde::ser::{self, Serialize};

    /// The first non-finite float found.
    #[derive(Debug)]
    pub struct Found(pub String);

    impl std::fmt::Display for Found {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl std::error::Error for Found {}

    impl ser::Error for Found {
        fn custom<T: std::fmt::Display>(msg: T) -> Self {
            Self(msg.to_string())
        }
    }

    /// Walks a value; fails at a NaN or an infinity.
    pub struct Check;

    type R = Result<(), Found>;

    fn float(v: f64) -> R {
        if v.is_finite() {
            Ok(())
        } else {
            Err(Found(format!("{v} is not a finite number")))
        }
    }

    impl ser::Serializer for Check {
        type Ok = ();
        type Error = Found;
        type SerializeSeq = Self;
        type SerializeTuple = Self;
        type SerializeTupleStruct = Self;
        type SerializeTupleVariant = Self;
        type SerializeMap = Self;
        type SerializeStruct = Self;
        type SerializeStructVariant = Self;

        fn serialize_bool(self, _: bool) -> R {
            Ok(())
        }
        fn serialize_i8(self, _: i8) -> R {
            Ok(())
        }
        fn serialize_i16(self, _: i16) -> R {
            Ok(())
        }
        fn serialize_i32(self, _: i32) -> R {
            Ok(())
        }
        fn serialize_i64(self, _: i64) -> R {
            Ok(())
        }
        fn serialize_i128(self, _: i128) -> R {
            Ok(())
        }
        fn serialize_u8(self, _: u8) -> R {
            Ok(())
        }
        fn serialize_u16(self, _: u16) -> R {
            Ok(())
        }
        fn serialize_u32(self, _: u32) -> R {
            Ok(())
        }
        fn serialize_u64(self, _: u64) -> R {
            Ok(())
        }
        fn serialize_u128(self, _: u128) -> R {
            Ok(())
        }
        fn serialize_f32(self, v: f32) -> R {
            float(f64::from(v))
        }
        fn serialize_f64(self, v: f64) -> R {
            float(v)
        }
        fn serialize_char(self, _: char) -> R {
            Ok(())
        }
        fn serialize_str(self, _: &str) -> R {
            Ok(())
        }
        fn serialize_bytes(self, _: &[u8]) -> R {
            Ok(())
        }
        fn serialize_none(self) -> R {
            Ok(())
        }
        fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> R {
            v.serialize(self)
        }
        fn serialize_unit(self) -> R {
            Ok(())
        }
        fn serialize_unit_struct(self, _: &'static str) -> R {
            Ok(())
        }
        fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> R {
            Ok(())
        }
        fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, v: &T) -> R {
            v.serialize(self)
        }
        fn serialize_newtype_variant<T: Serialize + ?Sized>(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            v: &T,
        ) -> R {
            v.serialize(self)
        }
        fn serialize_seq(self, _: Option<usize>) -> Result<Self, Found> {
            Ok(self)
        }
        fn serialize_tuple(self, _: usize) -> Result<Self, Found> {
            Ok(self)
        }
        fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Self, Found> {
            Ok(self)
        }
        fn serialize_tuple_variant(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: usize,
        ) -> Result<Self, Found> {
            Ok(self)
        }
        fn serialize_map(self, _: Option<usize>) -> Result<Self, Found> {
            Ok(self)
        }
        fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self, Found> {
            Ok(self)
        }
        fn serialize_struct_variant(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: usize,
        ) -> Result<Self, Found> {
            Ok(self)
        }
    }

    macro_rules! elements {
        ($($trait:ident :: $method:ident),*) => {$(
            impl ser::$trait for Check {
                type Ok = ();
                type Error = Found;
                fn $method<T: Serialize + ?Sized>(&mut self, v: &T) -> R {
                    v.serialize(Check)
                }
                fn end(self) -> R {
                    Ok(())
                }
            }
        )*};
    }
    elements!(
        SerializeSeq::serialize_element,
        SerializeTuple::serialize_element,
        SerializeTupleStruct::serialize_field,
        SerializeTupleVariant::serialize_field
    );

    impl ser::SerializeMap for Check {
        type Ok = ();
        type Error = Found;
        fn serialize_key<T: Serialize + ?Sized>(&mut self, k: &T) -> R {
            k.serialize(Check)
        }
        fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> R {
            v.serialize(Check)
        }
        fn end(self) -> R {
            Ok(())
        }
    }

    impl ser::SerializeStruct for Check {
        type Ok = ();
        type Error = Found;
        fn serialize_field<T: Serialize + ?Sized>(&mut self, _: &'static str, v: &T) -> R {
            v.serialize(Check)
        }
        fn end(self) -> R {
            Ok(())
        }
    }

    impl ser::SerializeStructVariant for Check {
        type Ok = ();
        type Error = Found;
        fn serialize_field<T: Serialize + ?Sized>(&mut self, _: &'static str, v: &T) -> R {
            v.serialize(Check)
        }
        fn end(self) -> R {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use serde_json::json;

    use super::*;

    /// The journal both SDKs' tests read (`tests/journal/`), and what reading it gives.
    const SHARED: &str = include_str!("../../tests/journal/shared.jsonl");
    const SHARED_READ: &str = include_str!("../../tests/journal/shared.json");

    #[test]
    fn the_shared_journal_reads_as_the_other_sdks_read_it() {
        let j = Journal::read(SHARED.as_bytes());
        assert!(j.appendable(), "every line of the shared journal is valid");
        let want: Value = serde_json::from_str(SHARED_READ).unwrap();
        for r in want["runs"].as_array().unwrap() {
            let (name, seq) = (r[0].as_str().unwrap(), r[1].as_u64().unwrap());
            assert_eq!(j.run(name, seq), Some(&r[2]), "run {name} #{seq}");
        }
        assert_eq!(j.state(), Some(&want["state"]));
        for s in want["spawns"].as_array().unwrap() {
            let ids: Vec<String> = serde_json::from_value(s[2].clone()).unwrap();
            assert_eq!(
                j.spawned(s[0].as_str().unwrap(), s[1].as_u64().unwrap()),
                Some(ids.as_slice())
            );
        }
        let messages: Vec<String> = serde_json::from_value(want["resumeMessages"].clone()).unwrap();
        for o in want["outcomes"].as_array().unwrap() {
            let (name, seq) = (o[0].as_str().unwrap(), o[1].as_u64().unwrap());
            assert_eq!(j.outcomes(name, seq), Some(&o[2]), "outcomes {name} #{seq}");
            // The awaited ids, in their order, as the outcomes list them.
            let mut ids: Vec<String> = o[2]["children"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["childRunId"].as_str().unwrap().to_string())
                .collect();
            ids.extend(serde_json::from_value::<Vec<String>>(o[2]["stillRunning"].clone()).unwrap());
            let spawned = j.spawned(name, seq).unwrap();
            ids.sort_by_key(|id| spawned.iter().position(|s| s == id));
            assert_eq!(outcomes_in(&messages, &ids).as_ref(), Some(&o[2]));
        }
        assert_eq!(outcomes_in(&messages, &["nobody".to_string()]), None);
    }

    fn run(name: &str, seq: u64, value: Value) -> Record {
        Record::Run {
            name: name.into(),
            seq,
            value,
        }
    }

    fn write(j: &mut Journal, r: Record) {
        let bytes = j.record(&r).expect("a JSON record");
        j.push(r, bytes);
    }

    #[test]
    fn round_trip() {
        let mut j = Journal::new();
        assert!(j.bytes().is_empty());
        write(&mut j, run("fetch", 0, json!({"rows": [1, 2]})));
        write(&mut j, run("fetch", 1, json!("two")));
        write(
            &mut j,
            Record::State {
                value: json!({"page": 3}),
            },
        );
        write(
            &mut j,
            Record::Spawn {
                name: "kids".into(),
                seq: 0,
                run_ids: vec!["c1".into(), "c2".into()],
            },
        );
        let text = std::str::from_utf8(j.bytes()).expect("utf-8");
        assert_eq!(
            text,
            concat!(
                "{\"journal\":\"railyard/1\"}\n",
                "{\"k\":\"run\",\"name\":\"fetch\",\"seq\":0,\"value\":{\"rows\":[1,2]}}\n",
                "{\"k\":\"run\",\"name\":\"fetch\",\"seq\":1,\"value\":\"two\"}\n",
                "{\"k\":\"state\",\"value\":{\"page\":3}}\n",
                "{\"k\":\"spawn\",\"name\":\"kids\",\"seq\":0,\"run_ids\":[\"c1\",\"c2\"]}\n",
            )
        );
        let back = Journal::read(j.bytes());
        assert!(back.appendable());
        assert_eq!(back.bytes(), j.bytes());
        assert_eq!(back.run("fetch", 0), Some(&json!({"rows": [1, 2]})));
        assert_eq!(back.state(), Some(&json!({"page": 3})));
        assert_eq!(
            back.spawned("kids", 0),
            Some(&["c1".to_string(), "c2".to_string()][..])
        );
    }

    #[test]
    fn replays_by_name_and_seq() {
        let checkpoint = concat!(
            "{\"journal\":\"railyard/1\"}\n",
            "{\"k\":\"run\",\"name\":\"b\",\"seq\":0,\"value\":10}\n",
            "{\"k\":\"run\",\"name\":\"a\",\"seq\":0,\"value\":1}\n",
            "{\"k\":\"run\",\"name\":\"a\",\"seq\":1,\"value\":2}\n",
            "{\"k\":\"state\",\"value\":\"old\"}\n",
            "{\"k\":\"state\",\"value\":\"new\"}\n",
        );
        let j = Journal::read(checkpoint.as_bytes());
        assert_eq!(j.run("a", 0), Some(&json!(1)));
        assert_eq!(j.run("a", 1), Some(&json!(2)));
        assert_eq!(j.run("b", 0), Some(&json!(10)));
        assert_eq!(j.run("a", 2), None);
        assert_eq!(j.run("b", 1), None);
        assert_eq!(j.state(), Some(&json!("new")), "the last state wins");
    }

    #[test]
    fn an_unknown_kind_is_kept_and_skipped() {
        let checkpoint = concat!(
            "{\"journal\":\"railyard/1\"}\n",
            "{\"k\":\"timer\",\"name\":\"t\",\"seq\":0,\"at\":5}\n",
            "{\"k\":\"run\",\"name\":\"a\",\"seq\":0,\"value\":1}\n",
        );
        let mut j = Journal::read(checkpoint.as_bytes());
        assert!(j.appendable());
        assert_eq!(j.run("a", 0), Some(&json!(1)));
        assert_eq!(j.run("t", 0), None);
        write(&mut j, run("a", 1, json!(2)));
        let text = std::str::from_utf8(j.bytes()).expect("utf-8");
        assert!(text.starts_with(checkpoint), "the unknown record stays: {text}");
    }

    #[test]
    fn reading_stops_at_a_cut_or_invalid_line() {
        let whole = concat!(
            "{\"journal\":\"railyard/1\"}\n",
            "{\"k\":\"run\",\"name\":\"a\",\"seq\":0,\"value\":1}\n",
        );
        let cut = format!("{whole}{{\"k\":\"run\",\"name\":\"a\",\"seq\":1,\"val");
        let j = Journal::read(cut.as_bytes());
        assert_eq!(j.run("a", 0), Some(&json!(1)));
        assert_eq!(j.run("a", 1), None);
        assert_eq!(j.bytes(), whole.as_bytes(), "the valid prefix");
        assert!(!j.appendable(), "the next write replaces the cut tail");
        // A complete JSON line missing its newline is cut too.
        let j = Journal::read(format!("{whole}{{\"k\":\"state\",\"value\":1}}").as_bytes());
        assert_eq!((j.state(), j.bytes()), (None, whole.as_bytes()));
        // Nothing after an invalid line is read.
        let bad = format!("{whole}[1,2]\n{{\"k\":\"state\",\"value\":1}}\n");
        let j = Journal::read(bad.as_bytes());
        assert_eq!((j.state(), j.bytes()), (None, whole.as_bytes()));
    }

    #[test]
    fn a_foreign_checkpoint_is_an_empty_journal() {
        for foreign in [
            &b""[..],
            b"{\"role\":\"user\",\"content\":\"hi\"}\n",
            b"{\"journal\":\"railyard/2\"}\n",
            b"{\"journal\":\"railyard/1\"}", // the header without its newline
        ] {
            let mut j = Journal::read(foreign);
            assert!(j.bytes().is_empty() && !j.appendable(), "{foreign:?}");
            write(&mut j, run("a", 0, json!(1)));
            assert!(j.bytes().starts_with(b"{\"journal\":\"railyard/1\"}\n"));
        }
    }

    #[test]
    fn refuses_values_that_are_not_json() {
        let entry = || "run \"f\" #0".to_string();
        let nan = Journal::value(entry, &vec![1.0, f64::NAN]).unwrap_err();
        assert!(
            matches!(&nan, RecordError::NotJson { entry, .. } if entry == "run \"f\" #0"),
            "{nan}"
        );
        assert!(Journal::value(entry, &f32::INFINITY).is_err());
        let mut keyed = HashMap::new();
        keyed.insert((1, 2), "tuple keys are not JSON");
        let e = Journal::value(entry, &keyed).unwrap_err();
        assert!(e.to_string().contains("run \"f\" #0"), "{e}");
        assert_eq!(Journal::value(entry, &Some(1.5)), Ok(json!(1.5)));
        assert_eq!(Journal::value(entry, &None::<f64>), Ok(Value::Null));
    }

    #[test]
    fn refuses_a_record_past_the_limit() {
        let j = Journal::new();
        let big = "x".repeat(MAX_CHECKPOINT);
        let e = j.record(&Record::State { value: json!(big) }).unwrap_err();
        assert!(
            matches!(e, RecordError::TooLarge { ref entry, .. } if entry == "state"),
            "{e}"
        );
        assert!(j.bytes().is_empty(), "nothing written");
    }
}
