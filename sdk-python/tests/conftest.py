from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

import railyard
from tests.support import Server


def step(sid: str, **extra: Any) -> dict[str, Any]:
    return {"id": sid, "title": sid.upper(), "prompt": f"do {sid} for {{{{goal}}}}", **extra}


FAST_RETRY = {"initialIntervalSeconds": 0.1, "maximumIntervalSeconds": 1, "maximumAttempts": 4}

WORKFLOWS: dict[str, dict[str, Any]] = {
    "tour": {
        "id": "tour",
        "name": "tour",
        "version": "1",
        "taskQueue": "nobody",
        "steps": [step("a"), step("b")],
    },
    "two": {
        "id": "two",
        "version": "1",
        "taskQueue": "py-two",
        "steps": [
            step("a", retry=FAST_RETRY),
            step("b", prompt="b after {{steps.a.result.word}}", retry=FAST_RETRY),
        ],
    },
    "contract": {
        "id": "contract",
        "version": "1",
        "taskQueue": "py-contract",
        "steps": [
            step(
                "judge",
                retry={**FAST_RETRY, "maximumAttempts": 1},
                output={
                    "type": "object",
                    "required": ["verdict"],
                    "properties": {"verdict": {"enum": ["approve", "reject"]}},
                },
            )
        ],
    },
    "durable": {
        "id": "durable",
        "version": "1",
        "taskQueue": "py-durable",
        "steps": [step("work", retry=FAST_RETRY)],
    },
    "control": {
        "id": "control",
        "version": "1",
        "taskQueue": "py-control",
        "steps": [step("work", heartbeatTimeoutSeconds=3, retry=FAST_RETRY)],
    },
    "kill": {
        "id": "kill",
        "version": "1",
        "taskQueue": "py-kill",
        "steps": [step("calls", heartbeatTimeoutSeconds=2, retry=FAST_RETRY)],
    },
    "chat": {
        "id": "chat",
        "version": "1",
        "taskQueue": "py-chat",
        "steps": [step("talk", retry=FAST_RETRY)],
    },
    "agents": {
        "id": "agents",
        "version": "1",
        "taskQueue": "py-agents",
        "steps": [step("act", retry=FAST_RETRY)],
    },
    "parent": {
        "id": "parent",
        "version": "1",
        "taskQueue": "py-parent",
        "steps": [step("fan", retry=FAST_RETRY)],
    },
    "child": {
        "id": "child",
        "version": "1",
        "taskQueue": "py-child",
        "steps": [step("leaf", retry=FAST_RETRY)],
    },
}

for _id, _wf in WORKFLOWS.items():
    _wf.setdefault("name", _id)


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    s = Server(WORKFLOWS)
    with railyard.Client(s.url) as c:
        invalid = c.list_workflows().invalid
    assert not invalid, [w.error for w in invalid]
    yield s
    s.stop()


@pytest.fixture
async def client(server: Server) -> AsyncIterator[railyard.AsyncClient]:
    async with railyard.AsyncClient(server.url, request_timeout=10) as c:
        yield c


@pytest.fixture
def sync_client(server: Server) -> Iterator[railyard.Client]:
    with railyard.Client(server.url, request_timeout=10) as c:
        yield c
