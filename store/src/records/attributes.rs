//! Search attributes as records (`railyard_model::attributes`): a run's values,
//! their changes in history, and a namespace's declarations. Each value names its
//! type, so that it reads back as it was whatever the namespace declares now. Rows
//! from before attributes have none, and read as none.

use std::collections::BTreeMap;

use railyard_model::Millis;
use railyard_model::attributes::{AttributeChange, AttributeValue, Attributes};
use railyard_model::query::{AttributeTypes, ValueType};
use serde::{Deserialize, Serialize};

use super::corrupt;
use crate::error::StorageError;

/// One value, with its type: `{"type": "int", "value": 2}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "snake_case")]
pub(super) enum ValueRecord {
    Keyword(String),
    Text(String),
    Int(i64),
    Double(f64),
    Bool(bool),
    Datetime(Millis),
    KeywordList(Vec<String>),
}

impl ValueRecord {
    pub(super) fn from_model(v: &AttributeValue) -> Self {
        match v {
            AttributeValue::Keyword(s) => Self::Keyword(s.clone()),
            AttributeValue::Text(s) => Self::Text(s.clone()),
            AttributeValue::Int(n) => Self::Int(*n),
            AttributeValue::Double(d) => Self::Double(*d),
            AttributeValue::Bool(b) => Self::Bool(*b),
            AttributeValue::Datetime(t) => Self::Datetime(*t),
            AttributeValue::KeywordList(l) => Self::KeywordList(l.clone()),
        }
    }

    pub(super) fn into_model(self) -> AttributeValue {
        match self {
            Self::Keyword(s) => AttributeValue::Keyword(s),
            Self::Text(s) => AttributeValue::Text(s),
            Self::Int(n) => AttributeValue::Int(n),
            Self::Double(d) => AttributeValue::Double(d),
            Self::Bool(b) => AttributeValue::Bool(b),
            Self::Datetime(t) => AttributeValue::Datetime(t),
            Self::KeywordList(l) => AttributeValue::KeywordList(l),
        }
    }
}

/// A run's attributes, by name.
pub(super) type RunAttributesRecord = BTreeMap<String, ValueRecord>;

pub(super) fn run_to_record(a: &Attributes) -> RunAttributesRecord {
    a.iter()
        .map(|(k, v)| (k.clone(), ValueRecord::from_model(v)))
        .collect()
}

pub(super) fn run_from_record(r: RunAttributesRecord) -> Attributes {
    r.into_iter().map(|(k, v)| (k, v.into_model())).collect()
}

/// One change in a `SearchAttributesChanged` event.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct ChangeRecord {
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    before: Option<ValueRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    after: Option<ValueRecord>,
}

impl ChangeRecord {
    pub(super) fn from_model(c: &AttributeChange) -> Self {
        Self {
            name: c.name.clone(),
            before: c.before.as_ref().map(ValueRecord::from_model),
            after: c.after.as_ref().map(ValueRecord::from_model),
        }
    }

    pub(super) fn into_model(self) -> AttributeChange {
        AttributeChange {
            name: self.name,
            before: self.before.map(ValueRecord::into_model),
            after: self.after.map(ValueRecord::into_model),
        }
    }
}

/// A namespace's declarations: name → type name (`keyword`, `int`, ...).
pub(super) fn declarations_to_record(d: &AttributeTypes) -> BTreeMap<String, String> {
    d.iter().map(|(k, t)| (k.clone(), t.name().to_string())).collect()
}

/// A type this build does not know is refused, and the row left as it is.
pub(super) fn declarations_from_record(r: BTreeMap<String, String>) -> Result<AttributeTypes, StorageError> {
    r.into_iter()
        .map(|(k, t)| match ValueType::parse(&t) {
            Some(ty) => Ok((k, ty)),
            None => Err(corrupt(
                "namespace",
                format!("attribute {k} has the unknown type {t:?}"),
            )),
        })
        .collect()
}
