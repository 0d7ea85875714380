import { hostname } from "node:os";
import {
  ApiKey,
  DEFAULT_NAMESPACE,
  DEFAULT_SERVER,
  readApiKeyFile,
  type TlsOptions,
} from "./config.js";
import { DeadlineExceededError, NotFoundError, RailyardError } from "./errors.js";
import type { HistoryEvent, OutputChunk, RunInfo } from "./gen/railyard/v1/common.js";
import { IdReusePolicy, RunStatus } from "./gen/railyard/v1/common.js";
import {
  CountRunsRequest,
  type CountRunsResponse,
  GetHistoryRequest,
  type GetHistoryResponse,
  HistoryService,
  ListRunsRequest,
  type ListRunsResponse,
  type ListWorkflowsResponse,
  type RegisterWorkflowResponse,
  RerunRunRequest,
  ResetRunRequest,
  type ResetRunResponse,
  StartRunRequest,
  type WatchOutputResponse,
} from "./gen/railyard/v1/history.js";
import {
  CreateScheduleRequest,
  type ScheduleSummary,
  SchedulesService,
} from "./gen/railyard/v1/schedules.js";
import {
  AppendStepOutputRequest,
  ChildRunSpec,
  CompleteStepTaskRequest,
  type CompleteStepTaskResponse,
  FailStepTaskRequest,
  HeartbeatStepTaskRequest,
  type HeartbeatStepTaskResponse,
  type StepTask,
  TasksService,
} from "./gen/railyard/v1/tasks.js";
import { type TriggerInfo, TriggerSpec, TriggersService } from "./gen/railyard/v1/triggers.js";
import { DEFAULT_RETRY, type RetryPolicy } from "./retry.js";
import { type CallOptions, Transport } from "./transport.js";

export type { CallOptions } from "./transport.js";

/** How to reach the server. Each setting falls back to its environment variable. */
export interface ClientOptions {
  /** `http://host:port` or `https://host:port` (env `RAILYARD_SERVER`, default `http://127.0.0.1:7400`). */
  server?: string;
  /** The namespace calls act in (env `RAILYARD_NAMESPACE`, default `default`). */
  namespace?: string;
  /** Sent as `authorization: Bearer <key>` (env `RAILYARD_API_KEY`). */
  apiKey?: string;
  /** A file whose first line is the key (env `RAILYARD_API_KEY_FILE`). */
  apiKeyFile?: string;
  /** For `https://`: CA, client certificate and key, as PEM text or file paths
   * (env `RAILYARD_TLS_CA`, `RAILYARD_TLS_CLIENT_CERT`, `RAILYARD_TLS_CLIENT_KEY`). */
  tls?: TlsOptions;
  /** Who the calls are from, recorded in history (default `railyard-ts@<host>`). */
  identity?: string;
  /** Each call's deadline unless the call sets its own (default 30 s). */
  requestTimeoutMs?: number;
  /** Retries of transient errors on calls that may be repeated. */
  retry?: Partial<RetryPolicy>;
  /** Where the environment defaults come from (default `process.env`). */
  env?: Record<string, string | undefined>;
}

export interface StartRunOptions extends CallOptions {
  goal?: string;
  context?: Record<string, string>;
  /** Starting again with the same request id returns the first start's run (default: a new UUID). */
  requestId?: string;
  runId?: string;
  idReusePolicy?: "allow_duplicate" | "reject_duplicate";
  searchAttributes?: Record<string, string>;
  /** The run's token budget, and its cost budget in US dollars. */
  maxTokens?: number;
  maxCostUsd?: number;
  /** Where the run's result is POSTed when it closes. */
  callbackUrl?: string;
  taskQueue?: string;
  parentRunId?: string;
  traceparent?: string;
  /** Dispatch priority, 1 (first) to 5 (last); 0 or absent: 3 (docs/flow-control.md). */
  priority?: number;
  /** The key the run's steps share the queue fairly under (at most 64 bytes). */
  fairnessKey?: string;
  /** The fairness key's share, 1 to 1000 (absent: 1). */
  fairnessWeight?: number;
  /** The key its concurrency limit counts under (absent: the fairness key). */
  concurrencyKey?: string;
}

export interface ListRunsOptions extends CallOptions {
  /** A query in the query language (docs/search-and-queries.md), e.g. `status = "running"`. */
  query?: string;
  pageSize?: number;
  pageToken?: string;
  workflowId?: string;
  status?: RunStatus;
  parentRunId?: string;
  hasIssues?: boolean;
}

