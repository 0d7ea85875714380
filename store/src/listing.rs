//! Listing and counting runs by a filter and a query ([`railyard_model::query`]),
//! served from indexes: the planner takes the index terms the query's top-level AND
//! allows ([`railyard_model::query::Plan`]), plus the old filter fields, estimates
//! each by counting its index entries (at most [`ESTIMATE_CAP`]), and reads the runs
//! under the smallest; with none, it reads runs by start time. Every run read is
//! checked against the whole filter, so the choice of index changes only how many
//! rows are read, never the answer. Every index is ordered by (start ms, run id), so
//! the page cursor is the same whichever index served the page before.

use std::collections::BTreeMap;

use railyard_model::Millis;
use railyard_model::query::{Builtin, Field, Query, RunView, TermRange, Value, status_term, workflow_term};
use railyard_model::run::{RunState, RunStatus};

use crate::backend::Snapshot;
use crate::error::StorageError;
use crate::{Cursor, RunFilter};

/// How many index entries of a candidate term the planner counts, at most, to
/// compare candidates.
pub const ESTIMATE_CAP: u64 = 4096;

/// Most distinct terms a range of terms (a search attribute's `<`, `>`,
/// `STARTS_WITH`) may span to serve as an index: each is read as its own stream.
pub const MAX_RANGE_TERMS: usize = 64;

/// How much one page of a listing may hold and read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Most runs on the page.
    pub limit: usize,
    /// Most bytes of runs on the page, as the caller weighs them (at least one run).
    pub max_bytes: usize,
    /// Most rows read from one index ([`list`]'s doc says what happens past it).
    pub max_rows: u64,
}

/// What a listing or count read: for tests and logs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListStats {
    /// Runs read (decoded) from storage.
    pub rows_read: u64,
    /// The index that served it: `start` (runs by start time), or the terms read.
    pub index: String,
}

/// A count of runs, whole and by group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunCount {
    pub total: u64,
    /// By the group-by field's value (`None`: the field is null), in value order;
    /// empty without a group-by.
    pub groups: Vec<(Option<String>, u64)>,
    pub stats: ListStats,
}

/// Where to read: the start range and the terms (`None`: by start time).
struct Source {
    from_ms: Millis,
    before: (Millis, String),
    terms: Option<Vec<String>>,
}

fn keep(filter: &RunFilter, run: &RunState) -> bool {
    filter.status.is_none_or(|s| s == run.status)
        && filter.workflow_id.as_ref().is_none_or(|w| *w == run.workflow_id)
        && filter
            .parent_run_id
            .as_ref()
            .is_none_or(|p| *p == run.parent_run_id)
        && (!filter.has_issues || run.issue_count() > 0)
        && filter.query.as_ref().is_none_or(|q| q.matches(run))
}

fn plan(
    snap: &dyn Snapshot,
    ns: &str,
    filter: &RunFilter,
    after: Option<&Cursor>,
) -> Result<Source, StorageError> {
    let plan = filter.query.as_ref().map(Query::plan).unwrap_or_default();
    let mut candidates = plan.candidates;
    if let Some(s) = filter.status {
        candidates.push(vec![status_term(s.name())]);
    }
    if let Some(w) = &filter.workflow_id {
        candidates.push(vec![workflow_term(w)]);
    }
    let from_ms = filter
        .started_after_ms
        .unwrap_or(Millis::MIN)
        .max(plan.start_from.unwrap_or(Millis::MIN));
    // Exclusive: `started_before` as given, the plan's inclusive end plus one.
    let hi = filter
        .started_before_ms
        .unwrap_or(Millis::MAX)
        .min(plan.start_to.map_or(Millis::MAX, |t| t.saturating_add(1)));
    let mut before = (hi, String::new());
    if let Some((ms, id)) = after
        && (*ms, id.as_str()) < (before.0, before.1.as_str())
    {
        before = (*ms, id.clone());
    }
    for range in &plan.ranges {
        if let Some(terms) = range_terms(snap, ns, range)? {
            candidates.push(terms);
        }
    }
    let mut best: Option<(u64, Vec<String>)> = None;
    for terms in candidates {
        let mut estimate = 0u64;
        for t in &terms {
            estimate = estimate.saturating_add(snap.term_count(ns, t, ESTIMATE_CAP)?);
        }
        if best.as_ref().is_none_or(|(e, _)| estimate < *e) {
            best = Some((estimate, terms));
        }
    }
    Ok(Source {
        from_ms,
        before,
        terms: best.map(|(_, t)| t),
    })
}

