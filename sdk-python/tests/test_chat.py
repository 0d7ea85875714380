"""railyard.chat against local mocks of both wire formats: a tool call and a final
answer, each a durable call, replayed (not asked again) by a retry."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

import railyard
import railyard.chat
from railyard.v1 import common_pb2
from tests.support import MockModel, text_reply
from tests.test_worker import closed, working


def openai_script(path: str, request: dict[str, Any], n: int) -> dict[str, Any]:
    assert path == "/v1/chat/completions"
    last = request["messages"][-1]
    if last["role"] != "tool":
        assert request["tools"][0]["function"]["name"] == "weather"
        assert request["messages"][0] == {"role": "system", "content": "be brief"}
        call = {
            "id": "call-1",
            "type": "function",
            "function": {"name": "weather", "arguments": json.dumps({"city": "Paris"})},
        }
        return {
            "choices": [
                {
                    "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                    "finish_reason": "tool_calls",
                }
            ],
            "usage": {"prompt_tokens": 20, "completion_tokens": 5},
        }
    assert last["tool_call_id"] == "call-1"
    return text_reply(f"The weather: {last['content']}", n)


def anthropic_script(path: str, request: dict[str, Any], n: int) -> dict[str, Any]:
    assert path == "/v1/messages"
    assert request["system"] == "be brief" and request["tools"][0]["name"] == "weather"
    last = request["messages"][-1]
    usage = {"input_tokens": 20, "output_tokens": 5, "cache_read_input_tokens": 7}
    if isinstance(last["content"], str):
        block = {"type": "tool_use", "id": "tu-1", "name": "weather", "input": {"city": "Paris"}}
        return {"content": [block], "stop_reason": "tool_use", "usage": usage}
    result = last["content"][0]
    assert result["type"] == "tool_result" and result["tool_use_id"] == "tu-1"
    text = {"type": "text", "text": f"The weather: {result['content']}"}
    return {"content": [text], "stop_reason": "end_turn", "usage": usage}


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
async def test_a_chat_with_a_tool_is_durable(client: railyard.AsyncClient, wire: str) -> None:
    script: Callable[[str, dict[str, Any], int], dict[str, Any]] = (
        openai_script if wire == "openai" else anthropic_script
    )
    mock = MockModel(script=script)
    tool_calls: list[str] = []

    def weather(city: str) -> str:
        """The weather in a city."""
        tool_calls.append(city)
        return f"sunny in {city}"

    async def agent(step: railyard.Step) -> Any:
        provider: railyard.chat.Provider
        if wire == "openai":
            provider = railyard.chat.OpenAI("mock", base_url=mock.url, api_key="sk-test")
        else:
            provider = railyard.chat.Anthropic("mock", base_url=mock.url[: -len("/v1")],
                                               api_key="sk-test")  # fmt: skip
        reply = await railyard.chat.run(
            step, provider, "What is the weather?", tools=[weather], system="be brief"
        )
        if step.attempt == 1:
            raise railyard.StepError("once more", error_type="flaky")
        return {"text": reply.text, "turns": reply.turns}

    try:
        async with working(client, "py-chat", agent):
            run = await client.start_run("chat", "chat")
            info = await closed(client, run.run_id)
    finally:
        mock.stop()
    assert info.status == common_pb2.RUN_STATUS_COMPLETED, info.failure
    assert json.loads(info.steps[0].result_json) == {
        "text": "The weather: sunny in Paris",
        "turns": 2,
    }
    assert mock.answered == 2 and tool_calls == ["Paris"], "the retry asked nobody again"
    auth = mock.headers[0].get("authorization") or mock.headers[0].get("x-api-key")
    assert auth in ("Bearer sk-test", "sk-test")
    usage = info.steps[0].usage
    expected = (30, 8, 0) if wire == "openai" else (40, 10, 14)
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens) == expected
    records = (await client.get_step_checkpoint(run.run_id, "talk")).data.decode().splitlines()[1:]
    assert [json.loads(r)["name"] for r in records] == ["chat.model", "chat.tool", "chat.model"]


def test_tool_schemas_come_from_signatures() -> None:
    def search(query: str, limit: int = 10, exact: bool = False) -> list[str]:
        """Search the index."""
        return []

    t = railyard.chat.tool(search)
    assert t.name == "search" and t.description == "Search the index."
    assert t.parameters == {
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "limit": {"type": "integer"},
            "exact": {"type": "boolean"},
        },
        "required": ["query"],
    }
    assert "sk-" not in repr(railyard.chat.OpenAI("m", api_key="sk-secret"))
