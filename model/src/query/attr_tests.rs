//! Search attributes in queries: matched on a run's values, indexed by terms, and
//! planned as terms (`=`, `IN`) or ranges of terms (`<`, `>`, `STARTS_WITH`).

use super::tests::run;
use super::*;
use crate::attributes::{AttributeValue, term, term_prefix};
use crate::run::Out;

fn decl() -> AttributeTypes {
    [
        ("customer", ValueType::Keyword),
        ("notes", ValueType::Text),
        ("priority", ValueType::Int),
        ("score", ValueType::Double),
        ("urgent", ValueType::Bool),
        ("due", ValueType::Datetime),
        ("tags", ValueType::KeywordList),
    ]
    .into_iter()
    .map(|(n, t)| (n.to_string(), t))
    .collect()
}

fn q(text: &str) -> Query {
    Query::parse(text, &decl()).unwrap()
}

fn with_attrs() -> crate::run::RunState {
    let mut r = run("r1", "wf", 1_000);
    let set = [
        ("customer", "acme"),
        ("notes", "Late delivery of parts"),
        ("priority", "2"),
        ("score", "0.75"),
        ("urgent", "true"),
        ("due", "2026-11-20T00:00:00Z"),
        ("tags", "red,blue"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let set = crate::attributes::parse_set(&decl(), &set, "attributes").unwrap();
    let mut seq = 0;
    let mut out = Out::new(1_000, &mut seq);
    assert_eq!(r.set_attributes(set, "", "me", &mut out).unwrap(), 7);
    r
}

#[test]
fn attributes_match_by_their_type() {
    let r = with_attrs();
    for yes in [
        "customer = 'acme'",
        "customer STARTS_WITH 'ac'",
        "customer IN ('x', 'acme')",
        "notes = 'delivery late'",
        "priority > 1 AND priority <= 2",
        "score < 1",
        "urgent = true",
        "due >= '2026-11-19T23:00:00-01:00'",
        "tags = 'blue'",
        "tags IN ('green', 'red')",
        "tags != 'green'",
        "customer IS NOT NULL",
    ] {
        assert!(q(yes).matches(&r), "{yes}");
    }
    for no in [
        "customer = 'Acme'",
        "notes = 'early'",
        "priority > 2",
        "urgent = false",
        "tags = 'green'",
        "customer IS NULL",
    ] {
        assert!(!q(no).matches(&r), "{no}");
    }
    // A run without the attribute: NULL, and a comparison with NULL is false.
    let bare = run("r2", "wf", 1_000);
    assert!(!q("customer != 'x'").matches(&bare));
    assert!(q("customer IS NULL").matches(&bare));
    // A value of another type than declared (the name declared again) is NULL.
    let mut other = decl();
    other.insert("priority".into(), ValueType::Keyword);
    assert!(!Query::parse("priority = '2'", &other).unwrap().matches(&r));
}

#[test]
fn a_run_is_indexed_under_its_attributes_and_changes_move_them() {
    let mut r = with_attrs();
    let terms = index_terms(&r);
    for t in [
        "@customer:k=acme",
        "@urgent:b=true",
        "@tags:l=red",
        "@tags:l=blue",
    ] {
        assert!(terms.iter().any(|x| x == t), "{t} in {terms:?}");
    }
    let mut words: Vec<&String> = terms.iter().filter(|t| t.starts_with("@notes")).collect();
    words.sort();
    assert_eq!(
        words,
        [
            "@notes:x=delivery",
            "@notes:x=late",
            "@notes:x=of",
            "@notes:x=parts"
        ],
        "a text is indexed by its words, lowercased"
    );
    let mut seq = 0;
    let mut out = Out::new(2_000, &mut seq);
    let set = vec![
        (
            "customer".to_string(),
            Some(AttributeValue::Keyword("globex".into())),
        ),
        ("urgent".to_string(), None),
    ];
    r.set_attributes(set, "a", "me", &mut out).unwrap();
    let again = vec![(
        "customer".to_string(),
        Some(AttributeValue::Keyword("initech".into())),
    )];
    r.set_attributes(again, "a", "me", &mut out).unwrap();
    let (removed, added) = index_delta(&r, &out.events);
    assert_eq!(removed, vec!["@customer:k=acme", "@urgent:b=true"]);
    assert_eq!(
        added,
        vec!["@customer:k=initech"],
        "the passing value globex is never added"
    );
}

#[test]
fn attribute_equalities_are_candidates_and_comparisons_ranges() {
    let p = q("customer = 'acme' AND tags IN ('b', 'a') AND urgent = true AND notes = 'X, y'").plan();
    assert_eq!(
        p.candidates,
        vec![
            vec!["@customer:k=acme".to_string()],
            vec!["@tags:l=a".to_string(), "@tags:l=b".to_string()],
            vec!["@urgent:b=true".to_string()],
            vec!["@notes:x=x".to_string()],
            vec!["@notes:x=y".to_string()],
        ],
        "each word of a text's `=` is a candidate"
    );
    let p = q("Goal = 'Review the PR' AND notes != 'x'").plan();
    assert!(p.candidates.is_empty(), "the goal is not indexed: {p:?}");
    let p = q("priority > 2 AND priority <= 9 AND priority >= 1 AND customer STARTS_WITH 'ac'").plan();
    let int = |n| term("priority", ValueType::Int, &Value::Int(n)).unwrap();
    assert_eq!(
        p.ranges,
        vec![
            TermRange {
                prefix: "@customer:k=ac".into(),
                from: Some(("@customer:k=ac".into(), true)),
                to: None,
            },
            TermRange {
                prefix: term_prefix("priority", ValueType::Int),
                from: Some((int(2), false)),
                to: Some((int(9), true)),
            },
        ]
    );
    let r = &p.ranges[1];
    assert!(!r.contains(&int(2)) && r.contains(&int(3)) && r.contains(&int(9)) && !r.contains(&int(10)));
    assert!(q("priority > 2 OR customer = 'a'").plan().ranges.is_empty());
}

#[test]
fn no_attribute_may_take_a_built_in_fields_name() {
    let names: Vec<&str> = Builtin::ALL.iter().map(|b| b.name()).collect();
    assert_eq!(names, crate::attributes::BUILTIN_FIELDS);
}
