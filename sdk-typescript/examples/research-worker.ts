// A TypeScript agent for the `research` step of research.json (queue "research-ts");
// the `write` step goes to Railyard's built-in agent (`railyard worker`).
//
//   railyard server --workflows sdk-typescript/examples &
//   OPENAI_BASE_URL=https://api.openai.com/v1 OPENAI_API_KEY=... node dist-test/examples/research-worker.js
//   railyard run start research-and-write --goal "durable agent loops"
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateText, jsonSchema, stepCountIs, tool } from "ai";
import { durableModel, durableTools } from "../src/ai.js";
import { Client, type Step, StepWorker } from "../src/index.js";

const provider = createOpenAICompatible({
  name: "openai",
  baseURL: process.env.OPENAI_BASE_URL ?? "https://api.openai.com/v1",
  apiKey: process.env.OPENAI_API_KEY,
});

async function research(step: Step) {
  const model = durableModel(step, provider.chatModel(process.env.MODEL ?? "gpt-4o-mini"));
  const tools = durableTools(step, {
    fetchPage: tool({
      description: "Fetches a web page and returns its first 20 000 characters of text",
      inputSchema: jsonSchema<{ url: string }>({
        type: "object",
        properties: { url: { type: "string" } },
        required: ["url"],
      }),
      execute: async ({ url }) =>
        (await (await fetch(url, { signal: step.signal })).text()).slice(0, 20_000),
    }),
  });
  const { text } = await generateText({
    model,
    tools,
    stopWhen: stepCountIs(8),
    abortSignal: step.signal,
    system: "You are a careful researcher. Answer with one finding per line, nothing else.",
    prompt: step.prompt,
  });
  const findings = text
    .split("\n")
    .map((l) => l.replace(/^[-*\d.\s]+/, "").trim())
    .filter((l) => l !== "");
  return { findings };
}

const worker = new StepWorker({
  client: new Client(),
  queue: "research-ts",
  handler: research,
  slots: 4,
  handleSignals: true,
});
await worker.run();
