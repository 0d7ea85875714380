//! The run list query language, in the spirit of Temporal's visibility queries:
//! `WorkflowId = "review-pr" AND Status = "FAILED" AND StartTime > "2026-11-20T00:00:00Z"
//! ORDER BY StartTime DESC`. Pure: [`Query::parse`] checks a query against the
//! built-in fields and the namespace's declared attributes, [`Query::matches`]
//! evaluates it on a run, and [`Query::plan`] says which index terms could serve it
//! (the store picks one). The spec is `docs/search-and-queries.md`.

mod eval;
mod lexer;
mod parser;

#[cfg(test)]
mod attr_tests;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

pub use eval::{
    FAILURE_TYPE_NONE, RunView, failure_type, index_delta, index_terms, index_terms_of, status_term,
    workflow_term,
};

use crate::Millis;
pub use crate::attributes::{AttributeTypes, Value, ValueType};

/// Longest query, in bytes.
pub const MAX_QUERY_BYTES: usize = 4096;
/// Deepest nesting of parentheses.
pub const MAX_DEPTH: usize = 16;
/// Most values in one `IN (...)` list.
pub const MAX_IN_VALUES: usize = 100;
/// Most predicates (comparisons, `IN`, `STARTS_WITH`, `IS NULL`) in one query.
pub const MAX_PREDICATES: usize = 64;

/// A query that does not parse or does not fit the fields: where, and what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("column {column}: {message}")]
pub struct QueryError {
    /// 1-based, in characters.
    pub column: usize,
    /// What is wrong there.
    pub message: String,
}

impl QueryError {
    fn at(column: usize, message: impl Into<String>) -> Self {
        Self {
            column,
            message: message.into(),
        }
    }
}

/// A built-in field of every run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Builtin {
    /// `RunId`.
    RunId,
    /// `WorkflowId`.
    WorkflowId,
    /// `WorkflowVersion`.
    WorkflowVersion,
    /// `Status`: the run's status.
    Status,
    /// `StartTime`.
    StartTime,
    /// `CloseTime` (none while the run is open).
    CloseTime,
    /// `ParentRunId`.
    ParentRunId,
    /// `TaskQueue`.
    TaskQueue,
    /// `Tokens`: the run's tokens, all steps together.
    Tokens,
    /// `Cost`: the run's estimated cost, in USD.
    Cost,
    /// `FailureType`: the error type a failed or timed-out run ended with.
    FailureType,
    /// The run's goal, a text: `Goal = "word"` matches goals holding the word.
    Goal,
}

impl Builtin {
    /// Every built-in field, in the order the docs list them.
    pub const ALL: [Builtin; 12] = [
        Builtin::RunId,
        Builtin::WorkflowId,
        Builtin::WorkflowVersion,
        Builtin::Status,
        Builtin::StartTime,
        Builtin::CloseTime,
        Builtin::ParentRunId,
        Builtin::TaskQueue,
        Builtin::Tokens,
        Builtin::Cost,
        Builtin::FailureType,
        Builtin::Goal,
    ];

    /// Its name in a query.
    pub fn name(self) -> &'static str {
        match self {
            Builtin::RunId => "RunId",
            Builtin::WorkflowId => "WorkflowId",
            Builtin::WorkflowVersion => "WorkflowVersion",
            Builtin::Status => "Status",
            Builtin::StartTime => "StartTime",
            Builtin::CloseTime => "CloseTime",
            Builtin::ParentRunId => "ParentRunId",
            Builtin::TaskQueue => "TaskQueue",
            Builtin::Tokens => "Tokens",
            Builtin::Cost => "Cost",
            Builtin::FailureType => "FailureType",
            Builtin::Goal => "Goal",
        }
    }

    /// Its values' type.
    pub fn value_type(self) -> ValueType {
        match self {
            Builtin::StartTime | Builtin::CloseTime => ValueType::Datetime,
            Builtin::Tokens => ValueType::Int,
            Builtin::Cost => ValueType::Double,
            Builtin::Goal => ValueType::Text,
            _ => ValueType::Keyword,
        }
    }
}

