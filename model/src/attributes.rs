//! Search attributes: typed fields of a run's own (`customer = "acme"`, `priority = 2`)
//! that its namespace declares (name → [`ValueType`]), set at start or by a step,
//! recorded in history when they change, indexed and queryable by name
//! ([`crate::query`]). Values travel as text and are read here by the declared type,
//! so an undeclared or mistyped attribute is refused naming it. The spec is
//! `docs/search-and-queries.md`.

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, Utc};

use crate::Millis;
use crate::error::Rejection;

/// Most attributes a namespace declares (and so a run holds).
pub const MAX_DECLARED_ATTRIBUTES: usize = 32;
/// Most attributes a run holds (declared ones, and any kept from a removed
/// declaration).
pub const MAX_RUN_ATTRIBUTES: usize = 32;
/// Longest attribute name, in bytes.
pub const MAX_ATTRIBUTE_NAME_BYTES: usize = 64;
/// Longest value as text (a keyword, a text, a whole keyword list), in bytes.
pub const MAX_ATTRIBUTE_VALUE_BYTES: usize = 1024;
/// Most items of a keyword list.
pub const MAX_LIST_ITEMS: usize = 32;
/// Most distinct words of one text (an attribute's, or a run's goal) that are
/// indexed and matched: the first ones, in order; later words are not searchable.
pub const MAX_TEXT_WORDS: usize = 64;
/// Longest word of a text that is indexed and matched, in bytes (lowercased); a
/// longer word is skipped.
pub const MAX_WORD_BYTES: usize = 64;

/// The type of a field's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ValueType {
    /// An exact string (ids, names, statuses).
    Keyword,
    /// Free text: `=` matches when the value contains every word given (see
    /// [`text_words`]), as Temporal's Text.
    Text,
    /// A 64-bit integer.
    Int,
    /// A finite 64-bit float.
    Double,
    /// `true` or `false`.
    Bool,
    /// Unix milliseconds, written in a query as an RFC 3339 string.
    Datetime,
    /// Several keywords: `=` and `IN` match when any of them does.
    KeywordList,
}

impl ValueType {
    /// The name users write (`keyword`, `int`, ...).
    pub fn name(self) -> &'static str {
        match self {
            ValueType::Keyword => "keyword",
            ValueType::Text => "text",
            ValueType::Int => "int",
            ValueType::Double => "double",
            ValueType::Bool => "bool",
            ValueType::Datetime => "datetime",
            ValueType::KeywordList => "keyword_list",
        }
    }

    /// The type named `name` (case-insensitive).
    pub fn parse(name: &str) -> Option<Self> {
        const ALL: [ValueType; 7] = [
            ValueType::Keyword,
            ValueType::Text,
            ValueType::Int,
            ValueType::Double,
            ValueType::Bool,
            ValueType::Datetime,
            ValueType::KeywordList,
        ];
        ALL.into_iter().find(|t| t.name().eq_ignore_ascii_case(name))
    }
}

/// A typed value: a literal of a query, or a run's field.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A string (a keyword or a text).
    Str(String),
    /// An integer.
    Int(i64),
    /// A float.
    Double(f64),
    /// A boolean.
    Bool(bool),
    /// Unix milliseconds.
    Time(Millis),
    /// Several keywords.
    List(Vec<String>),
}

/// The search attributes a namespace declares: name → type.
pub type AttributeTypes = BTreeMap<String, ValueType>;

/// The query language's built-in fields (`crate::query::Builtin`), which no
/// attribute may be named; a test in `query` keeps the two lists equal.
pub const BUILTIN_FIELDS: [&str; 12] = [
    "RunId",
    "WorkflowId",
    "WorkflowVersion",
    "Status",
    "StartTime",
    "CloseTime",
    "ParentRunId",
    "TaskQueue",
    "Tokens",
    "Cost",
    "FailureType",
    "Goal",
];

/// Words of the query language an attribute may not be named.
const RESERVED: [&str; 13] = [
    "AND",
    "OR",
    "IN",
    "NOT",
    "IS",
    "NULL",
    "STARTS_WITH",
    "ORDER",
    "BY",
    "ASC",
    "DESC",
    "TRUE",
    "FALSE",
];

/// A search attribute's value, of one of the declarable types.
#[derive(Debug, Clone, PartialEq)]
pub enum AttributeValue {
    /// An exact string.
    Keyword(String),
    /// Free text.
    Text(String),
    /// An integer.
    Int(i64),
    /// Finite; `-0.0` is kept as `0.0`.
    Double(f64),
    /// A boolean.
    Bool(bool),
    /// Unix milliseconds.
    Datetime(Millis),
    /// Several keywords.
    KeywordList(Vec<String>),
}