/// The distinct terms in `range`, one seek each; `None` when there are more than
/// [`MAX_RANGE_TERMS`] (too many streams to merge: not a candidate).
fn range_terms(
    snap: &dyn Snapshot,
    ns: &str,
    range: &TermRange,
) -> Result<Option<Vec<String>>, StorageError> {
    let mut terms = Vec::new();
    let (mut at, mut inclusive) = match &range.from {
        Some((f, inc)) if f.as_str() > range.prefix.as_str() => (f.clone(), *inc),
        _ => (range.prefix.clone(), true),
    };
    while let Some(t) = snap.next_term(ns, &at, inclusive)? {
        if !range.contains(&t) {
            break;
        }
        if terms.len() == MAX_RANGE_TERMS {
            return Ok(None);
        }
        terms.push(t.clone());
        (at, inclusive) = (t, false);
    }
    Ok(Some(terms))
}

/// Reads `src` newest first, giving each run that passes `filter` to `take` until it
/// says stop, or until `max_rows` rows are read; counts the rows read. Returns the
/// position of the row it stopped at when the budget stopped it.
fn scan(
    snap: &dyn Snapshot,
    ns: &str,
    src: &Source,
    filter: &RunFilter,
    stats: &mut ListStats,
    max_rows: u64,
    take: &mut dyn FnMut(usize, Millis, &str, RunState) -> bool,
) -> Result<Option<Cursor>, StorageError> {
    let mut spent = None;
    let before = (src.before.0, src.before.1.as_str());
    let terms: Vec<Option<&str>> = match &src.terms {
        None => {
            stats.index = "start".into();
            vec![None]
        }
        Some(terms) => {
            stats.index = terms.join(" | ");
            terms.iter().map(|t| Some(t.as_str())).collect()
        }
    };
    for (stream, term) in terms.into_iter().enumerate() {
        let rows = &mut stats.rows_read;
        let spent = &mut spent;
        let mut visit = |ms: Millis, id: &str, run: RunState| {
            *rows += 1;
            let more = !keep(filter, &run) || take(stream, ms, id, run);
            if more && *rows >= max_rows {
                *spent = Some((ms, id.to_string()));
                return false;
            }
            more
        };
        match term {
            None => snap.runs_by_start(ns, src.from_ms, before, &mut visit)?,
            Some(t) => snap.runs_by_term(ns, t, src.from_ms, before, &mut visit)?,
        }
    }
    Ok(spent)
}