/// A field a query names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Field {
    /// A field every run has.
    Builtin(Builtin),
    /// A search attribute the namespace declares.
    Attribute(String, ValueType),
}

impl Field {
    /// Its name in a query.
    pub fn name(&self) -> &str {
        match self {
            Field::Builtin(b) => b.name(),
            Field::Attribute(name, _) => name,
        }
    }

    /// Its values' type.
    pub fn value_type(&self) -> ValueType {
        match self {
            Field::Builtin(b) => b.value_type(),
            Field::Attribute(_, t) => *t,
        }
    }
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    /// `=`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

/// A query's condition.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// Every condition holds.
    And(Vec<Expr>),
    /// At least one condition holds.
    Or(Vec<Expr>),
    /// `field op value`.
    Cmp(Field, CmpOp, Value),
    /// `field [NOT] IN (values)`.
    In(Field, Vec<Value>, bool),
    /// `field STARTS_WITH "prefix"`.
    StartsWith(Field, String),
    /// `field IS NULL` (`false`) or `IS NOT NULL` (`true`).
    IsNull(Field, bool),
}

/// Which way a listing goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Oldest first.
    Asc,
    /// Newest first.
    Desc,
}

/// A parsed query.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    /// `None`: every run.
    pub filter: Option<Expr>,
    /// The order asked for (`ORDER BY`): the field and its direction. Listing is by
    /// `StartTime DESC` unless a query says otherwise.
    pub order: (Builtin, Direction),
}

/// How the store may serve a query: the index terms, any of which holds every match
/// (a conjunct of the top-level AND), and the start-time range every match lies in.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan {
    /// Each entry is one top-level conjunct that an index can serve: the terms it
    /// allows (one for `=`, several for `IN`), every match being under one of them.
    pub candidates: Vec<Vec<String>>,
    /// Ranges of terms (a search attribute's `<`, `>`, `STARTS_WITH`), each holding
    /// every match under one of its terms; the store uses one when it spans few
    /// enough distinct terms.
    pub ranges: Vec<TermRange>,
    /// Matches started at or after this (unix ms).
    pub start_from: Option<Millis>,
    /// Matches started at or before this (unix ms).
    pub start_to: Option<Millis>,
}

/// The index terms that start with `prefix` and lie between `from` and `to`
/// (`(term, inclusive)`; `None`: unbounded on that side).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TermRange {
    /// What every term in the range starts with.
    pub prefix: String,
    /// The lower bound.
    pub from: Option<(String, bool)>,
    /// The upper bound.
    pub to: Option<(String, bool)>,
}

impl TermRange {
    /// Whether `term` is in the range.
    pub fn contains(&self, term: &str) -> bool {
        term.starts_with(&self.prefix)
            && self.from.as_ref().is_none_or(|(f, inc)| {
                if *inc {
                    term >= f.as_str()
                } else {
                    term > f.as_str()
                }
            })
            && self.to.as_ref().is_none_or(|(t, inc)| {
                if *inc {
                    term <= t.as_str()
                } else {
                    term < t.as_str()
                }
            })
    }
}

impl Query {
    /// Parses `text` against the built-in fields and `attributes`. An empty (or
    /// blank) text is the query of every run.
    pub fn parse(text: &str, attributes: &AttributeTypes) -> Result<Query, QueryError> {
        if text.len() > MAX_QUERY_BYTES {
            return Err(QueryError::at(
                1,
                format!(
                    "query is {} bytes, longer than the limit of {MAX_QUERY_BYTES}",
                    text.len()
                ),
            ));
        }
        parser::parse(text, attributes)
    }

    /// Whether `run` matches the filter.
    pub fn matches(&self, run: &dyn RunView) -> bool {
        self.filter.as_ref().is_none_or(|f| eval::eval(f, run))
    }

    /// What indexes could serve it ([`Plan`]).
    pub fn plan(&self) -> Plan {
        eval::plan(self)
    }
}
