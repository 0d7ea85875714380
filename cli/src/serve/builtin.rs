//! The demo built into the binary, so that `railyard dev` (and `railyard server`) work
//! for someone who installed `railyard` and runs it outside a checkout.
//!
//! The rule: the built-in demo stands in for the workflows directory only when no
//! directory was configured (no `--workflows`, `RAILYARD_WORKFLOWS` or config-file key)
//! and the default `./workflows` holds no definition file (it does not exist, or has
//! no `*.json` besides `*.script.json`). A directory that was asked for, or one with
//! definitions in it (even broken ones, which are then reported), is used as it is.

use std::path::Path;

use railyard_engine::registry::{self, BUILT_IN_PREFIX, EmbeddedDefinition};
use railyard_worker::provider::{BuiltInScript, ScriptSource};

/// `workflows/demo.json`, as built into the binary.
pub(crate) const DEMO_WORKFLOW: EmbeddedDefinition = EmbeddedDefinition {
    name: "demo.json",
    text: include_str!("../../../workflows/demo.json"),
};

/// `workflows/demo.script.json`, the offline script of the demo, as built into the binary.
pub(crate) const DEMO_SCRIPT: ScriptSource = ScriptSource::BuiltIn(BuiltInScript {
    name: "<built-in>/demo.script.json",
    text: include_str!("../../../workflows/demo.script.json"),
});

/// What the listening lines print for the workflows when the built-in demo is used
/// (one word: tests split those lines on whitespace).
pub(crate) const WORKFLOWS_LABEL: &str = "<built-in>";

/// Whether the built-in demo is used instead of `dir` (see the module's rule).
/// `configured` says whether `dir` was set by a flag, the environment or a config file.
/// A directory that cannot be read is not replaced: the server then reports it.
pub(crate) fn use_built_in(configured: bool, dir: &Path) -> bool {
    !configured && registry::definition_files(dir).is_ok_and(|files| files.is_empty())
}

/// Whether a definition's source (as `workflow list` shows it) is built into the binary.
pub(crate) fn is_built_in(source: &str) -> bool {
    source.starts_with(BUILT_IN_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use railyard_engine::registry::WorkflowRegistry;

    #[test]
    fn the_built_in_demo_is_valid_and_its_script_loads() {
        let mut reg = WorkflowRegistry::default();
        reg.add_embedded(&DEMO_WORKFLOW);
        assert!(reg.invalid.is_empty(), "{:?}", reg.invalid);
        let demo = reg.get("demo").expect("the demo's id is `demo`");
        assert_eq!(demo.steps.len(), 3);
        assert_eq!(
            reg.valid["demo"].1,
            std::path::PathBuf::from("<built-in>/demo.json")
        );
        railyard_worker::provider::ScriptedProvider::load(&DEMO_SCRIPT).expect("built-in script");
        // The same bytes as the files of a checkout.
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../workflows");
        assert_eq!(
            std::fs::read_to_string(repo.join("demo.json")).unwrap(),
            DEMO_WORKFLOW.text
        );
    }

    #[test]
    fn fallback_only_when_nothing_was_asked_for_and_no_definitions_exist() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("workflows");
        assert!(use_built_in(false, &missing), "missing default directory");
        assert!(
            !use_built_in(true, &missing),
            "a directory asked for is used as it is"
        );

        std::fs::create_dir(&missing).unwrap();
        std::fs::write(missing.join("demo.script.json"), "{}").unwrap();
        std::fs::write(missing.join("README.md"), "notes").unwrap();
        assert!(use_built_in(false, &missing), "no definition files");
        assert!(!use_built_in(true, &missing));

        std::fs::write(missing.join("broken.json"), "{").unwrap();
        assert!(
            !use_built_in(false, &missing),
            "a broken definition is reported, not replaced"
        );

        let file = dir.path().join("a-file");
        std::fs::write(&file, "").unwrap();
        assert!(!use_built_in(false, &file), "an unreadable directory is reported");
    }

    #[test]
    fn built_in_sources_are_recognised() {
        assert!(is_built_in(&DEMO_WORKFLOW.source().display().to_string()));
        assert!(!is_built_in("workflows/demo.json"));
    }
}
