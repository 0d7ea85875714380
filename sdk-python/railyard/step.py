"""A leased step as a handler sees it, :class:`Step`: its inputs, its journal of
durable calls, and the lease it keeps (heartbeats, live output, signals)."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import hashlib
import inspect
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar, overload

from railyard import errors
from railyard._base import str_map
from railyard.client import AsyncClient
from railyard.journal import Journal
from railyard.v1 import common_pb2 as c
from railyard.v1 import tasks_pb2 as t

log = logging.getLogger("railyard.worker")

P = ParamSpec("P")
T = TypeVar("T")

_current: contextvars.ContextVar[Step] = contextvars.ContextVar("railyard_step")

BASE_MISMATCH = "checkpoint base mismatch"
# Live output: shipped every quarter second, at most this much queued.
OUTPUT_INTERVAL = 0.25
MAX_OUTPUT_QUEUED_BYTES = 1 << 20
MAX_OUTPUT_QUEUED_CHUNKS = 4096
_KINDS = {
    "text": c.OUTPUT_KIND_TEXT,
    "thinking": c.OUTPUT_KIND_THINKING,
    "tool_call_start": c.OUTPUT_KIND_TOOL_CALL_START,
    "tool_input": c.OUTPUT_KIND_TOOL_INPUT,
    "tool_result": c.OUTPUT_KIND_TOOL_RESULT,
    "usage": c.OUTPUT_KIND_USAGE,
    "turn_end": c.OUTPUT_KIND_TURN_END,
    "error": c.OUTPUT_KIND_ERROR,
}


@dataclass
class StepResult:
    """What a handler returns to complete its step with more than a result: notes
    for the history and later prompts, artifacts, context for later steps, and
    search attributes to set on the run."""

    result: Mapping[str, Any] | None = None
    notes: str = ""
    artifacts: Sequence[str] = ()
    context_updates: Mapping[str, str] = field(default_factory=dict)
    search_attributes: Mapping[str, str] = field(default_factory=dict)


@dataclass
class ChildRun:
    """A child run to spawn: ``parent_close_policy`` is ``"cancel"`` (default),
    ``"terminate"`` or ``"abandon"``."""

    workflow_id: str
    goal: str = ""
    context: Mapping[str, str] = field(default_factory=dict)
    parent_close_policy: str = ""


@dataclass
class ChildOutcome:
    """How a child run ended: ``outcome`` is its status (``"COMPLETED"``,
    ``"FAILED"``...), ``result`` its last step's structured result (None: none)."""

    run_id: str
    outcome: str
    notes: str = ""
    artifacts: list[str] = field(default_factory=list)
    result: Any = None


class _Suspended(errors.StepInterrupted):
    """The step ended its lease to wait for child runs (internal)."""


def current_step() -> Step:
    """The step the calling handler works (for :func:`durable` functions)."""
    try:
        return _current.get()
    except LookupError:
        raise errors.RailyardError(
            "no step is being worked here: call durable functions from a step handler"
        ) from None


def durable(name: str) -> Callable[[Callable[P, Any]], Callable[P, Awaitable[Any]]]:
    """Makes a function a durable call of the step working it: each call is
    ``await current_step().run(name, fn, ...)``, so its result is journaled and
    replayed on resume. The wrapped function (plain or async) always returns an
    awaitable."""

    def wrap(fn: Callable[P, Any]) -> Callable[P, Awaitable[Any]]:
        @functools.wraps(fn)
        async def call(*args: P.args, **kwargs: P.kwargs) -> Any:
            return await current_step().run(name, fn, *args, **kwargs)

        return call

    return wrap


