import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { extendDigest, fullDigest, Journal, JournalError } from "../src/journal.js";
import { outcomesIn } from "../src/step.js";
import { REPO } from "./support.js";

const HEADER = '{"journal":"railyard/1"}\n';

test("the digest chain is the server's", () => {
  assert.equal(
    fullDigest(Buffer.alloc(0)).toString("hex"),
    "66687aadf862bd776c8fc18b8e9f8e20089714856ee233b3902a591d0d5f2925",
  );
  assert.deepEqual(
    fullDigest(Buffer.from("abc")),
    extendDigest(Buffer.alloc(32), Buffer.from("abc")),
  );
  assert.notDeepEqual(
    extendDigest(fullDigest(Buffer.from("ab")), Buffer.from("c")),
    fullDigest(Buffer.from("abc")),
  );
});

test("reads records up to the first bad line, keeping unknown kinds", () => {
  const cp = Buffer.from(
    `${HEADER}{"k":"run","name":"a","seq":0,"value":1}\n{"k":"future","x":1}\n{"k":"state","value":{"s":2}}\n{"k":"run","name":"a","seq":1,"val`,
  );
  const j = new Journal(cp, fullDigest(cp));
  assert.deepEqual(j.run("a", 0), { value: 1 });
  assert.equal(j.run("a", 1), undefined, "the torn line is not read");
  assert.deepEqual(j.state, { value: { s: 2 } });
  assert.equal(j.replayed, 3);
  const p = j.pending();
  assert.ok(p && "whole" in p, "the valid prefix goes whole");
  assert.equal(p.whole.toString(), cp.toString().slice(0, cp.toString().lastIndexOf("\n") + 1));
});

test("a checkpoint that is not a journal is replaced by one", () => {
  const transcript = Buffer.from('{"version":2}\n');
  const j = new Journal(transcript, fullDigest(transcript));
  assert.equal(j.replayed, 0);
  j.append({ k: "run", name: "x", seq: 0, value: "v" }, "x");
  const p = j.pending();
  assert.ok(p && "whole" in p);
  assert.equal(p.whole.toString(), `${HEADER}{"k":"run","name":"x","seq":0,"value":"v"}\n`);
});

test("appends extend the acknowledged base; a refused base goes whole", () => {
  const cp = Buffer.from(HEADER);
  const j = new Journal(cp, fullDigest(cp));
  assert.equal(j.pending(), undefined);
  j.append({ k: "state", value: [1] }, "s");
  const p = j.pending();
  assert.ok(p && "append" in p);
  assert.equal(p.append.baseLength, cp.length);
  assert.equal(p.append.bytes.toString(), '{"k":"state","value":[1]}\n');
  assert.deepEqual(p.expect, extendDigest(fullDigest(cp), p.append.bytes));
  j.acknowledged(j.bytes.length, p.expect, p.expect);
  assert.equal(j.pending(), undefined);
  j.append({ k: "state", value: [2] }, "s");
  j.resetBase();
  const w = j.pending();
  assert.ok(w && "whole" in w);
  assert.deepEqual(w.expect, fullDigest(j.bytes));
});

test("values that are not JSON are refused naming the entry, nothing written", () => {
  const j = new Journal(Buffer.alloc(0), Buffer.alloc(0));
  const cyclic: Record<string, unknown> = {};
  cyclic.self = cyclic;
  for (const [value, why] of [
    [undefined, /undefined/],
    [() => 1, /function/],
    [10n, /bigint/],
    [cyclic, /cycle/],
    [Number.NaN, /NaN/],
    [{ a: [1, Number.POSITIVE_INFINITY] }, /\$\.value\.a\[1\] is Infinity/],
    [new Map(), /Map/],
  ] as const) {
    assert.throws(
      () => j.append({ k: "run", name: "m", seq: 0, value }, 'step.run("m") #0'),
      (e: unknown) =>
        e instanceof JournalError && /step\.run\("m"\) #0/.test(e.message) && why.test(e.message),
    );
  }
  assert.equal(j.appended, 0);
  assert.equal(j.bytes.toString(), HEADER);
  assert.throws(
    () => j.append({ k: "state", value: "x".repeat(8 << 20) }, "step.saveState"),
    /step.saveState: the journal would be \d+ bytes, more than the limit of 8388608/,
  );
});

test("the shared journal reads and rewrites as in every SDK", () => {
  // tests/journal/: the same journal and reading the Python SDK's tests check.
  const checkpoint = readFileSync(join(REPO, "tests/journal/shared.jsonl"));
  const expected = JSON.parse(readFileSync(join(REPO, "tests/journal/shared.json"), "utf8"));
  const j = new Journal(checkpoint, fullDigest(checkpoint));
  assert.deepEqual(j.bytes, checkpoint);
  assert.equal(j.pending(), undefined);
  assert.equal(j.replayed, checkpoint.toString().split("\n").length - 2);
  for (const [name, seq, value] of expected.runs) assert.deepEqual(j.run(name, seq), { value });
  assert.deepEqual(j.state, { value: expected.state });
  for (const [name, seq, ids] of expected.spawns) assert.deepEqual(j.spawn(name, seq), ids);
  for (const [name, seq, value] of expected.outcomes)
    assert.deepEqual(j.outcomes(name, seq), value);
  const rewritten = new Journal(Buffer.alloc(0), Buffer.alloc(0));
  for (const line of checkpoint.toString().trimEnd().split("\n").slice(1)) {
    rewritten.append(JSON.parse(line), "shared");
  }
  assert.deepEqual(rewritten.bytes, checkpoint);
  const [name, seq, value] = expected.outcomes[0];
  assert.deepEqual(outcomesIn(expected.resumeMessages, j.spawn(name, seq) ?? []), value);
});
