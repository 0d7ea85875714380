import assert from "node:assert/strict";
import { test } from "node:test";
import { status } from "@grpc/grpc-js";
import { backoff, DEFAULT_RETRY, isTransient } from "../src/retry.js";

test("each pause is in [base, 2 * base), doubling from the first, capped under the maximum", () => {
  const p = { maxAttempts: 9, initialBackoffMs: 100, maxBackoffMs: 2000 };
  const bounds = [100, 200, 400, 800, 1000, 1000, 1000, 1000];
  for (let k = 0; k < bounds.length; k++) {
    assert.equal(
      backoff(p, k, () => 0),
      bounds[k],
    );
    const hi = backoff(p, k, () => 0.999999);
    assert.ok(hi < 2 * (bounds[k] ?? 0) && hi < p.maxBackoffMs, `pause ${k}: ${hi}`);
  }
  assert.equal(
    backoff({ ...p, initialBackoffMs: 10_000, maxBackoffMs: 1000 }, 0, () => 0),
    500,
  );
  assert.equal(
    backoff(DEFAULT_RETRY, 40, () => 0),
    1000,
  );
});

test("only an unreachable server is transient", () => {
  assert.ok(isTransient(status.UNAVAILABLE, "connection refused"));
  assert.ok(isTransient(status.UNKNOWN, "transport error"));
  for (const code of [
    status.INVALID_ARGUMENT,
    status.NOT_FOUND,
    status.UNAUTHENTICATED,
    status.DEADLINE_EXCEEDED,
  ]) {
    assert.ok(!isTransient(code, "x"));
  }
});
