import { readFileSync, statSync } from "node:fs";
import { ConfigError } from "./errors.js";

export const DEFAULT_SERVER = "http://127.0.0.1:7400";
export const DEFAULT_NAMESPACE = "default";

/** TLS for an `https://` server: PEM files (or their contents). */
export interface TlsOptions {
  /** The CA that signed the server's certificate (default: the system's roots). */
  ca?: string | Buffer;
  /** The client certificate, for a server that requires one (mutual TLS). */
  cert?: string | Buffer;
  /** The client certificate's private key. */
  key?: string | Buffer;
  /** The name to check the server's certificate against, when not the URL's host. */
  serverName?: string;
}

/** An API key that never shows in logs, `util.inspect` or JSON. */
export class ApiKey {
  readonly #key: string;

  constructor(key: string) {
    const trimmed = key.trim();
    if (trimmed === "") throw new ConfigError("invalid API key: it is empty");
    if (!/^[\x20-\x7e]+$/.test(trimmed)) {
      throw new ConfigError("invalid API key: it may hold only printable ASCII");
    }
    this.#key = trimmed;
  }

  /** The key itself, to send. */
  expose(): string {
    return this.#key;
  }

  toString(): string {
    return "ApiKey(<redacted>)";
  }

  toJSON(): string {
    return "<redacted>";
  }

  [Symbol.for("nodejs.util.inspect.custom")](): string {
    return "ApiKey(<redacted>)";
  }
}

const MAX_KEY_FILE = 4096;
const MAX_PEM_FILE = 1 << 20;

/** Reads a small regular file, or fails naming it and why. */
export function readBounded(path: string, max: number, what: string): Buffer {
  let size: number;
  try {
    const st = statSync(path);
    if (!st.isFile()) throw new ConfigError(`${what} ${path}: not a regular file`);
    size = st.size;
  } catch (e) {
    if (e instanceof ConfigError) throw e;
    throw new ConfigError(`${what} ${path}: ${(e as Error).message}`);
  }
  if (size > max) throw new ConfigError(`${what} ${path}: ${size} bytes, more than ${max}`);
  try {
    return readFileSync(path);
  } catch (e) {
    throw new ConfigError(`${what} ${path}: ${(e as Error).message}`);
  }
}

/** The key of an API key file: its first line, trimmed. */
export function readApiKeyFile(path: string): ApiKey {
  const text = readBounded(path, MAX_KEY_FILE, "API key file").toString("utf8");
  const key = (text.split("\n")[0] ?? "").trim();
  if (key === "") throw new ConfigError(`API key file ${path}: the file is empty`);
  return new ApiKey(key);
}

/** A PEM given as its text or bytes, or as the path of a file that holds it. */
export function pem(value: string | Buffer, what: string): Buffer {
  if (Buffer.isBuffer(value)) return value;
  if (value.includes("-----BEGIN")) return Buffer.from(value);
  return readBounded(value, MAX_PEM_FILE, what);
}

/** The server URL parsed to the gRPC target and whether it is TLS. */
export function parseServer(url: string): { target: string; tls: boolean; host: string } {
  const bad = (reason: string) => new ConfigError(`invalid server address "${url}": ${reason}`);
  if (!(url.startsWith("http://") || url.startsWith("https://"))) {
    throw bad("expected a URL such as http://127.0.0.1:7400");
  }
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw bad("not a URL");
  }
  if (parsed.hostname === "") throw bad("no host");
  if (parsed.pathname !== "/" && parsed.pathname !== "") throw bad("a path is not allowed");
  const tls = parsed.protocol === "https:";
  const port = parsed.port || (tls ? "443" : "80");
  return {
    target: `${parsed.hostname}:${port}`,
    tls,
    host: parsed.hostname.replace(/^\[|\]$/g, ""),
  };
}
