"""The connection an :class:`~railyard.AsyncClient` calls through: the channel, the
service stubs, credentials, deadlines and retries."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, TypeVar

import grpc

from railyard import errors
from railyard._connect import Settings, aio_channel, resolve
from railyard._retry import RetryPolicy, is_stream_break, is_transient
from railyard.v1 import (
    batches_pb2_grpc,
    history_pb2_grpc,
    schedules_pb2_grpc,
    tasks_pb2_grpc,
    triggers_pb2_grpc,
)

Req = TypeVar("Req")
Resp = TypeVar("Resp")
Item = TypeVar("Item")

PathLike = str | os.PathLike[str]


def new_request_id() -> str:
    return str(uuid.uuid4())


def str_map(what: str, value: Mapping[str, Any] | None) -> dict[str, str]:
    """A map of text to text, refusing other values by name (a common slip: numbers)."""
    if value is None:
        return {}
    out: dict[str, str] = {}
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise errors.InvalidArgument(f"{what}: keys and values must be strings, got {k!r}")
        out[k] = v
    return out


class ClientCore:
    """Connection and call machinery shared by every group of calls."""

    def __init__(
        self,
        server: str | None = None,
        *,
        namespace: str | None = None,
        api_key: str | None = None,
        api_key_file: PathLike | None = None,
        tls_ca: PathLike | None = None,
        tls_cert: PathLike | None = None,
        tls_key: PathLike | None = None,
        identity: str | None = None,
        request_timeout: float = 30.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        self._settings: Settings = resolve(
            server, namespace, api_key, api_key_file, tls_ca, tls_cert, tls_key, identity
        )
        if request_timeout <= 0:
            raise errors.ConfigurationError("request_timeout: must be positive")
        self._request_timeout = request_timeout
        self._retry = retry or RetryPolicy()
        self._metadata: tuple[tuple[str, str], ...] = (
            (("authorization", f"Bearer {self._settings.api_key.expose()}"),)
            if self._settings.api_key
            else ()
        )
        self._channel = aio_channel(self._settings)
        self._history = history_pb2_grpc.HistoryStub(self._channel)
        self._tasks = tasks_pb2_grpc.TasksStub(self._channel)
        self._schedules = schedules_pb2_grpc.SchedulesStub(self._channel)
        self._triggers = triggers_pb2_grpc.TriggersStub(self._channel)
        self._batches = batches_pb2_grpc.BatchesStub(self._channel)

    @property
    def server(self) -> str:
        """The server URL."""
        return self._settings.target.url

    @property
    def namespace(self) -> str:
        return self._settings.namespace

    @property
    def identity(self) -> str:
        """Who this client says it is in history (a server with auth records the key)."""
        return self._settings.identity

    @property
    def channel(self) -> grpc.aio.Channel:
        return self._channel

    def __repr__(self) -> str:
        key = ", api_key=<redacted>" if self._settings.api_key else ""
        return f"{type(self).__name__}({self.server!r}, namespace={self.namespace!r}{key})"

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self: _Self) -> _Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _error(self, e: grpc.RpcError) -> errors.RailyardError:
        err = errors.from_rpc_error(e)
        if isinstance(err, errors.Unavailable):
            return errors.Unavailable(f"server unavailable at {self.server}: {err.message}")
        return err

    async def _unary(
        self,
        rpc: grpc.aio.UnaryUnaryMultiCallable[Req, Resp],
        req: Req,
        *,
        retry: bool = True,
        wait: float = 0.0,
        timeout: float | None = None,
        gone_is_done: bool = False,
    ) -> Resp:
        """One unary call within its deadline (the request timeout plus ``wait`` for a
        long poll), its transient failures tried again by the retry policy when
        ``retry`` (calls safe to repeat: reads, and writes with a request id or whose
        repeat is refused unchanged). With ``gone_is_done``, NOT_FOUND after a retry
        counts as done (the try whose answer was lost did it)."""
        deadline = (self._request_timeout if timeout is None else timeout) + wait
        delays = self._retry.delays()
        retried = False
        while True:
            try:
                return await rpc(req, timeout=deadline, metadata=self._metadata)
            except grpc.aio.AioRpcError as e:
                code, message = e.code(), e.details() or ""
                if retry and is_transient(code, message):
                    pause = next(delays, None)
                    if pause is not None:
                        retried = True
                        await asyncio.sleep(pause)
                        continue
                if gone_is_done and retried and code == grpc.StatusCode.NOT_FOUND:
                    return None  # type: ignore[return-value]
                raise self._error(e) from None

    async def _stream(
        self,
        open_call: Callable[[], grpc.aio.UnaryStreamCall[Any, Item]],
        advance: Callable[[Item], None],
    ) -> AsyncIterator[Item]:
        """A server stream, reopened (by ``open_call``, which reads where ``advance``
        got to) when it breaks transiently, up to the retry policy's tries in a row."""
        delays = self._retry.delays()
        while True:
            call = open_call()
            try:
                async for item in call:
                    delays = self._retry.delays()
                    advance(item)
                    yield item
                return
            except grpc.aio.AioRpcError as e:
                code, message = e.code(), e.details() or ""
                pause = next(delays, None) if is_stream_break(code, message) else None
                if pause is None:
                    raise self._error(e) from None
                await asyncio.sleep(pause)
            finally:
                call.cancel()


_Self = TypeVar("_Self", bound=ClientCore)
