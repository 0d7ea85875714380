import { createHash } from "node:crypto";

import type { Client } from "./client.js";
import { FailedPreconditionError, NotFoundError, RailyardError } from "./errors.js";
import { OutputKind, type RunInfo, type TokenUsage } from "./gen/railyard/v1/common.js";
import type {
  ChildRunSpec,
  CoordinatorNote,
  PriorStep,
  Signal,
  StepTask,
} from "./gen/railyard/v1/tasks.js";
import { Journal, JournalError, type Outcomes } from "./journal.js";
import { StepResult } from "./result.js";
import { sleep } from "./retry.js";
import {
  LeaseLostError,
  StepCancelledError,
  type StepInterruptedError,
  StepPausedError,
  StepSuspendedError,
} from "./step-errors.js";

/** A signal sent to the run, as the step received it. */
export interface StepSignal {
  name: string;
  /** The payload, parsed from JSON (undefined when there was none). */
  payload: unknown;
  eventId: number;
}

/** How a child run ended, as the server told the resumed step. */
export interface ChildOutcome {
  runId: string;
  /** Its status: `"COMPLETED"`, `"FAILED"`... */
  outcome: string;
  notes: string;
  artifacts: string[];
  /** Its last step's structured result (null: none). */
  result: unknown;
}

/** The outcome of a wait on child runs. */
export interface ChildOutcomes {
  runIds: string[];
  /** The children that closed, in the order of `runIds`. */
  children: ChildOutcome[];
  /** Those still running (a wait that timed out). */
  stillRunning: string[];
  /** Each child as described now. */
  runs: RunInfo[];
}

const OUTPUT_FLUSH_MS = 200;
const OUTPUT_MAX_BUFFER = 256 << 10;

/**
 * A leased step, as its handler sees it: what to do (prompt, goal, context, prior
 * steps), the journal of durable results, live output, signals, and the lease's end.
 */
export class Step {
  readonly task: StepTask;
  readonly #client: Client;
  readonly #journal: Journal;
  readonly #controller = new AbortController();
  readonly #runSeq = new Map<string, number>();
  readonly #spawnSeq = new Map<string, number>();
  readonly #waitSeq = new Map<string, number>();
  readonly #signals: StepSignal[] = [];
  readonly #signalWaiters = new Set<() => void>();
  #ackedSignal = 0;
  #usage: TokenUsage | undefined;
  /** Usage reported since the last heartbeat went out. */
  #usageUnsent = false;
  #model = "";
  #notes: CoordinatorNote[] = [];
  #beat: Promise<void> = Promise.resolve();
  #lastBeat = Date.now();
  #over = false;
  #completed = false;
  #output: { kind: OutputKind; text: string; name: string; callId: string; isError: boolean }[] =
    [];
  #outputBytes = 0;
  #outputTimer: NodeJS.Timeout | undefined;
  #outputSending: Promise<void> = Promise.resolve();
  readonly #warn: (message: string) => void;

  /** @internal */
  constructor(client: Client, task: StepTask, warn: (message: string) => void) {
    this.#client = client;
    this.task = task;
    this.#warn = warn;
    this.#journal = new Journal(task.checkpoint, task.checkpointDigest);
    for (const s of task.signals) this.#receive(s);
  }

