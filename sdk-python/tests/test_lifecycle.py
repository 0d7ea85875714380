"""A step's life beyond completing: pause and unpause, a worker shutting down, a
lost lease, child runs waited for without a lease."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import railyard
import railyard.worker
from railyard.v1 import common_pb2
from tests.test_worker import closed, working


async def test_pause_suspends_with_the_journal(client: railyard.AsyncClient) -> None:
    calls: list[int] = []
    attempts: list[tuple[int, int]] = []
    working_now = asyncio.Event()

    def first() -> int:
        calls.append(1)
        return len(calls)

    async def agent(step: railyard.Step) -> Any:
        attempts.append((step.attempt, len(step.checkpoint)))
        n = await step.run("first", first)
        if len(attempts) == 1:
            working_now.set()
            while True:
                await step.heartbeat()
                await asyncio.sleep(0.05)
        return {"n": n}

    async with working(client, "py-control", agent):
        run = await client.start_run("control", "pause me")
        await asyncio.wait_for(working_now.wait(), 20)
        assert await client.pause_run(run.run_id, "hold on")

        async def parked() -> None:
            # The server's state, polled: there is nothing local to wait on.
            while (await client.describe_run(run.run_id)).run.steps[0].state != "WAITING":  # noqa: ASYNC110
                await asyncio.sleep(0.05)

        await asyncio.wait_for(parked(), 20)
        assert await client.unpause_run(run.run_id)
        info = await closed(client, run.run_id)
    assert info.status == common_pb2.RUN_STATUS_COMPLETED, info.failure
    assert calls == [1] and json.loads(info.steps[0].result_json) == {"n": 1}
    assert [a for a, _ in attempts] == [1, 1], "a pause uses up no attempt"
    assert attempts[1][1] > 0, "the resumed attempt has the journal"


async def test_shutdown_fails_running_steps_back(client: railyard.AsyncClient) -> None:
    started = asyncio.Event()
    interrupted: list[str] = []

    async def stubborn(step: railyard.Step) -> Any:
        await step.run("once", lambda: "done once")
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError as e:
            interrupted.append(type(e).__name__)
            raise
        return None

    worker = railyard.StepWorker(
        client, "py-durable", stubborn, poll_wait=1, shutdown_grace=0.3, handle_signals=False
    )
    task = asyncio.create_task(worker.run())
    run = await client.start_run("durable", "shut down")
    await asyncio.wait_for(started.wait(), 20)
    worker.shutdown()
    await asyncio.wait_for(task, 10)
    assert interrupted == ["CancelledError"]

    async def finish(step: railyard.Step) -> Any:
        return {"again": await step.run("once", lambda: "called again"), "attempt": step.attempt}

    async with working(client, "py-durable", finish):
        info = await closed(client, run.run_id)
    assert info.status == common_pb2.RUN_STATUS_COMPLETED, info.failure
    assert json.loads(info.steps[0].result_json) == {"again": "done once", "attempt": 2}
    failed = [
        json.loads(e.attributes_json)
        for e in await client.get_history(run.run_id)
        if e.event_type == "StepFailed"
    ]
    assert "worker_shutdown" in json.dumps(failed), failed


async def test_a_lost_lease_stops_the_step(client: railyard.AsyncClient) -> None:
    seen: list[str] = []
    going = asyncio.Event()
    done = asyncio.Event()

    async def agent(step: railyard.Step) -> Any:
        going.set()
        try:
            while True:
                await step.heartbeat()
                await asyncio.sleep(0.05)
        except railyard.LeaseLost as e:
            seen.append(str(e))
            raise
        finally:
            done.set()

    async with working(client, "py-control", agent):
        run = await client.start_run("control", "lose it")
        await asyncio.wait_for(going.wait(), 20)
        await client.terminate_run(run.run_id, "gone")
        await asyncio.wait_for(done.wait(), 20)
    assert len(seen) == 1 and "TERMINATED" in seen[0], seen
    history = await client.get_history(run.run_id)
    assert history[-1].event_type == "RunTerminated"
    assert not [e for e in history if e.event_type == "StepFailed"]


async def test_children_are_waited_for_without_a_lease(client: railyard.AsyncClient) -> None:
    parent_calls: list[int] = []

    async def agent(step: railyard.Step) -> Any:
        if step.workflow_id == "child":
            return {"goal": step.goal}
        parent_calls.append(step.attempt)
        kids = [railyard.ChildRun("child", goal=f"kid {i}") for i in range(2)]
        outcomes = await step.spawn_and_wait("kids", kids)
        return {
            "outcomes": [o.outcome for o in outcomes],
            "results": [o.result for o in outcomes],
        }

    worker = railyard.StepWorker(
        client, ["py-parent", "py-child"], agent, slots=2, poll_wait=1, handle_signals=False
    )
    task = asyncio.create_task(worker.run())
    try:
        run = await client.start_run("parent", "fan out")
        info = await closed(client, run.run_id)
    finally:
        worker.shutdown()
        await asyncio.wait_for(task, 10)
    assert info.status == common_pb2.RUN_STATUS_COMPLETED, info.failure
    assert json.loads(info.steps[0].result_json) == {
        "outcomes": ["COMPLETED", "COMPLETED"],
        "results": [{"goal": "kid 0"}, {"goal": "kid 1"}],
    }
    assert parent_calls == [1, 1], "suspended once, resumed under the same attempt"
    assert info.children_started == 2


async def test_children_started_before_a_lost_journal_write_are_not_started_again(
    client: railyard.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first attempt's spawn reaches the server, but its journal record never
    does (as when the worker dies in between): the next attempt's spawn, keyed by
    the step, name and count, gets the same two children back."""
    spawned: list[list[str]] = []
    real_write = railyard.Step._write
    lost = False

    async def write(self: railyard.Step, record: dict[str, Any], entry: str) -> None:
        nonlocal lost
        if record.get("k") == "spawn" and not lost:
            lost = True
            raise RuntimeError("the worker died before journaling the spawn")
        await real_write(self, record, entry)

    monkeypatch.setattr(railyard.Step, "_write", write)

    async def agent(step: railyard.Step) -> Any:
        if step.workflow_id == "child":
            return {"goal": step.goal}
        kids = [railyard.ChildRun("child", goal=f"kid {i}") for i in range(2)]
        ids = await step.spawn("kids", kids)
        spawned.append(ids)
        outcomes = await step.wait_children("kids", ids)
        return {"outcomes": [o.outcome for o in outcomes]}

    worker = railyard.StepWorker(
        client, ["py-parent", "py-child"], agent, slots=2, poll_wait=1, handle_signals=False
    )
    task = asyncio.create_task(worker.run())
    try:
        run = await client.start_run("parent", "fan out once")
        info = await closed(client, run.run_id)
    finally:
        worker.shutdown()
        await asyncio.wait_for(task, 10)
    assert info.status == common_pb2.RUN_STATUS_COMPLETED, info.failure
    assert lost, "the first spawn's record was dropped"
    assert len({tuple(ids) for ids in spawned}) == 1, spawned
    assert info.children_started == 2
    assert json.loads(info.steps[0].result_json) == {"outcomes": ["COMPLETED", "COMPLETED"]}


async def test_a_handler_ignoring_shutdown_is_not_waited_for(
    client: railyard.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(railyard.worker, "HANDLER_EXIT_WAIT", 0.3)
    started = asyncio.Event()
    deaf_tasks: list[asyncio.Task[Any]] = []
    listening = False

    async def deaf(step: railyard.Step) -> Any:
        task = asyncio.current_task()
        assert task is not None
        deaf_tasks.append(task)
        started.set()
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if listening:
                    raise

    worker = railyard.StepWorker(
        client, "py-durable", deaf, poll_wait=1, shutdown_grace=0.2, handle_signals=False
    )
    task = asyncio.create_task(worker.run())
    run = await client.start_run("durable", "deaf handler")
    await asyncio.wait_for(started.wait(), 20)
    worker.shutdown()
    await asyncio.wait_for(task, 10)
    history = await client.get_history(run.run_id)
    failed = [json.loads(e.attributes_json) for e in history if e.event_type == "StepFailed"]
    assert "worker_shutdown" in json.dumps(failed), failed
    await client.terminate_run(run.run_id)
    listening = True
    for t in deaf_tasks:
        t.cancel()
    await asyncio.gather(*deaf_tasks, return_exceptions=True)
