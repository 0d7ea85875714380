"""StepWorker against a real server: a two-step workflow, contract violations,
durable calls replayed on retry, cancellation and signals."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

import railyard
from railyard.v1 import common_pb2


@asynccontextmanager
async def working(
    client: railyard.AsyncClient, queue: str, handler: Callable[[railyard.Step], Awaitable[Any]]
) -> AsyncIterator[railyard.StepWorker]:
    worker = railyard.StepWorker(
        client, queue, handler, slots=2, poll_wait=1, shutdown_grace=2, handle_signals=False
    )
    task = asyncio.create_task(worker.run())
    try:
        yield worker
    finally:
        worker.shutdown()
        await asyncio.wait_for(task, 15)


async def closed(
    client: railyard.AsyncClient, run_id: str, timeout: float = 30
) -> common_pb2.RunInfo:
    async def wait() -> common_pb2.RunInfo:
        async for _ in client.watch_run(run_id):
            pass
        return (await client.describe_run(run_id)).run

    return await asyncio.wait_for(wait(), timeout)


async def test_two_step_workflow(client: railyard.AsyncClient) -> None:
    seen: list[tuple[str, int]] = []

    async def agent(step: railyard.Step) -> Any:
        seen.append((step.step_id, step.attempt))
        if step.step_id == "a":
            assert step.goal == "two goal" and "two goal" in step.prompt
            await step.output("thinking about a")
            step.report_usage(10, 5, model="mock-model")
            word = await step.run("pick", lambda: "railyard")
            return {"word": word}
        assert step.prior_results == {"a": {"word": "railyard"}}
        assert step.prompt == "b after railyard"
        return railyard.StepResult(result={"ok": True}, notes="b done", context_updates={"x": "y"})

    async with working(client, "py-two", agent):
        run = await client.start_run("two", "two goal")
        info = await closed(client, run.run_id)
    assert info.status == common_pb2.RUN_STATUS_COMPLETED, info.failure
    assert seen == [("a", 1), ("b", 1)]
    a, b = info.steps
    assert json.loads(a.result_json) == {"word": "railyard"}
    assert a.usage.input_tokens == 10 and a.usage.output_tokens == 5 and a.model == "mock-model"
    assert json.loads(b.result_json) == {"ok": True} and b.notes == "b done"
    assert dict(info.context)["x"] == "y"
    texts = [ch.text async for ch in client.watch_output(run.run_id) if ch.kind == 1]
    assert "thinking about a" in "".join(texts)


async def test_contract_violation_fails_the_step(client: railyard.AsyncClient) -> None:
    async def agent(step: railyard.Step) -> Any:
        assert step.output_schema is not None and step.output_schema["required"] == ["verdict"]
        return {"verdict": "maybe"}

    async with working(client, "py-contract", agent):
        run = await client.start_run("contract", "judge it")
        info = await closed(client, run.run_id)
    assert info.status == common_pb2.RUN_STATUS_FAILED
    step = info.steps[0]
    assert "contract_violation" in step.last_failure or "contract_violation" in info.failure
    assert "result.verdict" in step.last_failure, step.last_failure
    events = [e.event_type for e in await client.get_history(run.run_id)]
    assert "StepResultRefused" in events


async def test_contract_violation_raised_into_the_handler(client: railyard.AsyncClient) -> None:
    violations: list[list[str]] = []

    async def agent(step: railyard.Step) -> None:
        try:
            await step.complete({"verdict": "maybe"})
        except railyard.ContractViolation as e:
            violations.append(e.violations)
            await step.complete({"verdict": "approve"}, notes="fixed")

    async with working(client, "py-contract", agent):
        run = await client.start_run("contract", "judge it")
        info = await closed(client, run.run_id)
    assert info.status == common_pb2.RUN_STATUS_COMPLETED, info.failure
    assert len(violations) == 1 and violations[0][0].startswith("result.verdict"), violations
    assert json.loads(info.steps[0].result_json) == {"verdict": "approve"}


async def test_durable_calls_replay_on_retry(client: railyard.AsyncClient) -> None:
    calls: list[str] = []

    @railyard.durable("double")
    def double(x: int) -> int:
        calls.append(f"double {x}")
        return 2 * x

    async def agent(step: railyard.Step) -> Any:
        async def fetch(n: int) -> dict[str, int]:
            calls.append(f"fetch {n}")
            return {"n": n}

        first = await step.run("fetch", fetch, 1)
        second = await step.run("fetch", fetch, 2)
        doubled = await double(21)
        if step.state is None:
            await step.save_state({"phase": "one"})
        with pytest.raises(railyard.JournalError, match=r"step.run\('bad'\) call 0"):
            await step.run("bad", lambda: {1, 2})
        if step.attempt == 1:
            raise railyard.StepError("try again", error_type="flaky")
        return {"first": first, "second": second, "doubled": doubled, "state": step.state}

    async with working(client, "py-durable", agent):
        run = await client.start_run("durable", "replay")
        info = await closed(client, run.run_id)
    assert info.status == common_pb2.RUN_STATUS_COMPLETED, info.failure
    assert json.loads(info.steps[0].result_json) == {
        "first": {"n": 1},
        "second": {"n": 2},
        "doubled": 42,
        "state": {"phase": "one"},
    }
    assert calls == ["fetch 1", "fetch 2", "double 21"], calls
    assert info.steps[0].attempt == 2
    history = await client.get_history(run.run_id)
    failed = [json.loads(e.attributes_json) for e in history if e.event_type == "StepFailed"]
    assert failed and "flaky" in json.dumps(failed[0])
    checkpoint = await client.get_step_checkpoint(run.run_id, "work")
    lines = checkpoint.data.decode().splitlines()
    assert lines[0] == '{"journal":"railyard/1"}'
    records = [json.loads(line) for line in lines[1:]]
    assert [r["k"] for r in records] == ["run", "run", "run", "state"]
    assert records[1] == {"k": "run", "name": "fetch", "seq": 1, "value": {"n": 2}}


async def test_signals_and_cancellation(client: railyard.AsyncClient) -> None:
    got: list[str] = []
    stopped: list[BaseException] = []
    ready, signalled = asyncio.Event(), asyncio.Event()

    async def agent(step: railyard.Step) -> Any:
        ready.set()
        sig = await step.next_signal("go", timeout=20)
        got.append(json.loads(sig.payload_json)["word"])
        signalled.set()
        try:
            while True:
                await step.heartbeat()
                await asyncio.sleep(0.1)
        except Exception:
            got.append("swallowed")
        except railyard.StepCancelled as e:
            stopped.append(e)
            raise

    async with working(client, "py-control", agent):
        run = await client.start_run("control", "signals")
        await asyncio.wait_for(ready.wait(), 20)
        await client.signal_run(run.run_id, "go", {"word": "hello"})
        await asyncio.wait_for(signalled.wait(), 20)
        await client.cancel_run(run.run_id, "enough")
        info = await closed(client, run.run_id)
    assert info.status == common_pb2.RUN_STATUS_CANCELED
    assert got == ["hello"] and len(stopped) == 1


async def test_a_refused_append_base_sends_the_journal_whole(
    client: railyard.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from railyard import journal

    real_init = journal.Journal.__init__

    def wrong_base(self: journal.Journal, checkpoint: bytes = b"", digest: bytes = b"") -> None:
        real_init(self, checkpoint, digest)
        if self.base is not None:
            self.base = (self.base[0], bytes(32))  # not what the server holds

    refusals: list[int] = []
    real_refused = journal.Journal.refused

    def refused(self: journal.Journal) -> None:
        refusals.append(self.stored)
        real_refused(self)

    monkeypatch.setattr(journal.Journal, "__init__", wrong_base)
    monkeypatch.setattr(journal.Journal, "refused", refused)

    def ident(i: int) -> int:
        return i

    async def agent(step: railyard.Step) -> Any:
        values = [await step.run("n", ident, i) for i in range(step.attempt * 2)]
        if step.attempt == 1:
            raise RuntimeError("first attempt fails")
        return {"values": values}

    async with working(client, "py-durable", agent):
        run = await client.start_run("durable", "mismatch")
        info = await closed(client, run.run_id)
    assert info.status == common_pb2.RUN_STATUS_COMPLETED, info.failure
    assert json.loads(info.steps[0].result_json) == {"values": [0, 1, 2, 3]}
    data = (await client.get_step_checkpoint(run.run_id, "work")).data.decode()
    assert [json.loads(line)["value"] for line in data.splitlines()[1:]] == [0, 1, 2, 3]
    assert len(refusals) == 1, "the second attempt's first append was refused, then sent whole"
