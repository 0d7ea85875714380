import { status as Code } from "@grpc/grpc-js";

/** The base of every error the SDK throws; `code` is the gRPC status code, when there was one. */
export class RailyardError extends Error {
  readonly code: number | undefined;

  constructor(message: string, code?: number, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
  }

  /** Whether a later try of the same call may succeed (the server unreachable or slow). */
  get transient(): boolean {
    return this.code === Code.UNAVAILABLE || this.code === Code.DEADLINE_EXCEEDED;
  }
}

/** A setting cannot be used: a bad URL, an empty API key, an unreadable TLS file. */
export class ConfigError extends RailyardError {}

/** The request was wrong. `field` is the field the server's message names, when it names one. */
export class InvalidArgumentError extends RailyardError {
  readonly field: string | undefined;

  constructor(message: string, options?: ErrorOptions) {
    super(message, Code.INVALID_ARGUMENT, options);
    this.field = fieldOf(message);
  }
}

/** The run, step, schedule or trigger named does not exist. */
export class NotFoundError extends RailyardError {}
/** What a create names exists already. */
export class AlreadyExistsError extends RailyardError {}
/** The caller is known but may not do this. */
export class PermissionDeniedError extends RailyardError {}
/** Credentials are missing or refused. Never retried. */
export class UnauthenticatedError extends RailyardError {}
/** A stale lease or an illegal state change. */
export class FailedPreconditionError extends RailyardError {}
/** A limit of the namespace or the server was reached. */
export class ResourceExhaustedError extends RailyardError {}
/** The server could not be reached (after retries, on calls that retry). */
export class UnavailableError extends RailyardError {}
/** No answer within the call's deadline. */
export class DeadlineExceededError extends RailyardError {}
/** The call was cancelled by the caller (its AbortSignal). */
export class CancelledError extends RailyardError {}
/** The server failed in a way it did not expect. */
export class InternalError extends RailyardError {}

/**
 * A completion refused by the step's output contract: each violation a JSON path and a
 * reason, from the server's "- path: reason" lines.
 */
export class ContractViolationError extends InvalidArgumentError {
  readonly violations: { path: string; reason: string }[];

  constructor(message: string, violations: { path: string; reason: string }[]) {
    super(message);
    this.violations = violations;
  }
}

const FIELD = /^([A-Za-z_][A-Za-z0-9_]*(?:(?:\.[A-Za-z_][A-Za-z0-9_]*)|(?:\[\d+\]))*): /;

function fieldOf(message: string): string | undefined {
  return FIELD.exec(message)?.[1];
}

/** The violations listed in a contract refusal, or none when the message is not one. */
export function contractViolations(message: string): { path: string; reason: string }[] {
  const out: { path: string; reason: string }[] = [];
  for (const line of message.split("\n")) {
    const m = /^- (.+?): (.*)$/.exec(line);
    if (m) out.push({ path: m[1], reason: m[2] });
  }
  return out;
}

interface StatusLike {
  code?: number;
  details?: string;
  message?: string;
}

/** The SDK error for a gRPC status from the server at `url`. */
export function fromStatus(err: StatusLike, url: string): RailyardError {
  const message = err.details || err.message || "unknown error";
  const options = { cause: err };
  switch (err.code) {
    case Code.INVALID_ARGUMENT: {
      const violations = /violations? of the output contract/.test(message)
        ? contractViolations(message)
        : [];
      return violations.length > 0
        ? new ContractViolationError(message, violations)
        : new InvalidArgumentError(message, options);
    }
    case Code.NOT_FOUND:
      return new NotFoundError(message, err.code, options);
    case Code.ALREADY_EXISTS:
      return new AlreadyExistsError(message, err.code, options);
    case Code.PERMISSION_DENIED:
      return new PermissionDeniedError(message, err.code, options);
    case Code.UNAUTHENTICATED:
      return new UnauthenticatedError(message, err.code, options);
    case Code.FAILED_PRECONDITION:
      return new FailedPreconditionError(message, err.code, options);
    case Code.RESOURCE_EXHAUSTED:
      return new ResourceExhaustedError(message, err.code, options);
    case Code.UNAVAILABLE:
      return new UnavailableError(
        `server unavailable at ${url}: ${message}${tlsHint(message)}`,
        err.code,
        options,
      );
    case Code.DEADLINE_EXCEEDED:
      return new DeadlineExceededError(message, err.code, options);
    case Code.CANCELLED:
      return new CancelledError(message, err.code, options);
    case Code.INTERNAL:
      return new InternalError(message, err.code, options);
    default:
      return new RailyardError(message, err.code, options);
  }
}

/** Whether a connection failed in the TLS handshake: no retry changes that. */
export function isTlsFailure(message: string): boolean {
  return /SSL routines|certificate|handshake/i.test(message);
}

function tlsHint(message: string): string {
  if (/certificate required/.test(message)) {
    return " (the server requires a client certificate: set tls.cert and tls.key)";
  }
  if (
    /certificate verify failed|unknown ca|self.signed|unable to (get local issuer|verify)/i.test(
      message,
    )
  ) {
    return " (the server's certificate is not trusted: set tls.ca to the CA that signed it)";
  }
  return "";
}
