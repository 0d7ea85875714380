//! The principles section of a step's system prompt: what the run pinned when it
//! started (`StepTask.principles`: the server's, extended or replaced by the
//! workflow's), under a heading of its own, after the rules. Nothing when empty.

use railyard_proto::v1::StepTask;

use crate::provider::ToolSpec;

/// The step's system prompt (`crate::prompt`) with the principles section after it.
pub(crate) fn system_prompt(task: &StepTask, max_turns: u32, tools: &[ToolSpec]) -> String {
    let mut s = crate::prompt::system_prompt(task, max_turns, tools);
    if let Some(section) = section(task) {
        s.push_str(&section);
    }
    s
}

/// The heading the principles go under.
pub(crate) const HEADING: &str = "## Principles";

/// The section, or `None` when the task carries none.
pub(crate) fn section(task: &StepTask) -> Option<String> {
    let text = task.principles.trim();
    (!text.is_empty())
        .then(|| format!("\n{HEADING}\n\nHow to work, in every step of this workflow:\n\n{text}\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principles_go_under_their_heading_and_none_add_nothing() {
        let mut task = StepTask::default();
        assert_eq!(section(&task), None);
        task.principles = "  \n".into();
        assert_eq!(section(&task), None);
        task.principles = "- check your work\n".into();
        let s = section(&task).unwrap();
        assert!(s.contains("## Principles\n"), "{s}");
        assert!(s.ends_with("- check your work\n"), "{s}");
    }
}
