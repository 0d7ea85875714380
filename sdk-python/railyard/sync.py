"""The blocking client, :class:`Client`: the calls of :class:`~railyard.AsyncClient`
for code without an event loop. It runs an ``AsyncClient`` on an event loop of its
own, in a daemon thread, so both behave alike (deadlines, retries, errors)."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from concurrent.futures import Future
from typing import Any, Concatenate, ParamSpec, TypeVar

from railyard._base import PathLike
from railyard._retry import RetryPolicy
from railyard.client import AsyncClient

P = ParamSpec("P")
T = TypeVar("T")


def _blocking(
    f: Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[Client, P], T]:
    """``f``, an ``AsyncClient`` method, as a blocking ``Client`` method."""

    @functools.wraps(f)
    def call(this: Client, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return this._run(f(this._async, *args, **kwargs))

    return call


def _blocking_iter(
    f: Callable[Concatenate[AsyncClient, P], AsyncIterator[T]],
) -> Callable[Concatenate[Client, P], Iterator[T]]:
    """``f``, an ``AsyncClient`` method answering an async iterator, as a ``Client``
    method answering an iterator."""

    @functools.wraps(f)
    def call(this: Client, /, *args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
        return this._iterate(f(this._async, *args, **kwargs))

    return call


class Client:
    """A blocking connection to a Railyard server; the same arguments and calls as
    :class:`~railyard.AsyncClient`, with iterators for its async iterators."""

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
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="railyard-client", daemon=True
        )
        self._thread.start()

        async def make() -> AsyncClient:
            return AsyncClient(
                server,
                namespace=namespace,
                api_key=api_key,
                api_key_file=api_key_file,
                tls_ca=tls_ca,
                tls_cert=tls_cert,
                tls_key=tls_key,
                identity=identity,
                request_timeout=request_timeout,
                retry=retry,
            )

        try:
            self._async = self._run(make())
        except BaseException:
            self._stop_loop()
            raise

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result()
        except KeyboardInterrupt:
            future.cancel()
            raise

    def _iterate(self, items: AsyncIterator[T]) -> Iterator[T]:
        async def step() -> tuple[bool, T | None]:
            try:
                return True, await items.__anext__()
            except StopAsyncIteration:
                return False, None

        async def close() -> None:
            aclose = getattr(items, "aclose", None)
            if aclose is not None:
                await aclose()

        def gen() -> Iterator[T]:
            try:
                while True:
                    more, item = self._run(step())
                    if not more:
                        return
                    yield item  # type: ignore[misc]
            finally:
                if not self._loop.is_closed():
                    self._run(close())

        return gen()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()

    @property
    def server(self) -> str:
        return self._async.server

    @property
    def namespace(self) -> str:
        return self._async.namespace

    @property
    def identity(self) -> str:
        return self._async.identity

    def __repr__(self) -> str:
        return repr(self._async).replace("AsyncClient", "Client", 1)

    def close(self) -> None:
        """Closes the connection and stops the client's event loop."""
        if self._loop.is_closed():
            return
        self._run(self._async.close())
        self._stop_loop()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    start_run = _blocking(AsyncClient.start_run)
    describe_run = _blocking(AsyncClient.describe_run)
    get_history = _blocking(AsyncClient.get_history)
    watch_run = _blocking_iter(AsyncClient.watch_run)
    watch_output = _blocking_iter(AsyncClient.watch_output)
    list_runs_page = _blocking(AsyncClient.list_runs_page)
    list_runs = _blocking_iter(AsyncClient.list_runs)
    count_runs = _blocking(AsyncClient.count_runs)
    signal_run = _blocking(AsyncClient.signal_run)
    cancel_run = _blocking(AsyncClient.cancel_run)
    terminate_run = _blocking(AsyncClient.terminate_run)
    pause_run = _blocking(AsyncClient.pause_run)
    unpause_run = _blocking(AsyncClient.unpause_run)
    approve_step = _blocking(AsyncClient.approve_step)
    reject_step = _blocking(AsyncClient.reject_step)
    reset_run = _blocking(AsyncClient.reset_run)
    rerun_run = _blocking(AsyncClient.rerun_run)
    get_session_tree = _blocking(AsyncClient.get_session_tree)
    get_step_checkpoint = _blocking(AsyncClient.get_step_checkpoint)
    list_workflows = _blocking(AsyncClient.list_workflows)
    register_workflow = _blocking(AsyncClient.register_workflow)
    describe_task_queue = _blocking(AsyncClient.describe_task_queue)
    create_schedule = _blocking(AsyncClient.create_schedule)
    describe_schedule = _blocking(AsyncClient.describe_schedule)
    list_schedules = _blocking_iter(AsyncClient.list_schedules)
    patch_schedule = _blocking(AsyncClient.patch_schedule)
    delete_schedule = _blocking(AsyncClient.delete_schedule)
    create_trigger = _blocking(AsyncClient.create_trigger)
    describe_trigger = _blocking(AsyncClient.describe_trigger)
    list_triggers = _blocking_iter(AsyncClient.list_triggers)
    delete_trigger = _blocking(AsyncClient.delete_trigger)
    start_batch = _blocking(AsyncClient.start_batch)
    describe_batch = _blocking(AsyncClient.describe_batch)
    stop_batch = _blocking(AsyncClient.stop_batch)
