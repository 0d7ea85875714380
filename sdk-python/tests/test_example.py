"""The example of the docs: research.json loads, and research_worker.py works the
research step against a mock model, handing the write step to the built-in agent's
queue."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

import railyard
from tests.support import MockModel, Server, text_reply

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


async def test_the_research_example(monkeypatch: pytest.MonkeyPatch) -> None:
    definition = json.loads((EXAMPLES / "research.json").read_text())
    spec = importlib.util.spec_from_file_location(
        "research_worker", EXAMPLES / "research_worker.py"
    )
    assert spec is not None and spec.loader is not None
    example: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    assert definition["steps"][0]["taskQueue"] == example.QUEUE

    def answer(path: str, request: dict[str, Any], n: int) -> dict[str, Any]:
        assert "HTTP/3" in request["messages"][-1]["content"]
        return text_reply("- httpx does not\n- aioquic does\nsource: https://example.org/h3", n)

    mock = MockModel(script=answer)
    monkeypatch.setenv("OPENAI_BASE_URL", mock.url)
    server = Server({"research": definition})
    try:
        async with railyard.AsyncClient(server.url) as client:
            assert not (await client.list_workflows()).invalid
            worker = railyard.StepWorker(
                client, example.QUEUE, example.research, poll_wait=1, handle_signals=False
            )
            task = asyncio.create_task(worker.run())
            run = await client.start_run("research-and-write", "Which clients speak HTTP/3?")
            async for ev in client.watch_run(run.run_id):
                if ev.event_type == "StepScheduled" and '"write"' in ev.attributes_json:
                    break
            worker.shutdown()
            await asyncio.wait_for(task, 10)
            info = (await client.describe_run(run.run_id)).run
            research, write = info.steps
            assert json.loads(research.result_json) == {
                "findings": ["httpx does not", "aioquic does"],
                "sources": ["https://example.org/h3"],
            }
            assert write.state == "SCHEDULED" and write.task_queue == "default"
            await client.terminate_run(run.run_id)
    finally:
        server.stop()
        mock.stop()
