"""A real ``railyard server`` process for the tests, and a local model stand-in
speaking the OpenAI Chat Completions wire format."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
BIN = os.environ.get("RAILYARD_BIN") or str(REPO / "target" / "debug" / "railyard")


class Server:
    """``railyard server`` on free ports with a temporary data directory and the
    given workflow definitions."""

    def __init__(
        self, workflows: Mapping[str, Mapping[str, Any]], args: Sequence[str] = ()
    ) -> None:
        if not Path(BIN).is_file():
            raise RuntimeError(f"no railyard binary at {BIN}: build it or set RAILYARD_BIN")
        self.dir = tempfile.TemporaryDirectory(prefix="railyard-sdk-python-")
        root = Path(self.dir.name)
        self.data = root / "data"
        (root / "workflows").mkdir()
        for name, definition in workflows.items():
            (root / "workflows" / f"{name}.json").write_text(json.dumps(definition))
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("RAILYARD_") or k in ("RAILYARD_BIN",)
        }
        env["RUST_LOG"] = os.environ.get("TEST_SERVER_LOG", "warn")
        self.proc = subprocess.Popen(
            [
                BIN,
                "server",
                "--data-dir",
                str(root / "data"),
                "--listen",
                "127.0.0.1:0",
                "--http-listen",
                "127.0.0.1:0",
                "--workflows",
                str(root / "workflows"),
                *args,
            ],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=env,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("railyard server listening "):
            self.stop()
            raise RuntimeError(f"unexpected first line from the server: {line!r}")
        fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
        self.url = f"http://{fields['grpc']}"
        self.http = f"http://{fields['http']}"
        out = self.proc.stdout
        threading.Thread(target=lambda: [None for _ in out], daemon=True).start()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.dir.cleanup()


class MockModel:
    """A local OpenAI-compatible ``/v1/chat/completions`` endpoint: answer ``n`` says
    ``answer n`` (from 1). It counts the calls it answered; ``hold_from`` makes it hold
    call number ``hold_from`` and later ones until :meth:`release` (``answer=False``:
    drop them unanswered, not counted)."""

    def __init__(
        self,
        hold_from: int | None = None,
        script: Callable[[str, dict[str, Any], int], dict[str, Any]] | None = None,
    ) -> None:
        self.answered = 0
        self.script = script
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.received = 0
        self.prompts: list[str] = []
        self.hold_from = hold_from
        self._cond = threading.Condition()
        self._release: bool | None = None
        mock = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                request = json.loads(body or b"{}")
                with mock._cond:
                    mock.received += 1
                    n = mock.received
                    mock.prompts.append(str(request.get("messages", [{}])[-1].get("content")))
                    mock.paths.append(self.path)
                    mock.headers.append({k.lower(): v for k, v in self.headers.items()})
                    mock._cond.notify_all()
                    if mock.hold_from is not None and n >= mock.hold_from:
                        mock._cond.wait_for(lambda: mock._release is not None, timeout=60)
                        if not mock._release:
                            self.close_connection = True
                            return
                    mock.answered += 1
                    answered = mock.answered
                reply = (
                    mock.script(self.path, request, answered)
                    if mock.script
                    else text_reply(f"answer {answered}", answered)
                )
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def wait_received(self, n: int, timeout: float = 30) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: self.received >= n, timeout=timeout):
                raise TimeoutError(f"the mock model got {self.received} calls, not {n}")

    def release(self, answer: bool) -> None:
        with self._cond:
            self._release = answer
            self._cond.notify_all()

    def reset_hold(self) -> None:
        with self._cond:
            self.hold_from = None
            self._release = None

    def stop(self) -> None:
        self.release(False)
        self.httpd.shutdown()


def text_reply(text: str, n: int = 1) -> dict[str, Any]:
    """An OpenAI Chat Completions answer saying ``text``."""
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "model": "mock",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
    }


def wait_until(what: str, check: Any, timeout: float = 30.0, every: float = 0.05) -> Any:
    """Polls ``check()`` until it answers something true; fails naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(every)
