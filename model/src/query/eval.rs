//! Evaluating a query on a run, what a run is indexed under, and which of those
//! index terms could serve a query.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use super::{Builtin, CmpOp, Expr, Field, Plan, Query, TermRange, Value, ValueType};
use crate::run::{Event, EventKind, RunState, RunStatus};
use crate::workflow::DEFAULT_TASK_QUEUE;

/// The values a query reads of a run.
pub trait RunView {
    /// The field's value (`None`: the field is NULL for this run).
    fn field(&self, field: &Field) -> Option<Value>;
}

/// What `FailureType` is for a failed or timed-out run whose current step has no
/// failure recorded.
pub const FAILURE_TYPE_NONE: &str = "";

/// A closed run's failure type: the `error_type` of its current step's last failure
/// (`"error_type: message"` as recorded), or `timed out` for a step that missed a
/// deadline; `None` for a run that did not fail.
pub fn failure_type(run: &RunState) -> Option<String> {
    if !matches!(run.status, RunStatus::Failed | RunStatus::TimedOut) {
        return None;
    }
    let last = run
        .steps
        .get(run.current_step)
        .map_or("", |s| s.last_failure.as_str());
    if last.is_empty() {
        return Some(FAILURE_TYPE_NONE.into());
    }
    if last.starts_with("timed out") {
        return Some("timed out".into());
    }
    Some(last.split_once(": ").map_or(last, |(t, _)| t).to_string())
}

impl RunView for RunState {
    fn field(&self, field: &Field) -> Option<Value> {
        let b = match field {
            Field::Builtin(b) => *b,
            // A value of another type (kept from a declaration since removed) is
            // NULL to a query of the declared type.
            Field::Attribute(name, ty) => {
                return self
                    .attributes
                    .get(name)
                    .filter(|v| v.value_type() == *ty)
                    .map(crate::attributes::AttributeValue::to_query_value);
            }
        };
        Some(match b {
            Builtin::RunId => Value::Str(self.run_id.clone()),
            Builtin::WorkflowId => Value::Str(self.workflow_id.clone()),
            Builtin::WorkflowVersion => Value::Str(self.definition.version.clone()),
            Builtin::Status => Value::Str(self.status.name().into()),
            Builtin::StartTime => Value::Time(self.start_ms),
            Builtin::CloseTime => Value::Time(self.close_ms?),
            Builtin::ParentRunId if self.parent_run_id.is_empty() => return None,
            Builtin::ParentRunId => Value::Str(self.parent_run_id.clone()),
            Builtin::TaskQueue => Value::Str(if self.task_queue.is_empty() {
                self.definition
                    .task_queue
                    .clone()
                    .unwrap_or_else(|| DEFAULT_TASK_QUEUE.into())
            } else {
                self.task_queue.clone()
            }),
            Builtin::Tokens => Value::Int(i64::try_from(self.usage.total()).unwrap_or(i64::MAX)),
            Builtin::Cost => Value::Double(self.usage.cost_usd),
            Builtin::FailureType => Value::Str(failure_type(self)?),
            Builtin::Goal => Value::Str(self.goal.clone()),
        })
    }
}

pub(super) fn eval(e: &Expr, run: &dyn RunView) -> bool {
    match e {
        Expr::And(all) => all.iter().all(|e| eval(e, run)),
        Expr::Or(any) => any.iter().any(|e| eval(e, run)),
        Expr::Cmp(f, op, v) => run.field(f).is_some_and(|actual| compare(f, &actual, *op, v)),
        Expr::In(f, vs, negated) => run
            .field(f)
            .is_some_and(|actual| vs.iter().any(|v| compare(f, &actual, CmpOp::Eq, v)) != *negated),
        Expr::StartsWith(f, prefix) => {
            matches!(run.field(f), Some(Value::Str(s)) if s.starts_with(prefix.as_str()))
        }
        Expr::IsNull(f, not_null) => run.field(f).is_some() == *not_null,
    }
}

/// `actual op wanted`, SQL-like: values of other types never match.
fn compare(f: &Field, actual: &Value, op: CmpOp, wanted: &Value) -> bool {
    if let Value::List(items) = actual {
        let hit = items.iter().any(|i| matches!(wanted, Value::Str(w) if w == i));
        return match op {
            CmpOp::Eq => hit,
            CmpOp::Ne => !hit,
            _ => false,
        };
    }
    if f.value_type() == ValueType::Text
        && let (Value::Str(a), Value::Str(w)) = (actual, wanted)
    {
        let hit = text_contains(a, w);
        return match op {
            CmpOp::Eq => hit,
            CmpOp::Ne => !hit,
            _ => false,
        };
    }
    let Some(ord) = order(actual, wanted) else {
        return false;
    };
    match op {
        CmpOp::Eq => ord == Ordering::Equal,
        CmpOp::Ne => ord != Ordering::Equal,
        CmpOp::Lt => ord == Ordering::Less,
        CmpOp::Le => ord != Ordering::Greater,
        CmpOp::Gt => ord == Ordering::Greater,
        CmpOp::Ge => ord != Ordering::Less,
    }
}

