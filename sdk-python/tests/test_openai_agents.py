"""railyard.openai_agents: an openai-agents Agent with a function tool works a step
against a local Chat Completions mock; a retry replays its model and tool calls."""

from __future__ import annotations

import json
from typing import Any

from agents import Agent, function_tool
from agents.models.openai_provider import OpenAIProvider

import railyard
from railyard.openai_agents import run_agent
from railyard.v1 import common_pb2
from tests.support import MockModel, text_reply
from tests.test_worker import closed, working


def script(path: str, request: dict[str, Any], n: int) -> dict[str, Any]:
    assert path == "/v1/chat/completions", path
    last = request["messages"][-1]
    if last["role"] != "tool":
        assert request["messages"][0]["content"] == "Answer briefly."
        call = {
            "id": "call-7",
            "type": "function",
            "function": {"name": "weather", "arguments": json.dumps({"city": "Oslo"})},
        }
        return {
            "id": "c1",
            "object": "chat.completion",
            "created": 0,
            "model": "mock",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                    "finish_reason": "tool_calls",
                }
            ],
            "usage": {"prompt_tokens": 30, "completion_tokens": 4, "total_tokens": 34},
        }
    assert last["tool_call_id"] == "call-7"
    reply = text_reply(f"In Oslo: {last['content']}", n)
    reply["created"] = 0
    return reply


async def test_an_agent_run_is_durable(client: railyard.AsyncClient) -> None:
    mock = MockModel(script=script)
    calls: list[str] = []

    @function_tool
    def weather(city: str) -> str:
        """The weather in a city."""
        calls.append(city)
        return f"snow in {city}"

    agent = Agent(name="forecaster", instructions="Answer briefly.", tools=[weather], model="mock")

    async def handler(step: railyard.Step) -> Any:
        provider = OpenAIProvider(api_key="sk-test", base_url=mock.url, use_responses=False)
        result = await run_agent(step, agent, "Weather in Oslo?", provider=provider)
        if step.attempt == 1:
            raise railyard.StepError("again", error_type="flaky")
        return {"answer": str(result.final_output)}

    try:
        async with working(client, "py-agents", handler):
            run = await client.start_run("agents", "forecast")
            info = await closed(client, run.run_id)
    finally:
        mock.stop()
    assert info.status == common_pb2.RUN_STATUS_COMPLETED, info.failure
    assert json.loads(info.steps[0].result_json) == {"answer": "In Oslo: snow in Oslo"}
    assert mock.answered == 2 and calls == ["Oslo"], (mock.answered, calls)
    assert info.steps[0].usage.output_tokens == 7 and info.steps[0].model == "mock"
    data = (await client.get_step_checkpoint(run.run_id, "act")).data.decode()
    names = [json.loads(line)["name"] for line in data.splitlines()[1:]]
    assert names == ["agents.model", "agents.tool call-7", "agents.model"]
