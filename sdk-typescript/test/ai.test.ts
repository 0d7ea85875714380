import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateText, jsonSchema, stepCountIs, streamText, tool } from "ai";
import { durableModel, durableTools } from "../src/ai.js";
import { Client, RunStatus, StepError, StepWorker } from "../src/index.js";
import {
  type MockModel,
  oneStep,
  type ServerProcess,
  startMockModel,
  startServer,
} from "./support.js";

let server: ServerProcess;
let mock: MockModel;
let client: Client;

before(async () => {
  server = await startServer([
    oneStep("ai", "ts-ai", {
      heartbeatTimeoutSeconds: 10,
      retry: { initialIntervalSeconds: 1, maximumAttempts: 2 },
    }),
  ]);
  mock = await startMockModel();
  client = new Client({ server: server.url, env: {} });
});
after(async () => {
  client.close();
  await mock.close();
  await server.stop();
});

test("the AI SDK adapter journals model and tool calls; a retry replays them", async () => {
  const provider = createOpenAICompatible({ name: "mock", baseURL: mock.url, apiKey: "not-used" });
  let toolCalls = 0;
  const worker = new StepWorker({
    client,
    queue: "ts-ai",
    pollTimeoutMs: 1000,
    handler: async (step) => {
      const model = durableModel(step, provider.chatModel("mock-1"));
      const tools = durableTools(step, {
        lookup: tool({
          description: "Looks a word up",
          inputSchema: jsonSchema<{ q: string }>({
            type: "object",
            properties: { q: { type: "string" } },
            required: ["q"],
          }),
          execute: async ({ q }) => {
            toolCalls++;
            return `found ${q}`;
          },
        }),
      });
      const r = await generateText({ model, tools, stopWhen: stepCountIs(3), prompt: step.goal });
      const s = streamText({ model, prompt: "stream it" });
      let streamed = "";
      for await (const d of s.textStream) streamed += d;
      if (step.attempt === 1) throw new StepError("crash after the calls");
      return { text: r.text, streamed };
    },
  });
  const running = worker.run();
  try {
    const { runId } = await client.startRun("ai", { goal: "rails" });
    const run = await client.waitForRun(runId, { timeoutMs: 30_000 });
    assert.equal(run.status, RunStatus.RUN_STATUS_COMPLETED, run.failure);
    assert.equal(run.steps[0]?.attempt, 2);
    assert.deepEqual(JSON.parse(run.steps[0]?.resultJson ?? ""), {
      text: "answer 2 after the tool said found rails",
      streamed: "answer 3 to: stream it",
    });
    assert.equal(mock.answered, 3, "the second attempt called no model");
    assert.equal(toolCalls, 1, "nor the tool");
    assert.ok((run.usage?.inputTokens ?? 0) >= 30, "usage was reported");
    let text = "";
    const stop = new AbortController();
    const timer = setTimeout(() => stop.abort(), 3000);
    for await (const m of client.watchOutput(runId, { signal: stop.signal })) {
      text += m.chunk?.text ?? "";
      if (text.includes("answer 3 to: stream it")) break;
    }
    clearTimeout(timer);
    assert.match(text, /answer 3 to: stream it/);
  } finally {
    await worker.shutdown();
    await running;
  }
});
