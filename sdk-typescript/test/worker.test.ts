import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  Client,
  ContractViolationError,
  JournalError,
  LeaseLostError,
  RunStatus,
  type Step,
  StepCancelledError,
  StepError,
  StepResult,
  StepWorker,
} from "../src/index.js";
import { spawnRequestId } from "../src/step.js";
import { oneStep, type ServerProcess, startServer, until } from "./support.js";

const verdict = {
  type: "object",
  required: ["verdict"],
  properties: { verdict: { enum: ["approve", "reject"] } },
};
const once = { retry: { maximumAttempts: 1 } };

describe("step worker", () => {
  let server: ServerProcess;
  let client: Client;
  const handlers = new Map<string, (step: Step) => unknown>();
  let worker: StepWorker;
  let running: Promise<void>;

  before(async () => {
    server = await startServer([
      oneStep("basic", "ts-w", { heartbeatTimeoutSeconds: 3, ...once }),
      oneStep("contract", "ts-w", { output: verdict, ...once }),
      oneStep("fails", "ts-w", once),
      oneStep("pausable", "ts-w", { heartbeatTimeoutSeconds: 2, ...once }),
      oneStep("parent", "ts-w", { heartbeatTimeoutSeconds: 5, ...once }),
      oneStep("child", "ts-w-child", once),
      oneStep("doomed", "ts-w", { heartbeatTimeoutSeconds: 5, ...once }),
      oneStep("rebased", "ts-w", once),
      oneStep("respawn", "ts-w", {
        heartbeatTimeoutSeconds: 5,
        retry: { initialIntervalSeconds: 0.1, maximumAttempts: 2 },
      }),
    ]);
    client = new Client({ server: server.url, env: {} });
    worker = new StepWorker({
      client,
      queue: ["ts-w", "ts-w-child"],
      slots: 4,
      pollTimeoutMs: 1000,
      shutdownGraceMs: 1000,
      handler: (step) => {
        const h = handlers.get(step.workflowId);
        if (!h) throw new StepError(`no handler for ${step.workflowId}`, { nonRetryable: true });
        return h(step);
      },
    });
    running = worker.run();
  });
  after(async () => {
    await worker.shutdown();
    await running;
    client.close();
    await server.stop();
  });

  test("works a step: prompt, journal, state, live output, result", async () => {
    let calls = 0;
    handlers.set("basic", async (step) => {
      assert.equal(step.prompt, "Do write a haiku");
      assert.equal(step.goal, "write a haiku");
      assert.deepEqual(step.context, { lang: "en" });
      assert.equal(step.attempt, 1);
      assert.equal(step.state, undefined);
      const word = await step.run(
        "pick",
        (n: number) => {
          calls++;
          return { word: "rails", n };
        },
        3,
      );
      await step.saveState({ picked: word.word });
      assert.deepEqual(step.state, { picked: "rails" });
      await step.output("thinking about ");
      await step.output("rails");
      await assert.rejects(
        step.run("bad", () => ({ when: 1n })),
        (e: unknown) => {
          assert.ok(e instanceof JournalError);
          assert.match(e.message, /step.run\("bad"\) #0/);
          assert.match(e.message, /bigint/);
          return true;
        },
      );
      await step.reportIssue("the muse is slow", { severity: "info" });
      step.reportUsage({ inputTokens: 120, outputTokens: 30 }, "mock-model");
      return { haiku: `${word.word} x${word.n}` };
    });
    const { runId } = await client.startRun("basic", {
      goal: "write a haiku",
      context: { lang: "en" },
    });
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    assert.equal(run.status, RunStatus.RUN_STATUS_COMPLETED, run.failure);
    assert.deepEqual(JSON.parse(run.steps[0]?.resultJson ?? ""), { haiku: "rails x3" });
    assert.equal(calls, 1);
    assert.equal(run.issueCount, 1);
    assert.equal(run.usage?.inputTokens, 120, "the usage reported last reached the server");
    assert.equal(run.steps[0]?.model, "mock-model");
    const journal = (await client.getStepCheckpoint(runId, "work")).toString("utf8").split("\n");
    assert.equal(journal[0], '{"journal":"railyard/1"}');
    assert.deepEqual(JSON.parse(journal[1] ?? ""), {
      k: "run",
      name: "pick",
      seq: 0,
      value: { word: "rails", n: 3 },
    });
    assert.deepEqual(JSON.parse(journal[2] ?? ""), { k: "state", value: { picked: "rails" } });
    let text = "";
    const stop = new AbortController();
    const timer = setTimeout(() => stop.abort(), 3000);
    for await (const m of client.watchOutput(runId, { signal: stop.signal })) {
      text += m.chunk?.text ?? "";
      if (text.includes("thinking about rails")) break;
    }
    clearTimeout(timer);
    assert.match(text, /thinking about rails/);
  });

  test("a result the contract refuses: caught by step.complete, or the step fails", async () => {
    handlers.set("contract", async (step) => {
      if (step.goal === "fix it") {
        await assert.rejects(step.complete({ verdict: "maybe" }), (e: unknown) => {
          assert.ok(e instanceof ContractViolationError, String(e));
          assert.deepEqual(
            e.violations.map((v) => v.path),
            ["result.verdict"],
          );
          return true;
        });
        await step.complete(new StepResult({ result: { verdict: "approve" }, notes: "fixed" }));
        return undefined;
      }
      return { verdict: "maybe" };
    });
    const fixed = await client.startRun("contract", { goal: "fix it" });
    const good = await client.waitForRun(fixed.runId, { timeoutMs: 20_000 });
    assert.equal(good.status, RunStatus.RUN_STATUS_COMPLETED, good.failure);
    assert.equal(good.steps[0]?.notes, "fixed");

    const { runId } = await client.startRun("contract", { goal: "do not" });
    const bad = await client.waitForRun(runId, { timeoutMs: 20_000 });
    assert.equal(bad.status, RunStatus.RUN_STATUS_FAILED);
    assert.match(bad.failure, /contract_violation/);
    assert.match(bad.failure, /result.verdict/);
  });

  test("a thrown error fails the step with its type", async () => {
    handlers.set("fails", async (step) => {
      if (step.goal === "typed")
        throw new StepError("no can do", { errorType: "refused", nonRetryable: true });
      throw new TypeError("boom");
    });
    const a = await client.startRun("fails", { goal: "typed" });
    const b = await client.startRun("fails", { goal: "plain" });
    const ra = await client.waitForRun(a.runId, { timeoutMs: 20_000 });
    const rb = await client.waitForRun(b.runId, { timeoutMs: 20_000 });
    assert.equal(ra.status, RunStatus.RUN_STATUS_FAILED);
    assert.match(ra.failure, /refused/);
    assert.match(ra.failure, /no can do/);
    assert.match(rb.failure, /TypeError/);
    assert.match(rb.failure, /boom/);
  });

  test("signals reach the step; cancellation rejects its next await and fires step.signal", async () => {
    let aborted: unknown;
    let rejected: unknown;
    let signalled = false;
    handlers.set("pausable", async (step) => {
      step.signal.addEventListener("abort", () => {
        aborted = step.signal.reason;
      });
      try {
        const s = await step.waitForSignal("go", { timeoutMs: 15_000 });
        assert.deepEqual(s.payload, { n: 1 });
        signalled = true;
        for (;;) await step.heartbeat();
      } catch (e) {
        rejected = e;
        throw e;
      }
    });
    const { runId } = await client.startRun("pausable", { goal: "cancel me" });
    await until(
      "the step leased",
      async () => (await client.describeRun(runId)).steps[0]?.state === "STARTED",
    );
    await client.signal(runId, "go", { n: 1 });
    await until("the signal received", () => signalled);
    await client.cancel(runId, "enough");
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    assert.equal(run.status, RunStatus.RUN_STATUS_CANCELED);
    assert.ok(rejected instanceof StepCancelledError, String(rejected));
    assert.ok(aborted instanceof StepCancelledError);
  });

  test("a pause suspends the step with its journal; unpaused, it replays", async () => {
    const calls: string[] = [];
    let attempts = 0;
    handlers.set("pausable", async (step) => {
      attempts++;
      const a = await step.run("a", () => {
        calls.push("a");
        return "A";
      });
      if (attempts === 1) for (;;) await step.heartbeat();
      const b = await step.run("b", () => {
        calls.push("b");
        return "B";
      });
      return { got: a + b };
    });
    const { runId } = await client.startRun("pausable", { goal: "pause me" });
    await until("the first record journaled", () => calls.length === 1);
    assert.equal(await client.pause(runId, "hold on"), true);
    await until(
      "the step suspended",
      async () => (await client.describeRun(runId)).waiting !== undefined,
    );
    assert.equal(await client.unpause(runId), true);
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    assert.equal(run.status, RunStatus.RUN_STATUS_COMPLETED, run.failure);
    assert.deepEqual(JSON.parse(run.steps[0]?.resultJson ?? ""), { got: "AB" });
    assert.deepEqual(calls, ["a", "b"], "the journaled call is not made again");
    assert.equal(attempts, 2);
  });

  test("an append on a base the server no longer has is sent again whole", async () => {
    handlers.set("rebased", async (step) => {
      await step.run("a", () => 1);
      // Another writer replaces the stored checkpoint behind the step's back.
      await client.heartbeatStepTask({
        taskToken: step.task.taskToken,
        checkpoint: Buffer.from('{"journal":"railyard/1"}\n{"k":"state","value":"other"}\n'),
      });
      await step.run("b", () => 2);
      return { ok: true };
    });
    const { runId } = await client.startRun("rebased", { goal: "rebase" });
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    assert.equal(run.status, RunStatus.RUN_STATUS_COMPLETED, run.failure);
    const journal = (await client.getStepCheckpoint(runId, "work")).toString("utf8");
    assert.equal(
      journal,
      '{"journal":"railyard/1"}\n{"k":"run","name":"a","seq":0,"value":1}\n{"k":"run","name":"b","seq":0,"value":2}\n',
    );
  });

  test("a terminated run: the lease is lost, the handler told, nothing more written", async () => {
    let rejected: unknown;
    let leased = false;
    handlers.set("doomed", async (step) => {
      leased = true;
      try {
        for (;;) await step.heartbeat();
      } catch (e) {
        rejected = e;
      }
      await assert.rejects(step.output("too late"), LeaseLostError);
      return { never: "sent" };
    });
    const { runId } = await client.startRun("doomed", { goal: "terminate me" });
    await until("the step leased", () => leased);
    await client.terminate(runId, "stop");
    await until("the handler told", () => rejected !== undefined);
    assert.ok(rejected instanceof LeaseLostError, String(rejected));
    const run = await client.describeRun(runId);
    assert.equal(run.status, RunStatus.RUN_STATUS_TERMINATED);
    assert.equal(run.steps[0]?.resultJson, "");
  });

  test("spawns child runs and waits for them across a suspension", async () => {
    let parentStarts = 0;
    let spawned = 0;
    handlers.set("child", (step) => ({ echoed: step.goal }));
    handlers.set("parent", async (step) => {
      parentStarts++;
      const ids = await step.spawn("kids", [
        { workflowId: "child", goal: "one" },
        { workflowId: "child", goal: "two" },
      ]);
      spawned += ids.length;
      const out = await step.waitForChildren("kids", ids);
      return {
        inOrder: out.children.map((c) => c.runId).join() === ids.join(),
        children: out.runs.map((r) => JSON.parse(r.steps[0]?.resultJson ?? "{}").echoed),
        outcomes: out.children.map((c) => [c.outcome, (c.result as { echoed: string }).echoed]),
        stillRunning: out.stillRunning,
      };
    });
    const { runId } = await client.startRun("parent", { goal: "fan out" });
    const run = await client.waitForRun(runId, { timeoutMs: 30_000 });
    assert.equal(run.status, RunStatus.RUN_STATUS_COMPLETED, run.failure);
    const result = JSON.parse(run.steps[0]?.resultJson ?? "");
    assert.deepEqual(result.children, ["one", "two"]);
    assert.deepEqual(result.outcomes, [
      ["COMPLETED", "one"],
      ["COMPLETED", "two"],
    ]);
    assert.deepEqual(result.stillRunning, []);
    assert.ok(result.inOrder, "the outcomes in the order of the ids");
    const journal = (await client.getStepCheckpoint(runId, "work"))
      .toString()
      .trimEnd()
      .split("\n");
    const wait = JSON.parse(journal.at(-1) ?? "");
    assert.deepEqual(Object.keys(wait), ["k", "name", "seq", "value"]);
    assert.deepEqual([wait.k, wait.name, wait.seq], ["outcomes", "kids", 0]);
    assert.deepEqual(Object.keys(wait.value), ["children", "stillRunning"]);
    assert.equal(wait.value.children.length, 2);
    assert.equal(parentStarts, 2, "the handler ran again after the wait");
    assert.equal(spawned, 4, "the second run got the journaled ids");
    assert.equal(run.childrenStarted, 2, "no child was started twice");
  });

  test("children started before a lost journal write are not started again", async () => {
    const kids = [
      { workflowId: "child", goal: "a" },
      { workflowId: "child", goal: "b" },
    ];
    const seen: string[][] = [];
    handlers.set("respawn", async (step) => {
      if (step.attempt === 1) {
        // The first attempt's spawn reaches the server, but the worker dies before
        // its journal holds the ids: the request the SDK would send, then a failure.
        const requestId = spawnRequestId(step.task.stepId, "kids", 0);
        seen.push(await client.spawnChildRuns(step.task.taskToken, kids, { requestId }));
        throw new Error("the worker died before journaling the spawn");
      }
      const ids = await step.spawn("kids", kids);
      seen.push(ids);
      const out = await step.waitForChildren("kids", ids);
      return { outcomes: out.children.map((c) => c.outcome) };
    });
    const { runId } = await client.startRun("respawn", { goal: "fan out once" });
    const run = await client.waitForRun(runId, { timeoutMs: 30_000 });
    assert.equal(run.status, RunStatus.RUN_STATUS_COMPLETED, run.failure);
    assert.deepEqual(JSON.parse(run.steps[0]?.resultJson ?? "").outcomes, [
      "COMPLETED",
      "COMPLETED",
    ]);
    assert.equal(new Set(seen.map((ids) => ids.join())).size, 1, JSON.stringify(seen));
    assert.equal(run.childrenStarted, 2, "the second attempt got the first one's children");
  });
});
