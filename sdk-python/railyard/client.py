"""The asyncio client, :class:`AsyncClient`: runs, their history and live output,
and the calls of a step's lease. Schedules, triggers and batches are in
``railyard._admin``; the blocking :class:`~railyard.Client` wraps this one."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

from railyard import errors
from railyard._admin import AdminCalls
from railyard._base import new_request_id, str_map
from railyard.v1 import common_pb2 as c
from railyard.v1 import history_pb2 as h
from railyard.v1 import tasks_pb2 as t

# The checkpoint's page size asked for (the server's cap).
_CHECKPOINT_PAGE = 1 << 20


class AsyncClient(AdminCalls):
    """A connection to a Railyard server, for asyncio code.

    ``server`` is ``http://host:port`` or ``https://host:port`` (default:
    ``RAILYARD_SERVER``, else ``http://127.0.0.1:7400``); ``namespace`` defaults to
    ``RAILYARD_NAMESPACE``, else ``default``; the API key to ``api_key_file``, then
    ``RAILYARD_API_KEY_FILE``, then ``RAILYARD_API_KEY``. ``tls_ca`` (a CA bundle) and
    ``tls_cert`` with ``tls_key`` (mutual TLS) apply to ``https://`` URLs. Nothing is
    dialled until the first call. Each call has a deadline (``request_timeout``, or
    the call's ``timeout``); calls safe to repeat are tried again, with backoff, when
    the server is unreachable. Results are the generated messages of
    ``railyard.v1``; failures raise :class:`~railyard.RailyardError` subclasses.
    """

    # ------------------------------------------------------------------ runs

    async def start_run(
        self,
        workflow_id: str,
        goal: str = "",
        *,
        context: Mapping[str, str] | None = None,
        request_id: str | None = None,
        run_id: str = "",
        search_attributes: Mapping[str, str] | None = None,
        max_tokens: int = 0,
        max_cost_usd: float = 0.0,
        callback_url: str = "",
        task_queue: str = "",
        parent_run_id: str = "",
        traceparent: str = "",
        priority: int = 0,
        fairness_key: str = "",
        fairness_weight: int = 0,
        concurrency_key: str = "",
        timeout: float | None = None,
    ) -> h.StartRunResponse:
        """Starts a run of ``workflow_id``. A request id is made when none is given, so
        a retry never starts two runs; a repeated request id answers the first run
        (``started`` False). ``priority`` 1 (first) to 5 (0: 3), ``fairness_key``,
        ``fairness_weight`` and ``concurrency_key`` are its flow control
        (docs/flow-control.md)."""
        req = h.StartRunRequest(
            namespace=self.namespace,
            workflow_id=workflow_id,
            goal=goal,
            context=str_map("context", context),
            request_id=request_id or new_request_id(),
            run_id=run_id,
            search_attributes=str_map("search_attributes", search_attributes),
            max_tokens=max_tokens,
            max_cost_usd=max_cost_usd,
            callback_url=callback_url,
            task_queue=task_queue,
            parent_run_id=parent_run_id,
            traceparent=traceparent,
            identity=self.identity,
            priority=priority,
            fairness_key=fairness_key,
            fairness_weight=fairness_weight,
            concurrency_key=concurrency_key,
        )
        return await self._unary(self._history.StartRun, req, timeout=timeout)

    async def describe_run(
        self, run_id: str, *, timeout: float | None = None
    ) -> h.DescribeRunResponse:
        """A run (``.run``: status, steps, results) and its pinned definition."""
        req = h.DescribeRunRequest(namespace=self.namespace, run_id=run_id)
        return await self._unary(self._history.DescribeRun, req, timeout=timeout)

    async def get_history(
        self, run_id: str, *, from_event_id: int = 1, timeout: float | None = None
    ) -> list[c.HistoryEvent]:
        """Every event of a run from ``from_event_id``, following pages."""
        events: list[c.HistoryEvent] = []
        start = max(from_event_id, 1)
        while True:
            req = h.GetHistoryRequest(namespace=self.namespace, run_id=run_id, from_event_id=start)
            page = await self._unary(self._history.GetHistory, req, timeout=timeout)
            events.extend(page.events)
            if not page.events or page.next_event_id == 0:
                return events
            start = max(page.next_event_id, start + len(page.events))

    def watch_run(self, run_id: str, *, from_event_id: int = 1) -> AsyncIterator[c.HistoryEvent]:
        """A run's events from ``from_event_id`` as they happen; ends when the run
        closes. A stream broken by a server restart is reopened where it was."""
        at = [max(from_event_id, 1)]

        def advance(ev: c.HistoryEvent) -> None:
            at[0] = ev.event_id + 1

        return self._stream(
            lambda: self._history.WatchRun(
                h.WatchRunRequest(namespace=self.namespace, run_id=run_id, from_event_id=at[0]),
                metadata=self._metadata,
            ),
            advance,
        )

    async def watch_output(
        self, run_id: str, *, from_offset: int = 1, from_end: int = 0
    ) -> AsyncIterator[c.OutputChunk]:
        """A run's live output chunks (text, tool calls, segment starts...) from
        ``from_offset`` (or the last ``from_end`` kept); ends once the run is closed
        and its last chunk sent. Reopened where it was when the stream breaks."""
        at = [max(from_offset, 1), from_end]

        def advance(resp: h.WatchOutputResponse) -> None:
            if resp.HasField("chunk"):
                at[0], at[1] = resp.chunk.offset + 1, 0

        stream = self._stream(
            lambda: self._history.WatchOutput(
                h.WatchOutputRequest(
                    namespace=self.namespace, run_id=run_id, from_offset=at[0], from_end=at[1]
                ),
                metadata=self._metadata,
            ),
            advance,
        )
        async for resp in stream:
            if resp.HasField("chunk"):
                yield resp.chunk

    async def list_runs_page(
        self,
        query: str = "",
        *,
        page_size: int = 100,
        page_token: str = "",
        status: c.RunStatus.ValueType = c.RUN_STATUS_UNSPECIFIED,
        workflow_id: str = "",
        parent_run_id: str = "",
        has_issues: bool = False,
        timeout: float | None = None,
    ) -> h.ListRunsResponse:
        """One page of the runs a list query matches (docs/search-and-queries.md);
        ``next_page_token`` is empty on the last."""
        req = h.ListRunsRequest(
            namespace=self.namespace,
            query=query,
            page_size=page_size,
            page_token=page_token,
            status=status,
            workflow_id=workflow_id,
            parent_run_id=parent_run_id,
            has_issues=has_issues,
        )
        return await self._unary(self._history.ListRuns, req, timeout=timeout)

    async def list_runs(
        self,
        query: str = "",
        *,
        page_size: int = 100,
        status: c.RunStatus.ValueType = c.RUN_STATUS_UNSPECIFIED,
        workflow_id: str = "",
        parent_run_id: str = "",
        has_issues: bool = False,
    ) -> AsyncIterator[c.RunInfo]:
        """Every run a list query matches (summaries), page after page."""
        token = ""
        while True:
            page = await self.list_runs_page(
                query,
                page_size=page_size,
                page_token=token,
                status=status,
                workflow_id=workflow_id,
                parent_run_id=parent_run_id,
                has_issues=has_issues,
            )
            for run in page.runs:
                yield run
            if not page.next_page_token:
                return
            token = page.next_page_token

    async def count_runs(
        self, query: str = "", *, group_by: str = "", timeout: float | None = None
    ) -> h.CountRunsResponse:
        """How many runs a query matches (``.count``), by ``group_by`` (``.groups``)."""
        req = h.CountRunsRequest(namespace=self.namespace, query=query, group_by=group_by)
        return await self._unary(self._history.CountRuns, req, timeout=timeout)

    async def signal_run(
        self,
        run_id: str,
        signal_name: str,
        payload: Any = None,
        *,
        request_id: str | None = None,
        timeout: float | None = None,
    ) -> None:
        """Sends a signal; ``payload`` is any JSON value. Delivered once per request id
        (one is made when none is given)."""
        try:
            payload_json = "" if payload is None else json.dumps(payload, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise errors.InvalidArgument(f"payload: not JSON: {e}") from None
        req = h.SignalRunRequest(
            namespace=self.namespace,
            run_id=run_id,
            signal_name=signal_name,
            payload_json=payload_json,
            identity=self.identity,
            request_id=request_id or new_request_id(),
        )
        await self._unary(self._history.SignalRun, req, timeout=timeout)

    async def cancel_run(
        self, run_id: str, reason: str = "", *, timeout: float | None = None
    ) -> None:
        """Asks a run to cancel (``CANCELED``); a step in flight hears it."""
        req = h.CancelRunRequest(
            namespace=self.namespace, run_id=run_id, reason=reason, identity=self.identity
        )
        await self._unary(self._history.CancelRun, req, timeout=timeout)

    async def terminate_run(
        self, run_id: str, reason: str = "", *, timeout: float | None = None
    ) -> None:
        """Ends a run at once (``TERMINATED``)."""
        req = h.TerminateRunRequest(
            namespace=self.namespace, run_id=run_id, reason=reason, identity=self.identity
        )
        await self._unary(self._history.TerminateRun, req, timeout=timeout)

    async def pause_run(
        self, run_id: str, reason: str = "", *, timeout: float | None = None
    ) -> bool:
        """Pauses a run and its open children; answers whether it changed."""
        req = h.PauseRunRequest(
            namespace=self.namespace, run_id=run_id, reason=reason, identity=self.identity
        )
        return (await self._unary(self._history.PauseRun, req, timeout=timeout)).changed

    async def unpause_run(self, run_id: str, *, timeout: float | None = None) -> bool:
        """Unpauses a run; answers whether it changed."""
        req = h.UnpauseRunRequest(namespace=self.namespace, run_id=run_id, identity=self.identity)
        return (await self._unary(self._history.UnpauseRun, req, timeout=timeout)).changed

    async def approve_step(
        self, run_id: str, *, step_id: str = "", note: str = "", timeout: float | None = None
    ) -> None:
        """Approves the result a ``requireConfirmation`` step holds."""
        req = h.ApproveStepRequest(
            namespace=self.namespace, run_id=run_id, step_id=step_id, note=note,
            identity=self.identity,
        )  # fmt: skip
        await self._unary(self._history.ApproveStep, req, timeout=timeout)

    async def reject_step(
        self, run_id: str, feedback: str, *, step_id: str = "", timeout: float | None = None
    ) -> None:
        """Rejects the held result with feedback: the step re-opens on its journal."""
        req = h.RejectStepRequest(
            namespace=self.namespace, run_id=run_id, step_id=step_id, feedback=feedback,
            identity=self.identity,
        )  # fmt: skip
        await self._unary(self._history.RejectStep, req, timeout=timeout)

    async def reset_run(
        self,
        run_id: str,
        *,
        to_step: str = "",
        reason: str = "",
        goal: str = "",
        context: Mapping[str, str] | None = None,
        new_run_id: str = "",
        request_id: str | None = None,
        timeout: float | None = None,
    ) -> h.ResetRunResponse:
        """A new run from an old one's state at ``to_step`` (earlier steps carried)."""
        req = h.ResetRunRequest(
            namespace=self.namespace,
            run_id=run_id,
            to_step=to_step,
            reason=reason,
            goal=goal,
            context=str_map("context", context),
            new_run_id=new_run_id,
            request_id=request_id or new_request_id(),
            identity=self.identity,
        )
        return await self._unary(self._history.ResetRun, req, timeout=timeout)

    async def rerun_run(
        self,
        run_id: str,
        *,
        reason: str = "",
        goal: str = "",
        context: Mapping[str, str] | None = None,
        new_run_id: str = "",
        request_id: str | None = None,
        timeout: float | None = None,
    ) -> h.ResetRunResponse:
        """A new run of the old run's pinned workflow version from its first step."""
        req = h.RerunRunRequest(
            namespace=self.namespace,
            run_id=run_id,
            reason=reason,
            goal=goal,
            context=str_map("context", context),
            new_run_id=new_run_id,
            request_id=request_id or new_request_id(),
            identity=self.identity,
        )
        return await self._unary(self._history.RerunRun, req, timeout=timeout)

    async def get_session_tree(
        self, run_id: str, *, timeout: float | None = None
    ) -> h.GetSessionTreeResponse:
        """A run and the runs it spawned, as a tree."""
        req = h.GetSessionTreeRequest(namespace=self.namespace, run_id=run_id)
        return await self._unary(self._history.GetSessionTree, req, timeout=timeout)

    async def get_step_checkpoint(
        self, run_id: str, step_id: str = "", *, timeout: float | None = None
    ) -> h.GetStepCheckpointResponse:
        """The latest checkpoint of a run's step (empty ``step_id``: the current
        step), all its pages read: ``.data`` holds it whole."""
        data = bytearray()
        offset = 0
        while True:
            req = h.GetStepCheckpointRequest(
                namespace=self.namespace, run_id=run_id, step_id=step_id, offset=offset,
                max_bytes=_CHECKPOINT_PAGE,
            )  # fmt: skip
            page = await self._unary(self._history.GetStepCheckpoint, req, timeout=timeout)
            data += page.data
            if page.next_offset == 0 or not page.data:
                return h.GetStepCheckpointResponse(
                    step_id=page.step_id,
                    attempt=page.attempt,
                    total_bytes=page.total_bytes,
                    data=bytes(data),
                )
            offset = page.next_offset

    # ------------------------------------------------------------- workflows

    async def list_workflows(self, *, timeout: float | None = None) -> h.ListWorkflowsResponse:
        """The workflows the namespace serves (``.workflows``) and the definition files
        that failed validation (``.invalid``)."""
        req = h.ListWorkflowsRequest(namespace=self.namespace)
        return await self._unary(self._history.ListWorkflows, req, timeout=timeout)

    async def register_workflow(
        self, definition: str | Mapping[str, Any], *, timeout: float | None = None
    ) -> h.RegisterWorkflowResponse:
        """Registers a workflow definition (its JSON text, or a dict), validated as a
        workflows-directory file is: :class:`~railyard.InvalidArgument` naming the JSON
        path when it is not valid. ``.changed`` is False when the same definition was
        registered already. Safe to repeat."""
        text = definition if isinstance(definition, str) else json.dumps(definition)
        req = h.RegisterWorkflowRequest(namespace=self.namespace, definition_json=text)
        try:
            return await self._unary(self._history.RegisterWorkflow, req, timeout=timeout)
        except errors.Unimplemented:
            raise errors.Unimplemented(
                f"the server at {self.server} does not serve History.RegisterWorkflow "
                "(a server older than this SDK)"
            ) from None

    # ---------------------------------------------------------------- tasks

    async def describe_task_queue(
        self, task_queue: str, *, timeout: float | None = None
    ) -> t.DescribeTaskQueueResponse:
        """A task queue's backlog and recent pollers."""
        req = t.DescribeTaskQueueRequest(namespace=self.namespace, task_queue=task_queue)
        return await self._unary(self._tasks.DescribeTaskQueue, req, timeout=timeout)

    async def poll_step_task(
        self, task_queue: str, *, wait: float = 20.0, identity: str | None = None
    ) -> t.StepTask | None:
        """Long-polls a queue for a step (None when ``wait`` passed with none)."""
        req = t.PollStepTaskRequest(
            namespace=self.namespace,
            task_queue=task_queue,
            identity=identity or self.identity,
            wait_timeout_ms=int(wait * 1000),
        )
        resp = await self._unary(self._tasks.PollStepTask, req, wait=wait)
        return resp.task if resp.HasField("task") else None

    async def heartbeat_step_task(
        self, req: t.HeartbeatStepTaskRequest
    ) -> t.HeartbeatStepTaskResponse:
        """One heartbeat as given (retried: the server applies a repeat once)."""
        return await self._unary(self._tasks.HeartbeatStepTask, req)

    async def complete_step_task(
        self, req: t.CompleteStepTaskRequest
    ) -> t.CompleteStepTaskResponse:
        return await self._unary(self._tasks.CompleteStepTask, req)

    async def fail_step_task(self, req: t.FailStepTaskRequest) -> t.FailStepTaskResponse:
        return await self._unary(self._tasks.FailStepTask, req)

    async def spawn_child_runs(self, req: t.SpawnChildRunsRequest) -> t.SpawnChildRunsResponse:
        """Retried only when the request names a ``request_id`` (a repeat then answers
        the same children); without one a repeat after a lost answer could start the
        children twice, so it is tried once."""
        return await self._unary(self._tasks.SpawnChildRuns, req, retry=bool(req.request_id))

    async def append_step_output(
        self, req: t.AppendStepOutputRequest
    ) -> t.AppendStepOutputResponse:
        """Tried once (live output is never resent, so nothing is doubled)."""
        return await self._unary(self._tasks.AppendStepOutput, req, retry=False)

    async def report_issue(self, req: t.ReportIssueRequest) -> t.ReportIssueResponse:
        """Tried once: a repeat after a lost answer would record the issue twice."""
        return await self._unary(self._tasks.ReportIssue, req, retry=False)

    async def upsert_search_attributes(
        self, req: t.UpsertSearchAttributesRequest
    ) -> t.UpsertSearchAttributesResponse:
        return await self._unary(self._tasks.UpsertSearchAttributes, req)
