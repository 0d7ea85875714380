"""A plain chat loop with tools for a step handler: Anthropic's Messages API or an
OpenAI-compatible Chat Completions API, tools as Python functions. Each model call and
each tool call is a durable call of the step (``chat.model``, ``chat.tool``), so a
resumed step replays the conversation instead of paying for it again. HTTP is the
standard library's (urllib, in a thread): no extra dependency.

    model = railyard.chat.OpenAI(model="gpt-4o-mini")          # OPENAI_API_KEY, OPENAI_BASE_URL
    reply = await railyard.chat.run(step, model, step.prompt, tools=[get_weather])
    return {"answer": reply.text}
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import random
import time
import typing
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from railyard.errors import StepError
from railyard.step import Step

MAX_RESPONSE_BYTES = 32 * 1024 * 1024
_JSON_TYPES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    dict: "object",
}


class ModelError(StepError):
    """A model API refused a call (after retries of 429 and 5xx answers)."""

    def __init__(self, message: str, *, status: int = 0) -> None:
        retryable = status in (0, 408, 409, 429) or status >= 500
        super().__init__(message, error_type="model_error", non_retryable=not retryable)
        self.status = status


@dataclass
class Tool:
    """A function the model may call: its name, description and JSON Schema of its
    arguments, read from the signature and docstring by :func:`tool`."""

    fn: Callable[..., Any]
    name: str
    description: str
    parameters: dict[str, Any]

    def call(self, arguments: dict[str, Any]) -> Any:
        return self.fn(**arguments)


def tool(fn: Callable[..., Any]) -> Tool:
    """A :class:`Tool` from a function with type-annotated parameters (``str``,
    ``int``, ``float``, ``bool``, ``list``, ``dict``) and a docstring."""
    hints = typing.get_type_hints(fn)
    props: dict[str, Any] = {}
    required: list[str] = []
    for name, p in inspect.signature(fn).parameters.items():
        hint = hints.get(name, str)
        origin = typing.get_origin(hint) or hint
        props[name] = {"type": _JSON_TYPES.get(origin, "string")}
        if p.default is inspect.Parameter.empty:
            required.append(name)
    schema = {"type": "object", "properties": props, "required": required}
    return Tool(fn, fn.__name__, inspect.getdoc(fn) or fn.__name__, schema)


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass
class Turn:
    """One model answer, read from the provider's JSON."""

    text: str
    tool_calls: list[ToolCall]
    stop_reason: str
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass
class Reply:
    """How the conversation ended: the last answer's text, the turns taken, and the
    whole transcript in the provider's format."""

    text: str
    turns: int
    messages: list[dict[str, Any]] = field(default_factory=list)