class Step:
    """One leased step attempt. Handed to the worker's handler; its inputs are
    attributes, and its methods journal durable calls, keep state, stream output,
    report usage and issues, and spawn child runs."""

    def __init__(
        self,
        client: AsyncClient,
        task: t.StepTask,
        identity: str,
        heartbeat_interval: float,
    ) -> None:
        self.task = task
        self.run_id = task.run_id
        self.step_id = task.step_id
        self.workflow_id = task.workflow_id
        self.attempt = task.attempt
        self.prompt = task.prompt
        self.goal = task.goal
        self.context: dict[str, str] = dict(task.context)
        self.prior_steps = list(task.prior_steps)
        self.resume_messages = list(task.resume_messages)
        self.checkpoint = bytes(task.checkpoint)
        self.output_schema: dict[str, Any] | None = (
            json.loads(task.output_schema_json) if task.output_schema_json else None
        )
        self.required_artifacts = list(task.required_artifacts)
        self.signals: list[t.Signal] = list(task.signals)
        self._client = client
        self._identity = identity
        self._interval = heartbeat_interval
        self._journal = Journal(self.checkpoint, bytes(task.checkpoint_digest))
        self._seq: dict[tuple[str, str], int] = {}
        self._lock = asyncio.Lock()
        self._last_beat = time.monotonic()
        self._usage = c.TokenUsage()
        self._model = ""
        self._usage_unsent = False
        self._acked_signal = max((s.event_id for s in task.signals), default=0)
        self._new_signal = asyncio.Event()
        self._output: list[c.OutputChunk] = []
        self._output_bytes = 0
        self._output_dropped = 0
        self.interrupt: errors.StepInterrupted | None = None
        self.lost = False
        self.suspended = False
        self.completed = False
        self.handler_task: asyncio.Task[Any] | None = None

    def __repr__(self) -> str:
        return f"Step(run_id={self.run_id!r}, step_id={self.step_id!r}, attempt={self.attempt})"

    # -------------------------------------------------------------- inputs

    @property
    def prior_results(self) -> dict[str, Any]:
        """The structured results of the steps before this one, by step id."""
        return {p.step_id: json.loads(p.result_json) for p in self.prior_steps if p.result_json}

    @property
    def state(self) -> Any:
        """The value last given to :meth:`save_state` (in this attempt or one before)."""
        return self._journal.state

    # --------------------------------------------------------- interruption

    def _check(self) -> None:
        if self.interrupt is not None:
            raise self.interrupt

    def _interrupt(self, exc: errors.StepInterrupted, *, cancel: bool) -> None:
        if self.interrupt is None or isinstance(exc, errors.LeaseLost):
            self.interrupt = exc
        self._new_signal.set()
        if cancel and self.handler_task is not None and not self.handler_task.done():
            self.handler_task.cancel(str(exc))

    async def _guard(self, aw: Awaitable[T]) -> T:
        """``aw``, with the task's cancellation for an interruption raised as that
        interruption (StepCancelled, LeaseLost...)."""
        try:
            return await aw
        except asyncio.CancelledError:
            if self.interrupt is not None:
                raise self.interrupt from None
            raise

    # ------------------------------------------------------------ durability

    def _next(self, kind: str, name: str) -> int:
        if not isinstance(name, str) or not name:
            raise errors.JournalError(f"{kind}: the name must be a non-empty string")
        key = (kind, name)
        n = self._seq.get(key, 0)
        self._seq[key] = n + 1
        return n

    @overload
    async def run(
        self, name: str, fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs
    ) -> T: ...

    @overload
    async def run(
        self, name: str, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
    ) -> T: ...

    async def run(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """A durable call: the ``n``-th call of ``name`` in an attempt returns the
        journaled value of the ``n``-th call of an attempt before it, without calling
        ``fn``; otherwise it calls ``fn(*args, **kwargs)`` (an async function is
        awaited, a plain one runs in a thread), journals its result and returns it
        once the server has acknowledged the journal entry. The value is returned as
        JSON reads it back (a tuple as a list), in this attempt as on a replay."""
        self._check()
        seq = self._next("run", name)
        if (name, seq) in self._journal.runs:
            return self._journal.runs[(name, seq)]
        if inspect.iscoroutinefunction(fn):
            value = await self._guard(fn(*args, **kwargs))
        else:
            value = await self._guard(asyncio.to_thread(fn, *args, **kwargs))
            if inspect.isawaitable(value):
                value = await self._guard(value)
        record = {"k": "run", "name": name, "seq": seq, "value": value}
        await self._write(record, f"step.run({name!r}) call {seq}")
        return self._journal.runs[(name, seq)]

    def will_replay(self, name: str) -> bool:
        """Whether the next :meth:`run` of ``name`` will answer from the journal
        (without calling its function): for work to skip on replay, such as live
        output or usage already reported."""
        return (name, self._seq.get(("run", name), 0)) in self._journal.runs

    def durable(self, name: str) -> Callable[[Callable[P, Any]], Callable[P, Awaitable[Any]]]:
        """:func:`railyard.durable` bound to this step."""

        def wrap(fn: Callable[P, Any]) -> Callable[P, Awaitable[Any]]:
            @functools.wraps(fn)
            async def call(*args: P.args, **kwargs: P.kwargs) -> Any:
                return await self.run(name, fn, *args, **kwargs)

            return call

        return wrap

    async def save_state(self, value: Any) -> None:
        """Journals ``value`` (any JSON) as the step's state, read back as
        :attr:`state` by a later attempt; returns once the server has it."""
        self._check()
        await self._write({"k": "state", "value": value}, "step.save_state")

    async def _write(self, record: dict[str, Any], entry: str) -> None:
        end = self._journal.add(record, entry)
        await self._guard(self._beat(until=end))

    # --------------------------------------------------------------- lease

    async def heartbeat(self) -> None:
        """Sends a heartbeat now (they are also sent on their own, on an interval
        derived from the step's heartbeat timeout); raises a pending interruption."""
        self._check()
        await self._guard(self._beat(until=0, force=True))
        self._check()

    def report_usage(
        self,
        input_tokens: int = 0,
        output_tokens: int = 0,
        *,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        cost_usd: float = 0.0,
        model: str = "",
    ) -> None:
        """Adds a model call's tokens to the attempt's usage, sent with the next
        heartbeat (the server keeps them per step and run, and enforces budgets)."""
        u = self._usage
        u.input_tokens += input_tokens
        u.output_tokens += output_tokens
        u.cache_read_tokens += cache_read_tokens
        u.cache_write_tokens += cache_write_tokens
        u.cost_usd += cost_usd
        if model:
            self._model = model
        self._usage_unsent = True

    async def _beat(self, *, until: int, force: bool = False) -> None:
        """One heartbeat carrying what the server lacks of the journal, unless the
        server has the journal up to ``until`` and nothing else is due."""
        async with self._lock:
            plan = self._journal.plan()
            if until and self._journal.stored >= until and not force:
                return
            if self.lost:
                raise errors.LeaseLost("the step's lease is gone")
            req = t.HeartbeatStepTaskRequest(
                task_token=self.task.task_token,
                identity=self._identity,
                acked_signal_event_id=self._acked_signal,
            )
            if self._usage_unsent or self._model:
                req.usage.CopyFrom(self._usage)
                req.model = self._model
            self._usage_unsent = False
            if plan is not None:
                if plan.whole is not None:
                    req.checkpoint = plan.whole
                else:
                    req.checkpoint_append.base_length = plan.base_length
                    req.checkpoint_append.base_digest = plan.base_digest
                    req.checkpoint_append.bytes = plan.append
            self._last_beat = time.monotonic()
            try:
                resp = await self._client.heartbeat_step_task(req)
            except errors.FailedPrecondition as e:
                if plan is not None and plan.whole is None and e.message.startswith(BASE_MISMATCH):
                    log.debug("checkpoint append refused; sending the journal whole")
                    self._journal.refused()
                    plan = self._journal.plan()
                    assert plan is not None and plan.whole is not None
                    req.ClearField("checkpoint_append")
                    req.checkpoint = plan.whole
                    resp = await self._lost_on_error(self._client.heartbeat_step_task(req))
                else:
                    self._lose(e)
                    raise self.interrupt or e from None
            except (errors.NotFound, errors.PermissionDenied, errors.Unauthenticated) as e:
                self._lose(e)
                raise self.interrupt or e from None
            except errors.RailyardError:
                self._usage_unsent = True
                raise
            if plan is not None:
                self._journal.acknowledged(plan, resp.checkpoint_length, resp.checkpoint_digest)
            self._answered(resp)

    async def _lost_on_error(
        self, aw: Awaitable[t.HeartbeatStepTaskResponse]
    ) -> t.HeartbeatStepTaskResponse:
        try:
            return await aw
        except (
            errors.FailedPrecondition,
            errors.NotFound,
            errors.PermissionDenied,
            errors.Unauthenticated,
        ) as e:
            self._lose(e)
            raise self.interrupt or e from None

    def _lose(self, e: errors.RailyardError | str) -> None:
        message = e if isinstance(e, str) else f"{type(e).__name__}: {e.message}"
        log.warning(
            "step %s of run %s: lease lost (%s); stopping", self.step_id, self.run_id, message
        )
        self.lost = True
        self._interrupt(errors.LeaseLost(message), cancel=True)

    def _answered(self, resp: t.HeartbeatStepTaskResponse) -> None:
        if resp.budget_exceeded:
            self._lose(f"the server failed the step: {resp.budget_exceeded}")
            return
        seen = {s.event_id for s in self.signals}
        for s in resp.signals:
            if s.event_id == 0 or s.event_id not in seen:
                self.signals.append(s)
                self._acked_signal = max(self._acked_signal, s.event_id)
                self._new_signal.set()
        if resp.cancel_requested:
            self._interrupt(
                errors.StepCancelled("the run's cancellation was requested"), cancel=True
            )
        elif resp.pause_requested:
            self._interrupt(errors.StepPaused("the run was paused"), cancel=False)

    async def keep_alive(self) -> None:
        """Heartbeats whenever the interval passes without one, until cancelled."""
        while not self.lost:
            due = self._last_beat + self._interval
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            if time.monotonic() - self._last_beat < self._interval:
                continue
            try:
                await self._beat(until=0, force=True)
            except errors.StepInterrupted:
                return
            except errors.RailyardError as e:
                log.warning("heartbeat failed (will try again): %s", e)

    async def flush_usage(self) -> None:
        if self._usage_unsent and not self.lost:
            await self._beat(until=0, force=True)

    async def next_signal(self, name: str | None = None, timeout: float | None = None) -> t.Signal:
        """Waits for a signal (of ``name``) that arrives after this call, heartbeating
        meanwhile; :class:`TimeoutError` after ``timeout`` seconds."""
        self._check()
        start = len(self.signals)

        async def wait() -> t.Signal:
            at = start
            while True:
                for s in self.signals[at:]:
                    if name is None or s.name == name:
                        return s
                at = len(self.signals)
                self._new_signal.clear()
                await self._new_signal.wait()
                self._check()

        return await self._guard(asyncio.wait_for(wait(), timeout))

    # ---------------------------------------------------------- live output

    async def output(
        self,
        text: str = "",
        *,
        kind: str = "text",
        name: str = "",
        call_id: str = "",
        is_error: bool = False,
    ) -> None:
        """Streams live output (``railyard run watch RUN --stream``): queued and sent
        in batches four times a second. Not journaled: a resumed step does not
        resend it. Past 1 MiB or 4096 queued chunks, output is dropped and counted."""
        self._check()
        k = _KINDS.get(kind)
        if k is None:
            raise errors.InvalidArgument(f"kind: {kind!r} is not one of {', '.join(_KINDS)}")
        last = self._output[-1] if self._output else None
        size = len(text.encode())
        if self._output_bytes + size > MAX_OUTPUT_QUEUED_BYTES or (
            len(self._output) >= MAX_OUTPUT_QUEUED_CHUNKS
        ):
            self._output_dropped += 1
            return
        self._output_bytes += size
        if last is not None and k == c.OUTPUT_KIND_TEXT and last.kind == k:
            last.text += text
            return
        self._output.append(
            c.OutputChunk(kind=k, text=text, name=name, call_id=call_id, is_error=is_error)
        )

    async def flush_output(self) -> None:
        """Sends the queued live output now (once; a batch the server does not take
        is dropped, never resent)."""
        if not self._output or self.lost:
            return
        chunks, self._output, self._output_bytes = self._output, [], 0
        req = t.AppendStepOutputRequest(
            task_token=self.task.task_token, identity=self._identity, chunks=chunks
        )
        try:
            await self._client.append_step_output(req)
        except errors.RailyardError as e:
            log.debug("live output dropped: %s", e)

    async def ship_output(self) -> None:
        while not self.lost:
            await asyncio.sleep(OUTPUT_INTERVAL)
            await self.flush_output()

    # ---------------------------------------------------------- the run's record

    async def report_issue(
        self, summary: str, details: str = "", severity: str = "warning"
    ) -> bool:
        """Records an issue without ending the step (``info``, ``warning``, ``error``,
        ``critical``); answers whether it was recorded (at most 10 per attempt)."""
        self._check()
        req = t.ReportIssueRequest(
            task_token=self.task.task_token, identity=self._identity, severity=severity,
            summary=summary, details=details,
        )  # fmt: skip
        return (await self._guard(self._client.report_issue(req))).recorded

    async def upsert_search_attributes(self, attributes: Mapping[str, str]) -> int:
        """Sets search attributes of the run now (empty text unsets); answers how many
        changed."""
        self._check()
        req = t.UpsertSearchAttributesRequest(
            task_token=self.task.task_token,
            identity=self._identity,
            search_attributes=str_map("search_attributes", attributes),
        )
        return (await self._guard(self._client.upsert_search_attributes(req))).changed

    # ------------------------------------------------------------ children

    async def spawn(self, name: str, children: Sequence[ChildRun]) -> list[str]:
        """Starts child runs under the lease (journaled as a ``spawn`` record: a
        resumed step gets the same run ids instead of new children); answers their
        run ids. The request's id is derived from the step, ``name`` and the call's
        count, so a step killed after the server started the children but before the
        journal held their ids gets the same children again, and a lost answer is
        retried."""
        self._check()
        seq = self._next("spawn", name)
        if (name, seq) in self._journal.spawns:
            return list(self._journal.spawns[(name, seq)])
        req = t.SpawnChildRunsRequest(
            task_token=self.task.task_token,
            identity=self._identity,
            request_id=_spawn_request_id(self.task.step_id, name, seq),
            children=[
                t.ChildRunSpec(
                    workflow_id=ch.workflow_id,
                    goal=ch.goal,
                    context=str_map("context", ch.context),
                    parent_close_policy=ch.parent_close_policy,
                )
                for ch in children
            ],
        )
        try:
            resp = await self._guard(self._client.spawn_child_runs(req))
        except (errors.FailedPrecondition, errors.PermissionDenied, errors.Unauthenticated) as e:
            # The server's only such answers here: the lease itself is gone.
            self._lose(e)
            raise self.interrupt or e from None
        ids = list(resp.child_run_ids)
        record = {"k": "spawn", "name": name, "seq": seq, "run_ids": ids}
        await self._write(record, f"step.spawn({name!r}) call {seq}")
        return ids

    async def wait_children(self, name: str, run_ids: Sequence[str]) -> list[ChildOutcome]:
        """Waits until the child runs have closed and answers their outcomes (in the
        order of ``run_ids``). The wait holds no lease: the step ends its lease with its
        journal, the handler is suspended (never call this inside try/except that
        swallows ``asyncio.CancelledError``), and a later lease resumes it; the
        handler then runs again from the start, its durable calls replayed, and this
        call answers the outcomes (journaled as an ``outcomes`` record)."""
        self._check()
        seq = self._next("outcomes", name)
        ids = list(run_ids)
        if (name, seq) not in self._journal.outcomes:
            found = _outcomes_in(self.resume_messages, ids)
            if found is None:
                await self._suspend(ids)
            record = {"k": "outcomes", "name": name, "seq": seq, "value": found}
            await self._write(record, f"step.wait_children({name!r}) call {seq}")
        return [_outcome(o) for o in self._journal.outcomes[(name, seq)]["children"]]

    async def spawn_and_wait(self, name: str, children: Sequence[ChildRun]) -> list[ChildOutcome]:
        """:meth:`spawn`, then :meth:`wait_children` for them."""
        return await self.wait_children(name, await self.spawn(name, children))

    async def _suspend(self, ids: list[str]) -> None:
        async with self._lock:
            req = t.SpawnChildRunsRequest(
                task_token=self.task.task_token,
                identity=self._identity,
                wait=True,
                await_run_ids=ids,
                checkpoint=self._journal.whole(),
            )
            try:
                await self._client.spawn_child_runs(req)
            except (
                errors.FailedPrecondition,
                errors.PermissionDenied,
                errors.Unauthenticated,
            ) as e:
                self._lose(e)
                raise self.interrupt or e from None
            self.suspended = True
            self.lost = True
        raise _Suspended(f"waiting for child runs {', '.join(ids)}")

    # ------------------------------------------------------------ completion

    async def complete(
        self,
        result: Mapping[str, Any] | None = None,
        *,
        notes: str = "",
        artifacts: Sequence[str] = (),
        context_updates: Mapping[str, str] | None = None,
        search_attributes: Mapping[str, str] | None = None,
    ) -> bool:
        """Completes the step from inside the handler, so that a result refused for
        its output contract comes back as :class:`~railyard.ContractViolation` for the
        handler to fix and try again. The handler's return value is then ignored.
        Answers whether the result is held for approval."""
        self._check()
        resp = await self._guard(
            self.send_completion(
                StepResult(
                    result=result,
                    notes=notes,
                    artifacts=artifacts,
                    context_updates=context_updates or {},
                    search_attributes=search_attributes or {},
                )
            )
        )
        self.completed = True
        return resp.held_for_approval

    async def send_completion(self, r: StepResult) -> t.CompleteStepTaskResponse:
        await self.flush_output()
        await self.flush_usage()
        result_json = ""
        if r.result is not None:
            if not isinstance(r.result, Mapping):
                kind = type(r.result).__name__
                raise errors.StepError(
                    f"the step's result must be a JSON object (a dict), got {kind}",
                    error_type="bad_result",
                    non_retryable=True,
                )
            try:
                result_json = json.dumps(dict(r.result), allow_nan=False)
            except (TypeError, ValueError) as e:
                raise errors.StepError(
                    f"the step's result is not JSON: {e}",
                    error_type="bad_result",
                    non_retryable=True,
                ) from None
        req = t.CompleteStepTaskRequest(
            task_token=self.task.task_token,
            identity=self._identity,
            notes=r.notes,
            artifacts=list(r.artifacts),
            context_updates=str_map("context_updates", r.context_updates),
            result_json=result_json,
            search_attributes=str_map("search_attributes", r.search_attributes),
        )
        if self.task.require_confirmation:
            req.checkpoint = self._journal.whole()
        return await self._client.complete_step_task(req)

    def journal_bytes(self) -> bytes:
        return self._journal.whole()


def _spawn_request_id(step_id: str, name: str, seq: int) -> str:
    """The request id of the ``seq``-th ``spawn`` named ``name`` in step ``step_id``
    (the server scopes it to the run); the TypeScript SDK derives the same."""
    return hashlib.sha256(f"spawn\0{step_id}\0{name}\0{seq}".encode()).hexdigest()


def _outcomes_in(messages: Sequence[str], ids: list[str]) -> dict[str, Any] | None:
    """The children's outcomes in a resume message that covers ``ids`` (in their
    order), with the ones still running (a wait that timed out and resumed)."""
    for message in messages:
        _, _, body = message.partition("\n")
        try:
            value = json.loads(body)
        except ValueError:
            continue
        if not isinstance(value, dict) or not isinstance(value.get("children"), list):
            continue
        by_id = {ch.get("childRunId"): ch for ch in value["children"] if isinstance(ch, dict)}
        running = [str(i) for i in value.get("stillRunning") or []]
        if all(i in by_id or i in running for i in ids):
            return {
                "children": [by_id[i] for i in ids if i in by_id],
                "stillRunning": [i for i in ids if i in running],
            }
    return None


def _outcome(raw: Mapping[str, Any]) -> ChildOutcome:
    return ChildOutcome(
        run_id=str(raw.get("childRunId", "")),
        outcome=str(raw.get("outcome", "")),
        notes=str(raw.get("notes") or ""),
        artifacts=[str(a) for a in raw.get("artifacts") or []],
        result=raw.get("result"),
    )
