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
    railyard_model::limits::check_storable("query", text)?;
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

/// Most groups a count answers: the largest, the rest summed in
/// [`RunCounts::other_count`].
pub const MAX_GROUPS: usize = 1000;

/// Counts, whole and by group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunCounts {
    pub count: u64,
    /// (value, count), in value order (nulls first); `None`: the field is null for
    /// those runs. At most [`MAX_GROUPS`], the largest.
    pub groups: Vec<(Option<String>, u64)>,
    /// Runs in the groups left out.
    pub other_count: u64,
    /// Groups left out.
    pub other_groups: u64,
}

/// `groups` (in value order) cut to the `max` largest, still in value order, and
/// what was left out: (kept, runs left out, groups left out).
pub fn top_groups(
    mut groups: Vec<(Option<String>, u64)>,
    max: usize,
) -> (Vec<(Option<String>, u64)>, u64, u64) {
    if groups.len() <= max {
        return (groups, 0, 0);
    }
    // The largest first; equal counts in value order, so the cut is stable.
    let mut order: Vec<usize> = (0..groups.len()).collect();
    order.sort_by(|&a, &b| groups[b].1.cmp(&groups[a].1).then(a.cmp(&b)));
    let mut keep = vec![false; groups.len()];
    for &i in &order[..max] {
        keep[i] = true;
    }
    let (mut runs, mut left) = (0u64, 0u64);
    let mut i = 0;
    groups.retain(|g| {
        let k = keep[i];
        i += 1;
        if !k {
            runs = runs.saturating_add(g.1);
            left += 1;
        }
        k
    });
    (groups, runs, left)
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
    let (groups, other_count, other_groups) = top_groups(c.groups, MAX_GROUPS);
    Ok(RunCounts {
        count: c.total,
        groups,
        other_count,
        other_groups,
    })
}

/// The field a count groups by: a keyword field (Status, WorkflowId, ...).
fn group_field(core: &Core, ns: &str, name: &str) -> Result<Field, ApiError> {
    railyard_model::limits::check_len("group_by", name, railyard_model::limits::QUERY_FIELD)?;
    railyard_model::limits::check_storable("group_by", name)?;
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

#[cfg(test)]
mod tests {
    use super::top_groups;

    #[test]
    fn the_largest_groups_are_kept_in_value_order_and_the_rest_summed() {
        let g = |v: &str, n: u64| (Some(v.to_string()), n);
        let all = vec![(None, 5), g("a", 1), g("b", 9), g("c", 2), g("d", 9), g("e", 1)];
        let (kept, runs, left) = top_groups(all.clone(), 3);
        assert_eq!(kept, vec![(None, 5), g("b", 9), g("d", 9)]);
        assert_eq!((runs, left), (4, 3));
        assert_eq!(top_groups(all.clone(), 10), (all, 0, 0));
    }
}
