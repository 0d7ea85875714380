//! Today's behaviour of the three template vocabularies, recorded before they shared
//! one engine: what each accepts, refuses (with which message) and renders. A
//! change here is a change users see.

use std::collections::BTreeMap;

use serde_json::json;

use crate::schedule::Fire;
use crate::template::payload::{RenderError, Template};
use crate::workflow::{
    PromptValues, check_template, check_template_with, render, render_values, rendered_len_values,
};

fn ctx() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("k".to_string(), "V".to_string()),
        ("é".to_string(), "ü".to_string()),
    ])
}

fn show<T: std::fmt::Debug, E: std::fmt::Display>(r: Result<T, E>) -> String {
    match r {
        Ok(v) => format!("ok {v:?}"),
        Err(e) => format!("err {e}"),
    }
}

#[test]
fn prompt_checks() {
    let cases = [
        "",
        "plain text",
        "{{goal}}",
        "{{ goal }}",
        "{{\tgoal\n}}",
        "{{\u{3000}goal\u{3000}}}",
        "{{context.k}}",
        "{{ context.any-key_1.x }}",
        "{{context.}}",
        "{{context.a b}}",
        "{{Goal}}",
        "{{}}",
        "{{ }}",
        "{{",
        "ab{{goal}}é{{",
        "é{{x}}",
        "{{{goal}}}",
        "{{goal}}}",
        "}}{{goal}}",
        "{{ {{goal}} }}",
        "{{goal}}{{",
        "{{goal",
        "{{steps.a.result}}",
        "{{steps.a}}",
        "{ {goal} }",
        "{{goal}}{{context.k}}{{nope}}",
    ];
    let got: Vec<String> = cases
        .iter()
        .map(|t| format!("{t:?}: {}", show(check_template(t))))
        .collect();
    let want = [
        r#""": ok ()"#,
        r#""plain text": ok ()"#,
        r#""{{goal}}": ok ()"#,
        r#""{{ goal }}": ok ()"#,
        r#""{{\tgoal\n}}": ok ()"#,
        r#""{{\u{3000}goal\u{3000}}}": ok ()"#,
        r#""{{context.k}}": ok ()"#,
        r#""{{ context.any-key_1.x }}": ok ()"#,
        r#""{{context.}}": err unknown placeholder {{context.}} at character 0 (use {{goal}}, {{context.KEY}} or {{steps.ID.result.FIELD}})"#,
        r#""{{context.a b}}": ok ()"#,
        r#""{{Goal}}": err unknown placeholder {{Goal}} at character 0 (use {{goal}}, {{context.KEY}} or {{steps.ID.result.FIELD}})"#,
        r#""{{}}": err unknown placeholder {{}} at character 0 (use {{goal}}, {{context.KEY}} or {{steps.ID.result.FIELD}})"#,
        r#""{{ }}": err unknown placeholder {{}} at character 0 (use {{goal}}, {{context.KEY}} or {{steps.ID.result.FIELD}})"#,
        r#""{{": err unclosed '{{' at character 0"#,
        r#""ab{{goal}}é{{": err unclosed '{{' at character 12"#,
        r#""é{{x}}": err unknown placeholder {{x}} at character 2 (use {{goal}}, {{context.KEY}} or {{steps.ID.result.FIELD}})"#,
        r#""{{{goal}}}": err unknown placeholder {{{goal}} at character 0 (use {{goal}}, {{context.KEY}} or {{steps.ID.result.FIELD}})"#,
        r#""{{goal}}}": ok ()"#,
        r#""}}{{goal}}": ok ()"#,
        r#""{{ {{goal}} }}": err unknown placeholder {{{{goal}} at character 0 (use {{goal}}, {{context.KEY}} or {{steps.ID.result.FIELD}})"#,
        r#""{{goal}}{{": err unclosed '{{' at character 8"#,
        r#""{{goal": err unclosed '{{' at character 0"#,
        r#""{{steps.a.result}}": err placeholder "{{steps.a.result}}" at character 0 names no earlier step's result: no step "a" runs before this one"#,
        r#""{{steps.a}}": err placeholder "{{steps.a}}" at character 0 names no earlier step's result: the form is {{steps.ID.result}} or {{steps.ID.result.FIELD}}"#,
        r#""{ {goal} }": ok ()"#,
        r#""{{goal}}{{context.k}}{{nope}}": err unknown placeholder {{nope}} at character 21 (use {{goal}}, {{context.KEY}} or {{steps.ID.result.FIELD}})"#,
    ];
    assert_eq!(got, want);
}

