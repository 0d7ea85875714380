"""The client against a real server: a tour of the run calls, and errors."""

from __future__ import annotations

import asyncio
import json

import pytest

import railyard
from railyard.v1 import common_pb2
from tests.support import Server


def test_sync_tour(sync_client: railyard.Client) -> None:
    c = sync_client
    started = c.start_run("tour", "tour goal", context={"k": "v"}, request_id="tour-1")
    assert started.started and started.run_id
    again = c.start_run("tour", "tour goal", request_id="tour-1")
    assert (again.run_id, again.started) == (started.run_id, False)

    d = c.describe_run(started.run_id)
    assert d.run.status == railyard.RunStatus.Value("RUN_STATUS_RUNNING")
    assert d.run.goal == "tour goal" and dict(d.run.context) == {"k": "v"}
    assert [s.step_id for s in d.run.steps] == ["a", "b"]
    assert json.loads(d.definition_json)["id"] == "tour"

    ids = {started.run_id} | {c.start_run("tour", f"more {i}").run_id for i in range(4)}
    listed = [r.run_id for r in c.list_runs('WorkflowId = "tour"', page_size=2)]
    assert set(listed) >= ids and len(listed) == len(set(listed))
    page = c.list_runs_page('WorkflowId = "tour"', page_size=2)
    assert len(page.runs) == 2 and page.next_page_token
    count = c.count_runs('WorkflowId = "tour"')
    assert count.count == len(listed)
    grouped = c.count_runs('WorkflowId = "tour"', group_by="Status")
    assert sum(g.count for g in grouped.groups) == count.count

    c.signal_run(started.run_id, "steer", {"text": "go left"})
    c.cancel_run(started.run_id, "tour over")
    events = [e.event_type for e in c.watch_run(started.run_id)]
    assert events[0] == "RunStarted" and events[-1] == "RunCanceled", events
    assert "SignalReceived" in events, events
    history = c.get_history(started.run_id)
    assert [e.event_type for e in history] == events
    assert [e.event_id for e in history] == list(range(1, len(history) + 1))
    assert c.describe_run(started.run_id).run.status == common_pb2.RUN_STATUS_CANCELED
    assert [w.id for w in c.list_workflows().workflows if w.id == "tour"] == ["tour"]


async def test_async_tour(client: railyard.AsyncClient) -> None:
    run = await client.start_run("tour", "async goal", search_attributes={})
    seen: list[str] = []

    async def watch() -> None:
        async for ev in client.watch_run(run.run_id):
            seen.append(ev.event_type)

    watcher = asyncio.create_task(watch())
    assert await client.pause_run(run.run_id, "a pause")
    assert not await client.pause_run(run.run_id, "again")
    assert await client.unpause_run(run.run_id)
    await client.terminate_run(run.run_id, "done touring")
    await asyncio.wait_for(watcher, 10)
    assert seen[0] == "RunStarted" and seen[-1] == "RunTerminated", seen
    runs = [r.run_id async for r in client.list_runs(f'RunId = "{run.run_id}"')]
    assert runs == [run.run_id]
    q = await client.describe_task_queue("nobody")
    assert q.backlog >= 0
    rerun = await client.rerun_run(run.run_id, reason="again")
    assert rerun.started and rerun.run_id != run.run_id
    await client.terminate_run(rerun.run_id)


async def test_errors_are_typed(client: railyard.AsyncClient) -> None:
    with pytest.raises(railyard.NotFound) as nf:
        await client.describe_run("no-such-run")
    assert "no-such-run" in str(nf.value) and nf.value.code is not None
    with pytest.raises(railyard.NotFound):
        await client.start_run("no-such-workflow")
    with pytest.raises(railyard.InvalidArgument) as bad:
        await client.list_runs_page('NoSuchField = "x"')
    assert bad.value.field == "query", bad.value
    with pytest.raises(railyard.InvalidArgument) as bad_signal:
        await client.signal_run("x", "s", payload={1, 2})
    assert bad_signal.value.field == "payload"
    with pytest.raises(railyard.FailedPrecondition):
        run = await client.start_run("tour")
        await client.terminate_run(run.run_id)
        await client.signal_run(run.run_id, "late")
    with pytest.raises(railyard.AlreadyExists):
        await client.start_run("tour", run_id=run.run_id)
    assert isinstance(nf.value, railyard.RailyardError)


async def test_unreachable_server_is_unavailable_after_retries() -> None:
    policy = railyard.RetryPolicy(max_attempts=3, initial_backoff=0.01, max_backoff=0.05)
    async with railyard.AsyncClient("http://127.0.0.1:1", retry=policy) as c:
        with pytest.raises(railyard.Unavailable) as e:
            await c.describe_run("r")
    assert "127.0.0.1:1" in str(e.value) and e.value.transient


def test_settings_are_checked(tmp_path: object, server: Server) -> None:
    with pytest.raises(railyard.ConfigurationError, match="expected a URL"):
        railyard.Client("127.0.0.1:7400")
    with pytest.raises(railyard.ConfigurationError, match="https://"):
        railyard.AsyncClient("http://127.0.0.1:7400", tls_ca="/nonexistent")
    with pytest.raises(railyard.ConfigurationError, match="api_key_file"):
        railyard.AsyncClient(server.url, api_key_file="/nonexistent/key")
    with pytest.raises(railyard.ConfigurationError, match="empty"):
        railyard.AsyncClient(server.url, api_key="  ")
    c = railyard.AsyncClient(server.url, api_key="sekrit-key-123")
    assert "sekrit" not in repr(c) and "redacted" in repr(c)
    assert "sekrit" not in repr(railyard.ApiKey("sekrit"))


async def test_register_workflow(client: railyard.AsyncClient) -> None:
    step = {"id": "a", "title": "A", "prompt": "p"}
    definition = {"id": "registered", "name": "registered", "version": "1", "steps": [step]}
    first = await client.register_workflow(definition)
    assert first.changed and first.workflow.id == "registered" and first.workflow.registered
    listed = {w.id: w for w in (await client.list_workflows()).workflows}
    assert listed["registered"].registered and not listed["tour"].registered
    assert not (await client.register_workflow(definition)).changed
    with pytest.raises(railyard.InvalidArgument) as e:
        await client.register_workflow({"id": "bad", "steps": []})
    assert e.value.field


async def test_a_run_carries_its_flow_control(client: railyard.AsyncClient) -> None:
    started = await client.start_run(
        "tour", "g", priority=1, fairness_key="customer:acme", fairness_weight=2
    )
    run = (await client.describe_run(started.run_id)).run
    assert (run.priority, run.fairness_key, run.fairness_weight) == (1, "customer:acme", 2)
    with pytest.raises(railyard.InvalidArgument) as bad:
        await client.start_run("tour", "g", priority=9)
    assert bad.value.field == "priority", bad.value
    await client.terminate_run(started.run_id)