  get runId(): string {
    return this.task.runId;
  }
  get stepId(): string {
    return this.task.stepId;
  }
  get workflowId(): string {
    return this.task.workflowId;
  }
  /** The step's prompt with its placeholders filled in. */
  get prompt(): string {
    return this.task.prompt;
  }
  get goal(): string {
    return this.task.goal;
  }
  get context(): Record<string, string> {
    return this.task.context;
  }
  /** The steps before this one: notes, artifacts and structured results. */
  get priorSteps(): (PriorStep & { result: unknown })[] {
    return this.task.priorSteps.map((p) => ({
      ...p,
      result: p.resultJson === "" ? undefined : JSON.parse(p.resultJson),
    }));
  }
  /** 1 for the first attempt. */
  get attempt(): number {
    return this.task.attempt;
  }
  /** The checkpoint the task carried, as is. */
  get checkpoint(): Buffer {
    return Buffer.from(this.task.checkpoint);
  }
  /** The JSON Schema the result must match (undefined: none). */
  get outputSchema(): object | undefined {
    return this.task.outputSchemaJson === "" ? undefined : JSON.parse(this.task.outputSchemaJson);
  }
  get lastFailure(): string {
    return this.task.lastFailure;
  }
  /** Aborts when the step is cancelled, paused, loses its lease or the worker shuts down; its reason says which. */
  get signal(): AbortSignal {
    return this.#controller.signal;
  }
  /** The signals received so far. */
  get signals(): readonly StepSignal[] {
    return this.#signals;
  }
  /** The last state saved with `saveState` (this attempt's or an earlier one's), or undefined. */
  get state(): unknown {
    return this.#journal.state?.value;
  }
  /** @internal the checkpoint a failure, pause or wait hands on: the journal, unless the
   * task's checkpoint was not one and this attempt journaled nothing (kept as it was). */
  get handOff(): Buffer {
    return this.#journal.replayed > 0 ||
      this.#journal.appended > 0 ||
      this.task.checkpoint.length === 0
      ? this.#journal.bytes
      : Buffer.from(this.task.checkpoint);
  }
  /** @internal */
  get completed(): boolean {
    return this.#completed;
  }
  /** @internal */
  get lastBeat(): number {
    return this.#lastBeat;
  }

  #check(): void {
    if (this.#controller.signal.aborted) throw this.#controller.signal.reason;
  }

  /** @internal ends the step from outside the handler. */
  interrupt(reason: StepInterruptedError): void {
    if (reason instanceof LeaseLostError || reason instanceof StepSuspendedError) this.#over = true;
    if (!this.#controller.signal.aborted) this.#controller.abort(reason);
    for (const w of this.#signalWaiters) w();
  }

  /** @internal the lease is over (completed or failed): nothing more is sent. */
  end(): void {
    this.#over = true;
    clearTimeout(this.#outputTimer);
  }

  /**
   * Runs `fn(...args)` once per step: its result is journaled, and an attempt that
   * resumes the step gets it back without calling `fn`. The value (JSON, read back as
   * JSON reads it) is returned once the server has acknowledged it.
   */
  async run<A extends unknown[], T>(
    name: string,
    fn: (...args: A) => T | Promise<T>,
    ...args: A
  ): Promise<T> {
    this.#check();
    const seq = this.#runSeq.get(name) ?? 0;
    this.#runSeq.set(name, seq + 1);
    const done = this.#journal.run(name, seq);
    if (done) return done.value as T;
    const value = await fn(...args);
    this.#check();
    const what = `step.run("${name}") #${seq}`;
    this.#journal.append({ k: "run", name, seq, value }, what);
    await this.heartbeat();
    return JSON.parse(JSON.stringify(value)) as T;
  }

  /** Journals the step's state; the last one saved is `step.state` when the step resumes. */
  async saveState(value: unknown): Promise<void> {
    this.#check();
    this.#journal.append({ k: "state", value }, "step.saveState");
    await this.heartbeat();
  }

  /** Sends a heartbeat now (with any journal records not yet acknowledged) and waits for its answer. */
  heartbeat(
    opts: { usage?: Partial<TokenUsage>; model?: string; note?: CoordinatorNote } = {},
  ): Promise<void> {
    this.#check();
    if (opts.usage) this.reportUsage(opts.usage, opts.model);
    if (opts.note) this.#notes.push(opts.note);
    const next = this.#beat.catch(() => undefined).then(() => this.#send());
    this.#beat = next;
    return next;
  }

  /** The attempt's token usage so far (cumulative) and the model, sent with the next heartbeat. */
  reportUsage(usage: Partial<TokenUsage>, model?: string): void {
    this.#usage = {
      inputTokens: usage.inputTokens ?? 0,
      outputTokens: usage.outputTokens ?? 0,
      cacheReadTokens: usage.cacheReadTokens ?? 0,
      cacheWriteTokens: usage.cacheWriteTokens ?? 0,
      costUsd: usage.costUsd ?? 0,
    };
    if (model !== undefined) this.#model = model;
    this.#usageUnsent = true;
  }

  async #send(): Promise<void> {
    this.#check();
    if (this.#over) throw new LeaseLostError("the lease is over");
    const pending = this.#journal.pending();
    this.#usageUnsent = false;
    const req = {
      taskToken: this.task.taskToken,
      usage: this.#usage,
      model: this.#model,
      notes: this.#notes.splice(0),
      ackedSignalEventId: this.#ackedSignal,
      checkpoint: pending && "whole" in pending ? pending.whole : Buffer.alloc(0),
      checkpointAppend: pending && "append" in pending ? pending.append : undefined,
    };
    let res: Awaited<ReturnType<Client["heartbeatStepTask"]>>;
    let expect = pending?.expect;
    try {
      try {
        res = await this.#client.heartbeatStepTask(req);
      } catch (e) {
        if (
          !(
            e instanceof FailedPreconditionError && e.message.startsWith("checkpoint base mismatch")
          )
        )
          throw e;
        this.#journal.resetBase();
        const whole = this.#journal.pending();
        if (!whole || !("whole" in whole)) throw e;
        expect = whole.expect;
        res = await this.#client.heartbeatStepTask({
          ...req,
          checkpointAppend: undefined,
          checkpoint: whole.whole,
        });
      }
    } catch (e) {
      if (e instanceof FailedPreconditionError || e instanceof NotFoundError) {
        const lost = new LeaseLostError(`the lease is gone: ${e.message}`, e.code, { cause: e });
        this.interrupt(lost);
        throw lost;
      }
      throw e;
    }
    this.#lastBeat = Date.now();
    if (expect) this.#journal.acknowledged(res.checkpointLength, res.checkpointDigest, expect);
    for (const s of res.signals) this.#receive(s);
    if (res.budgetExceeded !== "") {
      this.interrupt(new LeaseLostError(`the token budget was passed: ${res.budgetExceeded}`));
    } else if (res.cancelRequested) {
      this.interrupt(new StepCancelledError("cancellation of the run was requested"));
    } else if (res.pauseRequested) {
      this.interrupt(new StepPausedError("the run was paused"));
    }
    this.#check();
  }

