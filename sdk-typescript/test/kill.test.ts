import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { dirname, join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { Client, RunStatus } from "../src/index.js";
import {
  type MockModel,
  oneStep,
  type ServerProcess,
  startMockModel,
  startServer,
  until,
} from "./support.js";

const script = join(dirname(fileURLToPath(import.meta.url)), "fixtures/kill-worker.js");

let server: ServerProcess;
let mock: MockModel;
let client: Client;

before(async () => {
  server = await startServer([
    oneStep("six-calls", "ts-kill", {
      heartbeatTimeoutSeconds: 2,
      retry: { initialIntervalSeconds: 1, maximumAttempts: 3 },
    }),
    oneStep("shut-down", "ts-kill", { heartbeatTimeoutSeconds: 10, retry: { maximumAttempts: 2 } }),
  ]);
  mock = await startMockModel();
  client = new Client({ server: server.url, env: {} });
});
after(async () => {
  client.close();
  await mock.close();
  await server.stop();
});

function worker(): ChildProcess {
  const child = spawn(process.execPath, [script], {
    env: { ...process.env, RAILYARD_SERVER: server.url, MODEL_URL: mock.url, QUEUE: "ts-kill" },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const reap = () => child.kill("SIGKILL");
  process.once("exit", reap);
  child.once("exit", () => process.off("exit", reap));
  return child;
}

async function journaledCalls(runId: string): Promise<number> {
  const text = (await client.getStepCheckpoint(runId, "work")).toString("utf8");
  return text.split("\n").filter((l) => l.startsWith('{"k":"run"')).length;
}

test("a worker SIGKILLed mid-step: the next one resumes from the journal, no call made twice", async () => {
  mock.holdAfter(3);
  const first = worker();
  const { runId } = await client.startRun("six-calls", { goal: "ask six questions" });
  await until("the fourth call held at the model", () => mock.received === 4);
  await until("three answers journaled", async () => (await journaledCalls(runId)) === 3);
  assert.equal(mock.answered, 3);
  first.kill("SIGKILL");
  await once(first, "exit");
  mock.dropHeld();
  mock.release();

  const second = worker();
  try {
    const run = await client.waitForRun(runId, { timeoutMs: 30_000 });
    assert.equal(run.status, RunStatus.RUN_STATUS_COMPLETED, run.failure);
    const result = JSON.parse(run.steps[0]?.resultJson ?? "");
    assert.equal(result.attempt, 2, "the second worker worked the second attempt");
    assert.deepEqual(result.answers, [
      "answer 1 to: question 0",
      "answer 2 to: question 1",
      "answer 3 to: question 2",
      "answer 5 to: question 3",
      "answer 6 to: question 4",
      "answer 7 to: question 5",
    ]);
    assert.equal(mock.answered, 6, "the model answered six calls in all");
    assert.equal(await journaledCalls(runId), 6);
  } finally {
    second.kill("SIGTERM");
    const [code] = await once(second, "exit");
    assert.equal(code, 0, "SIGTERM stops the worker cleanly");
  }
});

test("SIGTERM: a step still running after the grace period is handed back to be retried", async () => {
  const before = mock.received;
  mock.holdAfter(mock.received + 1);
  const w = worker();
  const { runId } = await client.startRun("shut-down", { goal: "hang" });
  await until(
    "the step leased",
    async () => (await client.describeRun(runId)).steps[0]?.state === "STARTED",
  );
  await until("the call held", () => mock.received > before);
  w.kill("SIGTERM");
  const [code] = await once(w, "exit");
  assert.equal(code, 0);
  const failed = (await client.history(runId)).find((e) => e.eventType === "StepFailed");
  assert.ok(failed, "the step was failed back");
  assert.match(failed.attributesJson, /worker_shutdown/);
  const run = await client.describeRun(runId);
  assert.equal(run.status, RunStatus.RUN_STATUS_RUNNING, "it is retried, not failed");
  mock.dropHeld();
  mock.release();
  await client.terminate(runId, "done");
});
