//! Prompt templates (`{{goal}}`, `{{context.KEY}}`, `workflow::render`) and a
//! schedule fire's templates (`{{scheduledTime}}`, `{{scheduleId}}`,
//! `schedule::Fire::render`): any template over any values renders without a
//! panic, and the output is bounded by the inputs.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use railyard_model::ids;
use railyard_model::schedule::{Fire, MAX_SCHEDULE_ID, MAX_TIME, check_schedule_id};
use railyard_model::workflow::{check_template, render};

use crate::corpus;

/// A goal and a context to render over.
#[derive(Debug, Clone, Default)]
pub struct Values {
    pub goal: String,
    pub context: BTreeMap<String, String>,
}

/// Goals and contexts: short, unicode, control characters, placeholders inside
/// values, and long ones.
pub fn values() -> impl Strategy<Value = Values> {
    let value = prop_oneof![
        4 => ".{0,16}",
        1 => Just("{{goal}}{{context.k}}".to_string()),
        1 => "[\\x00-\\x1f]{0,4}",
        1 => (0usize..3).prop_map(|n| "v".repeat([0, 1000, 70_000][n])),
    ];
    let key = prop_oneof![
        Just("k".to_string()),
        Just("lang".to_string()),
        Just("any key".to_string()),
        ".{1,8}"
    ];
    (value.clone(), prop::collection::btree_map(key, value, 0..4))
        .prop_map(|(goal, context)| Values { goal, context })
}

/// One input: a template, values, and a fire to render the template for.
#[derive(Debug, Clone)]
pub struct TemplateInput {
    pub template: String,
    pub values: Values,
    pub schedule_id: String,
    pub due: i64,
}

/// Generated and mutated inputs; `seeds` are corpus templates.
pub fn strategy(seeds: Arc<Vec<Vec<u8>>>) -> impl Strategy<Value = TemplateInput> {
    let piece = prop_oneof![
        Just("{{goal}}".to_string()),
        Just("{{ context.k }}".to_string()),
        Just("{{context.lang}}".to_string()),
        Just("{{scheduledTime}}".to_string()),
        Just("{{scheduleId}}".to_string()),
        Just("{{".to_string()),
        Just("}}".to_string()),
        Just("{".to_string()),
        ".{0,6}",
    ];
    let template = prop_oneof![
        3 => prop::collection::vec(piece, 0..12).prop_map(|p| p.concat()),
        2 => corpus::mutated_text(seeds.clone()),
        1 => corpus::seed_text(seeds),
        1 => ".{0,40}",
    ];
    let id = prop_oneof![
        4 => "[a-z0-9-]{1,20}",
        1 => Just("x".repeat(MAX_SCHEDULE_ID)),
        1 => Just("x".repeat(MAX_SCHEDULE_ID + 1)),
        1 => ".{0,12}",
    ];
    let due = prop_oneof![
        3 => 0..=MAX_TIME,
        1 => any::<i64>(),
        1 => prop_oneof![Just(-1i64), Just(0), Just(MAX_TIME), Just(MAX_TIME + 1), Just(i64::MIN), Just(i64::MAX)],
    ];
    (template, values(), id, due).prop_map(|(template, values, schedule_id, due)| TemplateInput {
        template,
        values,
        schedule_id,
        due,
    })
}

/// Renders `template` over `values`; the output is at most the template plus, per
/// `{{`, the longest value.
pub fn check_render(template: &str, values: &Values) -> Result<(), TestCaseError> {
    // Checking never panics either, whatever it decides.
    let _ = check_template(template);
    let out = render(template, &values.goal, &values.context);
    let longest = values
        .context
        .values()
        .map(String::len)
        .chain([values.goal.len()])
        .max()
        .unwrap_or(0);
    let bound = template.len() + template.matches("{{").count() * longest;
    prop_assert!(out.len() <= bound, "rendered {} bytes, bound {bound}", out.len());
    if !template.contains("{{") {
        prop_assert_eq!(&out, template, "a template without placeholders changed");
    }
    Ok(())
}

/// The property (see the module docs).
pub fn check(input: &TemplateInput) -> Result<(), TestCaseError> {
    check_render(&input.template, &input.values)?;
    let fire = Fire::new(&input.schedule_id, input.due);
    let valid = check_schedule_id(&input.schedule_id).is_ok() && (0..=MAX_TIME).contains(&input.due);
    prop_assert_eq!(fire.is_ok(), valid, "Fire::new: {:?}", fire);
    if let Ok(fire) = fire {
        let run_id = fire.run_id();
        prop_assert!(
            ids::check_name(&run_id).is_ok(),
            "run id {run_id:?} is not a name"
        );
        prop_assert_eq!(fire.due(), input.due);
        let out = fire.render(&input.template);
        prop_assert!(
            out.len() <= 8 * input.template.len(),
            "Fire::render gave {} bytes from {}",
            out.len(),
            input.template.len()
        );
        if !input.template.contains("{{") {
            prop_assert_eq!(&out, &input.template);
        }
        // A fire's goal then goes through the workflow's template.
        check_render(&out, &input.values)?;
    }
    Ok(())
}