  #receive(s: Signal): void {
    if (s.eventId <= this.#ackedSignal) return;
    let payload: unknown;
    try {
      payload = s.payloadJson === "" ? undefined : JSON.parse(s.payloadJson);
    } catch {
      payload = s.payloadJson;
    }
    this.#signals.push({ name: s.name, payload, eventId: s.eventId });
    this.#ackedSignal = s.eventId;
    for (const w of this.#signalWaiters) w();
  }

  /** Waits for a signal (of `name`, when given) received after `afterEventId`, and returns it. */
  async waitForSignal(
    name?: string,
    opts: { afterEventId?: number; timeoutMs?: number } = {},
  ): Promise<StepSignal> {
    const end = Date.now() + (opts.timeoutMs ?? Number.POSITIVE_INFINITY);
    const after = opts.afterEventId ?? 0;
    for (;;) {
      this.#check();
      const found = this.#signals.find(
        (s) => s.eventId > after && (name === undefined || s.name === name),
      );
      if (found) return found;
      const left = end - Date.now();
      if (left <= 0)
        throw new RailyardError(`no signal${name ? ` "${name}"` : ""} within ${opts.timeoutMs} ms`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(wake, Math.min(left, 1000));
        function wake() {
          clearTimeout(t);
          resolve();
        }
        this.#signalWaiters.add(wake);
      }).finally(() => this.#signalWaiters.clear());
      if (Date.now() - this.#lastBeat > 1000) await this.heartbeat();
    }
  }

  /** Live output for watchers of the run (`railyard run watch`, the console); batched, never in history. */
  async output(text: string, kind: "text" | "thinking" = "text"): Promise<void> {
    this.#check();
    if (text === "") return;
    this.#output.push({
      kind: kind === "thinking" ? OutputKind.OUTPUT_KIND_THINKING : OutputKind.OUTPUT_KIND_TEXT,
      text,
      name: "",
      callId: "",
      isError: false,
    });
    this.#outputBytes += Buffer.byteLength(text);
    if (this.#outputBytes >= OUTPUT_MAX_BUFFER) await this.flushOutput();
    else this.#outputTimer ??= setTimeout(() => void this.flushOutput(), OUTPUT_FLUSH_MS);
  }

