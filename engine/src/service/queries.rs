//! List queries ([`railyard_model::query`]) at the service layer: parsing a
//! request's `query` against the namespace's fields, and counting runs
//! (`History.CountRuns`). Listing itself is [`super::runs::list`]; both are served
//! from the store's indexes ([`railyard_store::listing`]). The spec is
//! `docs/search-and-queries.md`.

use railyard_model::query::{AttributeTypes, Builtin, Direction, Field, Query};
use railyard_store::RunFilter;

use super::Core;
use super::caller::Caller;
use crate::error::ApiError;

/// The search attributes `ns` declares: the fields a query may name besides the
/// built-in ones.
fn attribute_types(core: &Core, ns: &str) -> Result<AttributeTypes, ApiError> {
    super::attributes::declared(core, ns)
}

/// Parses a request's `query` (empty: none). Errors name the field and the column.
pub fn parse(core: &Core, ns: &str, text: &str) -> Result<Option<Query>, ApiError> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    let q = Query::parse(text, &attribute_types(core, ns)?).map_err(|e| ApiError::field("query", e))?;
    // Every index is ordered by start time, newest first: that is the one order a
    // page can be served in without reading every match.
    if q.order != (Builtin::StartTime, Direction::Desc) {
        return Err(ApiError::field(
            "query",
            format!(
                "ORDER BY {} {}: only ORDER BY StartTime DESC is supported",
                q.order.0.name(),
                if q.order.1 == Direction::Asc {
                    "ASC"
                } else {
                    "DESC"
                }
            ),
        ));
    }
    Ok(Some(q))
}

/// A count to make.
#[derive(Debug, Clone, Default)]
pub struct CountRuns {
    /// Empty: every run of the namespace.
    pub query: String,
    /// Empty: no grouping; else `Status`, `WorkflowId` (or another keyword field).
    pub group_by: String,
}

/// Counts, whole and by group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunCounts {
    pub count: u64,
    /// (value, count); `None`: the field is null for those runs.
    pub groups: Vec<(Option<String>, u64)>,
}

/// Counts the runs of the caller's namespace that match a query.
pub fn count(core: &Core, caller: &Caller, r: CountRuns) -> Result<RunCounts, ApiError> {
    let ns = &caller.namespace;
    let filter = RunFilter {
        query: parse(core, ns, &r.query)?,
        ..RunFilter::default()
    };
    let group_by = if r.group_by.is_empty() {
        None
    } else {
        Some(group_field(core, ns, &r.group_by)?)
    };
    let c = core.store.count_runs(ns, &filter, group_by.as_ref())?;
    tracing::debug!(
        namespace = %ns,
        count = c.total,
        rows_read = c.stats.rows_read,
        index = %c.stats.index,
        "runs counted"
    );
    Ok(RunCounts {
        count: c.total,
        groups: c.groups,
    })
}

/// The field a count groups by: a keyword field (Status, WorkflowId, ...).
fn group_field(core: &Core, ns: &str, name: &str) -> Result<Field, ApiError> {
    if let Some(b) = Builtin::ALL
        .into_iter()
        .find(|b| b.name().eq_ignore_ascii_case(name))
    {
        return match b {
            Builtin::Status
            | Builtin::WorkflowId
            | Builtin::WorkflowVersion
            | Builtin::TaskQueue
            | Builtin::FailureType
            | Builtin::ParentRunId => Ok(Field::Builtin(b)),
            other => Err(ApiError::field(
                "group_by",
                format!("{} is not a keyword field to group by", other.name()),
            )),
        };
    }
    attribute_types(core, ns)?
        .get(name)
        .map(|t| Field::Attribute(name.to_string(), *t))
        .ok_or_else(|| {
            ApiError::field(
                "group_by",
                format!("unknown field {}", railyard_model::echo(name)),
            )
        })
}
