//! The workflow definitions a server offers: the files of its workflows directory
//! and those built into the binary, each parsed and validated by the model
//! ([`railyard_model::workflow::parse_definition`]). Reading is bounded: regular
//! files only, at most [`MAX_DEFINITION_FILES`] of at most [`MAX_DEFINITION_BYTES`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use railyard_model::workflow::{WorkflowDef, parse_definition};

/// Largest definition file, in bytes.
pub const MAX_DEFINITION_BYTES: u64 = 1 << 20;
/// Most definition files loaded from one directory.
pub const MAX_DEFINITION_FILES: usize = 256;
/// Longest load error kept for one file, in bytes.
pub const MAX_LOAD_ERROR: usize = 1024;

/// A definition that failed to load, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct InvalidDefinition {
    pub file: PathBuf,
    /// `file: JSON path: problem`.
    pub error: String,
}

/// The prefix of the source name of a definition built into the binary, where a file's
/// path would be: `<built-in>/demo.json`.
pub const BUILT_IN_PREFIX: &str = "<built-in>/";

/// The prefix of the source name of a definition registered from code
/// (`History.RegisterWorkflow`): `<registered>/<namespace>/<id>`.
pub const REGISTERED_PREFIX: &str = "<registered>/";

/// A definition built into the binary (`include_str!`), loaded like a file of the
/// workflows directory: same validation, same errors, its source named
/// `<built-in>/<name>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmbeddedDefinition {
    /// The file name it was built from (`demo.json`).
    pub name: &'static str,
    /// The definition's JSON text.
    pub text: &'static str,
}

impl EmbeddedDefinition {
    /// Where listings and errors say it came from: `<built-in>/<name>`.
    pub fn source(&self) -> PathBuf {
        PathBuf::from(format!("{BUILT_IN_PREFIX}{}", self.name))
    }
}

/// Whether a file name is a workflow definition: `*.json` but not `*.script.json`
/// (scripts for the offline provider).
pub fn is_definition_file(name: &str) -> bool {
    name.ends_with(".json") && !name.ends_with(".script.json")
}

/// The definition files of `dir`, sorted by path. A missing directory has none.
/// Whether each is a regular file is checked when it is read.
pub fn definition_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(is_definition_file)
            })
            // Bounded while listing, so a directory of millions of names cannot
            // exhaust memory; one over the limit tells `load_dir` to say so.
            .take(MAX_DEFINITION_FILES * 4 + 1)
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    files.sort();
    Ok(files)
}

/// Reads one definition file: a regular file of at most [`MAX_DEFINITION_BYTES`],
/// opened without blocking, so a FIFO or a device is refused instead of hanging the
/// server's start.
fn read_definition(file: &Path) -> Result<String, String> {
    railyard_files::read_regular_text(file, MAX_DEFINITION_BYTES).map_err(|e| e.to_string())
}

/// The loaded definitions, by id.
#[derive(Debug, Default)]
pub struct WorkflowRegistry {
    pub valid: BTreeMap<String, (Arc<WorkflowDef>, PathBuf)>,
    pub invalid: Vec<InvalidDefinition>,
    /// The server's principles (`server.principles_file`); `None`: the built-in
    /// `railyard_model::principles::DEFAULT`.
    pub principles: Option<String>,
}

impl WorkflowRegistry {
    /// The server's principles, the first layer every run's are composed from.
    pub fn server_principles(&self) -> &str {
        self.principles
            .as_deref()
            .unwrap_or(railyard_model::principles::DEFAULT)
    }

    /// The principles a run of `def` in a namespace with `namespace` principles
    /// starts with: the server's, then the namespace's, then the definition's, each
    /// extending or replacing the ones before.
    pub fn principles_for(
        &self,
        namespace: Option<&railyard_model::principles::Layer>,
        def: &WorkflowDef,
    ) -> String {
        railyard_model::principles::compose(
            self.server_principles(),
            namespace.into_iter().chain(def.principles.as_ref()),
        )
    }

