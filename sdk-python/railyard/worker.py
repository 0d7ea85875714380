"""The step worker, :class:`StepWorker`: polls task queues, works each leased step
with a Python handler in an asyncio slot, and reports how it ended."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from railyard import errors
from railyard.client import AsyncClient
from railyard.step import Step, StepResult, _current
from railyard.v1 import tasks_pb2 as t

log = logging.getLogger("railyard.worker")

Handler = Callable[[Step], Awaitable[Any]]

# Errors that no later poll can get past: stop the worker.
_FATAL = (
    errors.Unauthenticated,
    errors.PermissionDenied,
    errors.InvalidArgument,
    errors.NotFound,
    errors.ConfigurationError,
)


# How long a cancelled handler may take to end before its step is reported without it.
HANDLER_EXIT_WAIT = 5.0


def heartbeat_interval(configured: float, heartbeat_timeout_ms: int) -> float:
    """The configured interval, or a third of the step's heartbeat timeout when that
    is shorter; at least 50 ms (the Rust worker's rule)."""
    interval = configured
    if heartbeat_timeout_ms > 0:
        interval = min(interval, heartbeat_timeout_ms / 1000 / 3)
    return max(interval, 0.05)


class StepWorker:
    """Works the steps of one or more task queues with ``handler``, an
    ``async def handler(step: Step)``, in up to ``slots`` steps at once.

    The handler's return value completes the step: a dict is its structured result,
    a :class:`~railyard.StepResult` says more, a str is its notes, None completes
    it with nothing. An exception fails it (``error_type``: the exception's class
    name, or a :class:`~railyard.StepError`'s), with the journal as checkpoint so a
    retry replays the durable calls. A result its output contract refuses fails the
    step as ``contract_violation``, the violations in the message (call
    :meth:`Step.complete` instead to get :class:`~railyard.ContractViolation`
    raised into the handler). A cancellation fails it as ``canceled``; a pause
    suspends it (``paused``, with the journal); a lost lease stops it sending
    anything. :meth:`shutdown` (and, from :meth:`run` in the main thread, SIGTERM or
    SIGINT) stops polling and lets running steps finish for ``shutdown_grace``
    seconds, then fails them back as ``worker_shutdown`` (retryable) for another
    worker; a second signal skips the grace.
    """

    def __init__(
        self,
        client: AsyncClient,
        queue: str | Sequence[str],
        handler: Handler,
        *,
        slots: int = 1,
        identity: str | None = None,
        poll_wait: float = 20.0,
        heartbeat_interval: float = 10.0,
        shutdown_grace: float = 30.0,
        handle_signals: bool = True,
    ) -> None:
        queues = [queue] if isinstance(queue, str) else list(queue)
        if not queues or not all(isinstance(q, str) and q for q in queues):
            raise errors.ConfigurationError("queue: name at least one task queue")
        if slots < 1:
            raise errors.ConfigurationError(f"slots: must be at least 1, got {slots}")
        if not 0 < poll_wait <= 60:
            raise errors.ConfigurationError("poll_wait: must be between 0 and 60 seconds")
        if not callable(handler):
            raise errors.ConfigurationError("handler: must be an async function of a Step")
        self.client = client
        self.queues = queues
        self.handler = handler
        self.slots = slots
        self.identity = identity or f"{socket.gethostname() or 'localhost'}:{os.getpid()}"
        # With more queues than slots, pollers take turns holding the slots: shorter
        # waits keep every queue served.
        self._poll_wait = poll_wait if len(queues) <= slots else min(poll_wait, 5.0)
        self._heartbeat_interval = heartbeat_interval
        self.shutdown_grace = shutdown_grace
        self._handle_signals = handle_signals
        self._stopping: asyncio.Event | None = None
        self._grace_over: asyncio.Event | None = None
        self._steps: dict[asyncio.Task[None], Step | None] = {}
        self._fatal: BaseException | None = None

    def __repr__(self) -> str:
        return f"StepWorker(queues={self.queues!r}, slots={self.slots}, identity={self.identity!r})"

    def shutdown(self, grace: float | None = None) -> None:
        """Stops polling; running steps get ``grace`` seconds (default:
        ``shutdown_grace``) to finish before they are failed back. Safe to call from
        a signal handler or another thread."""
        if grace is not None:
            self.shutdown_grace = grace
        stopping, grace_over = self._stopping, self._grace_over
        if stopping is None or grace_over is None:
            return
        if stopping.is_set():
            grace_over.set()
        else:
            stopping.set()
            if self.shutdown_grace <= 0:
                grace_over.set()

    async def run(self) -> None:
        """Polls and works steps until :meth:`shutdown`; raises when polling meets an
        error no retry can fix (a refused key, an unknown namespace)."""
        loop = asyncio.get_running_loop()
        self._stopping, self._grace_over = asyncio.Event(), asyncio.Event()
        installed: list[signal.Signals] = []
        if self._handle_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                try:
                    loop.add_signal_handler(sig, self.shutdown)
                    installed.append(sig)
                except (NotImplementedError, RuntimeError):
                    pass
        sem = asyncio.Semaphore(self.slots)
        pollers = [asyncio.create_task(self._poll(q, sem)) for q in self.queues]
        log.info("worker %s polling %s with %d slots", self.identity, self.queues, self.slots)
        try:
            await self._stopping.wait()
        finally:
            for p in pollers:
                p.cancel()
            await asyncio.gather(*pollers, return_exceptions=True)
            await self._drain()
            for sig in installed:
                loop.remove_signal_handler(sig)
        if self._fatal is not None:
            raise self._fatal

    async def _drain(self) -> None:
        running = [task for task in self._steps if not task.done()]
        if not running:
            return
        assert self._grace_over is not None
        log.info("shutting down: %d steps running, %.1fs grace", len(running), self.shutdown_grace)
        grace: asyncio.Future[Any] = asyncio.ensure_future(self._grace_over.wait())
        finished: asyncio.Future[Any] = asyncio.gather(*running, return_exceptions=True)
        await asyncio.wait(
            {grace, finished}, timeout=self.shutdown_grace, return_when=asyncio.FIRST_COMPLETED
        )
        grace.cancel()
        for task in running:
            step = self._steps.get(task)
            if not task.done() and step is not None:
                step._interrupt(
                    errors.WorkerShutdown("the worker shut down before the step finished"),
                    cancel=True,
                )
        # A handler that ignores its cancellation is not waited for long: its step is
        # reported (failed back) without it.
        _, stubborn = await asyncio.wait(running, timeout=HANDLER_EXIT_WAIT)
        for task in stubborn:
            task.cancel()
        if stubborn:
            await asyncio.wait(stubborn, timeout=HANDLER_EXIT_WAIT + 5)

    async def _poll(self, queue: str, sem: asyncio.Semaphore) -> None:
        assert self._stopping is not None
        pause = 0.5
        while not self._stopping.is_set():
            await sem.acquire()
            try:
                task = await self.client.poll_step_task(
                    queue, wait=self._poll_wait, identity=self.identity
                )
            except asyncio.CancelledError:
                sem.release()
                raise
            except _FATAL as e:
                sem.release()
                log.error("polling %s failed: %s", queue, e)
                self._fatal = e
                self._stopping.set()
                return
            except errors.RailyardError as e:
                sem.release()
                log.warning("polling %s failed (trying again in %.1fs): %s", queue, pause, e)
                await asyncio.sleep(pause)
                pause = min(pause * 2, 10.0)
                continue
            pause = 0.5
            if task is None:
                sem.release()
                continue
            work = asyncio.create_task(self._work(task))
            self._steps[work] = None

            def done(w: asyncio.Task[None]) -> None:
                sem.release()
                self._steps.pop(w, None)

            work.add_done_callback(done)

    async def _work(self, task: t.StepTask) -> None:
        interval = heartbeat_interval(self._heartbeat_interval, task.heartbeat_timeout_ms)
        step = Step(self.client, task, self.identity, interval)
        me = asyncio.current_task()
        if me is not None:
            self._steps[me] = step
        log.info("step %s of run %s, attempt %d: started", step.step_id, step.run_id, step.attempt)
        keeper = asyncio.create_task(step.keep_alive())
        shipper = asyncio.create_task(step.ship_output())
        ctx = asyncio.create_task(self._call(step))
        step.handler_task = ctx
        try:
            try:
                value: Any = await asyncio.shield(ctx)
                failure: BaseException | None = None
            except BaseException as e:
                if not ctx.done():
                    ctx.cancel()
                    await asyncio.wait({ctx}, timeout=HANDLER_EXIT_WAIT)
                value, failure = None, e
            await self._report(step, value, failure)
        except Exception:
            log.exception("step %s of run %s: reporting failed", step.step_id, step.run_id)
        finally:
            keeper.cancel()
            shipper.cancel()
            await asyncio.gather(keeper, shipper, return_exceptions=True)

    async def _call(self, step: Step) -> Any:
        _current.set(step)
        return await self.handler(step)

    async def _report(self, step: Step, value: Any, failure: BaseException | None) -> None:
        where = f"step {step.step_id} of run {step.run_id}"
        if step.suspended:
            log.info("%s: waiting for child runs", where)
            return
        if step.lost:
            return
        if step.completed:
            log.info("%s: completed", where)
            return
        interrupt = step.interrupt
        if isinstance(interrupt, errors.StepCancelled):
            await self._fail(step, "canceled", "cancellation was requested", non_retryable=True)
        elif isinstance(interrupt, errors.StepPaused) and isinstance(
            failure, asyncio.CancelledError
        ):
            await self._fail(step, "paused", "the run was paused")
        elif isinstance(interrupt, errors.WorkerShutdown):
            await self._fail(step, "worker_shutdown", str(interrupt))
        elif failure is not None:
            await self._fail_with(step, failure)
        else:
            await self._complete(step, value)

    async def _complete(self, step: Step, value: Any) -> None:
        where = f"step {step.step_id} of run {step.run_id}"
        if isinstance(value, StepResult):
            result = value
        elif value is None:
            result = StepResult()
        elif isinstance(value, Mapping):
            result = StepResult(result=value)
        elif isinstance(value, str):
            result = StepResult(notes=value)
        else:
            await self._fail(
                step,
                "bad_result",
                f"the handler returned {type(value).__name__}: return a dict, a str, a "
                "railyard.StepResult or None",
                non_retryable=True,
            )
            return
        try:
            resp = await step.send_completion(result)
        except errors.ContractViolation as e:
            log.warning("%s: result refused by the output contract:\n%s", where, e.message)
            await self._fail(step, "contract_violation", e.message)
            return
        except errors.StepError as e:
            await self._fail(step, e.error_type, e.message, non_retryable=e.non_retryable)
            return
        except (errors.FailedPrecondition, errors.NotFound) as e:
            log.warning("%s: completion not accepted (the lease is gone): %s", where, e)
            return
        held = " (held for approval)" if resp.held_for_approval else ""
        log.info("%s: completed%s", where, held)

    async def _fail_with(self, step: Step, e: BaseException) -> None:
        if isinstance(e, errors.ContractViolation):
            await self._fail(step, "contract_violation", e.message)
        elif isinstance(e, errors.StepError):
            await self._fail(step, e.error_type, e.message, non_retryable=e.non_retryable)
        elif isinstance(e, errors.JournalError):
            await self._fail(step, "journal_error", e.message)
        elif isinstance(e, asyncio.CancelledError):
            await self._fail(step, "canceled_in_handler", "the handler was cancelled")
        else:
            log.warning("step %s of run %s failed", step.step_id, step.run_id, exc_info=e)
            await self._fail(step, type(e).__name__, str(e) or repr(e))

    async def _fail(
        self, step: Step, error_type: str, message: str, *, non_retryable: bool = False
    ) -> None:
        await step.flush_output()
        with contextlib.suppress(errors.RailyardError):
            await step.flush_usage()
        if step.lost:
            return
        req = t.FailStepTaskRequest(
            task_token=step.task.task_token,
            error_type=error_type,
            message=message[:16384],
            non_retryable=non_retryable,
            identity=self.identity,
            checkpoint=step.journal_bytes(),
        )
        try:
            resp = await self.client.fail_step_task(req)
        except (errors.FailedPrecondition, errors.NotFound) as e:
            log.warning("step %s: failure not accepted (the lease is gone): %s", step.step_id, e)
            return
        retry = "; it will be retried" if resp.will_retry else ""
        log.info("step %s of run %s: failed (%s)%s", step.step_id, step.run_id, error_type, retry)


__all__ = ["Handler", "StepWorker", "heartbeat_interval"]