  /** @internal sends the output buffered so far. */
  flushOutput(): Promise<void> {
    clearTimeout(this.#outputTimer);
    this.#outputTimer = undefined;
    const chunks = this.#output.splice(0);
    this.#outputBytes = 0;
    if (chunks.length === 0 || this.#over) return this.#outputSending;
    this.#outputSending = this.#outputSending.then(async () => {
      for (let i = 0; i < chunks.length; i += 1000) {
        try {
          await this.#client.appendStepOutput(this.task.taskToken, chunks.slice(i, i + 1000));
        } catch (e) {
          this.#warn(`live output not sent: ${(e as Error).message}`);
        }
      }
    });
    return this.#outputSending;
  }

  /** Records an issue in the run's history, without ending the step. */
  async reportIssue(
    summary: string,
    opts: { severity?: "info" | "warning" | "error" | "critical"; details?: string } = {},
  ): Promise<{ recorded: boolean; stepIssues: number }> {
    this.#check();
    return this.#client.reportIssue(this.task.taskToken, { summary, ...opts });
  }

  /** Sets search attributes of the run mid-step; returns how many changed. */
  async upsertSearchAttributes(attributes: Record<string, string>): Promise<number> {
    this.#check();
    return this.#client.upsertSearchAttributes(this.task.taskToken, attributes);
  }

  /**
   * Starts child runs, once per step: journaled as a `spawn` record, so an attempt
   * that resumes the step gets the same run ids back instead of starting them again.
   * The request's id is derived from the step, `name` and the call's count, so a step
   * killed after the server started the children but before the journal held their
   * ids gets the same children again, and a lost answer is retried.
   */
  async spawn(
    name: string,
    children: (Partial<ChildRunSpec> & { workflowId: string })[],
  ): Promise<string[]> {
    this.#check();
    const seq = this.#spawnSeq.get(name) ?? 0;
    this.#spawnSeq.set(name, seq + 1);
    const done = this.#journal.spawn(name, seq);
    if (done) return done;
    const runIds = await this.#client.spawnChildRuns(this.task.taskToken, children, {
      requestId: spawnRequestId(this.task.stepId, name, seq),
    });
    this.#journal.append(
      { k: "spawn", name, seq, run_ids: runIds },
      `step.spawn("${name}") #${seq}`,
    );
    await this.heartbeat();
    return runIds;
  }

  /**
   * Waits for child runs to close. The lease ends while they run (the worker's slot is
   * free); the step is leased again when they have all closed, the handler runs again
   * from the top on the journal, and this call then returns their outcomes, journaled
   * as an `outcomes` record so that a later resume returns them again.
   */
  async waitForChildren(name: string, runIds: string[]): Promise<ChildOutcomes> {
    this.#check();
    const seq = this.#waitSeq.get(name) ?? 0;
    this.#waitSeq.set(name, seq + 1);
    let value = this.#journal.outcomes(name, seq);
    if (!value) {
      const found = outcomesIn(this.task.resumeMessages, runIds);
      if (!found) {
        await this.flushOutput();
        await this.#beat.catch(() => undefined);
        this.#check();
        await this.#client.spawnChildRuns(this.task.taskToken, [], {
          wait: true,
          awaitRunIds: runIds,
          checkpoint: this.#journal.bytes,
        });
        const suspended = new StepSuspendedError(
          `the step waits for ${runIds.length} child run(s)`,
        );
        this.interrupt(suspended);
        throw suspended;
      }
      this.#journal.append(
        { k: "outcomes", name, seq, value: found },
        `step.waitForChildren("${name}") #${seq}`,
      );
      await this.heartbeat();
      value = found;
    }
    const runs = await Promise.all(runIds.map((id) => this.#client.describeRun(id)));
    return {
      runIds,
      children: value.children.map(childOutcome),
      stillRunning: [...value.stillRunning],
      runs,
    };
  }

  /** Starts child runs and waits for them: `spawn` then `waitForChildren`. */
  async spawnAndWait(
    name: string,
    children: (Partial<ChildRunSpec> & { workflowId: string })[],
  ): Promise<ChildOutcomes> {
    return this.waitForChildren(name, await this.spawn(name, children));
  }

  /**
   * Completes the step now (the handler's return value does it otherwise), so that a
   * refusal by the output contract (a ContractViolationError) reaches the handler.
   */
  async complete(value: unknown): Promise<{ heldForApproval: boolean }> {
    this.#check();
    const r = StepResult.from(value);
    await this.flushOutput();
    await this.#beat.catch(() => undefined);
    // The completion carries no usage: a heartbeat takes the last of it first.
    if (this.#usageUnsent) await this.heartbeat();
    this.#check();
    let resultJson = "";
    if (r.result !== undefined) {
      try {
        resultJson = JSON.stringify(r.result);
      } catch (e) {
        throw new JournalError(`the step's result is not JSON: ${(e as Error).message}`);
      }
    }
    const res = await this.#client.completeStepTask({
      taskToken: this.task.taskToken,
      notes: r.notes,
      artifacts: r.artifacts,
      contextUpdates: r.contextUpdates,
      searchAttributes: r.searchAttributes,
      resultJson,
      checkpoint:
        this.#journal.replayed > 0 || this.#journal.appended > 0
          ? this.#journal.bytes
          : Buffer.alloc(0),
    });
    this.#completed = true;
    this.end();
    return { heldForApproval: res.heldForApproval };
  }

  /** @internal waits out a pause between retries of a write, unless the step ends first. */
  pause(ms: number): Promise<void> {
    return sleep(ms, this.#controller.signal);
  }
}