#[test]
fn prompt_checks_with_steps() {
    let earlier = ["a", "a.b"];
    let later = ["c"];
    let cases = [
        "{{steps.a.result}}",
        "{{steps.a.b.result.x}}",
        "{{ steps.a.result.items.0.y }}",
        "{{steps.c.result}}",
        "x {{steps.c.result.f}}",
        "{{steps.z.result}}",
        "{{steps.a.results}}",
        "{{steps.a.result..x}}",
        "{{steps.a.result.}}",
        "{{steps.a.result.{x}}",
        "{{steps.}}",
    ];
    let got: Vec<String> = cases
        .iter()
        .map(|t| format!("{t:?}: {}", show(check_template_with(t, &earlier, &later))))
        .collect();
    let want = [
        r#""{{steps.a.result}}": ok ()"#,
        r#""{{steps.a.b.result.x}}": ok ()"#,
        r#""{{ steps.a.result.items.0.y }}": ok ()"#,
        r#""{{steps.c.result}}": err placeholder "{{steps.c.result}}" at character 0 names no earlier step's result: step "c" does not run before this one, so its result is not known yet"#,
        r#""x {{steps.c.result.f}}": err placeholder "{{steps.c.result.f}}" at character 2 names no earlier step's result: step "c" does not run before this one, so its result is not known yet"#,
        r#""{{steps.z.result}}": err placeholder "{{steps.z.result}}" at character 0 names no earlier step's result: no step "z" runs before this one"#,
        r#""{{steps.a.results}}": err placeholder "{{steps.a.results}}" at character 0 names no earlier step's result: no step "a" runs before this one"#,
        r#""{{steps.a.result..x}}": err placeholder "{{steps.a.result..x}}" at character 0 names no earlier step's result: no step "a" runs before this one"#,
        r#""{{steps.a.result.}}": err placeholder "{{steps.a.result.}}" at character 0 names no earlier step's result: no step "a" runs before this one"#,
        r#""{{steps.a.result.{x}}": err placeholder "{{steps.a.result.{x}}" at character 0 names no earlier step's result: no step "a" runs before this one"#,
        r#""{{steps.}}": err placeholder "{{steps.}}" at character 0 names no earlier step's result: the form is {{steps.ID.result}} or {{steps.ID.result.FIELD}}"#,
    ];
    assert_eq!(got, want);
    // A long placeholder is quoted cut to 64 bytes, with its length (the step id is
    // not cut).
    let long = format!("{{{{steps.{}.result}}}}", "s".repeat(100));
    let e = check_template_with(&long, &earlier, &later).unwrap_err();
    let s = "s".repeat(100);
    assert_eq!(
        e,
        format!(
            "placeholder \"{{{{steps.{}\"… (117 bytes) at character 0 names no earlier step's result: \
             no step \"{s}\" runs before this one",
            &s[..56]
        )
    );
    // An unknown one is quoted whole.
    let long = format!("{{{{{}}}}}", "u".repeat(300));
    let e = check_template(&long).unwrap_err();
    assert!(
        e.starts_with(&format!("unknown placeholder {long} at character 0")),
        "{e}"
    );
}

