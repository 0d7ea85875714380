"""Schedules, triggers and batches: the calls of :class:`~railyard.AsyncClient`
beyond runs and tasks."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence

from railyard import errors
from railyard._base import ClientCore, new_request_id, str_map
from railyard.v1 import batches_pb2 as b
from railyard.v1 import schedules_pb2 as s
from railyard.v1 import triggers_pb2 as tr


def _batch_action(action: str | b.BatchAction.ValueType) -> b.BatchAction.ValueType:
    if isinstance(action, int):
        return action
    try:
        return b.BatchAction.Value(f"BATCH_ACTION_{action.upper()}")
    except ValueError:
        raise errors.InvalidArgument(
            f"action: {action!r} is not one of cancel, terminate, reset, rerun, signal"
        ) from None


class AdminCalls(ClientCore):
    # ------------------------------------------------------------ schedules

    async def create_schedule(
        self,
        schedule_id: str,
        workflow_id: str,
        *,
        cron: Sequence[str] = (),
        interval: str = "",
        time_zone: str = "",
        goal: str = "",
        context: Mapping[str, str] | None = None,
        task_queue: str = "",
        search_attributes: Mapping[str, str] | None = None,
        overlap: s.OverlapPolicy.ValueType = s.OVERLAP_POLICY_UNSPECIFIED,
        pause_on_failure: bool = False,
        paused: bool = False,
        note: str = "",
        memo: str = "",
        remaining_actions: int = 0,
        request_id: str | None = None,
        timeout: float | None = None,
    ) -> None:
        """Creates a schedule firing on ``cron`` expressions or an ``interval``
        (``"every 15m offset 2m"``); goal and context are templates over
        ``{{scheduledTime}}`` and ``{{scheduleId}}``."""
        req = s.CreateScheduleRequest(
            namespace=self.namespace,
            schedule_id=schedule_id,
            spec=s.ScheduleSpec(cron=list(cron), interval=interval, time_zone=time_zone),
            action=s.ScheduleAction(
                workflow_id=workflow_id,
                goal=goal,
                context=str_map("context", context),
                task_queue=task_queue,
                search_attributes=str_map("search_attributes", search_attributes),
            ),
            policies=s.SchedulePolicies(overlap=overlap, pause_on_failure=pause_on_failure),
            paused=paused,
            note=note,
            memo=memo,
            remaining_actions=remaining_actions,
            identity=self.identity,
            request_id=request_id or new_request_id(),
        )
        await self._unary(self._schedules.CreateSchedule, req, timeout=timeout)

    async def describe_schedule(
        self, schedule_id: str, *, timeout: float | None = None
    ) -> s.ScheduleInfo:
        req = s.DescribeScheduleRequest(namespace=self.namespace, schedule_id=schedule_id)
        return (await self._unary(self._schedules.DescribeSchedule, req, timeout=timeout)).schedule

    async def list_schedules(self, *, page_size: int = 100) -> AsyncIterator[s.ScheduleSummary]:
        """Every schedule of the namespace, page after page."""
        token = ""
        while True:
            req = s.ListSchedulesRequest(
                namespace=self.namespace, page_size=page_size, page_token=token
            )
            page = await self._unary(self._schedules.ListSchedules, req)
            for item in page.schedules:
                yield item
            if not page.next_page_token:
                return
            token = page.next_page_token

    async def patch_schedule(
        self,
        schedule_id: str,
        *,
        pause: bool = False,
        unpause: bool = False,
        note: str = "",
        trigger: bool = False,
        request_id: str | None = None,
        timeout: float | None = None,
    ) -> s.PatchScheduleResponse:
        """Pauses, unpauses or triggers a schedule now (``.triggered_run_id``)."""
        req = s.PatchScheduleRequest(
            namespace=self.namespace,
            schedule_id=schedule_id,
            pause=pause,
            unpause=unpause,
            note=note,
            identity=self.identity,
            request_id=request_id or new_request_id(),
        )
        if trigger:
            req.trigger.SetInParent()
        return await self._unary(self._schedules.PatchSchedule, req, timeout=timeout)

    async def delete_schedule(self, schedule_id: str, *, timeout: float | None = None) -> None:
        req = s.DeleteScheduleRequest(
            namespace=self.namespace, schedule_id=schedule_id, identity=self.identity
        )
        await self._unary(self._schedules.DeleteSchedule, req, timeout=timeout, gone_is_done=True)

    # ------------------------------------------------------------- triggers

    async def create_trigger(
        self,
        trigger_id: str,
        spec: tr.TriggerSpec | None = None,
        *,
        workflow_id: str = "",
        goal: str = "",
        context: Mapping[str, str] | None = None,
        task_queue: str = "",
        description: str = "",
        bearer_token: str = "",
        signature_secret: str = "",
        timeout: float | None = None,
    ) -> tr.TriggerInfo:
        """Creates a webhook trigger (``POST /hooks/{namespace}/{trigger_id}``), from a
        whole ``spec`` or the common fields. Secrets are ``$ENV_NAME``s the server
        reads. Tried once (a repeat after a lost answer would meet ALREADY_EXISTS)."""
        if spec is None:
            spec = tr.TriggerSpec(
                workflow_id=workflow_id,
                goal=goal,
                context=str_map("context", context),
                task_queue=task_queue,
                description=description,
                bearer_token=bearer_token,
                signature_secret=signature_secret,
            )
        req = tr.CreateTriggerRequest(
            namespace=self.namespace, trigger_id=trigger_id, spec=spec, identity=self.identity
        )
        resp = await self._unary(self._triggers.CreateTrigger, req, retry=False, timeout=timeout)
        return resp.trigger

    async def describe_trigger(
        self, trigger_id: str, *, timeout: float | None = None
    ) -> tr.TriggerInfo:
        req = tr.DescribeTriggerRequest(namespace=self.namespace, trigger_id=trigger_id)
        return (await self._unary(self._triggers.DescribeTrigger, req, timeout=timeout)).trigger

    async def list_triggers(self, *, page_size: int = 100) -> AsyncIterator[tr.TriggerInfo]:
        token = ""
        while True:
            req = tr.ListTriggersRequest(
                namespace=self.namespace, page_size=page_size, page_token=token
            )
            page = await self._unary(self._triggers.ListTriggers, req)
            for item in page.triggers:
                yield item
            if not page.next_page_token:
                return
            token = page.next_page_token

    async def delete_trigger(self, trigger_id: str, *, timeout: float | None = None) -> None:
        req = tr.DeleteTriggerRequest(
            namespace=self.namespace, trigger_id=trigger_id, identity=self.identity
        )
        await self._unary(self._triggers.DeleteTrigger, req, timeout=timeout, gone_is_done=True)

    # -------------------------------------------------------------- batches

    async def start_batch(
        self,
        action: str | b.BatchAction.ValueType,
        query: str,
        *,
        reason: str = "",
        rate_per_second: int | None = None,
        dry_run: bool = False,
        batch_id: str = "",
        to_step: str = "",
        signal_name: str = "",
        signal_payload_json: str = "",
        timeout: float | None = None,
    ) -> b.StartBatchResponse:
        """Applies ``action`` (``"cancel"``, ``"terminate"``, ``"reset"``, ``"rerun"``,
        ``"signal"``) to every run ``query`` matches, ``rate_per_second`` a second
        (1 to 1000; ``None``: the server's default); ``dry_run`` counts them. Retried
        only with a ``batch_id`` (a repeat with it answers the same batch)."""
        req = b.StartBatchRequest(
            namespace=self.namespace,
            identity=self.identity,
            action=_batch_action(action),
            query=query,
            reason=reason,
            dry_run=dry_run,
            batch_id=batch_id,
            to_step=to_step,
            signal_name=signal_name,
            signal_payload_json=signal_payload_json,
        )
        if rate_per_second is not None:
            req.rate_per_second = rate_per_second
        return await self._unary(
            self._batches.StartBatch, req, retry=bool(batch_id) or dry_run, timeout=timeout
        )

    async def describe_batch(
        self, batch_id: str, *, timeout: float | None = None
    ) -> b.DescribeBatchResponse:
        """A batch's progress (``.batch``) and the runs it skipped or failed on."""
        req = b.DescribeBatchRequest(namespace=self.namespace, batch_id=batch_id)
        return await self._unary(self._batches.DescribeBatch, req, timeout=timeout)

    async def stop_batch(
        self, batch_id: str, reason: str = "", *, timeout: float | None = None
    ) -> b.BatchInfo:
        req = b.StopBatchRequest(
            namespace=self.namespace, batch_id=batch_id, identity=self.identity, reason=reason
        )
        return (await self._unary(self._batches.StopBatch, req, timeout=timeout)).batch