/**
 * The outcomes of `ids` in a resume message that covers them all (closed or still
 * running), in their order; undefined when none does.
 */
export function outcomesIn(messages: string[], ids: string[]): Outcomes | undefined {
  for (const message of messages) {
    const nl = message.indexOf("\n");
    let body: unknown;
    try {
      body = JSON.parse(nl < 0 ? "" : message.slice(nl + 1));
    } catch {
      continue;
    }
    if (typeof body !== "object" || body === null) continue;
    const { children, stillRunning } = body as { children?: unknown; stillRunning?: unknown };
    if (!Array.isArray(children)) continue;
    const byId = new Map<unknown, Record<string, unknown>>();
    for (const ch of children) {
      if (typeof ch === "object" && ch !== null && !Array.isArray(ch)) {
        byId.set((ch as Record<string, unknown>).childRunId, ch as Record<string, unknown>);
      }
    }
    const running = Array.isArray(stillRunning) ? stillRunning.map(String) : [];
    if (ids.every((id) => byId.has(id) || running.includes(id))) {
      return {
        children: ids.flatMap((id) => {
          const ch = byId.get(id);
          return ch ? [ch] : [];
        }),
        stillRunning: ids.filter((id) => running.includes(id)),
      };
    }
  }
  return undefined;
}

function childOutcome(raw: Record<string, unknown>): ChildOutcome {
  return {
    runId: String(raw.childRunId ?? ""),
    outcome: String(raw.outcome ?? ""),
    notes: String(raw.notes ?? ""),
    artifacts: Array.isArray(raw.artifacts) ? raw.artifacts.map(String) : [],
    result: raw.result ?? null,
  };
}

/**
 * The request id of the `seq`-th `spawn` named `name` in step `stepId` (the server
 * scopes it to the run); the Python SDK derives the same.
 */
export function spawnRequestId(stepId: string, name: string, seq: number): string {
  return createHash("sha256").update(`spawn\0${stepId}\0${name}\0${seq}`).digest("hex");
}