/// Every word of `words` is one of the indexed words of `text` (both as
/// [`crate::attributes::text_words`] splits them), so a match is what the index finds.
fn text_contains(text: &str, words: &str) -> bool {
    let have = crate::attributes::text_words(text);
    crate::attributes::query_words(words).all(|w| have.contains(&w))
}

fn order(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Str(a), Value::Str(b)) => Some(a.cmp(b)),
        (Value::Int(a), Value::Int(b)) => Some(a.cmp(b)),
        (Value::Time(a), Value::Time(b)) => Some(a.cmp(b)),
        (Value::Bool(a), Value::Bool(b)) => Some(a.cmp(b)),
        (Value::Double(a), Value::Double(b)) => a.partial_cmp(b),
        #[expect(
            clippy::cast_precision_loss,
            reason = "comparing an int field with a decimal literal"
        )]
        (Value::Int(a), Value::Double(b)) => (*a as f64).partial_cmp(b),
        #[expect(
            clippy::cast_precision_loss,
            reason = "comparing a double field with an int literal"
        )]
        (Value::Double(a), Value::Int(b)) => a.partial_cmp(&(*b as f64)),
        _ => None,
    }
}

/// The index term of runs with this status (its name, `FAILED`).
pub fn status_term(status: &str) -> String {
    format!("Status={status}")
}

/// The index term of runs of this workflow.
pub fn workflow_term(workflow_id: &str) -> String {
    format!("WorkflowId={workflow_id}")
}

/// Every index term a run is stored under (beside the start-time index every run is
/// in): its status, its workflow, its search attributes'. Each index is ordered by
/// (term, start ms, run id). The goal is not indexed: a row per word at every start
/// cost the writer too much (40 words cut one-step throughput about 2.5 times in
/// `railyard bench --goal-words 40`), so a `Goal` condition is checked on the runs
/// another index reads.
pub fn index_terms(run: &RunState) -> Vec<String> {
    index_terms_of(run.status, &run.workflow_id, &run.attributes)
}

/// [`index_terms`] from the fields it reads (a stored row's, without its definition).
pub fn index_terms_of(
    status: RunStatus,
    workflow_id: &str,
    attributes: &crate::attributes::Attributes,
) -> Vec<String> {
    let mut terms = vec![status_term(status.name()), workflow_term(workflow_id)];
    terms.extend(crate::attributes::attribute_terms(attributes));
    terms
}

/// What saving `run` with its new `events` changes in its index terms: (removed,
/// added). A start adds them all; a close moves the status term; a change of its
/// search attributes moves theirs; nothing else changes one.
pub fn index_delta(run: &RunState, events: &[Event]) -> (Vec<String>, Vec<String>) {
    if events
        .iter()
        .any(|e| matches!(e.kind, EventKind::RunStarted { .. }))
    {
        return (Vec::new(), index_terms(run));
    }
    // Per attribute the save changed: its terms before the save (the first change's
    // `before`) and now.
    let mut touched = BTreeSet::new();
    let mut removed = BTreeSet::new();
    for e in events {
        if let EventKind::SearchAttributesChanged { changes, .. } = &e.kind {
            for c in changes {
                if touched.insert(c.name.as_str()) {
                    removed.extend(c.before.iter().flat_map(|v| v.terms(&c.name)));
                }
            }
        }
    }
    let mut added: BTreeSet<String> = touched
        .iter()
        .filter_map(|n| run.attributes.get(*n).map(|v| v.terms(n)))
        .flatten()
        .collect();
    let both: Vec<String> = removed.intersection(&added).cloned().collect();
    for t in &both {
        removed.remove(t);
        added.remove(t);
    }
    let closed = events.iter().any(|e| {
        matches!(
            e.kind,
            EventKind::RunCompleted { .. }
                | EventKind::RunFailed { .. }
                | EventKind::RunCanceled { .. }
                | EventKind::RunTerminated { .. }
        )
    });
    if closed && !run.status.is_open() {
        removed.insert(status_term(RunStatus::Running.name()));
        added.insert(status_term(run.status.name()));
    }
    (removed.into_iter().collect(), added.into_iter().collect())
}