/// A run's search attributes, by name.
pub type Attributes = BTreeMap<String, AttributeValue>;

/// One attribute's change, as history records it (`None`: unset).
#[derive(Debug, Clone, PartialEq)]
pub struct AttributeChange {
    /// The attribute.
    pub name: String,
    /// Its value before (none: unset).
    pub before: Option<AttributeValue>,
    /// Its value after (none: unset).
    pub after: Option<AttributeValue>,
}

/// The API's view (history): `{"name": .., "before": .., "after": ..}`, each value
/// as JSON ([`AttributeValue::to_json`]) or null.
impl serde::Serialize for AttributeChange {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("AttributeChange", 3)?;
        st.serialize_field("name", &self.name)?;
        st.serialize_field("before", &self.before.as_ref().map(AttributeValue::to_json))?;
        st.serialize_field("after", &self.after.as_ref().map(AttributeValue::to_json))?;
        st.end()
    }
}

impl AttributeValue {
    /// Its type.
    pub fn value_type(&self) -> ValueType {
        match self {
            Self::Keyword(_) => ValueType::Keyword,
            Self::Text(_) => ValueType::Text,
            Self::Int(_) => ValueType::Int,
            Self::Double(_) => ValueType::Double,
            Self::Bool(_) => ValueType::Bool,
            Self::Datetime(_) => ValueType::Datetime,
            Self::KeywordList(_) => ValueType::KeywordList,
        }
    }

    /// Reads `text` as a value of type `ty`: a keyword or text as is; an int, a
    /// double (finite), `true`/`false`, an RFC 3339 time; a keyword list as a JSON
    /// array of strings or comma-separated. Bounded (value bytes, list items).
    pub fn parse(ty: ValueType, text: &str) -> Result<Self, String> {
        if text.len() > MAX_ATTRIBUTE_VALUE_BYTES {
            return Err(format!(
                "value is {} bytes, longer than the limit of {MAX_ATTRIBUTE_VALUE_BYTES}",
                text.len()
            ));
        }
        let bad = |what: &str| format!("{} is not {what}", crate::echo(text));
        let v = match ty {
            ValueType::Keyword => Self::Keyword(keyword(text)?),
            ValueType::Text => {
                if text.contains('\0') {
                    return Err("a text may not hold a NUL character".into());
                }
                Self::Text(text.to_string())
            }
            ValueType::Int => Self::Int(text.trim().parse().map_err(|_| bad("an int"))?),
            ValueType::Double => {
                let d: f64 = text.trim().parse().map_err(|_| bad("a number"))?;
                if !d.is_finite() {
                    return Err(bad("a finite number"));
                }
                Self::Double(if d == 0.0 { 0.0 } else { d })
            }
            ValueType::Bool => match text.trim() {
                t if t.eq_ignore_ascii_case("true") => Self::Bool(true),
                t if t.eq_ignore_ascii_case("false") => Self::Bool(false),
                _ => return Err(bad("a bool (true or false)")),
            },
            ValueType::Datetime => Self::Datetime(
                DateTime::parse_from_rfc3339(text.trim())
                    .map_err(|_| bad("an RFC 3339 time"))?
                    .timestamp_millis(),
            ),
            ValueType::KeywordList => {
                let items: Vec<String> = if text.trim_start().starts_with('[') {
                    serde_json::from_str(text).map_err(|_| bad("a JSON array of strings"))?
                } else {
                    text.split(',').map(|s| s.trim().to_string()).collect()
                };
                if items.len() > MAX_LIST_ITEMS {
                    return Err(format!(
                        "{} items, more than the limit of {MAX_LIST_ITEMS}",
                        items.len()
                    ));
                }
                let mut list = Vec::with_capacity(items.len());
                for i in items {
                    list.push(keyword(&i)?);
                }
                Self::KeywordList(list)
            }
        };
        Ok(v)
    }

    /// Its canonical text ([`Self::parse`] reads it back): a keyword list as a JSON
    /// array, a datetime in RFC 3339 (UTC).
    pub fn text(&self) -> String {
        match self {
            Self::Keyword(s) | Self::Text(s) => s.clone(),
            Self::Int(n) => n.to_string(),
            Self::Double(d) => d.to_string(),
            Self::Bool(b) => b.to_string(),
            Self::Datetime(ms) => DateTime::<Utc>::from_timestamp_millis(*ms).map_or_else(
                || ms.to_string(),
                |t| t.to_rfc3339_opts(SecondsFormat::Millis, true),
            ),
            Self::KeywordList(l) => serde_json::to_string(l).unwrap_or_default(),
        }
    }