def _post(url: str, headers: dict[str, str], body: dict[str, Any], timeout: float) -> Any:
    """POSTs JSON, retrying 429, 5xx and transport errors with backoff."""
    data = json.dumps(body).encode()
    for attempt in range(5):
        req = urllib.request.Request(url, data=data, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                raw = resp.read(MAX_RESPONSE_BYTES + 1)
            if len(raw) > MAX_RESPONSE_BYTES:
                raise ModelError(f"{url}: answer longer than {MAX_RESPONSE_BYTES} bytes", status=1)
            return json.loads(raw)
        except urllib.error.HTTPError as e:
            detail = e.read(65536).decode(errors="replace")
            if (e.code not in (408, 409, 429) and e.code < 500) or attempt == 4:
                raise ModelError(f"{url}: HTTP {e.code}: {detail[:2000]}", status=e.code) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
            if attempt == 4:
                raise ModelError(f"{url}: {e}") from None
        except ValueError as e:
            raise ModelError(f"{url}: the answer is not JSON: {e}", status=1) from None
        time.sleep(min(8.0, 0.5 * 2**attempt) * random.uniform(1, 2))
    raise AssertionError("unreachable")


class Provider:
    """A chat API: how to call it and read its answers."""

    model: str

    def request(
        self, system: str, messages: list[dict[str, Any]], tools: Sequence[Tool]
    ) -> dict[str, Any]:
        raise NotImplementedError

    def turn(self, response: dict[str, Any]) -> Turn:
        raise NotImplementedError

    def assistant(self, response: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def user(self, text: str) -> dict[str, Any]:
        return {"role": "user", "content": text}

    def tool_results(self, results: list[tuple[ToolCall, str, bool]]) -> list[dict[str, Any]]:
        raise NotImplementedError


class OpenAI(Provider):
    """An OpenAI-compatible Chat Completions API (OpenAI, Ollama, vLLM, llama.cpp):
    ``base_url`` defaults to ``OPENAI_BASE_URL``, else ``https://api.openai.com/v1``;
    the key to ``OPENAI_API_KEY`` (none sent when unset)."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 600.0,
        max_tokens: int = 0,
    ) -> None:
        self.model = model
        self.base_url = (
            base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        ).rstrip("/")
        self._key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY", "")
        self.timeout = timeout
        self.max_tokens = max_tokens

    def __repr__(self) -> str:
        return f"OpenAI(model={self.model!r}, base_url={self.base_url!r})"

    def request(
        self, system: str, messages: list[dict[str, Any]], tools: Sequence[Tool]
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": ([{"role": "system", "content": system}] if system else []) + messages,
        }
        if tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                }
                for t in tools
            ]
        if self.max_tokens:
            body["max_tokens"] = self.max_tokens
        headers = {"Content-Type": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        answer: dict[str, Any] = _post(
            f"{self.base_url}/chat/completions", headers, body, self.timeout
        )
        return answer

    def turn(self, response: dict[str, Any]) -> Turn:
        try:
            choice = response["choices"][0]
            message = choice["message"]
        except (KeyError, IndexError, TypeError):
            raise ModelError(f"an answer without choices: {json.dumps(response)[:500]}") from None
        calls = []
        for call in message.get("tool_calls") or []:
            fn = call.get("function") or {}
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except ValueError:
                args = {"_unparsed": fn.get("arguments")}
            calls.append(ToolCall(str(call.get("id", "")), str(fn.get("name", "")), args))
        usage = response.get("usage") or {}
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        return Turn(
            text=message.get("content") or "",
            tool_calls=calls,
            stop_reason=str(choice.get("finish_reason") or ""),
            input_tokens=int(usage.get("prompt_tokens") or 0) - int(cached),
            output_tokens=int(usage.get("completion_tokens") or 0),
            cache_read_tokens=int(cached),
        )

    def assistant(self, response: dict[str, Any]) -> dict[str, Any]:
        message = dict(response["choices"][0]["message"])
        message.setdefault("role", "assistant")
        return message

    def tool_results(self, results: list[tuple[ToolCall, str, bool]]) -> list[dict[str, Any]]:
        return [{"role": "tool", "tool_call_id": c.id, "content": text} for c, text, _ in results]


class Anthropic(Provider):
    """Anthropic's Messages API: ``base_url`` defaults to ``ANTHROPIC_BASE_URL``, else
    ``https://api.anthropic.com``; the key to ``ANTHROPIC_API_KEY``."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        max_tokens: int = 4096,
        timeout: float = 600.0,
    ) -> None:
        self.model = model
        self.base_url = (
            base_url or os.environ.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com"
        ).rstrip("/")
        self._key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY", "")
        self.max_tokens = max_tokens
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"Anthropic(model={self.model!r}, base_url={self.base_url!r})"

    def request(
        self, system: str, messages: list[dict[str, Any]], tools: Sequence[Tool]
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": messages,
        }
        if system:
            body["system"] = system
        if tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in tools
            ]
        headers = {"Content-Type": "application/json", "anthropic-version": "2023-06-01"}
        if self._key:
            headers["x-api-key"] = self._key
        base = self.base_url if self.base_url.endswith("/v1") else f"{self.base_url}/v1"
        answer: dict[str, Any] = _post(f"{base}/messages", headers, body, self.timeout)
        return answer

    def turn(self, response: dict[str, Any]) -> Turn:
        blocks = response.get("content")
        if not isinstance(blocks, list):
            raise ModelError(f"an answer without content: {json.dumps(response)[:500]}")
        text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
        calls = [
            ToolCall(str(b.get("id", "")), str(b.get("name", "")), dict(b.get("input") or {}))
            for b in blocks
            if b.get("type") == "tool_use"
        ]
        usage = response.get("usage") or {}
        return Turn(
            text=text,
            tool_calls=calls,
            stop_reason=str(response.get("stop_reason") or ""),
            input_tokens=int(usage.get("input_tokens") or 0),
            output_tokens=int(usage.get("output_tokens") or 0),
            cache_read_tokens=int(usage.get("cache_read_input_tokens") or 0),
            cache_write_tokens=int(usage.get("cache_creation_input_tokens") or 0),
        )

    def assistant(self, response: dict[str, Any]) -> dict[str, Any]:
        return {"role": "assistant", "content": response["content"]}

    def tool_results(self, results: list[tuple[ToolCall, str, bool]]) -> list[dict[str, Any]]:
        content = [
            {"type": "tool_result", "tool_use_id": c.id, "content": text, "is_error": error}
            for c, text, error in results
        ]
        return [{"role": "user", "content": content}]


