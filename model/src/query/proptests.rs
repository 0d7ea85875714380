//! Random queries over random runs: a query's answer equals a reference written
//! beside the generated text (brute force, no parser), and the plan never leaves out
//! a run that matches (every match is under one of each candidate's terms, within the
//! start range). Runs carry a goal and a text attribute (`notes`) of random words in
//! random case and punctuation, matched by word.

use std::sync::Arc;

use proptest::prelude::*;

use super::tests::run;
use super::*;
use crate::run::{RunState, RunStatus};

type Check = Arc<dyn Fn(&RunState) -> bool + Send + Sync>;

#[derive(Clone)]
struct Q {
    text: String,
    check: Check,
}

impl std::fmt::Debug for Q {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

const STATUSES: [RunStatus; 4] = [
    RunStatus::Running,
    RunStatus::Completed,
    RunStatus::Failed,
    RunStatus::TimedOut,
];
const WORKFLOWS: [&str; 3] = ["alpha", "beta", "gamma"];
/// Words of goals and notes, as written (the reference lowercases them).
const WORDS: [&str; 6] = ["Fix", "bug", "PR", "42", "the", "cache"];
/// What separates them.
const SEPARATORS: [&str; 4] = [" ", ", ", "-", "#"];

/// Whether every word of `query` is a word of `text`, by brute force: split where
/// a character is not a letter or digit, compared lowercased.
fn has_words(text: &str, query: &str) -> bool {
    let words = |s: &str| -> Vec<String> {
        s.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect()
    };
    let have = words(text);
    words(query).iter().all(|w| have.contains(w))
}

/// A text of 0 to 4 of [`WORDS`], in random case, with random separators.
fn a_text() -> impl Strategy<Value = String> {
    proptest::collection::vec((0..WORDS.len(), any::<bool>(), 0..SEPARATORS.len()), 0..5).prop_map(|ws| {
        ws.iter()
            .map(|(w, upper, sep)| {
                let w = if *upper {
                    WORDS[*w].to_uppercase()
                } else {
                    WORDS[*w].to_string()
                };
                format!("{w}{}", SEPARATORS[*sep])
            })
            .collect()
    })
}

/// The declared attributes: `notes`, a text.
fn decl() -> AttributeTypes {
    AttributeTypes::from([("notes".to_string(), ValueType::Text)])
}

fn notes(r: &RunState) -> Option<&str> {
    match r.attributes.get("notes") {
        Some(crate::attributes::AttributeValue::Text(t)) => Some(t),
        _ => None,
    }
}

fn time_text(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn leaf() -> impl Strategy<Value = Q> {
    let ops = prop_oneof![
        Just("="),
        Just("!="),
        Just("<"),
        Just("<="),
        Just(">"),
        Just(">=")
    ];
    prop_oneof![
        (0..3usize, any::<bool>()).prop_map(|(i, ne)| {
            let w = WORKFLOWS[i];
            Q {
                text: format!("WorkflowId {} '{w}'", if ne { "!=" } else { "=" }),
                check: Arc::new(move |r: &RunState| (r.workflow_id == w) != ne),
            }
        }),
        (0..4usize).prop_map(|i| {
            let s = STATUSES[i];
            Q {
                text: format!("Status = '{}'", s.name()),
                check: Arc::new(move |r: &RunState| r.status == s),
            }
        }),
        proptest::collection::vec(0..4usize, 1..3).prop_map(|ix| {
            let set: Vec<RunStatus> = ix.iter().map(|i| STATUSES[*i]).collect();
            let names: Vec<String> = set.iter().map(|s| format!("'{}'", s.name())).collect();
            Q {
                text: format!("Status IN ({})", names.join(", ")),
                check: Arc::new(move |r: &RunState| set.contains(&r.status)),
            }
        }),
        (ops.clone(), 0..6i64).prop_map(|(op, t)| {
            let ms = t * 1_000;
            Q {
                text: format!("StartTime {op} '{}'", time_text(ms)),
                check: Arc::new(move |r: &RunState| cmp(op, r.start_ms, ms)),
            }
        }),
        (ops, 0..12i64).prop_map(|(op, n)| Q {
            text: format!("Tokens {op} {n}"),
            check: Arc::new(move |r: &RunState| cmp(op, r.usage.input as i64, n)),
        }),
        any::<bool>().prop_map(|not| Q {
            text: format!("CloseTime IS {}NULL", if not { "NOT " } else { "" }),
            check: Arc::new(move |r: &RunState| r.close_ms.is_some() == not),
        }),
        (a_text(), any::<bool>()).prop_map(|(words, ne)| {
            let w = words.clone();
            Q {
                text: format!("Goal {} '{words}'", if ne { "!=" } else { "=" }),
                check: Arc::new(move |r: &RunState| has_words(&r.goal, &w) != ne),
            }
        }),
        (a_text(), any::<bool>()).prop_map(|(words, ne)| {
            let w = words.clone();
            Q {
                text: format!("notes {} '{words}'", if ne { "!=" } else { "=" }),
                check: Arc::new(move |r: &RunState| notes(r).is_some_and(|n| has_words(n, &w) != ne)),
            }
        }),
        (0..3usize).prop_map(|i| {
            let p = ["r1", "r", "x"][i];
            Q {
                text: format!("RunId STARTS_WITH '{p}'"),
                check: Arc::new(move |r: &RunState| r.run_id.starts_with(p)),
            }
        }),
    ]
}

fn cmp(op: &str, a: i64, b: i64) -> bool {
    match op {
        "=" => a == b,
        "!=" => a != b,
        "<" => a < b,
        "<=" => a <= b,
        ">" => a > b,
        _ => a >= b,
    }
}

fn query() -> impl Strategy<Value = Q> {
    leaf().prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 2..4).prop_map(|qs| {
                let text = qs
                    .iter()
                    .map(|q| format!("({})", q.text))
                    .collect::<Vec<_>>()
                    .join(" AND ");
                let checks: Vec<Check> = qs.into_iter().map(|q| q.check).collect();
                Q {
                    text,
                    check: Arc::new(move |r: &RunState| checks.iter().all(|c| c(r))),
                }
            }),
            proptest::collection::vec(inner, 2..4).prop_map(|qs| {
                let text = qs
                    .iter()
                    .map(|q| format!("({})", q.text))
                    .collect::<Vec<_>>()
                    .join(" OR ");
                let checks: Vec<Check> = qs.into_iter().map(|q| q.check).collect();
                Q {
                    text,
                    check: Arc::new(move |r: &RunState| checks.iter().any(|c| c(r))),
                }
            }),
        ]
    })
}

