//! Output contracts: what a step promises to hand the steps after it.
//!
//! A step may declare `output`, a JSON Schema (draft 2020-12) for the structured
//! `result` object its completion carries, and `requiredArtifacts`, file names or
//! globs that the completion's artifacts must match. Both are checked when the
//! definition loads (a bad schema is a definition error naming its JSON path) and
//! enforced by the server at completion: a result that does not match is refused
//! with each violation as a JSON path and a reason ([`Violation`]).
//!
//! The compiled forms (the schema's validator, the glob set) are built once per
//! definition and kept beside it, inside the shared `Arc<WorkflowDef>` (the store
//! interns definitions by content), so a completion never compiles anything.
//!
//! Bounds: a schema is at most [`MAX_OUTPUT_SCHEMA_BYTES`] of JSON; patterns use the
//! `regex` engine (linear time; no look-around), and `$ref`s are never fetched, so
//! validation costs time bounded by the sizes of schema and result. A refusal lists
//! at most [`MAX_VIOLATIONS`] violations, each cut short.

use std::sync::{Arc, OnceLock};

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};
use jsonschema::paths::LocationSegment;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::ids;

/// Largest `output` schema, as compact JSON, in bytes.
pub const MAX_OUTPUT_SCHEMA_BYTES: usize = 64 * 1024;
/// Most `requiredArtifacts` patterns of a step.
pub const MAX_REQUIRED_ARTIFACTS: usize = 32;
/// Longest `requiredArtifacts` pattern, in bytes.
pub const MAX_ARTIFACT_PATTERN: usize = 512;
/// Most violations a refusal lists (and history records); the rest are counted.
pub const MAX_VIOLATIONS: usize = 8;
/// Longest JSON path of a violation, in bytes.
pub const MAX_VIOLATION_PATH: usize = 96;
/// Longest reason of a violation, in bytes.
pub const MAX_VIOLATION_REASON: usize = 120;
/// Most refusals recorded in history per step attempt. Later ones are still
/// refused, with the same answer, but write nothing, so a model that keeps calling
/// `complete_step` with a bad result cannot grow the run's history without bound.
pub const MAX_RECORDED_REFUSALS: u32 = 10;

/// The meta-schema a step's `output` is read as; a `$schema` naming another is refused.
pub const DRAFT_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";

/// One way a result (or its artifacts) breaks the step's contract. Its `Serialize`
/// is the API's view of it, in a `StepResultRefused` event (`{path, reason}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// Where: `result`, `result.items[2].name`, or `artifacts`.
    pub path: String,
    /// What is wrong, e.g. `value is not of type "integer"`.
    pub reason: String,
}

impl Violation {
    fn new(path: String, reason: String) -> Self {
        Self {
            path: cut(path, MAX_VIOLATION_PATH),
            reason: cut(reason, MAX_VIOLATION_REASON),
        }
    }
}

/// Why a result was refused: the violations listed (at most [`MAX_VIOLATIONS`]) and
/// how many there were in all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violations {
    /// The first violations, at most [`MAX_VIOLATIONS`].
    pub listed: Vec<Violation>,
    /// How many there were in all.
    pub total: usize,
}

impl Violations {
    /// Whether there were none.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// The refusal's message: what the `INVALID_ARGUMENT` answer says and what a
    /// worker hands back to its model. Within 2 KiB, the gRPC message bound.
    pub fn message(&self, step_id: &str) -> String {
        let mut text = format!(
            "result refused: {} violation{} of the output contract of step {}:",
            self.total,
            if self.total == 1 { "" } else { "s" },
            crate::error::echo(step_id),
        );
        for v in &self.listed {
            text.push_str(&format!("\n- {}: {}", v.path, v.reason));
        }
        if self.total > self.listed.len() {
            text.push_str(&format!("\n- … and {} more", self.total - self.listed.len()));
        }
        text.push_str("\nFix them and call complete_step again.");
        text
    }
}

/// `text` cut to at most `max` bytes at a character boundary, with `…` when cut.
fn cut(text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    crate::text::cut(&text, max.saturating_sub('…'.len_utf8()), "…")
}

type Compiled = Result<Arc<jsonschema::Validator>, String>;