#[test]
fn prompt_renders() {
    let ctx = ctx();
    let results = [("a", r#"{"t":"T","n":[1,{"x":null}]}"#), ("b", "")];
    let values = PromptValues {
        goal: "G",
        context: &ctx,
        results: &results,
    };
    let cases = [
        ("", ""),
        ("plain", "plain"),
        ("{{goal}}", "G"),
        ("{{ goal }}{{goal}}", "GG"),
        ("{{context.k}}|{{context.é}}|{{context.none}}", "V|ü|"),
        ("{{nope}}x", "x"),
        ("{{}}x", "x"),
        ("a{{", "a{{"),
        ("a{{goal", "a{{goal"),
        ("{{goal}}{{", "G{{"),
        ("{{{goal}}}", "}"),
        ("{{goal}}}", "G}"),
        ("}}{{goal}}{", "}}G{"),
        ("{{ {{goal}} }}", " }}"),
        ("é{{goal}}ü", "éGü"),
        ("{{steps.a.result}}", r#"{"n":[1,{"x":null}],"t":"T"}"#),
        (
            "{{steps.a.result.t}}|{{steps.a.result.n.1}}|{{steps.a.result.n.9}}",
            r#"T|{"x":null}|"#,
        ),
        ("[{{steps.b.result}}][{{steps.zz.result}}]", "[][]"),
        ("{{scheduledTime}}{{$.a}}", ""),
    ];
    for (t, want) in cases {
        assert_eq!(render_values(t, &values), want, "{t:?}");
        assert_eq!(rendered_len_values(t, &values), want.len(), "{t:?}");
    }
    assert_eq!(
        render("{{goal}} {{context.k}} {{steps.a.result}}", "g", &ctx),
        "g V "
    );
    // Placeholders in values are not filled again.
    assert_eq!(render("{{goal}}", "{{context.k}}", &ctx), "{{context.k}}");
    // Many placeholders: no limit on their count.
    let many = "{{goal}}".repeat(100_000);
    assert_eq!(check_template(&many), Ok(()));
    assert_eq!(render(&many, "ab", &ctx).len(), 200_000);
}

fn payload_case(text: &str) -> String {
    let p = json!({
        "a": "A", "n": 7, "f": 1.5, "t": true, "z": null,
        "o": {"x": [1, "two", {"y": "é"}]}, "a.b": "dotted", "é": "ü", "": "empty key",
    });
    match Template::parse(text) {
        Err(e) => format!("refused: {e}"),
        Ok(t) => format!("{} {}", t.has_paths(), show(t.render(&p, 300))),
    }
}

#[test]
fn payload_templates() {
    let cases = [
        "",
        "plain",
        "{{$.a}}",
        "{{ $.a }}",
        "{{$.n}}{{$.f}}{{$.t}}{{$.z}}",
        "{{$.o}}",
        "{{$.o.x[1]}}|{{$.o.x[2].y}}|{{$.o.x[2][\"y\"]}}",
        "{{$[\"a.b\"]}}{{$.é}}{{$[\"\"]}}",
        "{{$}}",
        "{{$.missing}}",
        "{{ $.o.x[9] }}",
        "{{$.a.b}}",
        "{{goal}} {{context.k}} {{$.a}}",
        "{{ {{$.a}}",
        "{{$.a",
        "{{$.a}} {{",
        "{{{$.a}}}",
        "{{$.a}}}",
        "é{{$.é}}ü",
        "{{$.}}",
        "{{$x}}",
        "{{$[a]}}",
        "{{$[\"a}}",
        "{{$[1}}",
        "{{$..a}}",
        "{{$[-1]}}",
        "{{ $ }}",
        "{{$}}{{$}}{{$}}",
        "{{$.a[0]}}",
    ];
    let got: Vec<String> = cases
        .iter()
        .map(|t| format!("{t:?}: {}", payload_case(t)))
        .collect();
    let want = [
        r#""": false ok """#,
        r#""plain": false ok "plain""#,
        r#""{{$.a}}": true ok "A""#,
        r#""{{ $.a }}": true ok "A""#,
        r#""{{$.n}}{{$.f}}{{$.t}}{{$.z}}": true ok "71.5truenull""#,
        r#""{{$.o}}": true ok "{\"x\":[1,\"two\",{\"y\":\"é\"}]}""#,
        r#""{{$.o.x[1]}}|{{$.o.x[2].y}}|{{$.o.x[2][\"y\"]}}": true ok "two|é|é""#,
        r#""{{$[\"a.b\"]}}{{$.é}}{{$[\"\"]}}": true ok "dottedüempty key""#,
        r#""{{$}}": true ok "{\"\":\"empty key\",\"a\":\"A\",\"a.b\":\"dotted\",\"f\":1.5,\"n\":7,\"o\":{\"x\":[1,\"two\",{\"y\":\"é\"}]},\"t\":true,\"z\":null,\"é\":\"ü\"}""#,
        r#""{{$.missing}}": true err the payload has no value at $.missing"#,
        r#""{{ $.o.x[9] }}": true err the payload has no value at $.o.x[9]"#,
        r#""{{$.a.b}}": true err the payload has no value at $.a.b"#,
        r#""{{goal}} {{context.k}} {{$.a}}": true ok "{{goal}} {{context.k}} A""#,
        r#""{{ {{$.a}}": false ok "{{ {{$.a}}""#,
        r#""{{$.a": false ok "{{$.a""#,
        r#""{{$.a}} {{": true ok "A {{""#,
        r#""{{{$.a}}}": false ok "{{{$.a}}}""#,
        r#""{{$.a}}}": true ok "A}""#,
        r#""é{{$.é}}ü": true ok "éüü""#,
        r#""{{$.}}": refused: placeholder {{$.}}: empty name at byte 2"#,
        r#""{{$x}}": refused: placeholder {{$x}}: expected `.name`, `[index]` or `["name"]` at byte 1"#,
        r#""{{$[a]}}": refused: placeholder {{$[a]}}: index "a" is not a number"#,
        r#""{{$[\"a}}": refused: placeholder {{$["a}}: unclosed [" at byte 1"#,
        r#""{{$[1}}": refused: placeholder {{$[1}}: unclosed [ at byte 1"#,
        r#""{{$..a}}": refused: placeholder {{$..a}}: empty name at byte 2"#,
        r#""{{$[-1]}}": refused: placeholder {{$[-1]}}: index "-1" is not a number"#,
        r#""{{ $ }}": true ok "{\"\":\"empty key\",\"a\":\"A\",\"a.b\":\"dotted\",\"f\":1.5,\"n\":7,\"o\":{\"x\":[1,\"two\",{\"y\":\"é\"}]},\"t\":true,\"z\":null,\"é\":\"ü\"}""#,
        r#""{{$}}{{$}}{{$}}": true err renders to more than 300 bytes"#,
        r#""{{$.a[0]}}": true err the payload has no value at $.a[0]"#,
    ];
    assert_eq!(got, want);
}

#[test]
fn payload_bounds() {
    // 64 paths are taken, the 65th refused; other placeholders do not count.
    let ok = format!("{}{}", "{{x}}".repeat(100), "{{$.a}}".repeat(64));
    assert!(Template::parse(&ok).is_ok());
    let e = Template::parse(&"{{$.a}}".repeat(65)).unwrap_err();
    assert_eq!(e, "more than 64 placeholders");
    // The count is checked before the 65th path is read.
    let e = Template::parse(&format!("{}{{{{$x}}}}", "{{$.a}}".repeat(64))).unwrap_err();
    assert_eq!(e, "more than 64 placeholders");
    let e = Template::parse(&format!("{}{{{{$x}}}}", "{{$.a}}".repeat(63))).unwrap_err();
    assert!(e.starts_with("placeholder {{$x}}"), "{e}");
    // A path's length and steps are bounded, and a long one is quoted cut.
    let long = format!("{{{{$.{}}}}}", "p".repeat(255));
    let e = Template::parse(&long).unwrap_err();
    assert!(e.ends_with(": path is 257 bytes; at most 256"), "{e}");
    assert!(
        e.starts_with(&format!("placeholder {{{{$.{}…}}}}", "p".repeat(78))),
        "{e}"
    );
    let deep = format!("{{{{${}}}}}", ".a".repeat(33));
    assert!(
        Template::parse(&deep)
            .unwrap_err()
            .ends_with("more than 32 steps")
    );
    assert!(Template::parse(&format!("{{{{${}}}}}", ".a".repeat(32))).is_ok());
    // The output bound counts bytes, text and values alike; the limit named is the
    // template's.
    let t = Template::parse("é{{$.a}}").unwrap();
    assert_eq!(t.render(&json!({"a": "xy"}), 4), Ok("éxy".to_string()));
    assert_eq!(t.render(&json!({"a": "xyz"}), 4), Err(RenderError::TooLong(4)));
    assert_eq!(t.render(&json!({"a": [1]}), 5), Ok("é[1]".to_string()));
    assert_eq!(t.render(&json!({"a": [12]}), 5), Err(RenderError::TooLong(5)));
    let t = Template::parse("abcdef{{$.missing}}").unwrap();
    assert_eq!(t.render(&json!({}), 3), Err(RenderError::TooLong(3)));
    assert_eq!(
        t.render(&json!({}), 6),
        Err(RenderError::Missing("$.missing".into()))
    );
    assert_eq!(
        Template::parse("").unwrap().render(&json!({}), 0),
        Ok(String::new())
    );
}

#[test]
fn fire_renders() {
    let fire = Fire::new("nightly", 1_774_170_000_000).unwrap();
    let cases = [
        ("", ""),
        ("{{scheduledTime}}|{{scheduleId}}", "2026-03-22T09:00:00Z|nightly"),
        ("{{ scheduleId }}", "{{ scheduleId }}"),
        ("{{ScheduleId}}", "{{ScheduleId}}"),
        ("{{{scheduleId}}}", "{nightly}"),
        ("{{{{scheduleId}}", "{{nightly"),
        ("{{ x {{scheduleId}}", "{{ x nightly"),
        ("{{scheduleId", "{{scheduleId"),
        (
            "{{goal}}{{context.k}}{{$.a}}{{scheduleId}}",
            "{{goal}}{{context.k}}{{$.a}}nightly",
        ),
        ("é{{scheduleId}}ü{{", "énightlyü{{"),
        (
            "{{scheduledTime}}{{scheduledTime}}",
            "2026-03-22T09:00:00Z2026-03-22T09:00:00Z",
        ),
        ("{{scheduleId}}}}", "nightly}}"),
    ];
    for (t, want) in cases {
        assert_eq!(fire.render(t), want, "{t:?}");
    }
}

/// Every sequence of up to five of these pieces, through the prompt's check and
/// render, the payload template and a fire.
const PIECES: [&str; 11] = [
    "{{",
    "}}",
    "{",
    "}",
    " ",
    "goal",
    "context.k",
    "$.a",
    "é",
    "scheduleId",
    "$[",
];

fn every_sequence(max: usize, mut f: impl FnMut(&str)) {
    let mut idx: Vec<usize> = Vec::new();
    loop {
        f(&idx.iter().map(|&i| PIECES[i]).collect::<String>());
        // The next sequence, shortest first.
        let mut i = idx.len();
        loop {
            if i == 0 {
                if idx.len() == max {
                    return;
                }
                idx = vec![0; idx.len() + 1];
                break;
            }
            i -= 1;
            if idx[i] + 1 < PIECES.len() {
                idx[i] += 1;
                idx[i + 1..].iter_mut().for_each(|x| *x = 0);
                break;
            }
        }
    }
}

#[test]
fn fire_fills_exactly_what_a_search_for_the_names_finds() {
    let fire = Fire::new("s-1", 0).unwrap();
    let mut n = 0;
    every_sequence(5, |t| {
        let want = t
            .replace("{{scheduledTime}}", "1970-01-01T00:00:00Z")
            .replace("{{scheduleId}}", "s-1");
        assert_eq!(fire.render(t), want, "{t:?}");
        n += 1;
    });
    assert_eq!(n, 177_156);
}

/// A digest of every sequence's results, so the refactored engine can be checked
/// against what the separate implementations did.
#[test]
fn every_short_template_keeps_its_results() {
    use sha2::Digest;
    let ctx = ctx();
    let values = PromptValues {
        goal: "G",
        context: &ctx,
        results: &[],
    };
    let payload = json!({"a": "A"});
    let mut h = sha2::Sha256::new();
    every_sequence(5, |t| {
        h.update(format!("{:?}\u{0}", check_template(t)));
        h.update(render_values(t, &values));
        h.update([0]);
        h.update(rendered_len_values(t, &values).to_le_bytes());
        h.update(format!(
            "{:?}\u{0}",
            Template::parse(t).map(|p| (p.has_paths(), p.render(&payload, 8)))
        ));
    });
    assert_eq!(
        hex::encode(h.finalize()),
        "e50f71ddab53784a267973c52054c5e339156fea09324d92dc652153b92c4945"
    );
}

/// Templates of a megabyte render in one pass, whatever their braces: none of the
/// vocabularies looks at a piece of text more than a few times.
#[test]
fn huge_templates_render_in_linear_time() {
    let ctx = ctx();
    let fire = Fire::new("s", 0).unwrap();
    let payload = json!({"a": "A"});
    for t in [
        format!("{}}}}}", "{{".repeat(500_000)),
        "{{".repeat(500_000),
        "{{ x ".repeat(200_000) + "}}",
        "{{goal}}".repeat(130_000),
        "{{scheduleId}}".repeat(70_000),
        "{{x}}".repeat(200_000),
    ] {
        let _ = check_template(&t);
        let _ = render(&t, "g", &ctx);
        let _ = fire.render(&t);
        if let Ok(p) = Template::parse(&t) {
            let _ = p.render(&payload, 1 << 20);
        }
    }
}