/// A run of one of [`WORKFLOWS`], in one of [`STATUSES`].
fn a_run() -> impl Strategy<Value = RunState> {
    (
        (0..50u32, 0..3usize, 0..4usize, 0..6i64, 0..12u64),
        a_text(),
        proptest::option::of(a_text()),
    )
        .prop_map(|((id, w, s, t, tokens), goal, notes)| {
            let mut r = run(&format!("r{id}"), WORKFLOWS[w], t * 1_000);
            r.goal = goal;
            if let Some(n) = notes {
                r.attributes
                    .insert("notes".into(), crate::attributes::AttributeValue::Text(n));
            }
            r.status = STATUSES[s];
            if !r.status.is_open() {
                r.close_ms = Some(t * 1_000 + 500);
            }
            r.usage.input = tokens;
            r
        })
}

proptest! {
    #[test]
    fn a_query_answers_as_its_reference_and_its_plan_keeps_every_match(
        q in query(),
        runs in proptest::collection::vec(a_run(), 1..30),
    ) {
        // The top level, unparenthesized, so that the plan sees its conjuncts.
        let parsed = Query::parse(&q.text, &decl()).unwrap();
        let plan = parsed.plan();
        for r in &runs {
            let got = parsed.matches(r);
            prop_assert_eq!(got, (q.check)(r), "{} on {} {:?}", q.text, r.run_id, r.status);
            if got {
                let terms = index_terms(r);
                for c in &plan.candidates {
                    prop_assert!(c.iter().any(|t| terms.contains(t)), "{c:?} misses {}", r.run_id);
                }
                prop_assert!(plan.start_from.is_none_or(|f| r.start_ms >= f));
                prop_assert!(plan.start_to.is_none_or(|t| r.start_ms <= t));
            }
        }
    }
}
