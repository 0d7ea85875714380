//! A tool call of the agent's turn: run it (the loop's own tools, the workspace's, an
//! MCP server's), its result fed back, and a completion the output contract refuses.

use super::*;

impl StepRun<'_> {
    pub(super) async fn call_tool(
        &mut self,
        name: &str,
        input: &Value,
        completion: &mut Option<Completion>,
    ) -> ToolOutput {
        let task = self.task;
        self.emit(EventKind::ToolCall {
            name: name.to_string(),
            summary: summarize_tool_input(name, input),
        });
        info!(run_id = %task.run_id, step = %task.step_id, attempt = task.attempt, tool = name,
            input = %summarize_tool_input(name, input), "tool call");
        let out = match name {
            COMPLETE_STEP => match (parse_completion(input), completion.is_some()) {
                (Ok(_), true) => ToolOutput::error("complete_step was already called in this turn"),
                (Ok(c), false) => {
                    *completion = Some(c);
                    if task.require_confirmation {
                        ToolOutput::ok("result submitted; it is held until a person approves it")
                    } else {
                        ToolOutput::ok("step completed")
                    }
                }
                (Err(e), _) => ToolOutput::error(e),
            },
            SPAWN_AGENT | AWAIT_RUNS if !tools::is_allowed(name, &task.allowed_tools) => {
                self.refused += 1;
                ToolOutput::error(format!("tool {name:?} is not allowed in this step"))
            }
            SPAWN_AGENT => match spawn::parse_spawn(input) {
                Ok(call) if call.wait => {
                    let k = 1 + self
                        .turn_waits
                        .iter()
                        .filter(|(_, w)| matches!(w, TurnWait::Spawn(_)))
                        .count();
                    let out = ToolOutput::ok(spawn::spawn_placeholder(k, &call.spec.workflow_id));
                    self.turn_waits.push((self.call_index, TurnWait::Spawn(call.spec)));
                    out
                }
                Ok(call) => match self.lease.spawn(vec![call.spec], false, Vec::new(), Vec::new()).await {
                    Ok(ids) => ToolOutput::ok(
                        serde_json::json!({
                            "childRunId": ids.first(),
                            "note": "started; it runs on its own. Call await_runs with its id to wait for its outcome."
                        })
                        .to_string(),
                    ),
                    Err(e) => ToolOutput::error(e.to_string()),
                },
                Err(e) => ToolOutput::error(e),
            },
            AWAIT_RUNS => match spawn::parse_await(input) {
                Ok(ids) => {
                    let out = ToolOutput::ok(spawn::await_placeholder(&ids));
                    self.turn_waits.push((self.call_index, TurnWait::Await(ids)));
                    out
                }
                Err(e) => ToolOutput::error(e),
            },
            SET_SEARCH_ATTRIBUTES => match input.get("attributes").map(calls::attribute_texts) {
                Some(Ok(attrs)) => match self.lease.set_search_attributes(attrs).await {
                    Ok(n) => ToolOutput::ok(format!(
                        "search attributes set ({n} changed); carry on with the step"
                    )),
                    Err(e) => ToolOutput::error(format!("set_search_attributes failed: {e}")),
                },
                Some(Err(e)) => ToolOutput::error(format!("set_search_attributes: {e}")),
                None => ToolOutput::error("set_search_attributes: `attributes` is required"),
            },
            REPORT_ISSUE => match issue::parse(input) {
                Ok(call) => {
                    self.emit(EventKind::Note {
                        kind: format!("issue:{}", call.severity),
                        message: call.summary.clone(),
                    });
                    issue::answer(
                        self.lease
                            .report_issue(call.severity, call.summary, call.details)
                            .await,
                    )
                }
                Err(e) => ToolOutput::error(e),
            },
            SIGNAL_COORDINATOR => match parse_note(input) {
                Ok(note) => {
                    self.emit(EventKind::Note {
                        kind: note.kind.clone(),
                        message: note.message.clone(),
                    });
                    self.notes.push(note);
                    ToolOutput::ok("note queued for the coordinator")
                }
                Err(e) => ToolOutput::error(e),
            },
            n if self.mcp.has(n) => self.mcp.call(n, input).await,
            n if !(WORKSPACE_TOOLS.contains(&n) || n == WEB_FETCH)
                || !tools::is_allowed(n, &task.allowed_tools) =>
            {
                self.refused += 1;
                let offered: Vec<&str> = self.req.tools.iter().map(|t| t.name.as_str()).collect();
                let why = if WORKSPACE_TOOLS.contains(&n) || n == WEB_FETCH {
                    "is not allowed in this step"
                } else {
                    "does not exist"
                };
                warn!(run_id = %task.run_id, step = %task.step_id, attempt = task.attempt, tool = n,
                    refused = self.refused, "tool call refused");
                ToolOutput::error(format!(
                    "tool {n:?} {why}; the tools you can use are: {}",
                    offered.join(", ")
                ))
            }
            n => self.tools.execute(n, input).await,
        };
        if out.is_error {
            self.emit(EventKind::ToolError {
                name: name.to_string(),
                message: one_line(&out.content, 200),
            });
        }
        self.lease.output(OutputChunk::ToolResult {
            name: name.to_string(),
            excerpt: railyard_model::text::prefix(&out.content, TOOL_RESULT_EXCERPT).to_string(),
            is_error: out.is_error,
        });
        out
    }

    /// Turns the `complete_step` result `call_id` of the last message into the server's
    /// refusal, so the model reads it on its next turn.
    pub(super) fn completion_refused(&mut self, call_id: Option<&str>, why: String) {
        warn!(run_id = %self.task.run_id, step = %self.task.step_id, attempt = self.task.attempt,
            why = %one_line(&why, 300), "completion refused; handed back to the model");
        self.emit(EventKind::ToolError {
            name: COMPLETE_STEP.to_string(),
            message: one_line(&why, 200),
        });
        let last = self.req.messages.last_mut().map(|m| &mut m.content);
        let block = last.into_iter().flatten().find(
            |b| matches!(b, Block::ToolResult { tool_use_id, .. } if Some(tool_use_id.as_str()) == call_id),
        );
        match block {
            Some(Block::ToolResult {
                content, is_error, ..
            }) => {
                *content = why;
                *is_error = true;
            }
            _ => self.push_user_text(why),
        }
    }
}
