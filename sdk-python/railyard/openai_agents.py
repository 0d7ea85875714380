"""Runs an ``openai-agents`` Agent as a step, each model call and each function-tool
call a durable call (``agents.model``; ``agents.tool <call id>``), so a resumed step
replays the agent's run instead of paying for it again. Needs the extra:
``pip install './sdk-python[openai-agents]'``.

    from agents import Agent, function_tool
    from railyard.openai_agents import run_agent

    async def handler(step):
        result = await run_agent(step, Agent(name="researcher", tools=[search]), step.prompt)
        return {"answer": str(result.final_output)}

Only ``Runner.run`` (not streaming) is durable. The runner itself runs again on a
resume; with the same answers from the journal it takes the same path.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import AsyncIterator
from typing import Any

try:
    from agents import Agent, FunctionTool, RunConfig, Runner, RunResult
    from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
    from agents.models.interface import Model, ModelProvider, ModelTracing
    from agents.models.multi_provider import MultiProvider
    from agents.tool_context import ToolContext
    from agents.usage import Usage
    from openai.types.responses import ResponseOutputItem
    from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails
    from pydantic import TypeAdapter
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "railyard.openai_agents needs the openai-agents package: "
        "pip install 'railyard[openai-agents]'"
    ) from e

from railyard.step import Step

_OUTPUT = TypeAdapter(ResponseOutputItem)


def _dump(response: ModelResponse) -> dict[str, Any]:
    u = response.usage
    return {
        "output": [item.model_dump(mode="json", exclude_none=True) for item in response.output],
        "usage": {
            "requests": u.requests,
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens,
            "total_tokens": u.total_tokens,
            "input_tokens_details": u.input_tokens_details.model_dump(mode="json"),
            "output_tokens_details": u.output_tokens_details.model_dump(mode="json"),
        },
        "response_id": response.response_id,
    }


def _load(value: dict[str, Any]) -> ModelResponse:
    u = value["usage"]
    usage = Usage(
        requests=u["requests"],
        input_tokens=u["input_tokens"],
        output_tokens=u["output_tokens"],
        total_tokens=u["total_tokens"],
        input_tokens_details=InputTokensDetails.model_validate(u["input_tokens_details"]),
        output_tokens_details=OutputTokensDetails.model_validate(u["output_tokens_details"]),
    )
    output = [_OUTPUT.validate_python(item) for item in value["output"]]
    return ModelResponse(output=output, usage=usage, response_id=value.get("response_id"))


class DurableModel(Model):
    """A model whose every answer is a durable call of ``step``."""

    def __init__(self, inner: Model, step: Step, name: str = "") -> None:
        self.inner = inner
        self.step = step
        self.name = name

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        *args: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        fresh = not self.step.will_replay("agents.model")

        async def call() -> dict[str, Any]:
            answer = await self.inner.get_response(system_instructions, input, *args, **kwargs)
            return _dump(answer)

        response = _load(await self.step.run("agents.model", call))
        if fresh:
            u = response.usage
            cached = u.input_tokens_details.cached_tokens or 0
            self.step.report_usage(
                u.input_tokens - cached, u.output_tokens, cache_read_tokens=cached, model=self.name
            )
        return response

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("railyard.openai_agents makes Runner.run durable, not streaming")

    async def close(self) -> None:
        await self.inner.close()


class DurableProvider(ModelProvider):
    """Resolves model names through ``inner``, each model made durable."""

    def __init__(self, inner: ModelProvider, step: Step) -> None:
        self.inner = inner
        self.step = step

    def get_model(self, model_name: str | None) -> Model:
        return DurableModel(self.inner.get_model(model_name), self.step, model_name or "")


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value, allow_nan=False)
        return value
    except (TypeError, ValueError):
        dump = getattr(value, "model_dump", None)
        return dump(mode="json") if callable(dump) else str(value)


def _durable_tool(t: FunctionTool, step: Step) -> FunctionTool:
    original = t.on_invoke_tool

    @functools.wraps(original)
    async def invoke(ctx: ToolContext[Any], arguments: str) -> Any:
        async def call() -> Any:
            return _jsonable(await original(ctx, arguments))

        # Named by the model's call id (journaled with its answer): the runner may run
        # a turn's tool calls concurrently, in any order.
        return await step.run(f"agents.tool {ctx.tool_call_id}", call)

    durable = copy.copy(t)
    durable.on_invoke_tool = invoke
    return durable


def durable_agent(
    agent: Agent[Any], step: Step, _seen: dict[int, Agent[Any]] | None = None
) -> Agent[Any]:
    """A clone of ``agent`` (and of the agents it hands off to) whose function tools
    are durable calls of ``step``, and whose model, if it is a ``Model`` instance, too
    (a model named by a string is made durable by :func:`run_agent`'s provider)."""
    seen = {} if _seen is None else _seen
    if id(agent) in seen:
        return seen[id(agent)]
    tools = [_durable_tool(t, step) if isinstance(t, FunctionTool) else t for t in agent.tools]
    clone = agent.clone(tools=tools)
    seen[id(agent)] = clone
    if isinstance(agent.model, Model):
        clone.model = DurableModel(agent.model, step, type(agent.model).__name__)
    clone.handoffs = [
        durable_agent(h, step, seen) if isinstance(h, Agent) else h for h in agent.handoffs
    ]
    return clone


async def run_agent(
    step: Step,
    agent: Agent[Any],
    input: str | list[TResponseInputItem] | None = None,
    *,
    provider: ModelProvider | None = None,
    run_config: RunConfig | None = None,
    max_turns: int = 10,
    context: Any = None,
) -> RunResult:
    """``Runner.run(agent, input)`` with every model call and function-tool call
    durable (``input`` defaults to the step's prompt). Models named by strings are
    resolved by ``provider`` (default: the SDK's ``MultiProvider``: OpenAI, with
    ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL``). Tracing is off unless ``run_config``
    turns it on."""
    config = copy.copy(run_config) if run_config is not None else RunConfig(tracing_disabled=True)
    config.model_provider = DurableProvider(
        provider or config.model_provider or MultiProvider(), step
    )
    return await Runner.run(
        durable_agent(agent, step),
        step.prompt if input is None else input,
        context=context,
        max_turns=max_turns,
        run_config=config,
    )


__all__ = ["DurableModel", "DurableProvider", "ModelTracing", "durable_agent", "run_agent"]