/// A step's `output` schema: the JSON as written, and its validator, compiled on
/// first use and kept for the life of the definition. Compares, prints and
/// serializes as the schema JSON alone.
#[derive(Clone)]
pub struct OutputSchema {
    schema: Value,
    compiled: OnceLock<Compiled>,
}

impl OutputSchema {
    /// The schema as written (not yet checked: see [`OutputSchema::check`]).
    pub fn new(schema: Value) -> Self {
        Self {
            schema,
            compiled: OnceLock::new(),
        }
    }

    /// The schema JSON.
    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// The schema as compact JSON text.
    pub fn to_json(&self) -> String {
        self.schema.to_string()
    }

    /// The validator, compiled once.
    fn validator(&self) -> &Compiled {
        self.compiled.get_or_init(|| compile(&self.schema))
    }

    /// Checks the schema itself; the error is `JSON path: problem`, the path starting
    /// at `at` (`steps[0].output`).
    pub fn check(&self, at: &str) -> Result<(), String> {
        let bytes = self.schema.to_string().len();
        if bytes > MAX_OUTPUT_SCHEMA_BYTES {
            return Err(format!(
                "{at}: the schema is {bytes} bytes, more than the limit of {MAX_OUTPUT_SCHEMA_BYTES}"
            ));
        }
        match &self.schema {
            Value::Object(map) => {
                if let Some(s) = map.get("$schema")
                    && s.as_str().map(|s| s.trim_end_matches('#')) != Some(DRAFT_2020_12)
                {
                    return Err(format!(
                        "{at}.$schema: only draft 2020-12 ({DRAFT_2020_12}) is supported"
                    ));
                }
                if map.get("type").is_some_and(|t| t != "object") {
                    return Err(format!(
                        "{at}.type: a step's result is a JSON object, so the schema's type must be \"object\""
                    ));
                }
            }
            Value::Bool(_) => {}
            _ => return Err(format!("{at}: a JSON Schema must be an object or a boolean")),
        }
        match self.validator() {
            Ok(_) => Ok(()),
            Err(e) => Err(format!("{at}{e}")),
        }
    }

    /// Checks `result` against the schema; at most [`MAX_VIOLATIONS`] are listed,
    /// all are counted. `Err` when the schema does not compile (a stored definition
    /// this build cannot read as the one that stored it did).
    pub fn violations(
        &self,
        result: &Value,
        into: &mut Vec<Violation>,
        total: &mut usize,
    ) -> Result<(), String> {
        let validator = self.validator().as_ref().map_err(|e| format!("output{e}"))?;
        for error in validator.iter_errors(result) {
            *total += 1;
            if into.len() < MAX_VIOLATIONS {
                let path = instance_path("result", error.instance_path().segments());
                into.push(Violation::new(path, error.masked().to_string()));
            }
        }
        Ok(())
    }
}

/// Compiles a schema as draft 2020-12, offline, with linear-time patterns and
/// formats checked. The error starts with the JSON path inside the schema
/// (`.properties.n.type: ...`, or `: ...` for the schema as a whole).
fn compile(schema: &Value) -> Compiled {
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .offline()
        .should_validate_formats(true)
        .with_pattern_options(
            jsonschema::PatternOptions::regex()
                .size_limit(1 << 20)
                .dfa_size_limit(1 << 20),
        )
        .build(schema)
        .map(Arc::new)
        .map_err(|e| {
            let path = instance_path("", e.instance_path().segments());
            // The definition's own text, not a client's: quoted as it is, cut short.
            let reason = cut(e.to_string(), 256);
            if path.is_empty() {
                format!(": {reason}")
            } else if path.starts_with('[') {
                format!("{path}: {reason}")
            } else {
                format!(".{path}: {reason}")
            }
        })
}

/// A JSON Pointer's segments as this project writes paths: `result.items[2].name`;
/// a key that is not a plain name is quoted in brackets, cut short.
fn instance_path<'a>(root: &str, segments: impl Iterator<Item = LocationSegment<'a>>) -> String {
    let mut out = root.to_string();
    for segment in segments {
        if out.len() > MAX_VIOLATION_PATH {
            break;
        }
        match segment {
            LocationSegment::Index(i) => out.push_str(&format!("[{i}]")),
            LocationSegment::Property(key) if is_plain(&key) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(&key);
            }
            LocationSegment::Property(key) => out.push_str(&format!("[{}]", crate::error::echo(&key))),
        }
    }
    out
}