export interface ResetOptions extends CallOptions {
  reason?: string;
  goal?: string;
  context?: Record<string, string>;
  newRunId?: string;
  requestId?: string;
}

export interface ScheduleOptions extends CallOptions {
  workflowId: string;
  cron?: string[];
  /** A duration such as `1h` or `30m`. */
  interval?: string;
  timeZone?: string;
  goal?: string;
  context?: Record<string, string>;
  taskQueue?: string;
  searchAttributes?: Record<string, string>;
  paused?: boolean;
  note?: string;
  memo?: string;
  requestId?: string;
}

const CLOSED = new Set([
  RunStatus.RUN_STATUS_COMPLETED,
  RunStatus.RUN_STATUS_FAILED,
  RunStatus.RUN_STATUS_CANCELED,
  RunStatus.RUN_STATUS_TERMINATED,
  RunStatus.RUN_STATUS_TIMED_OUT,
]);

/** Whether a run of this status has closed. */
export function isClosed(status: RunStatus): boolean {
  return CLOSED.has(status);
}

/** A client of a Railyard server: runs, schedules, triggers, workflows, and the task calls a worker makes. */
export class Client {
  readonly namespace: string;
  readonly identity: string;
  readonly transport: Transport;

  constructor(options: ClientOptions = {}, transport?: Transport, namespace?: string) {
    const env = options.env ?? process.env;
    this.identity = options.identity ?? `railyard-ts@${hostname()}`;
    if (transport) {
      this.transport = transport;
      this.namespace = namespace ?? DEFAULT_NAMESPACE;
      return;
    }
    this.namespace = options.namespace ?? env.RAILYARD_NAMESPACE ?? DEFAULT_NAMESPACE;
    const server = options.server ?? env.RAILYARD_SERVER ?? DEFAULT_SERVER;
    let apiKey: ApiKey | undefined;
    if (options.apiKey !== undefined) apiKey = new ApiKey(options.apiKey);
    else if (options.apiKeyFile !== undefined) apiKey = readApiKeyFile(options.apiKeyFile);
    else if (env.RAILYARD_API_KEY) apiKey = new ApiKey(env.RAILYARD_API_KEY);
    else if (env.RAILYARD_API_KEY_FILE) apiKey = readApiKeyFile(env.RAILYARD_API_KEY_FILE);
    const tls: TlsOptions = { ...options.tls };
    tls.ca ??= env.RAILYARD_TLS_CA || undefined;
    tls.cert ??= env.RAILYARD_TLS_CLIENT_CERT || undefined;
    tls.key ??= env.RAILYARD_TLS_CLIENT_KEY || undefined;
    this.transport = new Transport(server, {
      apiKey,
      tls,
      retry: { ...DEFAULT_RETRY, ...options.retry },
      requestTimeoutMs: options.requestTimeoutMs ?? 30_000,
    });
  }

  /** The server's URL. */
  get url(): string {
    return this.transport.url;
  }

  /** The same connection, acting in another namespace. */
  withNamespace(namespace: string): Client {
    return new Client({ identity: this.identity }, this.transport, namespace);
  }

  /** Closes the connection; calls after it fail. */
  close(): void {
    this.transport.close();
  }

  toString(): string {
    return `Client(${this.url}, namespace ${this.namespace})`;
  }

