import { createHash } from "node:crypto";
import { RailyardError } from "./errors.js";

/** The first line of every journal (docs/step-journal.md). */
export const HEADER = '{"journal":"railyard/1"}\n';
/** The most a checkpoint may hold. */
export const MAX_CHECKPOINT_BYTES = 8 << 20;
/** The digest of the empty checkpoint. */
export const EMPTY_DIGEST = Buffer.alloc(32);

/** A value that cannot be journaled (not JSON, or past the checkpoint's bound). */
export class JournalError extends RailyardError {}

/** The digest after appending `bytes` to a checkpoint of digest `base`: SHA-256(base || bytes). */
export function extendDigest(base: Uint8Array, bytes: Uint8Array): Buffer {
  return createHash("sha256").update(base).update(bytes).digest();
}

/** The digest of a checkpoint written whole. */
export function fullDigest(bytes: Uint8Array): Buffer {
  return extendDigest(EMPTY_DIGEST, bytes);
}

/** An `outcomes` record's value: a finished wait's children and those still running. */
export interface Outcomes {
  children: Record<string, unknown>[];
  stillRunning: string[];
}

export type JournalRecord =
  | { k: "run"; name: string; seq: number; value: unknown }
  | { k: "state"; value: unknown }
  | { k: "spawn"; name: string; seq: number; run_ids: string[] }
  | {
      k: "outcomes";
      name: string;
      seq: number;
      value: Outcomes;
    }
  | { k: string; [field: string]: unknown };

/**
 * A step's journal: what the task's checkpoint held (its valid prefix) and what this
 * attempt added, and how much of it the server has acknowledged.
 */
export class Journal {
  /** The journal's bytes, header first. */
  #bytes: Buffer;
  readonly #runs = new Map<string, unknown>();
  readonly #spawns = new Map<string, string[]>();
  readonly #outcomes = new Map<string, Outcomes>();
  #state: { value: unknown } | undefined;
  /** The stored checkpoint as the server acknowledged it, when it matches a prefix of #bytes. */
  #acked: { length: number; digest: Buffer } | undefined;
  /** Records read from the task's checkpoint. */
  readonly replayed: number;
  /** Records this attempt added. */
  appended = 0;

  constructor(checkpoint: Uint8Array, digest: Uint8Array) {
    const parsed = parse(Buffer.from(checkpoint));
    this.#bytes = parsed.bytes;
    for (const r of parsed.records) this.#index(r);
    this.replayed = parsed.records.length;
    if (
      parsed.bytes.length === checkpoint.length &&
      checkpoint.length > 0 &&
      digest.length === 32
    ) {
      this.#acked = { length: checkpoint.length, digest: Buffer.from(digest) };
    }
  }