    /// Loads every definition file of `dir` ([`definition_files`]). A bad file is
    /// recorded in `invalid`; it stops nothing. A missing directory gives an empty
    /// registry.
    ///
    /// Each file must be a regular file of at most [`MAX_DEFINITION_BYTES`]; at most
    /// [`MAX_DEFINITION_FILES`] are loaded, and the rest recorded as refused.
    pub fn load_dir(dir: &Path) -> std::io::Result<Self> {
        let mut reg = Self::default();
        let files = definition_files(dir)?;
        for (i, file) in files.into_iter().enumerate() {
            if i >= MAX_DEFINITION_FILES {
                reg.invalid.push(InvalidDefinition {
                    error: format!(
                        "{}: more than {MAX_DEFINITION_FILES} definition files in {}; the rest were not loaded",
                        file.display(),
                        dir.display()
                    ),
                    file,
                });
                break;
            }
            let parsed = read_definition(&file).and_then(|text| parse_definition(&text));
            reg.add(file, parsed);
        }
        Ok(reg)
    }

    /// Adds a definition built into the binary, validated exactly like a file; a bad
    /// one (or one whose id is taken) is recorded in `invalid` under its source name.
    pub fn add_embedded(&mut self, def: &EmbeddedDefinition) {
        self.add(def.source(), parse_definition(def.text));
    }

    /// Records one parsed definition from `file`, refusing an id already defined.
    fn add(&mut self, file: PathBuf, parsed: Result<WorkflowDef, String>) {
        let error = match parsed {
            Ok(def) => match self.valid.get(&def.id) {
                Some((_, other)) => {
                    format!("id: \"{}\" is already defined by {}", def.id, other.display())
                }
                None => {
                    self.valid.insert(def.id.clone(), (Arc::new(def), file));
                    return;
                }
            },
            Err(e) => e,
        };
        self.invalid.push(InvalidDefinition {
            error: railyard_model::text::cut(&format!("{}: {error}", file.display()), MAX_LOAD_ERROR, "…"),
            file,
        });
    }

    pub fn get(&self, id: &str) -> Option<&Arc<WorkflowDef>> {
        self.valid.get(id).map(|(def, _)| def)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(steps: &str) -> String {
        format!(r#"{{"id":"wf","version":"1","name":"W","steps":{steps}}}"#)
    }

    #[test]
    fn fifos_devices_and_huge_files_are_refused_by_name_without_hanging() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo.json");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        std::os::unix::fs::symlink("/dev/zero", dir.path().join("zero.json")).unwrap();
        let big = std::fs::File::create(dir.path().join("big.json")).unwrap();
        big.set_len(MAX_DEFINITION_BYTES + 1).unwrap();
        std::fs::write(
            dir.path().join("good.json"),
            def(r#"[{"id":"a","title":"A","prompt":"p"}]"#),
        )
        .unwrap();
        let path = dir.path().to_path_buf();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(WorkflowRegistry::load_dir(&path).unwrap()).unwrap());
        let reg = rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("loading the directory hung");
        assert!(reg.get("wf").is_some());
        let errors: Vec<&str> = reg.invalid.iter().map(|i| i.error.as_str()).collect();
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(
            errors[0].ends_with("big.json: 1048577 bytes, more than the limit of 1048576"),
            "{errors:?}"
        );
        assert!(
            errors[1].ends_with("fifo.json: not a regular file (a FIFO)"),
            "{errors:?}"
        );
        assert!(
            errors[2].ends_with("zero.json: not a regular file (a device)"),
            "{errors:?}"
        );
    }

    #[test]
    fn at_most_max_definition_files_are_loaded() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..=MAX_DEFINITION_FILES {
            std::fs::write(
                dir.path().join(format!("w{i:04}.json")),
                format!(r#"{{"id":"w{i}","version":"1","name":"W","steps":[{{"id":"a","title":"A","prompt":"p"}}]}}"#),
            )
            .unwrap();
        }
        let reg = WorkflowRegistry::load_dir(dir.path()).unwrap();
        assert_eq!(reg.valid.len(), MAX_DEFINITION_FILES);
        assert_eq!(reg.invalid.len(), 1);
        assert!(
            reg.invalid[0].error.contains("the rest were not loaded"),
            "{:?}",
            reg.invalid
        );
    }

    #[test]
    fn load_dir_keeps_good_files_and_reports_bad_ones() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("good.json"),
            def(r#"[{"id":"a","title":"A","prompt":"p"}]"#),
        )
        .unwrap();
        std::fs::write(dir.path().join("bad.json"), r#"{"id":"x"}"#).unwrap();
        std::fs::write(dir.path().join("demo.script.json"), "not a definition").unwrap();
        let reg = WorkflowRegistry::load_dir(dir.path()).unwrap();
        assert!(reg.get("wf").is_some());
        assert_eq!(reg.invalid.len(), 1);
        assert!(
            reg.invalid[0].error.contains("bad.json: $: missing field"),
            "{}",
            reg.invalid[0].error
        );
    }

    #[test]
    fn embedded_definitions_are_validated_like_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("wf.json"),
            def(r#"[{"id":"a","title":"A","prompt":"p"}]"#),
        )
        .unwrap();
        let mut reg = WorkflowRegistry::load_dir(dir.path()).unwrap();
        let other =
            r#"{"id":"other","version":"1","name":"O","steps":[{"id":"a","title":"A","prompt":"p"}]}"#;
        reg.add_embedded(&EmbeddedDefinition {
            name: "other.json",
            text: other,
        });
        assert_eq!(reg.valid["other"].1, PathBuf::from("<built-in>/other.json"));

        // The same id as a file, and a broken definition: refused, named by source.
        reg.add_embedded(&EmbeddedDefinition {
            name: "same.json",
            text: r#"{"id":"wf","version":"1","name":"W","steps":[{"id":"a","title":"A","prompt":"p"}]}"#,
        });
        reg.add_embedded(&EmbeddedDefinition {
            name: "bad.json",
            text: r#"{"id":"x","version":"1","name":"X","steps":[]}"#,
        });
        assert_eq!(reg.valid.len(), 2);
        let errors: Vec<&str> = reg.invalid.iter().map(|i| i.error.as_str()).collect();
        assert!(
            errors[0].starts_with("<built-in>/same.json: id: \"wf\" is already defined by")
                && errors[0].ends_with("wf.json"),
            "{errors:?}"
        );
        assert_eq!(
            errors[1],
            "<built-in>/bad.json: steps: a workflow needs at least one step"
        );
        assert_eq!(reg.invalid[1].file, PathBuf::from("<built-in>/bad.json"));
    }