fn is_plain(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 64
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '$')
}

impl PartialEq for OutputSchema {
    fn eq(&self, other: &Self) -> bool {
        self.schema == other.schema
    }
}

impl std::fmt::Debug for OutputSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("OutputSchema").field(&self.schema).finish()
    }
}

impl Serialize for OutputSchema {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.schema.serialize(s)
    }
}

impl<'de> Deserialize<'de> for OutputSchema {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Value::deserialize(d).map(Self::new)
    }
}

/// A step's `requiredArtifacts`: glob patterns over the completion's artifact paths
/// (`*` stays within one directory, `**` crosses them), compiled once.
#[derive(Clone, Default)]
pub struct ArtifactPatterns {
    patterns: Vec<String>,
    compiled: OnceLock<Result<GlobSet, String>>,
}

impl ArtifactPatterns {
    /// Patterns as written; they are compiled when first used.
    pub fn new(patterns: Vec<String>) -> Self {
        Self {
            patterns,
            compiled: OnceLock::new(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// The patterns as written.
    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }

    fn glob(pattern: &str) -> Result<Glob, globset::Error> {
        GlobBuilder::new(pattern).literal_separator(true).build()
    }

    fn set(&self) -> &Result<GlobSet, String> {
        self.compiled.get_or_init(|| {
            let mut set = GlobSetBuilder::new();
            for p in &self.patterns {
                set.add(Self::glob(p).map_err(|e| e.to_string())?);
            }
            set.build().map_err(|e| e.to_string())
        })
    }

    /// Checks the patterns; the error is `JSON path: problem` under `at`
    /// (`steps[0].requiredArtifacts`).
    pub fn check(&self, at: &str) -> Result<(), String> {
        if self.patterns.len() > MAX_REQUIRED_ARTIFACTS {
            return Err(format!(
                "{at}: {} patterns, more than the limit of {MAX_REQUIRED_ARTIFACTS}",
                self.patterns.len()
            ));
        }
        for (i, p) in self.patterns.iter().enumerate() {
            let at = format!("{at}[{i}]");
            if p.trim().is_empty() {
                return Err(format!("{at}: must not be empty"));
            }
            if p.len() > MAX_ARTIFACT_PATTERN {
                return Err(format!(
                    "{at}: is {} bytes, more than the limit of {MAX_ARTIFACT_PATTERN}",
                    p.len()
                ));
            }
            if p.starts_with('/') || p.split('/').any(|part| part == "..") {
                return Err(format!(
                    "{at}: {} must be relative to the workspace, without `..`",
                    crate::error::echo(p)
                ));
            }
            Self::glob(p).map_err(|e| format!("{at}: {}", cut(e.to_string(), 256)))?;
        }
        self.set().as_ref().map(|_| ()).map_err(|e| format!("{at}: {e}"))
    }

    /// A violation for each pattern no artifact matches.
    fn violations(
        &self,
        artifacts: &[String],
        into: &mut Vec<Violation>,
        total: &mut usize,
    ) -> Result<(), String> {
        let set = self
            .set()
            .as_ref()
            .map_err(|e| format!("requiredArtifacts: {e}"))?;
        let mut matched = vec![false; self.patterns.len()];
        for artifact in artifacts {
            let artifact = artifact.strip_prefix("./").unwrap_or(artifact);
            for i in set.matches(artifact) {
                matched[i] = true;
            }
        }
        for (pattern, _) in self.patterns.iter().zip(matched).filter(|(_, m)| !m) {
            *total += 1;
            if into.len() < MAX_VIOLATIONS {
                into.push(Violation::new(
                    "artifacts".into(),
                    format!("no artifact matches the required {}", crate::error::echo(pattern)),
                ));
            }
        }
        Ok(())
    }
}

impl PartialEq for ArtifactPatterns {
    fn eq(&self, other: &Self) -> bool {
        self.patterns == other.patterns
    }
}

impl std::fmt::Debug for ArtifactPatterns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.patterns.fmt(f)
    }
}

impl Serialize for ArtifactPatterns {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.patterns.serialize(s)
    }
}

