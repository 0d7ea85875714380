//! Workflow definitions, stored once in the `definitions` table and named by the
//! runs that use them, and the in-memory cache that spares decoding a run from
//! parsing its definition.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use redb::{Key, ReadableTable, Table, Value};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{Record, corrupt, decode_record, encode_record};
use crate::error::StorageError;
use railyard_model::agent::ModelRef;
use railyard_model::contract::{ArtifactPatterns, OutputSchema};
use railyard_model::mcp::McpServer;
use railyard_model::workflow::{
    ApprovalOptions, ApprovalTimeoutPolicy, RetryPolicy, StepDef, StuckDef, WaitOptions, WaitTimeoutPolicy,
    WorkflowDef,
};

/// The `definitions` table's key: (workflow id, version, content hash).
pub(crate) type DefinitionTableKey = (&'static str, &'static str, &'static str);

/// Which stored definition a run (and its `RunStarted` event) follows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DefinitionKey {
    /// The workflow's id.
    #[serde(default)]
    pub workflow_id: String,
    /// The workflow's version.
    #[serde(default)]
    pub version: String,
    /// Hex of the first 16 bytes of the SHA-256 of the stored record.
    pub hash: String,
}

/// A workflow definition as stored. Mirrors the file format field by field, so
/// the file format and the stored form can each change on their own.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct DefinitionRecord {
    #[serde(default = "super::v1")]
    v: u32,
    #[serde(default)]
    id: String,
    #[serde(default)]
    version: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    task_queue: Option<String>,
    /// Absent in older records (and when unset): no run budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_cost_usd: Option<f64>,
    /// Absent in older records (and when unset): none of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    principles: Option<PrinciplesRecord>,
    /// Absent in older records (and when unset): the agent's model, fallbacks and
    /// MCP servers come from the worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    provider: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    fallback_models: Vec<ModelRef>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    mcp_servers: BTreeMap<String, McpServer>,
    #[serde(default)]
    steps: Vec<StepDefRecord>,
}