  #ns() {
    return { namespace: this.namespace };
  }

  // Runs.

  /** Starts a run of a workflow. With the same `requestId`, a repeated start returns the first run. */
  async startRun(
    workflowId: string,
    opts: StartRunOptions = {},
  ): Promise<{ runId: string; started: boolean }> {
    const req = StartRunRequest.fromPartial({
      ...this.#ns(),
      workflowId,
      goal: opts.goal ?? "",
      context: opts.context ?? {},
      requestId: opts.requestId ?? crypto.randomUUID(),
      runId: opts.runId ?? "",
      idReusePolicy:
        opts.idReusePolicy === "allow_duplicate"
          ? IdReusePolicy.ID_REUSE_POLICY_ALLOW_DUPLICATE
          : opts.idReusePolicy === "reject_duplicate"
            ? IdReusePolicy.ID_REUSE_POLICY_REJECT_DUPLICATE
            : IdReusePolicy.ID_REUSE_POLICY_UNSPECIFIED,
      identity: this.identity,
      searchAttributes: opts.searchAttributes ?? {},
      maxTokens: opts.maxTokens ?? 0,
      maxCostUsd: opts.maxCostUsd ?? 0,
      callbackUrl: opts.callbackUrl ?? "",
      taskQueue: opts.taskQueue ?? "",
      parentRunId: opts.parentRunId ?? "",
      traceparent: opts.traceparent ?? "",
      priority: opts.priority ?? 0,
      fairnessKey: opts.fairnessKey ?? "",
      fairnessWeight: opts.fairnessWeight ?? 0,
      concurrencyKey: opts.concurrencyKey ?? "",
    });
    const res = await this.transport.call(HistoryService.startRun, req, opts);
    return { runId: res.runId, started: res.started };
  }

  /** The run: status, steps and their results, usage, what it waits on. */
  async describeRun(runId: string, opts?: CallOptions): Promise<RunInfo> {
    return (await this.describeRunWithDefinition(runId, opts)).run;
  }

  /** The run and the definition (JSON text) it pinned when it started. */
  async describeRunWithDefinition(
    runId: string,
    opts?: CallOptions,
  ): Promise<{ run: RunInfo; definitionJson: string }> {
    const res = await this.transport.call(
      HistoryService.describeRun,
      { ...this.#ns(), runId },
      opts,
    );
    if (!res.run) throw new RailyardError("the server's answer is missing the run");
    return { run: res.run, definitionJson: res.definitionJson };
  }

  /** One page of a run's history; with `waitTimeoutMs`, waits that long for an event past `fromEventId`. */
  getHistory(
    runId: string,
    page: { fromEventId?: number; pageSize?: number; waitTimeoutMs?: number } & CallOptions = {},
  ): Promise<GetHistoryResponse> {
    const req = GetHistoryRequest.fromPartial({
      ...this.#ns(),
      runId,
      fromEventId: page.fromEventId ?? 0,
      pageSize: page.pageSize ?? 0,
      waitTimeoutMs: page.waitTimeoutMs ?? 0,
    });
    return this.transport.call(HistoryService.getHistory, req, page, page.waitTimeoutMs ?? 0);
  }

  /** A run's whole history, every page. */
  async history(runId: string, opts?: CallOptions): Promise<HistoryEvent[]> {
    const events: HistoryEvent[] = [];
    let from = 1;
    for (;;) {
      const page = await this.getHistory(runId, { ...opts, fromEventId: from });
      events.push(...page.events);
      if (page.events.length === 0 || page.nextEventId === 0) return events;
      from = Math.max(page.nextEventId, from + page.events.length);
    }
  }

  /** Waits until the run closes (or `timeoutMs` passes: a DeadlineExceededError), then describes it. */
  async waitForRun(
    runId: string,
    opts: { timeoutMs?: number; signal?: AbortSignal } = {},
  ): Promise<RunInfo> {
    const end = Date.now() + (opts.timeoutMs ?? 300_000);
    let from = 1;
    for (;;) {
      const left = end - Date.now();
      const page = await this.getHistory(runId, {
        fromEventId: from,
        waitTimeoutMs: Math.max(0, Math.min(left, 10_000)),
        signal: opts.signal,
      });
      if (isClosed(page.status)) return this.describeRun(runId, { signal: opts.signal });
      if (page.events.length > 0) from = Math.max(page.nextEventId, from + page.events.length);
      if (Date.now() >= end) {
        throw new DeadlineExceededError(
          `run ${runId} did not close within ${opts.timeoutMs ?? 300_000} ms`,
        );
      }
    }
  }

  /** The run's events as they happen, from `fromEventId` (default: the first). */
  watchRun(
    runId: string,
    opts: { fromEventId?: number; signal?: AbortSignal } = {},
  ): AsyncGenerator<HistoryEvent> {
    return this.transport.stream(
      HistoryService.watchRun,
      { ...this.#ns(), runId, fromEventId: opts.fromEventId ?? 0 },
      opts.signal,
    );
  }

  /** The run's live output (text, thinking, tool calls) as its steps' workers send it. */
  watchOutput(
    runId: string,
    opts: { fromOffset?: number; fromEnd?: number; signal?: AbortSignal } = {},
  ): AsyncGenerator<WatchOutputResponse> {
    return this.transport.stream(
      HistoryService.watchOutput,
      { ...this.#ns(), runId, fromOffset: opts.fromOffset ?? 0, fromEnd: opts.fromEnd ?? 0 },
      opts.signal,
    );
  }

  /** One page of runs. */
  listRunsPage(opts: ListRunsOptions = {}): Promise<ListRunsResponse> {
    const req = ListRunsRequest.fromPartial({
      ...this.#ns(),
      query: opts.query ?? "",
      pageSize: opts.pageSize ?? 0,
      pageToken: opts.pageToken ?? "",
      workflowId: opts.workflowId ?? "",
      status: opts.status ?? RunStatus.RUN_STATUS_UNSPECIFIED,
      parentRunId: opts.parentRunId ?? "",
      hasIssues: opts.hasIssues ?? false,
    });
    return this.transport.call(HistoryService.listRuns, req, opts);
  }

  /** Every run matching, page after page. */
  async *listRuns(opts: ListRunsOptions = {}): AsyncGenerator<RunInfo> {
    let pageToken = opts.pageToken ?? "";
    do {
      const page = await this.listRunsPage({ ...opts, pageToken });
      yield* page.runs;
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
  }

  /** How many runs match a query, and by group with `groupBy`. */
  countRuns(query = "", opts: { groupBy?: string } & CallOptions = {}): Promise<CountRunsResponse> {
    const req = CountRunsRequest.fromPartial({ ...this.#ns(), query, groupBy: opts.groupBy ?? "" });
    return this.transport.call(HistoryService.countRuns, req, opts);
  }

  /** Sends a signal to a run (`payload` is sent as JSON). */
  async signal(
    runId: string,
    name: string,
    payload?: unknown,
    opts: { requestId?: string } & CallOptions = {},
  ): Promise<void> {
    const payloadJson = payload === undefined ? "" : JSON.stringify(payload);
    await this.transport.call(
      HistoryService.signalRun,
      {
        ...this.#ns(),
        runId,
        signalName: name,
        payloadJson,
        identity: this.identity,
        requestId: opts.requestId ?? crypto.randomUUID(),
      },
      opts,
    );
  }

  /** Asks the run to cancel: its step's worker is told, and the run ends canceled. */
  async cancel(runId: string, reason = "", opts?: CallOptions): Promise<void> {
    await this.transport.call(
      HistoryService.cancelRun,
      { ...this.#ns(), runId, reason, identity: this.identity },
      opts,
    );
  }

  /** Ends the run at once. */
  async terminate(runId: string, reason = "", opts?: CallOptions): Promise<void> {
    await this.transport.call(
      HistoryService.terminateRun,
      { ...this.#ns(), runId, reason, identity: this.identity },
      opts,
    );
  }

  /** Pauses the run; false when it was paused already. */
  async pause(runId: string, reason = "", opts?: CallOptions): Promise<boolean> {
    const res = await this.transport.call(
      HistoryService.pauseRun,
      { ...this.#ns(), runId, reason, identity: this.identity },
      opts,
    );
    return res.changed;
  }

  /** Unpauses the run; false when it was not paused. */
  async unpause(runId: string, opts?: CallOptions): Promise<boolean> {
    const res = await this.transport.call(
      HistoryService.unpauseRun,
      { ...this.#ns(), runId, identity: this.identity },
      opts,
    );
    return res.changed;
  }

  /** Approves the result a step holds for approval. */
  async approve(runId: string, stepId: string, note = "", opts?: CallOptions): Promise<void> {
    await this.transport.call(
      HistoryService.approveStep,
      { ...this.#ns(), runId, stepId, note, identity: this.identity },
      opts,
    );
  }

  /** Rejects the result a step holds for approval; the step resumes with the feedback. */
  async reject(runId: string, stepId: string, feedback = "", opts?: CallOptions): Promise<void> {
    await this.transport.call(
      HistoryService.rejectStep,
      { ...this.#ns(), runId, stepId, feedback, identity: this.identity },
      opts,
    );
  }

  /** A new run from the run's step `toStep`, the steps before it carried over. */
  reset(runId: string, toStep: string, opts: ResetOptions = {}): Promise<ResetRunResponse> {
    const req = ResetRunRequest.fromPartial({
      ...this.#ns(),
      runId,
      toStep,
      reason: opts.reason ?? "",
      goal: opts.goal ?? "",
      context: opts.context ?? {},
      newRunId: opts.newRunId ?? "",
      requestId: opts.requestId ?? crypto.randomUUID(),
      identity: this.identity,
    });
    return this.transport.call(HistoryService.resetRun, req, opts);
  }

  /** A new run of the run's workflow from its first step. */
  rerun(runId: string, opts: ResetOptions = {}): Promise<ResetRunResponse> {
    const req = RerunRunRequest.fromPartial({
      ...this.#ns(),
      runId,
      reason: opts.reason ?? "",
      goal: opts.goal ?? "",
      context: opts.context ?? {},
      newRunId: opts.newRunId ?? "",
      requestId: opts.requestId ?? crypto.randomUUID(),
      identity: this.identity,
    });
    return this.transport.call(HistoryService.rerunRun, req, opts);
  }

  /** The checkpoint of a run's step (the one in flight, or the last), every page. */
  async getStepCheckpoint(runId: string, stepId: string, opts?: CallOptions): Promise<Buffer> {
    const parts: Buffer[] = [];
    let offset = 0;
    for (;;) {
      const page = await this.transport.call(
        HistoryService.getStepCheckpoint,
        { ...this.#ns(), runId, stepId, offset, maxBytes: 0 },
        opts,
      );
      parts.push(Buffer.from(page.data));
      const next = offset + page.data.length;
      if (page.data.length === 0 || page.nextOffset === 0 || next >= page.totalBytes) {
        return Buffer.concat(parts);
      }
      offset = Math.max(page.nextOffset, next);
    }
  }

  // Workflows.

  /** The namespace's workflow definitions, and the files that failed to load. */
  listWorkflows(opts?: CallOptions): Promise<ListWorkflowsResponse> {
    return this.transport.call(HistoryService.listWorkflows, this.#ns(), opts);
  }

  /** Registers a definition (an object, or its JSON text); `changed` is false when it was registered already. */
  async registerWorkflow(
    definition: object | string,
    opts?: CallOptions,
  ): Promise<RegisterWorkflowResponse> {
    const definitionJson = typeof definition === "string" ? definition : JSON.stringify(definition);
    return this.transport.call(
      HistoryService.registerWorkflow,
      { ...this.#ns(), definitionJson },
      opts,
    );
  }

  // Schedules.

  /** Creates a schedule that starts runs of a workflow on a cron or an interval. */
  async createSchedule(scheduleId: string, opts: ScheduleOptions): Promise<void> {
    const req = CreateScheduleRequest.fromPartial({
      ...this.#ns(),
      scheduleId,
      spec: { cron: opts.cron ?? [], interval: opts.interval ?? "", timeZone: opts.timeZone ?? "" },
      action: {
        workflowId: opts.workflowId,
        taskQueue: opts.taskQueue ?? "",
        goal: opts.goal ?? "",
        context: opts.context ?? {},
        searchAttributes: opts.searchAttributes ?? {},
      },
      paused: opts.paused ?? false,
      note: opts.note ?? "",
      memo: opts.memo ?? "",
      identity: this.identity,
      requestId: opts.requestId ?? crypto.randomUUID(),
    });
    await this.transport.call(SchedulesService.createSchedule, req, opts);
  }

  /** Every schedule of the namespace. */
  async *listSchedules(
    opts: { pageSize?: number } & CallOptions = {},
  ): AsyncGenerator<ScheduleSummary> {
    let pageToken = "";
    do {
      const page = await this.transport.call(
        SchedulesService.listSchedules,
        { ...this.#ns(), pageSize: opts.pageSize ?? 0, pageToken },
        opts,
      );
      yield* page.schedules;
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
  }

  /** Deletes a schedule; deleting one already gone (say, by a retried call) is not an error. */
  async deleteSchedule(scheduleId: string, opts?: CallOptions): Promise<void> {
    await this.#deleting(() =>
      this.transport.call(
        SchedulesService.deleteSchedule,
        { ...this.#ns(), scheduleId, identity: this.identity },
        opts,
      ),
    );
  }

  // Triggers.

  /** Creates a trigger: a webhook (or a poll of a source) that starts runs of a workflow. */
  async createTrigger(
    triggerId: string,
    spec: Partial<TriggerSpec> & { workflowId: string },
    opts?: CallOptions,
  ): Promise<TriggerInfo | undefined> {
    const res = await this.transport.call(
      TriggersService.createTrigger,
      { ...this.#ns(), triggerId, spec: TriggerSpec.fromPartial(spec), identity: this.identity },
      opts,
    );
    return res.trigger;
  }

  /** Every trigger of the namespace. */
  async *listTriggers(opts: { pageSize?: number } & CallOptions = {}): AsyncGenerator<TriggerInfo> {
    let pageToken = "";
    do {
      const page = await this.transport.call(
        TriggersService.listTriggers,
        { ...this.#ns(), pageSize: opts.pageSize ?? 0, pageToken },
        opts,
      );
      yield* page.triggers;
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
  }

  /** Deletes a trigger; deleting one already gone is not an error. */
  async deleteTrigger(triggerId: string, opts?: CallOptions): Promise<void> {
    await this.#deleting(() =>
      this.transport.call(
        TriggersService.deleteTrigger,
        { ...this.#ns(), triggerId, identity: this.identity },
        opts,
      ),
    );
  }

  async #deleting(call: () => Promise<unknown>): Promise<void> {
    try {
      await call();
    } catch (e) {
      if (!(e instanceof NotFoundError)) throw e;
    }
  }

  // The task calls a step worker makes (StepWorker uses them; most code never needs to).

  /** Leases the next step task of a queue, waiting up to `waitTimeoutMs`; undefined when none came. */
  async pollStepTask(
    taskQueue: string,
    opts: { waitTimeoutMs?: number; runId?: string } & CallOptions = {},
  ): Promise<StepTask | undefined> {
    const wait = opts.waitTimeoutMs ?? 20_000;
    const res = await this.transport.call(
      TasksService.pollStepTask,
      {
        ...this.#ns(),
        taskQueue,
        identity: this.identity,
        waitTimeoutMs: wait,
        runId: opts.runId ?? "",
      },
      opts,
      wait,
    );
    return res.task;
  }

  heartbeatStepTask(
    req: Partial<HeartbeatStepTaskRequest> & { taskToken: string },
    opts?: CallOptions,
  ): Promise<HeartbeatStepTaskResponse> {
    const full = HeartbeatStepTaskRequest.fromPartial({ identity: this.identity, ...req });
    return this.transport.call(TasksService.heartbeatStepTask, full, opts);
  }

  completeStepTask(
    req: Partial<CompleteStepTaskRequest> & { taskToken: string },
    opts?: CallOptions,
  ): Promise<CompleteStepTaskResponse> {
    const full = CompleteStepTaskRequest.fromPartial({ identity: this.identity, ...req });
    return this.transport.call(TasksService.completeStepTask, full, opts);
  }

  async failStepTask(
    req: Partial<FailStepTaskRequest> & { taskToken: string },
    opts?: CallOptions,
  ): Promise<boolean> {
    const full = FailStepTaskRequest.fromPartial({ identity: this.identity, ...req });
    return (await this.transport.call(TasksService.failStepTask, full, opts)).willRetry;
  }

  /**
   * Starts child runs under a step's lease. With a `requestId` the children's run ids
   * are derived from it and a repeat answers the same ones, so the call is retried;
   * without one it is tried once (a repeat would start them twice).
   */
  async spawnChildRuns(
    taskToken: string,
    children: Partial<ChildRunSpec>[],
    opts: {
      wait?: boolean;
      awaitRunIds?: string[];
      checkpoint?: Uint8Array;
      requestId?: string;
    } & CallOptions = {},
  ): Promise<string[]> {
    const req = {
      taskToken,
      identity: this.identity,
      children: children.map((c) => ChildRunSpec.fromPartial(c)),
      wait: opts.wait ?? false,
      awaitRunIds: opts.awaitRunIds ?? [],
      checkpoint: Buffer.from(opts.checkpoint ?? new Uint8Array()),
      requestId: opts.requestId ?? "",
    };
    const method = TasksService.spawnChildRuns;
    const resp = req.requestId
      ? await this.transport.call(method, req, opts)
      : await this.transport.once(method, req, opts);
    return resp.childRunIds;
  }

  async appendStepOutput(
    taskToken: string,
    chunks: Partial<OutputChunk>[],
    opts?: CallOptions,
  ): Promise<{ accepted: number; dropped: number }> {
    const req = AppendStepOutputRequest.fromPartial({ taskToken, identity: this.identity, chunks });
    return this.transport.once(TasksService.appendStepOutput, req, opts);
  }

  async reportIssue(
    taskToken: string,
    issue: {
      severity?: "info" | "warning" | "error" | "critical";
      summary: string;
      details?: string;
    },
    opts?: CallOptions,
  ): Promise<{ recorded: boolean; stepIssues: number }> {
    const req = {
      taskToken,
      identity: this.identity,
      severity: issue.severity ?? "warning",
      summary: issue.summary,
      details: issue.details ?? "",
    };
    return this.transport.once(TasksService.reportIssue, req, opts);
  }

  async upsertSearchAttributes(
    taskToken: string,
    searchAttributes: Record<string, string>,
    opts?: CallOptions,
  ): Promise<number> {
    const req = { taskToken, identity: this.identity, searchAttributes };
    return (await this.transport.call(TasksService.upsertSearchAttributes, req, opts)).changed;
  }
}
