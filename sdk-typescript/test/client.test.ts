import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { inspect } from "node:util";
import {
  Client,
  ConfigError,
  InvalidArgumentError,
  NotFoundError,
  RailyardError,
  RunStatus,
  UnauthenticatedError,
  UnavailableError,
} from "../src/index.js";
import { oneStep, REPO, type ServerProcess, startServer } from "./support.js";

describe("client tour", () => {
  let server: ServerProcess;
  let client: Client;

  before(async () => {
    server = await startServer([oneStep("tour", "ts-tour")]);
    client = new Client({ server: server.url, env: {} });
  });
  after(async () => {
    client.close();
    await server.stop();
  });

  test("start, describe, list with paging, count", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const { runId, started } = await client.startRun("tour", {
        goal: `goal ${i}`,
        context: { i: String(i) },
      });
      assert.ok(started);
      ids.push(runId);
    }
    const again = await client.startRun("tour", { goal: "x", requestId: "same" });
    const repeat = await client.startRun("tour", { goal: "x", requestId: "same" });
    assert.equal(repeat.runId, again.runId, "a repeated request id returns the first start's run");
    assert.equal(repeat.started, false);

    const run = await client.describeRun(ids[1]);
    assert.equal(run.runId, ids[1]);
    assert.equal(run.workflowId, "tour");
    assert.equal(run.goal, "goal 1");
    assert.deepEqual(run.context, { i: "1" });
    assert.equal(run.status, RunStatus.RUN_STATUS_RUNNING);
    assert.equal(run.steps[0]?.taskQueue, "ts-tour");

    const page = await client.listRunsPage({ pageSize: 2, query: 'WorkflowId = "tour"' });
    assert.equal(page.runs.length, 2);
    assert.notEqual(page.nextPageToken, "");
    const all: string[] = [];
    for await (const r of client.listRuns({ pageSize: 2, query: 'WorkflowId = "tour"' }))
      all.push(r.runId);
    assert.equal(all.length, 4);
    for (const id of ids) assert.ok(all.includes(id));

    const count = await client.countRuns('WorkflowId = "tour"');
    assert.equal(count.count, 4);
    const grouped = await client.countRuns("", { groupBy: "Status" });
    assert.ok(grouped.groups.length >= 1);
  });

  test("signal, history, watch, cancel", async () => {
    const { runId } = await client.startRun("tour", { goal: "watched" });
    const stop = new AbortController();
    const seen: string[] = [];
    const watching = (async () => {
      for await (const e of client.watchRun(runId, { signal: stop.signal })) {
        seen.push(e.eventType);
        if (e.eventType === "SignalReceived") stop.abort();
      }
    })();
    await client.signal(runId, "steer", { text: "look left" });
    await watching;
    assert.ok(seen.includes("RunStarted"), `events seen: ${seen}`);

    const events = await client.history(runId);
    const signal = events.find((e) => e.eventType === "SignalReceived");
    assert.ok(signal, `no SignalReceived in ${events.map((e) => e.eventType)}`);
    assert.match(signal.attributesJson, /look left/);
    assert.equal(events[0]?.eventId, 1);

    await client.cancel(runId, "not needed");
    const closed = await client.waitForRun(runId, { timeoutMs: 10_000 });
    assert.equal(closed.status, RunStatus.RUN_STATUS_CANCELED);
  });

  test("terminate, pause and unpause, list workflows", async () => {
    const { runId } = await client.startRun("tour", { goal: "paused" });
    assert.equal(await client.pause(runId, "wait"), true);
    assert.equal(await client.pause(runId), false);
    assert.equal((await client.describeRun(runId)).paused, true);
    assert.equal(await client.unpause(runId), true);
    await client.terminate(runId, "done with it");
    assert.equal((await client.describeRun(runId)).status, RunStatus.RUN_STATUS_TERMINATED);
    const wf = await client.listWorkflows();
    assert.deepEqual(
      wf.workflows.map((w) => w.id),
      ["tour"],
    );
  });

  test("schedules and triggers", async () => {
    await client.createSchedule("nightly", {
      workflowId: "tour",
      cron: ["0 3 * * *"],
      goal: "nightly",
      paused: true,
    });
    const schedules = [];
    for await (const s of client.listSchedules()) schedules.push(s.scheduleId);
    assert.deepEqual(schedules, ["nightly"]);
    await client.deleteSchedule("nightly");
    await client.deleteSchedule("nightly");
    const trigger = await client.createTrigger("hook", { workflowId: "tour", goal: "from a hook" });
    assert.equal(trigger?.triggerId, "hook");
    const triggers = [];
    for await (const t of client.listTriggers()) triggers.push(t.triggerId);
    assert.deepEqual(triggers, ["hook"]);
    await client.deleteTrigger("hook");
  });

  test("registerWorkflow", async () => {
    const def = oneStep("registered", "ts-tour");
    const first = await client.registerWorkflow(def);
    assert.equal(first.workflow?.id, "registered");
    assert.equal(first.workflow?.registered, true);
    assert.equal(first.changed, true);
    const listed = (await client.listWorkflows()).workflows;
    assert.equal(listed.find((w) => w.id === "registered")?.registered, true);
    assert.equal(listed.find((w) => w.id === "tour")?.registered, false);
    assert.equal((await client.registerWorkflow(JSON.stringify(def))).changed, false);
    const started = await client.startRun("registered", { goal: "from code" });
    assert.equal((await client.describeRun(started.runId)).workflowId, "registered");
    await assert.rejects(
      client.registerWorkflow({
        ...def,
        steps: [{ id: "s", title: "S", prompt: "p", maxTurns: 0 }],
      }),
      (e: unknown) =>
        e instanceof InvalidArgumentError &&
        e.field === "definition_json" &&
        /maxTurns/.test(e.message),
    );
  });

  test("errors map to their classes", async () => {
    await assert.rejects(client.describeRun("no-such-run"), NotFoundError);
    await assert.rejects(client.startRun("no-such-workflow"), (e: unknown) => {
      assert.ok(e instanceof RailyardError);
      assert.match((e as Error).message, /no-such-workflow/);
      return true;
    });
    await assert.rejects(
      client.startRun("tour", { taskQueue: "x".repeat(10_000) }),
      (e: unknown) => {
        assert.ok(e instanceof InvalidArgumentError, String(e));
        assert.equal(e.field, "task_queue");
        return true;
      },
    );
    await assert.rejects(
      client.createSchedule("bad", { workflowId: "tour", cron: ["not a cron"] }),
      InvalidArgumentError,
    );
  });
});