/// A definition's own principles.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct PrinciplesRecord {
    #[serde(default)]
    text: String,
    /// `extend` or `replace`.
    #[serde(default)]
    mode: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct StepDefRecord {
    #[serde(default)]
    id: String,
    #[serde(default)]
    title: String,
    #[serde(default)]
    prompt: String,
    #[serde(default)]
    task_queue: Option<String>,
    #[serde(default)]
    allowed_tools: Vec<String>,
    #[serde(default)]
    max_turns: Option<u32>,
    #[serde(default)]
    timeout_seconds: Option<u32>,
    #[serde(default)]
    heartbeat_timeout_seconds: Option<u32>,
    #[serde(default)]
    retry: Option<RetryRecord>,
    #[serde(default)]
    require_confirmation: bool,
    /// The output contract's JSON Schema, as written (absent in older rows: none).
    /// Written only when set, so a definition without one keeps its content hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    output: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    required_artifacts: Vec<String>,
    /// Absent in older rows: no wait options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    wait: Option<WaitRecord>,
    /// Absent in older records (and when unset): no step budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u64>,
    /// Absent in older records (and when unset): the worker's defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stuck: Option<StuckRecord>,
    /// Absent in older records (and when unset): an approval waits with no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    approval: Option<ApprovalRecord>,
    /// Absent in older records (and when unset): the agent's model, fallbacks and
    /// MCP servers come from the worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    provider: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    fallback_models: Vec<ModelRef>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    mcp_servers: BTreeMap<String, McpServer>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ApprovalRecord {
    #[serde(default)]
    timeout_seconds: Option<u32>,
    /// `fail`, `approve` or `reject`; anything else reads as `fail`.
    #[serde(default)]
    on_timeout: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    feedback: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct WaitRecord {
    #[serde(default)]
    timeout_seconds: Option<u32>,
    /// `fail` or `resume`; anything else reads as `fail`.
    #[serde(default)]
    on_timeout: String,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct StuckRecord {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    repeated_calls: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    repeated_errors: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    no_progress_turns: Option<u32>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct RetryRecord {
    #[serde(default = "RetryRecord::initial")]
    initial_interval_seconds: f64,
    #[serde(default = "RetryRecord::coefficient")]
    backoff_coefficient: f64,
    #[serde(default = "RetryRecord::maximum")]
    maximum_interval_seconds: f64,
    #[serde(default = "RetryRecord::attempts")]
    maximum_attempts: u32,
    #[serde(default)]
    non_retryable_error_types: Vec<String>,
}

impl RetryRecord {
    fn initial() -> f64 {
        RetryPolicy::default().initial_interval_seconds
    }
    fn coefficient() -> f64 {
        RetryPolicy::default().backoff_coefficient
    }
    fn maximum() -> f64 {
        RetryPolicy::default().maximum_interval_seconds
    }
    fn attempts() -> u32 {
        RetryPolicy::default().maximum_attempts
    }
}

impl Record for DefinitionRecord {
    const WHAT: &'static str = "definition";
    const VERSION: u32 = 1;
    fn version(&self) -> u32 {
        self.v
    }
}

impl DefinitionRecord {
    fn from_model(d: &WorkflowDef) -> Self {
        Self {
            v: Self::VERSION,
            id: d.id.clone(),
            version: d.version.clone(),
            name: d.name.clone(),
            description: d.description.clone(),
            task_queue: d.task_queue.clone(),
            max_tokens: d.max_tokens,
            max_cost_usd: d.max_cost_usd,
            principles: d.principles.as_ref().map(|p| PrinciplesRecord {
                text: p.text.clone(),
                mode: p.mode.name().into(),
            }),
            model: d.model.clone(),
            provider: d.provider.clone(),
            fallback_models: d.fallback_models.clone(),
            mcp_servers: d.mcp_servers.clone(),
            steps: d
                .steps
                .iter()
                .map(|s| StepDefRecord {
                    id: s.id.clone(),
                    title: s.title.clone(),
                    prompt: s.prompt.clone(),
                    task_queue: s.task_queue.clone(),
                    allowed_tools: s.allowed_tools.clone(),
                    max_turns: s.max_turns,
                    timeout_seconds: s.timeout_seconds,
                    heartbeat_timeout_seconds: s.heartbeat_timeout_seconds,
                    retry: s.retry.as_ref().map(|r| RetryRecord {
                        initial_interval_seconds: r.initial_interval_seconds,
                        backoff_coefficient: r.backoff_coefficient,
                        maximum_interval_seconds: r.maximum_interval_seconds,
                        maximum_attempts: r.maximum_attempts,
                        non_retryable_error_types: r.non_retryable_error_types.clone(),
                    }),
                    require_confirmation: s.require_confirmation,
                    wait: s.wait.as_ref().map(|w| WaitRecord {
                        timeout_seconds: w.timeout_seconds,
                        on_timeout: match w.on_timeout {
                            WaitTimeoutPolicy::Fail => "fail",
                            WaitTimeoutPolicy::Resume => "resume",
                        }
                        .into(),
                    }),
                    output: s.output.as_ref().map(|o| o.schema().clone()),
                    required_artifacts: s.required_artifacts.patterns().to_vec(),
                    max_tokens: s.max_tokens,
                    stuck: s.stuck.map(|t| StuckRecord {
                        repeated_calls: t.repeated_calls,
                        repeated_errors: t.repeated_errors,
                        no_progress_turns: t.no_progress_turns,
                    }),
                    approval: s.approval.as_ref().map(|a| ApprovalRecord {
                        timeout_seconds: a.timeout_seconds,
                        on_timeout: a.on_timeout.name().into(),
                        feedback: a.feedback.clone(),
                    }),
                    model: s.model.clone(),
                    provider: s.provider.clone(),
                    fallback_models: s.fallback_models.clone(),
                    mcp_servers: s.mcp_servers.clone(),
                })
                .collect(),
        }
    }

    fn into_model(self) -> WorkflowDef {
        WorkflowDef {
            id: self.id,
            version: self.version,
            name: self.name,
            description: self.description,
            task_queue: self.task_queue,
            max_tokens: self.max_tokens,
            max_cost_usd: self.max_cost_usd,
            principles: self.principles.map(|p| railyard_model::principles::Layer {
                text: p.text,
                mode: if p.mode == "replace" {
                    railyard_model::principles::Mode::Replace
                } else {
                    railyard_model::principles::Mode::Extend
                },
            }),
            model: self.model,
            provider: self.provider,
            fallback_models: self.fallback_models,
            mcp_servers: self.mcp_servers,
            steps: self
                .steps
                .into_iter()
                .map(|s| StepDef {
                    id: s.id,
                    title: s.title,
                    prompt: s.prompt,
                    task_queue: s.task_queue,
                    allowed_tools: s.allowed_tools,
                    max_turns: s.max_turns,
                    timeout_seconds: s.timeout_seconds,
                    heartbeat_timeout_seconds: s.heartbeat_timeout_seconds,
                    retry: s.retry.map(|r| RetryPolicy {
                        initial_interval_seconds: r.initial_interval_seconds,
                        backoff_coefficient: r.backoff_coefficient,
                        maximum_interval_seconds: r.maximum_interval_seconds,
                        maximum_attempts: r.maximum_attempts,
                        non_retryable_error_types: r.non_retryable_error_types,
                    }),
                    require_confirmation: s.require_confirmation,
                    wait: s.wait.map(|w| WaitOptions {
                        timeout_seconds: w.timeout_seconds,
                        on_timeout: match w.on_timeout.as_str() {
                            "resume" => WaitTimeoutPolicy::Resume,
                            _ => WaitTimeoutPolicy::Fail,
                        },
                    }),
                    output: s.output.map(OutputSchema::new),
                    required_artifacts: ArtifactPatterns::new(s.required_artifacts),
                    max_tokens: s.max_tokens,
                    stuck: s.stuck.map(|t| StuckDef {
                        repeated_calls: t.repeated_calls,
                        repeated_errors: t.repeated_errors,
                        no_progress_turns: t.no_progress_turns,
                    }),
                    approval: s.approval.map(|a| ApprovalOptions {
                        timeout_seconds: a.timeout_seconds,
                        on_timeout: ApprovalTimeoutPolicy::parse(&a.on_timeout).unwrap_or_default(),
                        feedback: a.feedback,
                    }),
                    model: s.model,
                    provider: s.provider,
                    fallback_models: s.fallback_models,
                    mcp_servers: s.mcp_servers,
                })
                .collect(),
        }
    }
}

/// A definition ready to store: its key and its encoded record.
struct Encoded {
    key: DefinitionKey,
    bytes: Vec<u8>,
}

fn encode_definition(def: &WorkflowDef) -> Result<Encoded, StorageError> {
    let bytes = encode_record(&DefinitionRecord::from_model(def))?;
    let digest = Sha256::digest(&bytes);
    let hash = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    Ok(Encoded {
        key: DefinitionKey {
            workflow_id: def.id.clone(),
            version: def.version.clone(),
            hash,
        },
        bytes,
    })
}

/// The key `def` is stored under (its record's content hash), computed afresh.
pub(crate) fn encode_key(def: &WorkflowDef) -> Result<DefinitionKey, StorageError> {
    Ok(encode_definition(def)?.key)
}

/// Where decoding reads a `definitions` row the cache has not seen: a redb table, or
/// any backend's lookup through [`DefinitionLookup`].
pub trait DefinitionRows {
    /// The stored record of the definition `key` names, if there is one.
    fn definition_row(&self, key: &DefinitionKey) -> Result<Option<Vec<u8>>, StorageError>;
}

impl<T: ReadableTable<DefinitionTableKey, &'static [u8]>> DefinitionRows for T {
    fn definition_row(&self, key: &DefinitionKey) -> Result<Option<Vec<u8>>, StorageError> {
        let row = (key.workflow_id.as_str(), key.version.as_str(), key.hash.as_str());
        Ok(self.get(row)?.map(|v| v.value().to_vec()))
    }
}

/// A table rows can be put into: redb's own, or the redb backend's logged table
/// (which also writes each put to the redo log).
pub(crate) trait PutRow<K: Key + 'static, V: Value + 'static>: ReadableTable<K, V> {
    /// Puts `value` at `key`.
    fn put<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> Result<(), redb::StorageError>;
}

impl<K: Key + 'static, V: Value + 'static> PutRow<K, V> for Table<'_, K, V> {
    fn put<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> Result<(), redb::StorageError> {
        self.insert(key, value).map(drop)
    }
}

/// [`DefinitionRows`] read by a function: for a backend whose rows are not redb's.
pub struct DefinitionLookup<F>(pub F);

impl<F> DefinitionRows for DefinitionLookup<F>
where
    F: Fn(&DefinitionKey) -> Result<Option<Vec<u8>>, StorageError>,
{
    fn definition_row(&self, key: &DefinitionKey) -> Result<Option<Vec<u8>>, StorageError> {
        (self.0)(key)
    }
}

/// Definitions by content hash, shared by the readers and the writer. An entry is a
/// pure function of its hash, so the cache may run ahead of storage (a definition
/// of a batch that failed) without harm: whether a row must be written is always
/// asked of the transaction itself ([`Definitions::store`]). It holds every
/// definition a run of this process used: a handful of workflow versions.
#[derive(Default)]
pub struct Definitions {
    inner: Mutex<Cache>,
}

#[derive(Default)]
struct Cache {
    by_hash: HashMap<String, (Arc<WorkflowDef>, DefinitionKey)>,
    /// Address of a definition the process holds → its hash. The entry keeps its
    /// `Arc`, so the address cannot be reused by another definition.
    by_ptr: HashMap<usize, (Arc<WorkflowDef>, String)>,
}

impl Definitions {
    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        // The cache holds no invariant a panic could break half way.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The key a run of `def` names. Computed once per definition the process holds.
    pub fn key_of(&self, def: &Arc<WorkflowDef>) -> Result<DefinitionKey, StorageError> {
        let ptr = Arc::as_ptr(def) as usize;
        {
            let cache = self.cache();
            if let Some((_, hash)) = cache.by_ptr.get(&ptr)
                && let Some((_, key)) = cache.by_hash.get(hash)
            {
                return Ok(key.clone());
            }
        }
        Ok(self.remember(def, encode_definition(def)?.key))
    }

    fn remember(&self, def: &Arc<WorkflowDef>, key: DefinitionKey) -> DefinitionKey {
        let mut cache = self.cache();
        cache
            .by_hash
            .entry(key.hash.clone())
            .or_insert_with(|| (def.clone(), key.clone()));
        cache
            .by_ptr
            .insert(Arc::as_ptr(def) as usize, (def.clone(), key.hash.clone()));
        key
    }

    /// Writes `def`'s row unless the transaction already has it, and returns its key.
    /// Only a start with a definition new to storage touches the table.
    pub(crate) fn store(
        &self,
        def: &Arc<WorkflowDef>,
        table: &mut impl PutRow<DefinitionTableKey, &'static [u8]>,
    ) -> Result<DefinitionKey, StorageError> {
        let key = self.key_of(def)?;
        let row = (key.workflow_id.as_str(), key.version.as_str(), key.hash.as_str());
        if table.get(row)?.is_none() {
            let encoded = encode_definition(def)?;
            table.put(row, encoded.bytes.as_slice())?;
        }
        Ok(key)
    }

    /// The key of `def` and its encoded record, for a backend that writes the row
    /// itself when its `definitions` table lacks it (the redb backend uses
    /// [`Definitions::store`]).
    pub fn record_of(&self, def: &Arc<WorkflowDef>) -> Result<(DefinitionKey, Vec<u8>), StorageError> {
        let encoded = encode_definition(def)?;
        Ok((self.remember(def, encoded.key), encoded.bytes))
    }

    /// The definition `key` names: from the cache, or read from `table` once.
    pub fn resolve(
        &self,
        key: &DefinitionKey,
        table: &impl DefinitionRows,
    ) -> Result<Arc<WorkflowDef>, StorageError> {
        if let Some((def, _)) = self.cache().by_hash.get(&key.hash) {
            return Ok(def.clone());
        }
        let Some(bytes) = table.definition_row(key)? else {
            return Err(corrupt(
                "run",
                format!(
                    "its definition {} version {} ({}) is not stored",
                    key.workflow_id, key.version, key.hash
                ),
            ));
        };
        let record: DefinitionRecord = decode_record(&bytes)?;
        let def = Arc::new(record.into_model());
        let mut cache = self.cache();
        let def = cache
            .by_hash
            .entry(key.hash.clone())
            .or_insert_with(|| (def, key.clone()))
            .0
            .clone();
        cache
            .by_ptr
            .entry(Arc::as_ptr(&def) as usize)
            .or_insert_with(|| (def.clone(), key.hash.clone()));
        Ok(def)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use railyard_model::workflow::parse_definition;

    const DEF: &str = r#"{"id":"wf","version":"3","name":"W","description":"d","taskQueue":"q","steps":[
      {"id":"a","title":"A","prompt":"p","maxTurns":4,"timeoutSeconds":9,"heartbeatTimeoutSeconds":3,
       "allowedTools":["bash"],"requireConfirmation":true,
       "retry":{"maximumAttempts":5,"backoffCoefficient":1.5,"nonRetryableErrorTypes":["x"]}},
      {"id":"b","title":"B","prompt":"q","taskQueue":"other"}]}"#;

    #[test]
    fn a_definition_round_trips_and_its_hash_follows_its_content() {
        let def = parse_definition(DEF).unwrap();
        let enc = encode_definition(&def).unwrap();
        assert_eq!(enc.key.hash.len(), 32);
        assert_eq!(
            (enc.key.workflow_id.as_str(), enc.key.version.as_str()),
            ("wf", "3")
        );
        let back: DefinitionRecord = decode_record(&enc.bytes).unwrap();
        assert_eq!(back.into_model(), def);
        assert_eq!(encode_definition(&def).unwrap().key, enc.key, "stable");
        let mut other = def.clone();
        other.steps[1].prompt = "changed".into();
        assert_ne!(encode_definition(&other).unwrap().key.hash, enc.key.hash);
    }

    #[test]
    fn a_stored_definition_ignores_unknown_fields_and_defaults_missing_ones() {
        let row = br#"{"v":1,"id":"wf","version":"1","name":"W","future":{"x":1},
            "steps":[{"id":"a","title":"A","prompt":"p","retry":{"maximum_attempts":7},"new":true}]}"#;
        let def = decode_record::<DefinitionRecord>(row).unwrap().into_model();
        assert_eq!(def.description, "");
        assert_eq!(def.task_queue, None);
        let retry = def.steps[0].retry.clone().unwrap();
        assert_eq!(retry.maximum_attempts, 7);
        assert_eq!(retry.initial_interval_seconds, 1.0);
        assert_eq!(retry.maximum_interval_seconds, 60.0);
    }

    #[test]
    fn output_contracts_round_trip_and_older_rows_have_none() {
        let text = r#"{"id":"wf","version":"1","name":"W","steps":[
          {"id":"a","title":"A","prompt":"p","requiredArtifacts":["report.md","out/*.json"],
           "output":{"type":"object","required":["n"],"properties":{"n":{"type":"integer"}}}},
          {"id":"b","title":"B","prompt":"n is {{steps.a.result.n}}"}]}"#;
        let def = parse_definition(text).unwrap();
        let enc = encode_definition(&def).unwrap();
        let back = decode_record::<DefinitionRecord>(&enc.bytes)
            .unwrap()
            .into_model();
        assert_eq!(back, def);
        assert_eq!(
            back.steps[0].output.as_ref().unwrap().schema()["required"],
            serde_json::json!(["n"])
        );
        assert_eq!(
            back.steps[0].required_artifacts.patterns(),
            ["report.md", "out/*.json"]
        );
        // The stored contract works like the loaded one.
        let v = railyard_model::contract::check_completion(
            back.steps[0].output.as_ref(),
            &back.steps[0].required_artifacts,
            Some(&serde_json::json!({"n": "x"})),
            &["report.md".into()],
        )
        .unwrap();
        assert_eq!(v.total, 2, "{v:?}");

        // A row written before contracts existed: exactly what v1 wrote.
        let old = br#"{"v":1,"id":"wf","version":"1","name":"W","description":"","task_queue":null,
            "steps":[{"id":"a","title":"A","prompt":"p","task_queue":null,"allowed_tools":[],
            "max_turns":null,"timeout_seconds":null,"heartbeat_timeout_seconds":null,"retry":null,
            "require_confirmation":false}]}"#;
        let old = decode_record::<DefinitionRecord>(old).unwrap().into_model();
        assert_eq!(old.steps[0].output, None);
        assert!(old.steps[0].required_artifacts.is_empty());
        // A definition without a contract encodes as before, so its hash is unchanged.
        let plain = parse_definition(DEF).unwrap();
        let bytes = String::from_utf8(encode_definition(&plain).unwrap().bytes).unwrap();
        assert!(
            !bytes.contains("output") && !bytes.contains("required_artifacts"),
            "{bytes}"
        );
    }

    #[test]
    fn nested_schemas_are_stored_compact_and_a_pretty_row_reads_the_same() {
        // A definition with deeply nested output schemas grows many times over
        // when pretty-printed. Its row is compact JSON, no longer than the
        // definition's own compact JSON (what DescribeRun sends) and a little more.
        let mut schema = serde_json::json!({"type": "string"});
        for _ in 0..40 {
            schema =
                serde_json::json!({"type": "object", "properties": {"a": schema, "b": {"type": "integer"}}});
        }
        let text = serde_json::json!({"id": "wf", "version": "1", "name": "W", "steps": [
            {"id": "a", "title": "A", "prompt": "p", "output": schema}]})
        .to_string();
        let def = parse_definition(&text).unwrap();
        let enc = encode_definition(&def).unwrap();
        let row = String::from_utf8(enc.bytes.clone()).unwrap();
        assert!(!row.contains('\n') && !row.contains("  "), "{row}");
        assert!(row.len() <= text.len() + 512, "{} > {}", row.len(), text.len());

        // A row written pretty (by hand, or by any other writer) reads the same.
        let value: serde_json::Value = serde_json::from_slice(&enc.bytes).unwrap();
        let pretty = serde_json::to_vec_pretty(&value).unwrap();
        assert!(pretty.len() > 4 * enc.bytes.len());
        let back = decode_record::<DefinitionRecord>(&pretty).unwrap().into_model();
        assert_eq!(back, def);
    }

    #[test]
    fn keys_are_cached_per_definition_and_shared_by_content() {
        let defs = Definitions::default();
        let a = Arc::new(parse_definition(DEF).unwrap());
        let b = Arc::new(parse_definition(DEF).unwrap());
        let ka = defs.key_of(&a).unwrap();
        assert_eq!(defs.key_of(&b).unwrap(), ka);
        assert_eq!(defs.cache().by_hash.len(), 1);
        assert_eq!(defs.cache().by_ptr.len(), 2);
    }
}
