"""A Python agent for the ``research`` step of ``research.json`` (beside this file):
it talks with an OpenAI-compatible model, which may fetch web pages with a tool, and
completes with its findings; the ``write`` step goes to Railyard's built-in agent
(``railyard worker --queue default``).

    railyard server --workflows sdk-python/examples
    OPENAI_API_KEY=... python sdk-python/examples/research_worker.py
    railyard run start research-and-write --goal "Which Python HTTP clients support HTTP/3?"

Every model call and page fetch is a durable call: a worker killed mid-step is
replaced by the next one without asking the model again what it already answered.
Settings: RAILYARD_SERVER, RAILYARD_API_KEY (or _FILE), OPENAI_BASE_URL,
OPENAI_API_KEY, RESEARCH_MODEL.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import urllib.request

import railyard
import railyard.chat

QUEUE = "python-research"
MAX_PAGE_BYTES = 64 * 1024


def fetch_page(url: str) -> str:
    """Fetches a web page (http or https) and answers its text, at most 64 KiB."""
    if not re.match(r"^https?://", url):
        raise ValueError("only http:// and https:// URLs")
    with urllib.request.urlopen(url, timeout=30) as resp:
        body: bytes = resp.read(MAX_PAGE_BYTES)
    return re.sub(r"<[^>]+>", " ", body.decode(errors="replace"))


async def research(step: railyard.Step) -> dict[str, list[str]]:
    model = railyard.chat.OpenAI(os.environ.get("RESEARCH_MODEL", "gpt-4o-mini"))
    await step.output(f"researching: {step.goal}\n")
    reply = await railyard.chat.run(
        step,
        model,
        step.prompt,
        tools=[fetch_page],
        system="You are a careful researcher. Cite the pages you used as 'source: URL' lines.",
        max_turns=12,
    )
    findings, sources = [], []
    for line in reply.text.splitlines():
        line = line.strip().lstrip("-*• ").strip()
        if line.lower().startswith("source:"):
            sources.append(line.split(":", 1)[1].strip())
        elif line:
            findings.append(line)
    return {"findings": findings, "sources": sources}


async def main() -> None:
    logging.basicConfig(level=logging.INFO)
    async with railyard.AsyncClient() as client:
        await railyard.StepWorker(client, QUEUE, research, slots=4).run()


if __name__ == "__main__":
    asyncio.run(main())
