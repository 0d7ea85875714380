"""THE KILL TEST: a worker process SIGKILLed mid-step; a second one resumes from the
journal, and the model is asked each question once in all."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import railyard
from railyard.v1 import common_pb2
from tests.support import MockModel, Server, wait_until

SDK = Path(__file__).resolve().parents[1]


def worker(server: Server, mock: MockModel) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAILYARD_")}
    env |= {
        "RAILYARD_SERVER": server.url,
        "MOCK_URL": mock.url,
        "PYTHONPATH": str(SDK),
    }
    proc = subprocess.Popen(
        [sys.executable, str(SDK / "tests" / "kill_worker.py")],
        env=env,
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


@pytest.fixture
def mock() -> Iterator[MockModel]:
    m = MockModel(hold_from=4)
    yield m
    m.stop()


def records(c: railyard.Client, run_id: str) -> list[dict[str, object]]:
    data = c.get_step_checkpoint(run_id, "calls").data.decode()
    lines = data.splitlines()
    if not lines:
        return []
    assert lines[0] == '{"journal":"railyard/1"}'
    return [json.loads(line) for line in lines[1:]]


def test_a_killed_worker_is_resumed_from_its_journal(server: Server, mock: MockModel) -> None:
    first = worker(server, mock)
    second = None
    try:
        with railyard.Client(server.url) as c:
            run = c.start_run("kill", "six questions")
            mock.wait_received(4)
            # The fourth call is held at the mock: three are answered, and journaled
            # (a durable call returns only once its record is acknowledged).
            assert mock.answered == 3
            journaled = records(c, run.run_id)
            assert [(r["k"], r["seq"]) for r in journaled] == [("run", i) for i in range(3)]
            assert [r["value"] for r in journaled] == ["answer 1", "answer 2", "answer 3"]

            first.send_signal(signal.SIGKILL)
            first.wait(timeout=10)
            mock.release(answer=False)
            mock.reset_hold()

            second = worker(server, mock)
            info = wait_until(
                "the run to close",
                lambda: (
                    (r := c.describe_run(run.run_id).run).status != common_pb2.RUN_STATUS_RUNNING
                    and r
                ),
                timeout=60,
                every=0.2,
            )
            assert info.status == common_pb2.RUN_STATUS_COMPLETED, info.failure
            result = json.loads(info.steps[0].result_json)
            assert result == {"answers": [f"answer {i}" for i in range(1, 7)], "attempt": 2}
            assert mock.answered == 6, mock.answered
            assert mock.prompts[4:] == ["question 4", "question 5", "question 6"]
            assert [r["value"] for r in records(c, run.run_id)] == result["answers"]

        second.send_signal(signal.SIGTERM)
        out, _ = second.communicate(timeout=20)
        assert second.returncode == 0 and "stopped" in out
    finally:
        for p in (first, second):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
