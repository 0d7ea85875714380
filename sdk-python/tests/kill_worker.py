"""A step worker process for the kill test: its handler asks the model at MOCK_URL
six questions, each a durable call, and completes with the six answers."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import urllib.request
from typing import Any

import railyard


def ask(question: str) -> str:
    body = json.dumps(
        {"model": "mock", "messages": [{"role": "user", "content": question}]}
    ).encode()
    req = urllib.request.Request(
        os.environ["MOCK_URL"] + "/chat/completions",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        answer: dict[str, Any] = json.load(resp)
    return str(answer["choices"][0]["message"]["content"])


async def agent(step: railyard.Step) -> dict[str, Any]:
    answers = []
    for i in range(6):
        answers.append(await step.run("model", ask, f"question {i + 1}"))
        step.report_usage(10, 3, model="mock")
    return {"answers": answers, "attempt": step.attempt}


async def main() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    async with railyard.AsyncClient() as client:
        worker = railyard.StepWorker(client, "py-kill", agent, poll_wait=1, shutdown_grace=5)
        print("ready", flush=True)
        await worker.run()
    print("stopped", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