/// The index term a conjunct's equality on `f` with `v` would be served by.
fn term_of(f: &Field, v: &Value) -> Option<String> {
    match (f, v) {
        (Field::Builtin(Builtin::Status), Value::Str(s)) => Some(status_term(s)),
        (Field::Builtin(Builtin::WorkflowId), Value::Str(w)) => Some(workflow_term(w)),
        (Field::Attribute(name, ty), v) => crate::attributes::term(name, *ty, v),
        _ => None,
    }
}

pub(super) fn plan(q: &Query) -> Plan {
    let mut plan = Plan::default();
    let conjuncts: &[Expr] = match &q.filter {
        None => &[],
        Some(Expr::And(all)) => all,
        Some(one) => std::slice::from_ref(one),
    };
    let start = Field::Builtin(Builtin::StartTime);
    let mut ranges: BTreeMap<String, TermRange> = BTreeMap::new();
    for c in conjuncts {
        match c {
            // A text attribute's `=`: every match holds each word, so each word's
            // term holds every match. (The goal's words are not indexed.)
            Expr::Cmp(Field::Attribute(name, ValueType::Text), CmpOp::Eq, Value::Str(words)) => {
                for w in crate::attributes::query_words(words) {
                    plan.candidates.push(vec![crate::attributes::text_term(name, &w)]);
                }
            }
            Expr::Cmp(Field::Builtin(Builtin::Goal), _, _) => {}
            Expr::Cmp(f, CmpOp::Eq, v) if term_of(f, v).is_some() => {
                plan.candidates.extend(term_of(f, v).map(|t| vec![t]));
            }
            Expr::In(f, vs, false) => {
                let terms: Option<Vec<String>> = vs.iter().map(|v| term_of(f, v)).collect();
                if let Some(mut terms) = terms {
                    terms.sort();
                    terms.dedup();
                    plan.candidates.push(terms);
                }
            }
            Expr::Cmp(f, op, Value::Time(t)) if *f == start => {
                let (from, to) = match op {
                    CmpOp::Eq => (Some(*t), Some(*t)),
                    CmpOp::Gt => (Some(t.saturating_add(1)), None),
                    CmpOp::Ge => (Some(*t), None),
                    CmpOp::Lt => (None, Some(t.saturating_sub(1))),
                    CmpOp::Le => (None, Some(*t)),
                    CmpOp::Ne => (None, None),
                };
                if let Some(from) = from {
                    plan.start_from = Some(plan.start_from.map_or(from, |f| f.max(from)));
                }
                if let Some(to) = to {
                    plan.start_to = Some(plan.start_to.map_or(to, |t| t.min(to)));
                }
            }
            Expr::Cmp(Field::Attribute(name, ty), op, v) => {
                let Some(t) = crate::attributes::term(name, *ty, v) else {
                    continue;
                };
                let prefix = crate::attributes::term_prefix(name, *ty);
                let bound = (t, !matches!(op, CmpOp::Lt | CmpOp::Gt));
                let (from, to) = match op {
                    CmpOp::Gt | CmpOp::Ge => (Some(bound), None),
                    CmpOp::Lt | CmpOp::Le => (None, Some(bound)),
                    CmpOp::Eq | CmpOp::Ne => continue,
                };
                narrow(&mut ranges, prefix, from, to);
            }
            Expr::StartsWith(Field::Attribute(name, ValueType::Keyword), p) => {
                let prefix = format!("{}{p}", crate::attributes::term_prefix(name, ValueType::Keyword));
                narrow(&mut ranges, prefix.clone(), Some((prefix, true)), None);
            }
            _ => {}
        }
    }
    plan.ranges = ranges.into_values().collect();
    plan
}

/// Intersects the range of terms under `prefix` with [from, to].
fn narrow(
    ranges: &mut BTreeMap<String, TermRange>,
    prefix: String,
    from: Option<(String, bool)>,
    to: Option<(String, bool)>,
) {
    let r = ranges.entry(prefix.clone()).or_insert_with(|| TermRange {
        prefix,
        from: None,
        to: None,
    });
    // At one term, the exclusive bound is the narrower.
    if let Some(f) = from
        && r.from.as_ref().is_none_or(|cur| (&f.0, !f.1) > (&cur.0, !cur.1))
    {
        r.from = Some(f);
    }
    if let Some(t) = to
        && r.to.as_ref().is_none_or(|cur| (&t.0, t.1) < (&cur.0, cur.1))
    {
        r.to = Some(t);
    }
}