    #[test]
    fn definition_files_skip_scripts_and_other_files() {
        let dir = tempfile::tempdir().unwrap();
        assert!(definition_files(&dir.path().join("missing")).unwrap().is_empty());
        for name in ["b.json", "a.json", "demo.script.json", "notes.md"] {
            std::fs::write(dir.path().join(name), "{}").unwrap();
        }
        let names: Vec<_> = definition_files(dir.path())
            .unwrap()
            .into_iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["a.json", "b.json"]);
    }

    #[test]
    fn a_bad_contract_in_a_definition_file_names_the_file_and_json_path() {
        let dir = tempfile::tempdir().unwrap();
        let step = |extra: &str| {
            format!(
                r#"{{"id":"wf","version":"1","name":"W","steps":[{{"id":"a","title":"A","prompt":"p"}},
                {{"id":"b","title":"B","prompt":"p",{extra}}}]}}"#
            )
        };
        std::fs::write(
            dir.path().join("schema.json"),
            step(r#""output":{"type":"object","properties":{"n":{"type":"integr"}}}"#),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("globs.json"),
            step(r#""requiredArtifacts":["ok.md","[z"]"#),
        )
        .unwrap();
        let reg = WorkflowRegistry::load_dir(dir.path()).unwrap();
        assert!(reg.valid.is_empty());
        let errors: Vec<&str> = reg.invalid.iter().map(|i| i.error.as_str()).collect();
        let file = |name: &str| dir.path().join(name).display().to_string();
        assert!(
            errors[0].starts_with(&format!(
                "{}: steps[1].requiredArtifacts[1]: ",
                file("globs.json")
            )),
            "{errors:?}"
        );
        assert!(
            errors[1].starts_with(&format!(
                "{}: steps[1].output.properties.n.type: ",
                file("schema.json")
            )),
            "{errors:?}"
        );
    }
}