    /// As JSON (for a run's view and its history): a number, a bool, a string, an
    /// array of strings.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Self::Int(n) => serde_json::json!(n),
            Self::Double(d) => serde_json::json!(d),
            Self::Bool(b) => serde_json::json!(b),
            Self::KeywordList(l) => serde_json::json!(l),
            other => serde_json::Value::String(other.text()),
        }
    }

    /// As a query reads it.
    pub fn to_query_value(&self) -> Value {
        match self {
            Self::Keyword(s) | Self::Text(s) => Value::Str(s.clone()),
            Self::Int(n) => Value::Int(*n),
            Self::Double(d) => Value::Double(*d),
            Self::Bool(b) => Value::Bool(*b),
            Self::Datetime(ms) => Value::Time(*ms),
            Self::KeywordList(l) => Value::List(l.clone()),
        }
    }

    /// The index terms a run holding it under `name` is stored under (a text: one
    /// per word, [`text_words`]).
    pub fn terms(&self, name: &str) -> Vec<String> {
        match self {
            Self::Text(t) => {
                let mut t: Vec<String> = text_words(t).iter().map(|w| text_term(name, w)).collect();
                t.sort();
                t
            }
            Self::KeywordList(l) => {
                let mut t: Vec<String> = l
                    .iter()
                    .map(|i| term(name, ValueType::KeywordList, &Value::Str(i.clone())))
                    .collect::<Option<_>>()
                    .unwrap_or_default();
                t.sort();
                t.dedup();
                t
            }
            other => term(name, other.value_type(), &other.to_query_value())
                .into_iter()
                .collect(),
        }
    }
}

/// A keyword: no control characters (they could not be stored as index keys on
/// every backend).
fn keyword(s: &str) -> Result<String, String> {
    if s.chars().any(char::is_control) {
        return Err(format!(
            "{} holds a control character, which a keyword may not",
            crate::echo(s)
        ));
    }
    Ok(s.to_string())
}

/// The index-term prefix of attribute `name` of type `ty`: `@name:k=`. The type is
/// in it, so that a name declared again with another type never meets old terms.
pub fn term_prefix(name: &str, ty: ValueType) -> String {
    let code = match ty {
        ValueType::Keyword => 'k',
        ValueType::Text => 'x',
        ValueType::Int => 'i',
        ValueType::Double => 'd',
        ValueType::Bool => 'b',
        ValueType::Datetime => 't',
        ValueType::KeywordList => 'l',
    };
    format!("@{name}:{code}=")
}

/// The index term of attribute `name` (type `ty`) holding `v` (for a keyword list,
/// one item); `None` for a text or a value of another type. Numbers are encoded so
/// that their terms sort as they do (16 hex digits), so a range is a range of terms.
pub fn term(name: &str, ty: ValueType, v: &Value) -> Option<String> {
    let enc = match (ty, v) {
        (ValueType::Keyword | ValueType::KeywordList, Value::Str(s)) => s.clone(),
        (ValueType::Int, Value::Int(n)) => sortable_int(*n),
        (ValueType::Datetime, Value::Time(ms)) => sortable_int(*ms),
        (ValueType::Double, Value::Double(d)) => sortable_double(*d),
        (ValueType::Bool, Value::Bool(b)) => b.to_string(),
        _ => return None,
    };
    Some(format!("{}{enc}", term_prefix(name, ty)))
}

/// The index term of a text attribute `name` holding `word` (lowercased, as
/// [`text_words`] gives it).
pub fn text_term(name: &str, word: &str) -> String {
    format!("{}{word}", term_prefix(name, ValueType::Text))
}

/// The words of `text` as a query reads them: split on every character that is not
/// a letter or a digit, each lowercased; unbounded (a query's literal is).
pub fn query_words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

/// The words of `text` that are indexed and matched: [`query_words`] without
/// duplicates, in order of first appearance, skipping words longer than
/// [`MAX_WORD_BYTES`], at most [`MAX_TEXT_WORDS`].
pub fn text_words(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for w in query_words(text) {
        if out.len() >= MAX_TEXT_WORDS {
            break;
        }
        if w.len() <= MAX_WORD_BYTES && !out.contains(&w) {
            out.push(w);
        }
    }
    out
}

/// An i64 as 16 hex digits that sort as the numbers do.
pub fn sortable_int(n: i64) -> String {
    format!("{:016x}", n.cast_unsigned() ^ (1 << 63))
}