/// A page of runs, newest first, after the cursor: at most `limit`, and no more
/// than fit in `max_bytes` as `weigh` counts them (always at least one). Read from one
/// index, it reads at most `max_rows` rows: a filter its index does not serve (a
/// goal's word alone) may then answer fewer runs, even none, with the cursor of the
/// last row read, where the next page goes on.
pub(crate) fn list(
    snap: &dyn Snapshot,
    ns: &str,
    filter: &RunFilter,
    after: Option<Cursor>,
    bounds: Bounds,
    weigh: &dyn Fn(&RunState) -> usize,
) -> Result<(Vec<RunState>, Option<Cursor>, ListStats), StorageError> {
    let Bounds {
        limit,
        max_bytes,
        max_rows,
    } = bounds;
    let mut stats = ListStats::default();
    let limit = limit.max(1);
    let src = plan(snap, ns, filter, after.as_ref())?;
    // Each stream (one per term) gives at most a page: its runs past a page's worth
    // cannot be on this page. By bytes, it goes one run past the budget, so that the
    // page knows a run follows the last that fits.
    let streams = src.terms.as_ref().map_or(1, Vec::len);
    let mut per: Vec<(usize, usize)> = vec![(0, 0); streams];
    let mut found: Vec<(Millis, String, RunState)> = Vec::new();
    // Several streams stop each at its own row: no one cursor says where all of them
    // are, so those are read unbounded (each term bounds its own).
    let max_rows = if streams == 1 { max_rows.max(1) } else { u64::MAX };
    let spent = scan(
        snap,
        ns,
        &src,
        filter,
        &mut stats,
        max_rows,
        &mut |stream, ms, id, run| {
            let (n, bytes) = &mut per[stream];
            let before = *bytes;
            *n += 1;
            *bytes = bytes.saturating_add(weigh(&run));
            found.push((ms, id.to_string(), run));
            *n < limit && before <= max_bytes
        },
    )?;
    if streams > 1 {
        found.sort_by(|a, b| (b.0, &b.1).cmp(&(a.0, &a.1)));
    }
    let mut out = Vec::new();
    let mut bytes = 0usize;
    let mut last: Option<Cursor> = None;
    let mut next = None;
    for (ms, id, run) in found {
        let weight = weigh(&run);
        if !out.is_empty() && bytes.saturating_add(weight) > max_bytes {
            next = last.take();
            break;
        }
        bytes = bytes.saturating_add(weight);
        out.push(run);
        last = Some((ms, id));
        if out.len() == limit {
            next = last.take();
            break;
        }
    }
    if next.is_none() && out.len() < limit {
        next = spent;
    }
    Ok((out, next, stats))
}

/// The group a run falls in.
fn group_of(run: &RunState, by: &Field) -> Option<String> {
    match run.field(by)? {
        Value::Str(s) => Some(s),
        Value::Int(n) => Some(n.to_string()),
        Value::Double(d) => Some(d.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Time(t) => Some(t.to_string()),
        Value::List(l) => Some(l.join(",")),
    }
}

/// Counts the runs that pass `filter`, grouped by `group_by` when given. Served from
/// the term index alone (no run read) when the filter is empty and the grouping is by
/// status or none; else it reads every run under the chosen index.
pub(crate) fn count(
    snap: &dyn Snapshot,
    ns: &str,
    filter: &RunFilter,
    group_by: Option<&Field>,
) -> Result<RunCount, StorageError> {
    let unfiltered = filter.query.as_ref().is_none_or(|q| q.filter.is_none())
        && filter.status.is_none()
        && filter.workflow_id.is_none()
        && filter.parent_run_id.is_none()
        && !filter.has_issues
        && filter.started_after_ms.is_none()
        && filter.started_before_ms.is_none();
    let by_status = group_by == Some(&Field::Builtin(Builtin::Status));
    if unfiltered && (group_by.is_none() || by_status) {
        let mut c = RunCount {
            stats: ListStats {
                rows_read: 0,
                index: "Status=*".into(),
            },
            ..RunCount::default()
        };
        for s in RunStatus::ALL {
            let n = snap.term_count(ns, &status_term(s.name()), u64::MAX)?;
            c.total += n;
            if by_status && n > 0 {
                c.groups.push((Some(s.name().to_string()), n));
            }
        }
        c.groups.sort();
        return Ok(c);
    }
    let src = plan(snap, ns, filter, None)?;
    let mut c = RunCount::default();
    let mut groups: BTreeMap<Option<String>, u64> = BTreeMap::new();
    scan(
        snap,
        ns,
        &src,
        filter,
        &mut c.stats,
        u64::MAX,
        &mut |_, _, _, run| {
            c.total += 1;
            if let Some(by) = group_by {
                *groups.entry(group_of(&run, by)).or_insert(0) += 1;
            }
            true
        },
    )?;
    c.groups = groups.into_iter().collect();
    Ok(c)
}