async def run(
    step: Step,
    provider: Provider,
    prompt: str,
    *,
    tools: Sequence[Tool | Callable[..., Any]] = (),
    system: str = "",
    max_turns: int = 20,
) -> Reply:
    """Talks with the model until it answers without calling a tool (or ``max_turns``
    answers have come, a :class:`~railyard.StepError` ``max_turns_exceeded``). Every
    model call is ``step.run("chat.model", ...)`` and every tool call
    ``step.run("chat.tool", ...)``; a tool's exception goes back to the model as an
    error result. Usage is reported for the calls this attempt made; text and tool
    calls go to the step's live output."""
    toolset = [t if isinstance(t, Tool) else tool(t) for t in tools]
    by_name = {t.name: t for t in toolset}
    messages: list[dict[str, Any]] = [provider.user(prompt)]
    for n in range(1, max_turns + 1):
        fresh = not step.will_replay("chat.model")
        response = await step.run(
            "chat.model", functools.partial(provider.request, system, list(messages), toolset)
        )
        turn = provider.turn(response)
        if fresh:
            step.report_usage(
                turn.input_tokens,
                turn.output_tokens,
                cache_read_tokens=turn.cache_read_tokens,
                cache_write_tokens=turn.cache_write_tokens,
                model=provider.model,
            )
            if turn.text:
                await step.output(turn.text)
        messages.append(provider.assistant(response))
        if not turn.tool_calls:
            return Reply(text=turn.text, turns=n, messages=messages)
        results: list[tuple[ToolCall, str, bool]] = []
        for tc in turn.tool_calls:
            results.append(await _tool(step, by_name, tc))
        messages.extend(provider.tool_results(results))
    raise StepError(f"no final answer in {max_turns} turns", error_type="max_turns_exceeded")


async def _tool(step: Step, tools: dict[str, Tool], tc: ToolCall) -> tuple[ToolCall, str, bool]:
    t = tools.get(tc.name)

    def invoke() -> dict[str, Any]:
        if t is None:
            return {"error": f"no tool named {tc.name!r}"}
        try:
            value = t.call(tc.arguments)
        except Exception as e:
            return {"error": f"{type(e).__name__}: {e}"}
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        return {"ok": text}

    fresh = not step.will_replay("chat.tool")
    if fresh:
        await step.output(kind="tool_call_start", name=tc.name, call_id=tc.id)
        await step.output(json.dumps(tc.arguments), kind="tool_input")
    outcome = await step.run("chat.tool", invoke)
    error = "error" in outcome
    text = str(outcome.get("error") if error else outcome.get("ok"))
    if fresh:
        await step.output(text[:2048], kind="tool_result", name=tc.name, is_error=error)
    return tc, text, error
