import { status as Code } from "@grpc/grpc-js";

/** How a call that may be repeated is retried after a transient error. */
export interface RetryPolicy {
  /** Tries in all, the first included (at least 1). */
  maxAttempts: number;
  /** The first pause, in milliseconds. */
  initialBackoffMs: number;
  /** Each pause stays under this, in milliseconds. */
  maxBackoffMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = {
  maxAttempts: 8,
  initialBackoffMs: 50,
  maxBackoffMs: 2000,
};

/**
 * The pause before retry `k` (0-based): exponential from the initial backoff, doubled
 * each time, capped at half the maximum, plus up to as much again of jitter, so each
 * pause is in [base, 2 * base) and below the maximum, and two clients do not retry in
 * lockstep.
 */
export function backoff(policy: RetryPolicy, k: number, random: () => number = Math.random) {
  const cap = policy.maxBackoffMs / 2;
  const base = Math.min(Math.min(policy.initialBackoffMs, cap) * 2 ** Math.min(k, 31), cap);
  return base + random() * base;
}

/** Whether a status may clear on its own: the server unreachable, or gone mid-call. */
export function isTransient(code: number | undefined, message: string): boolean {
  if (code === Code.UNAVAILABLE) return true;
  return code === Code.UNKNOWN && message.startsWith("transport error");
}

/** Whether a stream that ended with this status is worth opening again. */
export function isTransientStreamBreak(code: number | undefined, message: string): boolean {
  return (
    isTransient(code, message) ||
    code === Code.UNKNOWN ||
    code === Code.CANCELLED ||
    code === Code.INTERNAL
  );
}

/** Sleeps `ms`, or rejects with the signal's reason once it aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
