import type { Client } from "./client.js";
import { ContractViolationError } from "./errors.js";
import type { StepTask } from "./gen/railyard/v1/tasks.js";
import { sleep } from "./retry.js";
import { Step } from "./step.js";
import {
  LeaseLostError,
  StepCancelledError,
  StepError,
  StepInterruptedError,
  StepPausedError,
  StepSuspendedError,
  WorkerShutdownError,
} from "./step-errors.js";

/** A step handler: the agent. Its return value completes the step (see StepResult.from). */
export type StepHandler = (step: Step) => unknown | Promise<unknown>;

export interface StepWorkerOptions {
  client: Client;
  /** The task queue, or queues, to poll. */
  queue: string | string[];
  handler: StepHandler;
  /** Steps worked at once (default 1). */
  slots?: number;
  /** How long one poll waits for a task (default 20 s). */
  pollTimeoutMs?: number;
  /** On shutdown, how long running steps get to finish before they are handed back (default 10 s). */
  shutdownGraceMs?: number;
  /** Shut down on SIGTERM and SIGINT while `run()` runs (default false). */
  handleSignals?: boolean;
  /** Where warnings go (default: stderr). Never given secrets. */
  logger?: (message: string) => void;
}

const PAUSED = "paused";
const CANCELED = "canceled";
const CONTRACT = "contract_violation";

/** Polls task queues and works each leased step with the handler, `slots` at a time. */
export class StepWorker {
  readonly #client: Client;
  readonly #queues: string[];
  readonly #handler: StepHandler;
  readonly #slots: number;
  readonly #pollTimeoutMs: number;
  readonly #graceMs: number;
  readonly #handleSignals: boolean;
  readonly #log: (message: string) => void;
  readonly #stop = new AbortController();
  readonly #running = new Map<Step, Promise<void>>();
  #free: number;
  #slotWaiters: (() => void)[] = [];
  #shutdown: Promise<void> | undefined;