impl<'de> Deserialize<'de> for ArtifactPatterns {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::<String>::deserialize(d).map(Self::new)
    }
}

/// Checks a completion against a step's contract: `result` (`None`: the completion
/// carried none) against `output`, `artifacts` against `required`. Every violation
/// is counted, at most [`MAX_VIOLATIONS`] listed. `Err` only when a stored contract
/// no longer compiles.
pub fn check_completion(
    output: Option<&OutputSchema>,
    required: &ArtifactPatterns,
    result: Option<&Value>,
    artifacts: &[String],
) -> Result<Violations, String> {
    let mut listed = Vec::new();
    let mut total = 0;
    if let Some(schema) = output {
        match result {
            Some(result) => schema.violations(result, &mut listed, &mut total)?,
            None => {
                total += 1;
                listed.push(Violation::new(
                    "result".into(),
                    "missing: this step declares an output schema, so complete_step needs a `result` object"
                        .into(),
                ));
            }
        }
    }
    if !required.is_empty() {
        required.violations(artifacts, &mut listed, &mut total)?;
    }
    Ok(Violations { listed, total })
}

/// Whether `field` could name a result field in a template (`{{steps.a.result.FIELD}}`):
/// not empty, and within the bound on names.
pub fn is_field_name(field: &str) -> bool {
    !field.is_empty() && field.len() <= ids::MAX_NAME && !field.contains(['{', '}'])
}