  #index(r: JournalRecord) {
    if (r.k === "run" && typeof r.name === "string" && typeof r.seq === "number") {
      this.#runs.set(key(r.name, r.seq), r.value);
    } else if (r.k === "spawn" && typeof r.name === "string" && typeof r.seq === "number") {
      this.#spawns.set(key(r.name, r.seq), (r.run_ids as string[]) ?? []);
    } else if (r.k === "outcomes" && typeof r.name === "string" && typeof r.seq === "number") {
      const v = r.value as Partial<Outcomes> | null | undefined;
      if (Array.isArray(v?.children)) {
        const stillRunning = Array.isArray(v.stillRunning) ? v.stillRunning.map(String) : [];
        this.#outcomes.set(key(r.name, r.seq), { children: v.children, stillRunning });
      }
    } else if (r.k === "state") {
      this.#state = { value: r.value };
    }
  }

  /** The journal's bytes (header first; just the header when nothing was recorded). */
  get bytes(): Buffer {
    return this.#bytes.length === 0 ? Buffer.from(HEADER) : this.#bytes;
  }

  run(name: string, seq: number): { value: unknown } | undefined {
    const k = key(name, seq);
    return this.#runs.has(k) ? { value: this.#runs.get(k) } : undefined;
  }

  spawn(name: string, seq: number): string[] | undefined {
    return this.#spawns.get(key(name, seq));
  }

  outcomes(name: string, seq: number): Outcomes | undefined {
    return this.#outcomes.get(key(name, seq));
  }

  get state(): { value: unknown } | undefined {
    return this.#state;
  }

  /**
   * Adds a record; what to send the server for it is `pending()`. Throws a JournalError
   * naming `what` when the record is not JSON or would pass the checkpoint's bound.
   */
  append(record: JournalRecord, what: string): void {
    const line = `${encode(record, what)}\n`;
    const base = this.#bytes.length === 0 ? Buffer.from(HEADER) : this.#bytes;
    const size = base.length + Buffer.byteLength(line);
    if (size > MAX_CHECKPOINT_BYTES) {
      throw new JournalError(
        `${what}: the journal would be ${size} bytes, more than the limit of ${MAX_CHECKPOINT_BYTES}`,
      );
    }
    this.#bytes = Buffer.concat([base, Buffer.from(line)]);
    this.#index(record);
    this.appended++;
  }

  /**
   * What a heartbeat carries to bring the server up to the journal: an append on the
   * acknowledged base, or the journal whole; undefined when the server has it all.
   */
  pending():
    | { append: { baseLength: number; baseDigest: Buffer; bytes: Buffer }; expect: Buffer }
    | { whole: Buffer; expect: Buffer }
    | undefined {
    const bytes = this.bytes;
    const a = this.#acked;
    if (a && a.length === bytes.length) return undefined;
    if (a && a.length < bytes.length) {
      const tail = bytes.subarray(a.length);
      return {
        append: { baseLength: a.length, baseDigest: a.digest, bytes: Buffer.from(tail) },
        expect: extendDigest(a.digest, tail),
      };
    }
    return { whole: bytes, expect: fullDigest(bytes) };
  }

  /** The server acknowledged the checkpoint at this length and digest. */
  acknowledged(length: number, digest: Uint8Array, expected: Buffer): void {
    if (length > 0 && Buffer.from(digest).equals(expected)) {
      this.#acked = { length, digest: Buffer.from(digest) };
    } else {
      this.#acked = undefined;
    }
  }

  /** Forgets the acknowledged base (a refused append): the next write sends the journal whole. */
  resetBase(): void {
    this.#acked = undefined;
  }

  /** Whether the server holds everything recorded so far. */
  get synced(): boolean {
    return this.pending() === undefined;
  }
}

function key(name: string, seq: number): string {
  return `${seq}\u0000${name}`;
}

/** The record as one compact JSON line, or a JournalError naming `what`. */
function encode(record: JournalRecord, what: string): string {
  const bad = checkJson(record, "$", new Set());
  if (bad) throw new JournalError(`${what}: the value is not JSON (${bad}); nothing was journaled`);
  return JSON.stringify(record);
}

function checkJson(v: unknown, path: string, seen: Set<object>): string | undefined {
  switch (typeof v) {
    case "string":
    case "boolean":
      return undefined;
    case "number":
      return Number.isFinite(v) ? undefined : `${path} is ${v}`;
    case "undefined":
      return `${path} is undefined`;
    case "bigint":
      return `${path} is a bigint`;
    case "function":
      return `${path} is a function`;
    case "symbol":
      return `${path} is a symbol`;
  }
  if (v === null) return undefined;
  const o = v as object;
  if (seen.has(o)) return `${path} is a cycle`;
  if (typeof (o as { toJSON?: unknown }).toJSON === "function") {
    return checkJson((o as { toJSON: () => unknown }).toJSON(), path, seen);
  }
  seen.add(o);
  try {
    if (Array.isArray(o)) {
      for (let i = 0; i < o.length; i++) {
        const bad = checkJson(o[i], `${path}[${i}]`, seen);
        if (bad) return bad;
      }
      return undefined;
    }
    const proto = Object.getPrototypeOf(o);
    if (proto !== Object.prototype && proto !== null) {
      return `${path} is a ${o.constructor?.name ?? "non-plain object"}, not a plain object`;
    }
    for (const [k, x] of Object.entries(o)) {
      const bad = checkJson(x, `${path}.${k}`, seen);
      if (bad) return bad;
    }
    return undefined;
  } finally {
    seen.delete(o);
  }
}

/** The journal in a checkpoint: the header and the records up to the first bad line. */
function parse(b: Buffer): { bytes: Buffer; records: JournalRecord[] } {
  const records: JournalRecord[] = [];
  if (!b.subarray(0, HEADER.length).equals(Buffer.from(HEADER))) {
    return { bytes: Buffer.alloc(0), records };
  }
  let at = HEADER.length;
  while (at < b.length) {
    const nl = b.indexOf(0x0a, at);
    if (nl < 0) break;
    let rec: unknown;
    try {
      rec = JSON.parse(b.subarray(at, nl).toString("utf8"));
    } catch {
      break;
    }
    if (typeof rec !== "object" || rec === null || Array.isArray(rec)) break;
    records.push(rec as JournalRecord);
    at = nl + 1;
  }
  return { bytes: b.subarray(0, at), records };
}
