export {
  Client,
  type ClientOptions,
  isClosed,
  type ListRunsOptions,
  type ResetOptions,
  type ScheduleOptions,
  type StartRunOptions,
} from "./client.js";
export { ApiKey, DEFAULT_NAMESPACE, DEFAULT_SERVER, type TlsOptions } from "./config.js";
export {
  AlreadyExistsError,
  CancelledError,
  ConfigError,
  ContractViolationError,
  DeadlineExceededError,
  FailedPreconditionError,
  InternalError,
  InvalidArgumentError,
  NotFoundError,
  PermissionDeniedError,
  RailyardError,
  ResourceExhaustedError,
  UnauthenticatedError,
  UnavailableError,
} from "./errors.js";
export type {
  HistoryEvent,
  OutputChunk,
  RunInfo,
  StepSummary,
  TokenUsage,
} from "./gen/railyard/v1/common.js";
export { OutputKind, RunStatus } from "./gen/railyard/v1/common.js";
export type {
  RegisterWorkflowResponse,
  WatchOutputResponse,
  WorkflowInfo,
} from "./gen/railyard/v1/history.js";
export type { StepTask } from "./gen/railyard/v1/tasks.js";
export { extendDigest, fullDigest, HEADER as JOURNAL_HEADER, JournalError } from "./journal.js";
export { StepResult } from "./result.js";
export { DEFAULT_RETRY, type RetryPolicy } from "./retry.js";
export { type ChildOutcome, type ChildOutcomes, Step, type StepSignal } from "./step.js";
export {
  LeaseLostError,
  StepCancelledError,
  StepError,
  StepInterruptedError,
  StepPausedError,
  StepSuspendedError,
  WorkerShutdownError,
} from "./step-errors.js";
export type { CallOptions } from "./transport.js";
export { type StepHandler, StepWorker, type StepWorkerOptions } from "./worker.js";
