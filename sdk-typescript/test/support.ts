import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
/** The repository root (this file is compiled to sdk-typescript/dist-test/test/). */
export const REPO = resolve(here, "../../..");
export const BIN = process.env.RAILYARD_BIN ?? join(REPO, "target/debug/railyard");

export interface ServerProcess {
  url: string;
  http: string;
  dir: string;
  child: ChildProcess;
  stop(): Promise<void>;
}

/** A real `railyard server` on free ports, its workflows the definitions given. */
export async function startServer(
  workflows: object[],
  args: string[] = [],
): Promise<ServerProcess> {
  const dir = mkdtempSync(join(tmpdir(), "railyard-ts-"));
  const wf = join(dir, "workflows");
  mkdirSync(wf);
  for (const def of workflows) {
    writeFileSync(join(wf, `${(def as { id: string }).id}.json`), JSON.stringify(def, null, 2));
  }
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    RUST_LOG: process.env.TEST_SERVER_LOG ?? "warn",
  };
  for (const k of [
    "RAILYARD_AUTH",
    "RAILYARD_STORE",
    "RAILYARD_DATA_DIR",
    "RAILYARD_SERVER_CONFIG",
  ])
    delete env[k];
  const child = spawn(
    BIN,
    [
      "server",
      "--listen",
      "127.0.0.1:0",
      "--http-listen",
      "127.0.0.1:0",
      "--data-dir",
      join(dir, "data"),
      "--workflows",
      wf,
      ...args,
    ],
    { env, stdio: ["ignore", "pipe", "inherit"] },
  );
  const reap = () => child.kill("SIGKILL");
  process.once("exit", reap);
  child.once("exit", () => process.off("exit", reap));
  const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream });
  const line = await new Promise<string>((ok, fail) => {
    const timer = setTimeout(
      () => fail(new Error("the server printed no listening line within 30 s")),
      30_000,
    );
    child.once("exit", (code) => fail(new Error(`the server exited (${code}) before listening`)));
    child.once("error", fail);
    lines.once("line", (l) => {
      clearTimeout(timer);
      ok(l);
    });
  });
  lines.on("line", () => undefined);
  if (!line.startsWith("railyard server listening "))
    throw new Error(`unexpected first line ${line}`);
  const field = (name: string) => {
    const w = line.split(/\s+/).find((x) => x.startsWith(name));
    if (!w) throw new Error(`no ${name} in ${line}`);
    return w.slice(name.length);
  };
  return {
    url: `http://${field("grpc=")}`,
    http: `http://${field("http=")}`,
    dir,
    child,
    async stop() {
      if (child.exitCode === null) {
        const exited = new Promise((r) => child.once("exit", r));
        child.kill("SIGKILL");
        await exited;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** One step on a queue of the test's own, so that only the test's workers lease it. */
export function oneStep(id: string, queue: string, step: Record<string, unknown> = {}): object {
  return {
    id,
    version: "1",
    name: id,
    steps: [{ id: "work", title: "Work", prompt: "Do {{goal}}", taskQueue: queue, ...step }],
  };
}

export interface MockModel {
  url: string;
  /** Requests answered so far. */
  answered: number;
  /** Requests received so far (answered or held). */
  received: number;
  /** Holds every answer after the first `n` until `release()`. */
  holdAfter(n: number): void;
  /** Answers the held requests. */
  release(): void;
  /** Closes the held requests' connections unanswered. */
  dropHeld(): void;
  close(): Promise<void>;
}

/**
 * A local HTTP server speaking the OpenAI chat-completions wire format: each answer
 * says which call it is ("answer N to: <last user message>"); a request with tools and
 * no tool result yet is answered with a call of the first tool, its input {q: the
 * last user message}.
 */
export async function startMockModel(): Promise<MockModel> {
  let hold = Number.POSITIVE_INFINITY;
  const held: { answer: () => void; res: ServerResponse }[] = [];
  const state = { answered: 0, received: 0 };
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const parts: Buffer[] = [];
    req.on("data", (c: Buffer) => parts.push(c));
    req.on("end", () => {
      state.received++;
      const n = state.received;
      const answer = () => {
        if (req.url?.endsWith("/chat/completions") !== true) {
          res.writeHead(404).end();
          return;
        }
        const body = JSON.parse(Buffer.concat(parts).toString("utf8") || "{}");
        const messages = (body.messages ?? []) as { role: string; content: unknown }[];
        const last = [...messages].reverse().find((m) => m.role === "user");
        const toolMessage = messages.find((m) => m.role === "tool");
        const asked =
          typeof last?.content === "string" ? last.content : JSON.stringify(last?.content);
        const text = toolMessage
          ? `answer ${n} after the tool said ${String(toolMessage.content)}`
          : `answer ${n} to: ${asked}`;
        state.answered++;
        const usage = { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 };
        const tools = (body.tools ?? []) as { function: { name: string } }[];
        if (tools.length > 0 && !toolMessage && !body.stream) {
          const call = {
            id: `call_${n}`,
            type: "function",
            function: { name: tools[0]?.function.name, arguments: JSON.stringify({ q: asked }) },
          };
          res.writeHead(200, { "content-type": "application/json" });
          res.end(
            JSON.stringify({
              id: `c${n}`,
              object: "chat.completion",
              created: 0,
              model: body.model,
              choices: [
                {
                  index: 0,
                  message: { role: "assistant", content: null, tool_calls: [call] },
                  finish_reason: "tool_calls",
                },
              ],
              usage,
            }),
          );
          return;
        }
        if (body.stream) {
          res.writeHead(200, { "content-type": "text/event-stream" });
          const chunk = (delta: object, finish: string | null, extra: object = {}) =>
            `data: ${JSON.stringify({ id: `c${n}`, object: "chat.completion.chunk", created: 0, model: body.model, choices: [{ index: 0, delta, finish_reason: finish }], ...extra })}\n\n`;
          res.write(chunk({ role: "assistant", content: "" }, null));
          for (const word of text.split(/(?<= )/)) res.write(chunk({ content: word }, null));
          res.write(chunk({}, "stop", { usage }));
          res.end("data: [DONE]\n\n");
          return;
        }
        res.writeHead(200, { "content-type": "application/json" });
        res.end(
          JSON.stringify({
            id: `c${n}`,
            object: "chat.completion",
            created: 0,
            model: body.model,
            choices: [
              { index: 0, message: { role: "assistant", content: text }, finish_reason: "stop" },
            ],
            usage,
          }),
        );
      };
      if (n > hold) held.push({ answer, res });
      else answer();
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    get answered() {
      return state.answered;
    },
    get received() {
      return state.received;
    },
    holdAfter(n: number) {
      hold = n;
    },
    release() {
      hold = Number.POSITIVE_INFINITY;
      for (const h of held.splice(0)) h.answer();
    },
    dropHeld() {
      for (const h of held.splice(0)) h.res.destroy();
    },
    close() {
      server.closeAllConnections();
      return new Promise((r) => server.close(() => r()));
    },
  };
}

/** Polls `cond` every 50 ms until it holds, or fails after `ms` naming `what`. */
export async function until(
  what: string,
  cond: () => boolean | Promise<boolean>,
  ms = 15_000,
): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
