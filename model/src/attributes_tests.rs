use std::collections::BTreeMap;

use crate::attributes::*;

fn decl() -> AttributeTypes {
    let mut d = AttributeTypes::new();
    for (n, t) in [
        ("customer", ValueType::Keyword),
        ("notes", ValueType::Text),
        ("priority", ValueType::Int),
        ("score", ValueType::Double),
        ("urgent", ValueType::Bool),
        ("due", ValueType::Datetime),
        ("tags", ValueType::KeywordList),
    ] {
        declare(&mut d, n, t).unwrap();
    }
    d
}

fn raw(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn each_type_parses_from_text_and_prints_back() {
    let cases = [
        (ValueType::Keyword, "acme", AttributeValue::Keyword("acme".into())),
        (
            ValueType::Text,
            "two words",
            AttributeValue::Text("two words".into()),
        ),
        (ValueType::Int, "-42", AttributeValue::Int(-42)),
        (ValueType::Double, "0.5", AttributeValue::Double(0.5)),
        (ValueType::Double, "-0", AttributeValue::Double(0.0)),
        (ValueType::Bool, "TRUE", AttributeValue::Bool(true)),
        (
            ValueType::Datetime,
            "2026-11-20T01:00:00+01:00",
            AttributeValue::Datetime(1_795_132_800_000),
        ),
        (
            ValueType::KeywordList,
            "a, b",
            AttributeValue::KeywordList(vec!["a".into(), "b".into()]),
        ),
        (
            ValueType::KeywordList,
            r#"["a,b","c"]"#,
            AttributeValue::KeywordList(vec!["a,b".into(), "c".into()]),
        ),
    ];
    for (ty, text, want) in cases {
        let got = AttributeValue::parse(ty, text).unwrap();
        assert_eq!(got, want, "{text}");
        assert_eq!(got.value_type(), ty);
        assert_eq!(
            AttributeValue::parse(ty, &got.text()).unwrap(),
            got,
            "round trip of {text}"
        );
    }
    assert_eq!(
        AttributeValue::Datetime(1_795_132_800_000).text(),
        "2026-11-20T00:00:00.000Z"
    );
}

#[test]
fn mistyped_values_are_refused_saying_what_was_expected() {
    for (ty, text, want) in [
        (ValueType::Int, "two", "\"two\" is not an int"),
        (ValueType::Int, "1.5", "is not an int"),
        (ValueType::Double, "NaN", "not a finite number"),
        (ValueType::Bool, "yes", "not a bool"),
        (ValueType::Datetime, "yesterday", "not an RFC 3339 time"),
        (ValueType::KeywordList, "[1,2]", "not a JSON array of strings"),
        (ValueType::Keyword, "a\nb", "control character"),
        (ValueType::Text, "a\0b", "NUL"),
    ] {
        let e = AttributeValue::parse(ty, text).unwrap_err();
        assert!(e.contains(want), "{text}: {e}");
    }
}

#[test]
fn values_and_lists_are_bounded() {
    let long = "x".repeat(MAX_ATTRIBUTE_VALUE_BYTES + 1);
    let e = AttributeValue::parse(ValueType::Keyword, &long).unwrap_err();
    assert!(e.contains("longer than the limit of 1024"), "{e}");
    assert!(AttributeValue::parse(ValueType::Keyword, &long[1..]).is_ok());
    let items = vec!["a"; MAX_LIST_ITEMS + 1].join(",");
    let e = AttributeValue::parse(ValueType::KeywordList, &items).unwrap_err();
    assert!(e.contains("more than the limit of 32"), "{e}");
}

#[test]
fn names_are_checked_and_declarations_bounded() {
    let mut d = AttributeTypes::new();
    for bad in ["", "9lives", "a-b", "Status", "workflowid", "and", "null"] {
        assert!(declare(&mut d, bad, ValueType::Keyword).is_err(), "{bad:?}");
    }
    assert!(declare(&mut d, &"a".repeat(MAX_ATTRIBUTE_NAME_BYTES + 1), ValueType::Int).is_err());
    assert_eq!(declare(&mut d, "customer", ValueType::Keyword), Ok(true));
    assert_eq!(declare(&mut d, "customer", ValueType::Keyword), Ok(false));
    let e = declare(&mut d, "customer", ValueType::Int).unwrap_err();
    assert!(e.to_string().contains("already declared as keyword"), "{e}");
    for i in 1..MAX_DECLARED_ATTRIBUTES {
        declare(&mut d, &format!("a{i}"), ValueType::Int).unwrap();
    }
    let e = declare(&mut d, "one_more", ValueType::Int).unwrap_err();
    assert!(e.to_string().contains("declares 32 attributes, the limit"), "{e}");
}

#[test]
fn parse_set_names_the_undeclared_or_mistyped_attribute() {
    let d = decl();
    let set = parse_set(
        &d,
        &raw(&[("customer", "acme"), ("priority", "2"), ("urgent", "")]),
        "attributes",
    )
    .unwrap();
    assert_eq!(
        set,
        vec![
            ("customer".into(), Some(AttributeValue::Keyword("acme".into()))),
            ("priority".into(), Some(AttributeValue::Int(2))),
            ("urgent".into(), None),
        ]
    );
    let e = parse_set(&d, &raw(&[("region", "eu")]), "attributes").unwrap_err();
    assert_eq!(
        e.to_string(),
        "attributes: \"region\" is not a search attribute the namespace declares (railyard namespace attribute add)"
    );
    let e = parse_set(&d, &raw(&[("priority", "high")]), "attributes").unwrap_err();
    assert_eq!(
        e.to_string(),
        "attributes.priority: int value: \"high\" is not an int"
    );
}

#[test]
fn apply_reports_changes_and_bounds_the_run() {
    let mut attrs = Attributes::new();
    let set = vec![
        (
            "customer".to_string(),
            Some(AttributeValue::Keyword("acme".into())),
        ),
        ("priority".to_string(), Some(AttributeValue::Int(2))),
    ];
    let changes = apply(&mut attrs, set.clone(), "attributes").unwrap();
    assert_eq!(changes.len(), 2);
    assert_eq!(
        apply(&mut attrs, set, "attributes").unwrap(),
        vec![],
        "same values: no change"
    );
    let changes = apply(&mut attrs, vec![("priority".into(), None)], "attributes").unwrap();
    assert_eq!(
        changes,
        vec![AttributeChange {
            name: "priority".into(),
            before: Some(AttributeValue::Int(2)),
            after: None
        }]
    );
    let many: Vec<_> = (0..MAX_RUN_ATTRIBUTES)
        .map(|i| (format!("a{i}"), Some(AttributeValue::Int(1))))
        .collect();
    let before = attrs.clone();
    assert!(apply(&mut attrs, many, "attributes").is_err());
    assert_eq!(attrs, before, "a refused set changes nothing");
}

#[test]
fn number_terms_sort_as_the_numbers() {
    let ints = [i64::MIN, -5, -1, 0, 1, 2, 10, i64::MAX];
    let enc: Vec<String> = ints.iter().map(|n| sortable_int(*n)).collect();
    assert!(enc.windows(2).all(|w| w[0] < w[1]), "{enc:?}");
    let ds = [f64::MIN, -2.5, -1e-300, 0.0, 1e-300, 0.5, 3.0, f64::MAX];
    let enc: Vec<String> = ds.iter().map(|d| sortable_double(*d)).collect();
    assert!(enc.windows(2).all(|w| w[0] < w[1]), "{enc:?}");
    assert_eq!(sortable_double(-0.0), sortable_double(0.0));
}

#[test]
fn terms_carry_the_type_and_a_text_has_one_per_word() {
    assert_eq!(
        AttributeValue::Keyword("acme".into()).terms("customer"),
        vec!["@customer:k=acme"]
    );
    assert_eq!(
        AttributeValue::Text("Late, late delivery!".into()).terms("notes"),
        vec!["@notes:x=delivery", "@notes:x=late"]
    );
    assert_eq!(
        AttributeValue::KeywordList(vec!["b".into(), "a".into(), "b".into()]).terms("tags"),
        vec!["@tags:l=a", "@tags:l=b"]
    );
    assert_eq!(AttributeValue::Bool(true).terms("urgent"), vec!["@urgent:b=true"]);
}

#[test]
fn a_change_is_shown_with_typed_values() {
    let kind = crate::run::EventKind::SearchAttributesChanged {
        step_id: "a".into(),
        changes: vec![
            AttributeChange {
                name: "priority".into(),
                before: None,
                after: Some(AttributeValue::Int(2)),
            },
            AttributeChange {
                name: "tags".into(),
                before: Some(AttributeValue::KeywordList(vec!["x".into()])),
                after: None,
            },
        ],
    };
    assert_eq!(
        crate::run::wire::event_attributes_json(&kind),
        r#"{"changes":[{"after":2,"before":null,"name":"priority"},{"after":null,"before":["x"],"name":"tags"}],"stepId":"a"}"#
    );
}

#[test]
fn text_words_are_lowercased_split_on_non_alphanumerics_and_bounded() {
    assert_eq!(
        text_words("Fix PR#42: the_cache  (Ünïcode) fix"),
        ["fix", "pr", "42", "the", "cache", "ünïcode"]
    );
    assert!(text_words(" ,.;- ").is_empty());
    // A word longer than 64 bytes is skipped, one of 64 kept.
    let long = "a".repeat(MAX_WORD_BYTES + 1);
    let edge = "b".repeat(MAX_WORD_BYTES);
    assert_eq!(text_words(&format!("{long} {edge}")), [edge]);
    // The first 64 distinct words, in order; the rest are not indexed.
    let many: Vec<String> = (0..100).map(|i| format!("w{i}")).collect();
    let words = text_words(&format!("w0 {}", many.join(" ")));
    assert_eq!(words.len(), MAX_TEXT_WORDS);
    assert_eq!((words[0].as_str(), words[63].as_str()), ("w0", "w63"));
    assert_eq!(query_words("A-b").collect::<Vec<_>>(), ["a", "b"]);
}
