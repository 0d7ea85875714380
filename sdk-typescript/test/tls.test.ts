import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { Client, RailyardError, UnavailableError } from "../src/index.js";
import { oneStep, type ServerProcess, startServer } from "./support.js";

let dir: string;
let haveOpenssl = true;

function openssl(...args: string[]) {
  execFileSync("openssl", args, { cwd: dir, stdio: ["ignore", "ignore", "pipe"] });
}

/** A CA, a server certificate for 127.0.0.1 and a client certificate, all from it. */
function makeCerts() {
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
  openssl(
    "req",
    "-x509",
    ...ec,
    "-keyout",
    "ca.key",
    "-out",
    "ca.pem",
    "-days",
    "2",
    "-subj",
    "/CN=test ca",
    "-addext",
    "basicConstraints=critical,CA:TRUE",
    "-addext",
    "keyUsage=critical,keyCertSign,cRLSign",
  );
  for (const [name, ext] of [
    [
      "server",
      "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE",
    ],
    ["client", "extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE"],
  ] as const) {
    writeFileSync(join(dir, `${name}.ext`), `${ext}\n`);
    openssl("req", ...ec, "-keyout", `${name}.key`, "-out", `${name}.csr`, "-subj", `/CN=${name}`);
    openssl(
      "x509",
      "-req",
      "-in",
      `${name}.csr`,
      "-CA",
      "ca.pem",
      "-CAkey",
      "ca.key",
      "-CAcreateserial",
      "-out",
      `${name}.pem`,
      "-days",
      "2",
      "-extfile",
      `${name}.ext`,
    );
  }
}

let server: ServerProcess | undefined;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "railyard-ts-tls-"));
  try {
    execFileSync("openssl", ["version"], { stdio: "ignore" });
  } catch {
    haveOpenssl = false;
    return;
  }
  makeCerts();
  server = await startServer(
    [oneStep("tls", "ts-tls")],
    [
      "--tls-cert",
      join(dir, "server.pem"),
      "--tls-key",
      join(dir, "server.key"),
      "--tls-client-ca",
      join(dir, "ca.pem"),
    ],
  );
});
after(async () => {
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

test("mutual TLS: the CA and a client certificate connect; without the certificate, refused", async (t) => {
  if (!haveOpenssl || !server) {
    t.skip("openssl is not installed: no certificates to test with");
    return;
  }
  const url = server.url.replace("http://", "https://");
  const tls = {
    ca: join(dir, "ca.pem"),
    cert: join(dir, "client.pem"),
    key: join(dir, "client.key"),
  };
  const ok = new Client({ server: url, tls, env: {} });
  assert.deepEqual(
    (await ok.listWorkflows()).workflows.map((w) => w.id),
    ["tls"],
  );
  ok.close();

  const quick = { maxAttempts: 2, initialBackoffMs: 10, maxBackoffMs: 50 };
  const anonymous = new Client({ server: url, tls: { ca: tls.ca }, retry: quick, env: {} });
  await assert.rejects(anonymous.listWorkflows(), (e: unknown) => {
    assert.ok(e instanceof UnavailableError, String(e));
    assert.match(e.message, /certificate required/);
    assert.match(e.message, /the server requires a client certificate/);
    return true;
  });
  anonymous.close();

  const untrusting = new Client({
    server: url,
    tls: { cert: tls.cert, key: tls.key },
    retry: quick,
    env: {},
  });
  await assert.rejects(untrusting.listWorkflows(), (e: unknown) => {
    assert.ok(e instanceof RailyardError, String(e));
    assert.match(e.message, /not trusted: set tls.ca/, "the server's CA is not the system's");
    return true;
  });
  untrusting.close();
});