/// A finite f64 as 16 hex digits that sort as the numbers do (`-0.0` as `0.0`).
pub fn sortable_double(d: f64) -> String {
    let d = if d == 0.0 { 0.0 } else { d };
    let bits = d.to_bits();
    let key = if bits >> 63 == 1 { !bits } else { bits | (1 << 63) };
    format!("{key:016x}")
}

/// Every index term of a run's attributes.
pub fn attribute_terms(attrs: &Attributes) -> Vec<String> {
    attrs.iter().flat_map(|(name, v)| v.terms(name)).collect()
}

/// Checks a name a namespace would declare: 1 to 64 bytes of letters, digits and
/// `_`, starting with a letter or `_`, and neither a built-in field nor a word of
/// the query language (case-insensitive).
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_ATTRIBUTE_NAME_BYTES {
        return Err(format!(
            "an attribute name is 1 to {MAX_ATTRIBUTE_NAME_BYTES} bytes, got {}",
            name.len()
        ));
    }
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!(
            "{} is not a name: letters, digits and _, not starting with a digit",
            crate::echo(name)
        ));
    }
    if BUILTIN_FIELDS.iter().any(|b| b.eq_ignore_ascii_case(name)) {
        return Err(format!("{name} is a built-in field"));
    }
    if RESERVED.iter().any(|k| k.eq_ignore_ascii_case(name)) {
        return Err(format!("{name} is a word of the query language"));
    }
    Ok(())
}

/// Adds `name` of type `ty` to a namespace's declarations. Declaring a name again
/// with its type changes nothing (`Ok(false)`); with another type it is refused.
pub fn declare(decl: &mut AttributeTypes, name: &str, ty: ValueType) -> Result<bool, Rejection> {
    check_name(name).map_err(|e| Rejection::field("name", e))?;
    if let Some(t) = decl.get(name) {
        if *t == ty {
            return Ok(false);
        }
        return Err(Rejection::FailedPrecondition(format!(
            "attribute {name} is already declared as {}; remove it first to declare it as {}",
            t.name(),
            ty.name()
        )));
    }
    if decl.len() >= MAX_DECLARED_ATTRIBUTES {
        return Err(Rejection::FailedPrecondition(format!(
            "the namespace declares {MAX_DECLARED_ATTRIBUTES} attributes, the limit"
        )));
    }
    decl.insert(name.to_string(), ty);
    Ok(true)
}

/// Reads the attributes a request sets (name → text) by the namespace's
/// declarations: each name declared, each value of its type; an empty text unsets.
/// Errors name the request's `field` and the attribute. Bounded (count).
pub fn parse_set(
    decl: &AttributeTypes,
    raw: &BTreeMap<String, String>,
    field: &str,
) -> Result<Vec<(String, Option<AttributeValue>)>, Rejection> {
    if raw.len() > MAX_RUN_ATTRIBUTES {
        return Err(Rejection::field(
            field,
            format!(
                "{} attributes, more than the limit of {MAX_RUN_ATTRIBUTES}",
                raw.len()
            ),
        ));
    }
    let mut out = Vec::with_capacity(raw.len());
    for (name, text) in raw {
        let Some(ty) = decl.get(name) else {
            let why = match check_name(name) {
                Err(e) => e,
                Ok(()) => format!(
                    "{} is not a search attribute the namespace declares (railyard namespace attribute add)",
                    crate::echo(name)
                ),
            };
            return Err(Rejection::field(field, why));
        };
        if text.is_empty() {
            out.push((name.clone(), None));
            continue;
        }
        let v = AttributeValue::parse(*ty, text)
            .map_err(|e| Rejection::field(&format!("{field}.{name}"), format!("{} value: {e}", ty.name())))?;
        out.push((name.clone(), Some(v)));
    }
    Ok(out)
}

/// Applies `set` to `attrs`: the changes it made (a value set to what it was is no
/// change), or an error when the run would hold more than [`MAX_RUN_ATTRIBUTES`].
/// On error `attrs` is unchanged.
pub fn apply(
    attrs: &mut Attributes,
    set: Vec<(String, Option<AttributeValue>)>,
    field: &str,
) -> Result<Vec<AttributeChange>, Rejection> {
    let mut next = attrs.clone();
    let mut changes = Vec::new();
    for (name, after) in set {
        let before = match &after {
            Some(v) => next.insert(name.clone(), v.clone()),
            None => next.remove(&name),
        };
        if before != after {
            changes.push(AttributeChange { name, before, after });
        }
    }
    if next.len() > MAX_RUN_ATTRIBUTES {
        return Err(Rejection::field(
            field,
            format!("a run holds at most {MAX_RUN_ATTRIBUTES} attributes"),
        ));
    }
    *attrs = next;
    Ok(changes)
}
