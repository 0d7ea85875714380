// The Vercel AI SDK adapter: each model call and tool call of generateText/streamText
// a durable step.run, streamed text forwarded to the step's live output.
import {
  type LanguageModel,
  type LanguageModelMiddleware,
  type ToolSet,
  wrapLanguageModel,
} from "ai";
import type { Step } from "./step.js";

type Middleware = LanguageModelMiddleware;
type GenerateResult = Awaited<ReturnType<NonNullable<Middleware["wrapGenerate"]>>>;
type StreamResult = Awaited<ReturnType<NonNullable<Middleware["wrapStream"]>>>;
type StreamPart = StreamResult["stream"] extends ReadableStream<infer P> ? P : never;
type Model = Parameters<typeof wrapLanguageModel>[0]["model"];
type Usage = GenerateResult["usage"];

export interface DurableOptions {
  /** The journal name of the model's calls (default "ai.model"); tools are "ai.tool.<name>". */
  name?: string;
  /** Forward streamed text and reasoning to the step's live output (default true). */
  liveOutput?: boolean;
}

/**
 * The model, each of its calls journaled: an attempt that resumes the step gets the
 * n-th call's answer back from the journal instead of calling the model again. A
 * streamed call is forwarded to live output as it arrives and journaled whole; the
 * stream the AI SDK reads is then played from the journal (so it starts when the call
 * ends). Token usage is reported with the step's heartbeats.
 */
export function durableModel(step: Step, model: Model, opts: DurableOptions = {}): LanguageModel {
  const name = opts.name ?? "ai.model";
  const live = opts.liveOutput ?? true;
  const total = { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 };
  const count = (usage: Usage | undefined) => {
    if (!usage) return;
    total.input += usage.inputTokens?.total ?? 0;
    total.output += usage.outputTokens?.total ?? 0;
    total.cacheRead += usage.inputTokens?.cacheRead ?? 0;
    total.cacheWrite += usage.inputTokens?.cacheWrite ?? 0;
    step.reportUsage(
      {
        inputTokens: total.input,
        outputTokens: total.output,
        cacheReadTokens: total.cacheRead,
        cacheWriteTokens: total.cacheWrite,
      },
      typeof model === "string" ? model : model.modelId,
    );
  };
  const middleware: Middleware = {
    specificationVersion: "v4",
    async wrapGenerate({ doGenerate }) {
      const kept = await step.run(name, async () => {
        const r = await doGenerate();
        count(r.usage);
        return plain({
          content: r.content,
          finishReason: r.finishReason,
          usage: r.usage,
          providerMetadata: r.providerMetadata,
          warnings: r.warnings,
          response: r.response && {
            id: r.response.id,
            modelId: r.response.modelId,
            timestamp: r.response.timestamp,
          },
        });
      });
      return revive(kept) as GenerateResult;
    },
    async wrapStream({ doStream }) {
      const parts = await step.run(name, async () => {
        const { stream } = await doStream();
        const out: unknown[] = [];
        for await (const part of stream as unknown as AsyncIterable<StreamPart>) {
          const p = part as { type: string; delta?: string; usage?: Usage; error?: unknown };
          if (p.type === "raw") continue;
          if (live && p.type === "text-delta" && p.delta) await step.output(p.delta);
          if (live && p.type === "reasoning-delta" && p.delta)
            await step.output(p.delta, "thinking");
          if (p.type === "finish") count(p.usage);
          if (p.type === "error")
            throw p.error instanceof Error ? p.error : new Error(String(p.error));
          out.push(plain(part));
        }
        return out;
      });
      const replay = (parts as unknown[]).map(revive) as StreamPart[];
      const stream = new ReadableStream<StreamPart>({
        start(controller) {
          for (const p of replay) controller.enqueue(p);
          controller.close();
        },
      });
      return { stream } as StreamResult;
    },
  };
  return wrapLanguageModel({ model, middleware });
}

/** The tools, each call's result journaled under "ai.tool.<name>". */
export function durableTools<T extends ToolSet>(step: Step, tools: T): T {
  const out: Record<string, unknown> = {};
  for (const [toolName, t] of Object.entries(tools)) {
    const execute = (t as { execute?: (input: unknown, options: unknown) => unknown }).execute;
    out[toolName] = execute
      ? {
          ...t,
          execute: (input: unknown, options: unknown) =>
            step.run(`ai.tool.${toolName}`, () => execute(input, options)),
        }
      : t;
  }
  return out as T;
}

/** A value as JSON keeps it: Dates as {"$date": ISO}, undefined fields dropped. */
function plain(v: unknown): unknown {
  return JSON.parse(
    JSON.stringify(v, function (this: Record<string, unknown>, key, value) {
      const raw = this[key];
      return raw instanceof Date ? { $date: raw.toISOString() } : value;
    }),
  );
}

function revive(v: unknown): unknown {
  return JSON.parse(JSON.stringify(v), (_key, value) =>
    value &&
    typeof value === "object" &&
    typeof value.$date === "string" &&
    Object.keys(value).length === 1
      ? new Date(value.$date)
      : value,
  );
}