/// The value at `path` (field names, or array indexes as digits) inside `value`.
pub fn lookup<'v>(value: &'v Value, path: &[&str]) -> Option<&'v Value> {
    path.iter().try_fold(value, |v, field| match v {
        Value::Object(map) => map.get(*field),
        Value::Array(items) => field.parse::<usize>().ok().and_then(|i| items.get(i)),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(v: Value) -> OutputSchema {
        OutputSchema::new(v)
    }

    #[test]
    fn a_good_schema_checks_and_validates_with_paths() {
        let s = schema(json!({
            "type": "object",
            "required": ["title", "count"],
            "properties": {
                "title": {"type": "string", "minLength": 1},
                "count": {"type": "integer", "minimum": 0},
                "items": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
                "mail": {"type": "string", "format": "email"}
            },
            "additionalProperties": false
        }));
        s.check("steps[0].output").unwrap();
        let v = check_completion(
            Some(&s),
            &ArtifactPatterns::default(),
            Some(&json!({"title": "", "count": "3", "items": [{"name": 1}], "mail": "nope", "x": 1})),
            &[],
        )
        .unwrap();
        let paths: Vec<&str> = v.listed.iter().map(|v| v.path.as_str()).collect();
        assert_eq!(v.total, v.listed.len());
        for want in [
            "result.title",
            "result.count",
            "result.items[0].name",
            "result.mail",
            "result",
        ] {
            assert!(paths.contains(&want), "{want} not in {:?}", v.listed);
        }
        let count = v.listed.iter().find(|v| v.path == "result.count").unwrap();
        assert_eq!(count.reason, r#"value is not of type "integer""#);
        let ok = check_completion(
            Some(&s),
            &ArtifactPatterns::default(),
            Some(&json!({"title": "t", "count": 3})),
            &[],
        )
        .unwrap();
        assert!(ok.is_empty(), "{ok:?}");
        let missing = check_completion(Some(&s), &ArtifactPatterns::default(), None, &[]).unwrap();
        assert_eq!(missing.listed[0].path, "result");
        assert!(missing.listed[0].reason.starts_with("missing"), "{missing:?}");
    }

    #[test]
    fn bad_schemas_name_the_json_path() {
        let e = schema(json!({"type": "object", "properties": {"n": {"type": "integr"}}}))
            .check("steps[1].output")
            .unwrap_err();
        assert!(e.starts_with("steps[1].output.properties.n.type: "), "{e}");
        let e = schema(json!({"type": "object", "properties": {"n": {"minimum": "zero"}}}))
            .check("steps[0].output")
            .unwrap_err();
        assert!(e.starts_with("steps[0].output.properties.n.minimum: "), "{e}");
        let e = schema(json!({"type": "array"}))
            .check("steps[0].output")
            .unwrap_err();
        assert!(
            e.starts_with("steps[0].output.type: a step's result is a JSON object"),
            "{e}"
        );
        let e = schema(json!(3)).check("steps[0].output").unwrap_err();
        assert_eq!(e, "steps[0].output: a JSON Schema must be an object or a boolean");
        let e = schema(json!({"$schema": "http://json-schema.org/draft-07/schema#"}))
            .check("steps[0].output")
            .unwrap_err();
        assert!(
            e.starts_with("steps[0].output.$schema: only draft 2020-12"),
            "{e}"
        );
        // Never fetched: a remote reference is a definition error, not a request.
        let e = schema(json!({"$ref": "https://example.com/schema.json"}))
            .check("steps[0].output")
            .unwrap_err();
        assert!(e.starts_with("steps[0].output"), "{e}");
        // Linear-time patterns only: look-around is refused at load.
        let e = schema(json!({"type": "object", "properties": {"s": {"pattern": "(?=a)a"}}}))
            .check("steps[0].output")
            .unwrap_err();
        assert!(e.starts_with("steps[0].output"), "{e}");
        let big = json!({"description": "x".repeat(MAX_OUTPUT_SCHEMA_BYTES)});
        let e = schema(big).check("steps[0].output").unwrap_err();
        assert!(e.contains("more than the limit of 65536"), "{e}");
    }

    #[test]
    fn required_artifacts_match_globs() {
        let req = ArtifactPatterns::new(vec!["report.md".into(), "out/*.json".into(), "**/*.png".into()]);
        req.check("steps[0].requiredArtifacts").unwrap();
        let v = check_completion(None, &req, None, &["./report.md".into(), "out/sub/a.json".into()]).unwrap();
        assert_eq!(v.total, 2, "{v:?}");
        assert_eq!(v.listed[0].path, "artifacts");
        assert_eq!(
            v.listed[0].reason,
            r#"no artifact matches the required "out/*.json""#
        );
        assert_eq!(
            v.listed[1].reason,
            r#"no artifact matches the required "**/*.png""#
        );
        let v = check_completion(
            None,
            &req,
            None,
            &["report.md".into(), "out/a.json".into(), "img/x/y.png".into()],
        )
        .unwrap();
        assert!(v.is_empty(), "{v:?}");
        let e = ArtifactPatterns::new(vec!["a".into(), "[z".into()])
            .check("steps[2].requiredArtifacts")
            .unwrap_err();
        assert!(e.starts_with("steps[2].requiredArtifacts[1]: "), "{e}");
        let e = ArtifactPatterns::new(vec!["../x".into()]).check("r").unwrap_err();
        assert!(e.starts_with("r[0]: \"../x\" must be relative"), "{e}");
    }

    #[test]
    fn refusals_are_bounded() {
        let props: serde_json::Map<String, Value> = (0..40)
            .map(|i| (format!("f{i}"), json!({"type": "integer"})))
            .collect();
        let s = schema(json!({"type": "object", "properties": props}));
        let bad: serde_json::Map<String, Value> = (0..40)
            .map(|i| (format!("f{i}"), json!("x".repeat(5000))))
            .collect();
        let v = check_completion(
            Some(&s),
            &ArtifactPatterns::default(),
            Some(&Value::Object(bad)),
            &[],
        )
        .unwrap();
        assert_eq!(v.total, 40);
        assert_eq!(v.listed.len(), MAX_VIOLATIONS);
        let message = v.message(&"s".repeat(200));
        assert!(message.len() <= 2048, "{}", message.len());
        assert!(message.contains("… and 32 more"), "{message}");
        assert!(!message.contains("xxxxx"), "the client's values are not echoed");
        let long_key = json!({"required": ["k".repeat(1000)]});
        let v = check_completion(
            Some(&schema(long_key)),
            &ArtifactPatterns::default(),
            Some(&json!({})),
            &[],
        )
        .unwrap();
        assert!(v.listed[0].reason.len() <= MAX_VIOLATION_REASON, "{:?}", v.listed);
    }

    #[test]
    fn lookup_finds_fields_and_indexes() {
        let v = json!({"a": {"b": [1, {"c": "x"}]}, "s": "text"});
        assert_eq!(lookup(&v, &["a", "b", "1", "c"]), Some(&json!("x")));
        assert_eq!(lookup(&v, &["a", "nope"]), None);
    }
}