describe("the example", () => {
  test("examples/research.json loads: a TypeScript step, then the built-in agent's", async () => {
    const def = JSON.parse(
      readFileSync(join(REPO, "sdk-typescript/examples/research.json"), "utf8"),
    );
    const server = await startServer([def]);
    const c = new Client({ server: server.url, env: {} });
    try {
      const wf = await c.listWorkflows();
      assert.deepEqual(wf.invalid, []);
      assert.deepEqual(wf.workflows[0]?.stepIds, ["research", "write"]);
      const { runId } = await c.startRun("research-and-write", { goal: "durable agents" });
      assert.equal((await c.describeRun(runId)).steps[0]?.taskQueue, "research-ts");
    } finally {
      c.close();
      await server.stop();
    }
  });
});

describe("connection settings", () => {
  test("bad settings are refused naming what is wrong", () => {
    assert.throws(() => new Client({ server: "127.0.0.1:7400", env: {} }), ConfigError);
    assert.throws(
      () => new Client({ server: "http://h:1", apiKey: "  ", env: {} }),
      /API key: it is empty/,
    );
    assert.throws(
      () => new Client({ server: "http://h:1", tls: { ca: "/nonexistent/ca.pem" }, env: {} }),
      /use an https:\/\/ URL/,
    );
    assert.throws(
      () => new Client({ server: "https://h:1", tls: { ca: "/nonexistent/ca.pem" }, env: {} }),
      /TLS CA/,
    );
  });

  test("the environment gives the defaults, and the key never shows", () => {
    const c = new Client({ env: { RAILYARD_NAMESPACE: "team", RAILYARD_API_KEY: "sekrit-key" } });
    assert.equal(c.namespace, "team");
    assert.equal(c.url, "http://127.0.0.1:7400");
    assert.doesNotMatch(inspect(c, { depth: 5 }), /sekrit/);
    assert.doesNotMatch(JSON.stringify(c.transport), /sekrit/);
    c.close();
  });

  test("an unreachable server is UnavailableError after the retries", async () => {
    const c = new Client({
      server: "http://127.0.0.1:9",
      env: {},
      retry: { maxAttempts: 3, initialBackoffMs: 10, maxBackoffMs: 50 },
    });
    const t0 = Date.now();
    await assert.rejects(c.describeRun("x"), UnavailableError);
    assert.ok(Date.now() - t0 < 10_000);
    c.close();
  });

  test("an auth server: no key is UnauthenticatedError, the key file works", async () => {
    const server = await startServer([oneStep("tour", "ts-auth")], ["--auth"]);
    try {
      const anon = new Client({ server: server.url, env: {} });
      await assert.rejects(anon.listWorkflows(), UnauthenticatedError);
      anon.close();
      const wrong = new Client({ server: server.url, apiKey: "not-a-key", env: {} });
      await assert.rejects(wrong.listWorkflows(), UnauthenticatedError);
      wrong.close();
      const keyed = new Client({
        server: server.url,
        env: { RAILYARD_API_KEY_FILE: `${server.dir}/data/admin.key` },
      });
      assert.equal((await keyed.listWorkflows()).workflows.length, 1);
      keyed.close();
    } finally {
      await server.stop();
    }
  });
});
