"""Railyard's MCP gateway, driven by an independent client: the official Python `mcp`
SDK (pinned in requirements.txt).

Starts a real `railyard server` (built-in demo workflow, free ports, a temporary data
directory), then over both transports, `railyard mcp` on stdio and `/mcp` over
streamable HTTP on the server's HTTP listener:
  - initialize, tools/list (every tool, with an object input schema),
  - list_workflows, start_workflow on the demo, complete_step through every step,
  - tool failures as tool results (isError) and an unknown tool as a protocol error,
and checks each run's history on the server with `railyard run history`.

Usage: python drive_demo.py --bin target/debug/railyard [--transcript]
Ends with "N passed, N failed"; exits non-zero on any failure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import traceback

from mcp import Client, StdioServerParameters

EXPECTED_TOOLS = {
    "list_workflows",
    "start_workflow",
    "complete_step",
    "get_run",
    "list_runs",
    "signal_run",
    "resume_run",
}
DEMO_HISTORY = [
    "RunStarted",
    "StepScheduled", "StepStarted", "StepCompleted",
    "StepScheduled", "StepStarted", "StepCompleted",
    "StepScheduled", "StepStarted", "StepCompleted",
    "RunCompleted",
]


class Server:
    """A `railyard server` in a temporary directory with no workflows/ (so the demo
    built into the binary is served)."""

    def __init__(self, binary: str):
        self.dir = tempfile.TemporaryDirectory()
        self.proc = subprocess.Popen(
            [binary, "server", "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
             "--data-dir", os.path.join(self.dir.name, "data")],
            cwd=self.dir.name, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env={**os.environ, "RUST_LOG": "warn"},
        )
        line = self.proc.stdout.readline()
        if not line.startswith("railyard server listening "):
            raise RuntimeError(f"unexpected first line from the server: {line!r}")
        fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
        self.grpc = "http://" + fields["grpc"]
        self.http = "http://" + fields["http"]

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.dir.cleanup()


class Transcript:
    def __init__(self, enabled: bool):
        self.enabled = enabled

    def call(self, name, args, result):
        if not self.enabled:
            return
        shown = dict(args)
        print(f"> {name} {json.dumps(shown)}")
        body = result.structured_content if result.structured_content is not None else result.content[0].text
        print(f"< {'(error) ' if result.is_error else ''}{json.dumps(body, indent=2)[:1500]}")


async def call(client, transcript, name, args):
    result = await client.call_tool(name, args)
    transcript.call(name, args, result)
    return result


def check(cond, message):
    if not cond:
        raise AssertionError(message)


async def drive(client, binary, server, transcript, label):
    """One whole demo run through `client`; returns the run id."""
    tools = await client.list_tools()
    names = {t.name for t in tools.tools}
    check(EXPECTED_TOOLS <= names, f"{label}: tools {sorted(names)}")
    for t in tools.tools:
        check(t.input_schema.get("type") == "object", f"{label}: {t.name} schema {t.input_schema}")
        check(t.description, f"{label}: {t.name} has a description")

    listed = await call(client, transcript, "list_workflows", {})
    check(not listed.is_error, f"{label}: list_workflows {listed}")
    check(any(w["id"] == "demo" for w in listed.structured_content["workflows"]), f"{label}: demo listed")

    step = await call(client, transcript, "start_workflow", {"workflow_id": "demo", "goal": "tide pools"})
    check(not step.is_error, f"{label}: start_workflow {step}")
    content = step.structured_content
    run_id = content["run_id"]
    titles = []
    while content["status"] == "step":
        titles.append(content["step"]["id"])
        check(content["prompt"], f"{label}: a prompt")
        token = content["continue_token"]
        step_id = content["step"]["id"]
        done = await call(client, transcript, "complete_step", {
            "continue_token": token,
            "notes": f"{step_id} done",
            "context_updates": {"research_file": "notes.md", "draft_file": "draft.md", "draft_status": "ok"},
        })
        check(not done.is_error, f"{label}: complete_step {done}")
        content = done.structured_content
        # The token just used is spent: refused as a tool error, nothing changes.
        again = await call(client, transcript, "complete_step", {"continue_token": token, "notes": "twice"})
        check(again.is_error and "refused" in again.content[0].text, f"{label}: reuse {again}")
    check(titles == ["research", "draft", "review"], f"{label}: steps {titles}")
    check(content["status"] == "finished" and content["run_status"] == "COMPLETED", f"{label}: {content}")

    bad = await call(client, transcript, "get_run", {"run_id": "no-such-run"})
    check(bad.is_error and "no-such-run" in bad.content[0].text, f"{label}: missing run {bad}")
    # An unknown tool is a protocol error (the SDK raises it), never a crash of the gateway.
    try:
        unknown = await client.call_tool("no_such_tool", {})
        check(unknown.is_error, f"{label}: unknown tool {unknown}")
    except AssertionError:
        raise
    except Exception:
        pass
    alive = await client.call_tool("list_workflows", {})
    check(not alive.is_error, f"{label}: still serving after an unknown tool")

    history = subprocess.run(
        [binary, "run", "history", run_id, "-o", "json", "--server", server.grpc],
        check=True, capture_output=True, text=True,
    )
    types = [e["event_type"] for e in json.loads(history.stdout)]
    check(types == DEMO_HISTORY, f"{label}: history {types}")
    return run_id


async def over_stdio(binary, server, transcript):
    params = StdioServerParameters(command=binary, args=["mcp", "--server", server.grpc],
                                   env={"RUST_LOG": "warn"})
    async with Client(params, read_timeout_seconds=60) as client:
        check(client.server_info.name == "railyard", f"stdio: server info {client.server_info}")
        await drive(client, binary, server, transcript, "stdio")


async def over_http(binary, server, transcript):
    async with Client(server.http + "/mcp", read_timeout_seconds=60) as client:
        check(client.server_info.name == "railyard", f"http: server info {client.server_info}")
        await drive(client, binary, server, transcript, "http")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--transcript", action="store_true")
    args = parser.parse_args()
    binary = os.path.abspath(args.bin)
    transcript = Transcript(args.transcript)
    passed = failed = 0
    server = Server(binary)
    try:
        for name, case in [("stdio", over_stdio), ("streamable http", over_http)]:
            try:
                asyncio.run(asyncio.wait_for(case(binary, server, transcript), timeout=300))
                passed += 1
                print(f"mcp client over {name}: ok", file=sys.stderr)
            except BaseException:
                failed += 1
                print(f"mcp client over {name}: FAILED", file=sys.stderr)
                traceback.print_exc()
    finally:
        server.stop()
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
