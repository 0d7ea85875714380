import { RailyardError } from "./errors.js";

/** Thrown by a step handler to fail the step with an error type of its choosing. */
export class StepError extends RailyardError {
  readonly errorType: string;
  readonly nonRetryable: boolean;

  constructor(
    message: string,
    opts: { errorType?: string; nonRetryable?: boolean; cause?: unknown } = {},
  ) {
    super(message, undefined, { cause: opts.cause });
    this.errorType = opts.errorType ?? "step_error";
    this.nonRetryable = opts.nonRetryable ?? false;
  }
}

/** The step's end came from outside the handler; the SDK's calls reject with one of these after it. */
export class StepInterruptedError extends RailyardError {}
/** Cancellation of the run was requested. */
export class StepCancelledError extends StepInterruptedError {}
/** The run was paused: the step suspends and resumes from its journal when unpaused. */
export class StepPausedError extends StepInterruptedError {}
/** The lease is gone (expired, taken over, the run closed, a budget passed): nothing more is written. */
export class LeaseLostError extends StepInterruptedError {}
/** The worker is shutting down: the step is handed back, to be retried from its journal. */
export class WorkerShutdownError extends StepInterruptedError {}
/** The step waits for child runs: the lease ended, and the handler runs again when they close. */
export class StepSuspendedError extends StepInterruptedError {}