  constructor(opts: StepWorkerOptions) {
    this.#client = opts.client;
    this.#queues = typeof opts.queue === "string" ? [opts.queue] : [...opts.queue];
    if (this.#queues.length === 0 || this.#queues.some((q) => q === "")) {
      throw new TypeError("StepWorker: queue must name at least one task queue");
    }
    this.#handler = opts.handler;
    this.#slots = opts.slots ?? 1;
    if (!Number.isInteger(this.#slots) || this.#slots < 1 || this.#slots > 1024) {
      throw new RangeError(
        `StepWorker: slots must be an integer from 1 to 1024, got ${opts.slots}`,
      );
    }
    this.#free = this.#slots;
    this.#pollTimeoutMs = opts.pollTimeoutMs ?? 20_000;
    this.#graceMs = opts.shutdownGraceMs ?? 10_000;
    this.#handleSignals = opts.handleSignals ?? false;
    this.#log = opts.logger ?? ((m) => process.stderr.write(`railyard worker: ${m}\n`));
  }

  /** Steps being worked now. */
  get active(): number {
    return this.#running.size;
  }

  /** Polls until `shutdown()` (or SIGTERM/SIGINT with `handleSignals`), and resolves once every step is settled. */
  async run(): Promise<void> {
    const onSignal = () => void this.shutdown();
    if (this.#handleSignals) {
      process.once("SIGTERM", onSignal);
      process.once("SIGINT", onSignal);
    }
    try {
      await Promise.all(this.#queues.map((q) => this.#poll(q)));
      await this.#shutdown;
    } finally {
      process.off("SIGTERM", onSignal);
      process.off("SIGINT", onSignal);
    }
  }

  /**
   * Stops polling, lets running steps finish for the grace period, then hands the rest
   * back to the server (failed, retryable, with their journals) and resolves.
   */
  shutdown(): Promise<void> {
    this.#shutdown ??= (async () => {
      this.#stop.abort();
      for (const w of this.#slotWaiters.splice(0)) w();
      const all = Promise.all(this.#running.values());
      const grace = new AbortController();
      const timer = sleep(this.#graceMs, grace.signal).then(
        () => "late" as const,
        () => "done" as const,
      );
      const first = await Promise.race([all.then(() => "done" as const), timer]);
      grace.abort();
      if (first === "late") {
        for (const step of this.#running.keys()) {
          step.interrupt(new WorkerShutdownError("the worker is shutting down"));
        }
        await all;
      }
    })();
    return this.#shutdown;
  }

  async #slot(): Promise<boolean> {
    while (this.#free === 0 && !this.#stop.signal.aborted) {
      await new Promise<void>((r) => this.#slotWaiters.push(r));
    }
    if (this.#stop.signal.aborted) return false;
    this.#free--;
    return true;
  }

  #release(): void {
    this.#free++;
    this.#slotWaiters.shift()?.();
  }

  async #poll(queue: string): Promise<void> {
    let failures = 0;
    while (await this.#slot()) {
      let task: StepTask | undefined;
      try {
        task = await this.#client.pollStepTask(queue, {
          waitTimeoutMs: this.#pollTimeoutMs,
          signal: this.#stop.signal,
        });
        failures = 0;
      } catch (e) {
        this.#release();
        if (this.#stop.signal.aborted) return;
        failures++;
        this.#log(`poll of ${queue} failed: ${(e as Error).message}`);
        await sleep(Math.min(200 * 2 ** Math.min(failures, 5), 5000), this.#stop.signal).catch(
          () => undefined,
        );
        continue;
      }
      if (!task) {
        this.#release();
        continue;
      }
      const step = new Step(this.#client, task, this.#log);
      const done = this.#work(step).finally(() => {
        this.#running.delete(step);
        this.#release();
      });
      this.#running.set(step, done);
    }
  }

  async #work(step: Step): Promise<void> {
    const interval = heartbeatInterval(step.task.heartbeatTimeoutMs);
    const timer = setInterval(() => {
      if (Date.now() - step.lastBeat < interval * 0.9) return;
      step.heartbeat().catch((e) => {
        if (!(e instanceof StepInterruptedError))
          this.#log(`heartbeat failed: ${(e as Error).message}`);
      });
    }, interval);
    let outcome: { ok: true; value: unknown } | { ok: false; error: unknown };
    const interrupted = new Promise<void>((resolve) => {
      step.signal.addEventListener("abort", () => resolve(), { once: true });
    });
    try {
      const handled = (async () => this.#handler(step))()
        .then((value) => ({ ok: true as const, value }))
        .catch((error: unknown) => ({ ok: false as const, error }));
      // A handler that ignores the interruption is not waited for past a grace period.
      const settled = new AbortController();
      const late = interrupted
        .then(() => sleep(Math.min(this.#graceMs, 5000), settled.signal))
        .then(() => ({ ok: false as const, error: step.signal.reason }));
      outcome = await Promise.race([handled, late.catch(() => handled)]);
      settled.abort();
    } finally {
      clearInterval(timer);
    }
    if (step.signal.aborted) outcome = { ok: false, error: step.signal.reason };
    await this.#settle(step, outcome);
  }

  async #settle(step: Step, outcome: { ok: true; value: unknown } | { ok: false; error: unknown }) {
    try {
      if (outcome.ok) {
        if (!step.completed) await step.complete(outcome.value);
        return;
      }
      const e = outcome.error;
      if (e instanceof LeaseLostError) {
        this.#log(`step ${step.runId}/${step.stepId}: ${e.message}; nothing more is written`);
        return;
      }
      if (e instanceof StepSuspendedError) return;
      await step.flushOutput();
      if (e instanceof StepCancelledError) {
        await this.#fail(step, CANCELED, "cancellation was requested", true);
      } else if (e instanceof StepPausedError) {
        await this.#fail(step, PAUSED, "the run was paused; the step suspended", false);
      } else if (e instanceof WorkerShutdownError) {
        await this.#fail(
          step,
          "worker_shutdown",
          "the worker shut down; the step is handed back",
          false,
        );
      } else if (e instanceof ContractViolationError) {
        await this.#fail(step, CONTRACT, e.message, false);
      } else if (e instanceof StepError) {
        await this.#fail(step, e.errorType, e.message, e.nonRetryable);
      } else if (e instanceof Error) {
        await this.#fail(step, e.name || "Error", e.message, false);
      } else {
        await this.#fail(step, "Error", String(e), false);
      }
    } catch (e) {
      if (e instanceof ContractViolationError) {
        await this.#fail(step, CONTRACT, e.message, false).catch((f) => this.#log(String(f)));
      } else {
        this.#log(
          `step ${step.runId}/${step.stepId}: its end was not reported: ${(e as Error).message}`,
        );
      }
    } finally {
      step.end();
    }
  }

  async #fail(
    step: Step,
    errorType: string,
    message: string,
    nonRetryable: boolean,
  ): Promise<void> {
    await this.#client.failStepTask({
      taskToken: step.task.taskToken,
      errorType,
      message: message.slice(0, 16 << 10),
      nonRetryable,
      checkpoint: step.handOff,
    });
  }
}

/** A third of the heartbeat timeout (10 s when the step sets none), at least 100 ms. */
export function heartbeatInterval(timeoutMs: number): number {
  return timeoutMs > 0 ? Math.max(100, Math.floor(timeoutMs / 3)) : 10_000;
}
