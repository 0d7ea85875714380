// Browser tests of the web console at /ui, in Debian's headless Chromium driven by
// playwright-core (no Playwright browser download): a real `railyard server` and a
// `railyard worker` with the offline scripted provider.
//
//   node console.test.mjs <railyard binary> <screenshot dir>
//
// Flows: start a run from the page and watch it complete without reloading, open its
// transcript; a requireConfirmation run approved from the inbox and one rejected with
// feedback; a run cancelled; sign-in under --auth with a client key (no admin pages)
// and a wrong key (refused); a keyboard-only pass through the start form. axe-core on
// each main page: no serious or critical violations. No page may break its CSP.
// Screenshots of each main page go to the screenshot dir.

import { spawn, execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const require = createRequire(import.meta.url);
const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..', '..');
const bin = path.resolve(process.argv[2] ?? path.join(repo, 'target/debug/railyard'));
const shots = path.resolve(process.argv[3] ?? path.join(repo, 'target/console-screenshots'));
const chromiumPath = process.env.CHROMIUM ?? '/usr/bin/chromium';
const axeSource = fs.readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');
const DEADLINE = 60_000; // bounds a hang only

const children = [];
let failures = 0;

function fail(message) {
  throw new Error(message);
}

function assert(cond, message) {
  if (!cond) fail(message);
}

// A workflow whose one step the scripted provider plays (the demo's research turns),
// held for approval; and one on a queue no worker polls, to cancel.
const APPROVE = JSON.stringify({
  id: 'approve', version: '1', name: 'Approve',
  steps: [{ id: 'research', title: 'Research', prompt: 'Research {{goal}}', requireConfirmation: true,
    allowedTools: ['list_files', 'read_file', 'write_file', 'grep', 'signal_coordinator', 'complete_step'] }],
});
const IDLE = JSON.stringify({
  id: 'idle', version: '1', name: 'Idle', taskQueue: 'nobody',
  steps: [{ id: 'wait', title: 'Wait', prompt: 'Wait' }],
});

async function startServer(extra) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'railyard-browser-'));
  const workflows = path.join(dir, 'workflows');
  fs.mkdirSync(workflows);
  fs.copyFileSync(path.join(repo, 'workflows/demo.json'), path.join(workflows, 'demo.json'));
  fs.writeFileSync(path.join(workflows, 'approve.json'), APPROVE);
  fs.writeFileSync(path.join(workflows, 'idle.json'), IDLE);
  const server = spawn(bin, ['server', '--listen', '127.0.0.1:0', '--http-listen', '127.0.0.1:0',
    '--data-dir', path.join(dir, 'data'), '--workflows', workflows, ...extra],
  { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, RUST_LOG: 'warn', RAILYARD_AUTH: '' } });
  children.push(server);
  const line = await new Promise((resolve, reject) => {
    const rl = readline.createInterface({ input: server.stdout });
    rl.once('line', resolve);
    server.once('exit', (code) => reject(new Error(`server exited ${code}`)));
  });
  const field = (name) => line.split(/\s+/).find((w) => w.startsWith(name))?.slice(name.length);
  return { dir, grpc: field('grpc='), http: `http://${field('http=')}` };
}

function startWorker(server, key) {
  const args = ['worker', '--server', `http://${server.grpc}`, '--provider', 'scripted',
    '--script', path.join(repo, 'workflows/demo.script.json'),
    '--workspace', path.join(server.dir, 'workspaces'), '--queue', 'default'];
  if (key) args.push('--api-key', key);
  const worker = spawn(bin, args, { stdio: ['ignore', 'ignore', 'inherit'], env: { ...process.env, RUST_LOG: 'warn' } });
  children.push(worker);
}

function watchCsp(page, label) {
  page.on('console', (msg) => {
    if (msg.type() === 'error' && /Content Security Policy/i.test(msg.text())) {
      failures += 1;
      console.error(`FAIL ${label}: CSP violation: ${msg.text()}`);
    }
  });
}

async function axe(context, url, label) {
  const page = await context.newPage();
  await page.goto(url);
  await page.addScriptTag({ content: axeSource });
  const result = await page.evaluate(async () => await window.axe.run(document, { resultTypes: ['violations'] }));
  const bad = result.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  await page.close();
  if (bad.length) {
    fail(`axe on ${label}: ${bad.map((v) => `${v.id} (${v.impact}): ${v.nodes.map((n) => n.target).join(', ')}`).join('; ')}`);
  }
}

async function step(name, body) {
  try {
    await body();
    console.log(`ok   ${name}`);
  } catch (e) {
    failures += 1;
    console.error(`FAIL ${name}: ${e.stack ?? e}`);
  }
}

async function main() {
  fs.mkdirSync(shots, { recursive: true });
  const browser = await chromium.launch({ executablePath: chromiumPath, args: ['--no-sandbox'] });
  const open = await startServer([]);
  startWorker(open);
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  context.setDefaultTimeout(DEADLINE);
  const page = await context.newPage();
  watchCsp(page, 'open server');
  const ui = `${open.http}/ui`;
  let demoRun;

  await step('start a run from the page, watch it complete live, open its transcript', async () => {
    await page.goto(`${ui}/runs?start=1`);
    await page.selectOption('#workflow', 'demo');
    await page.fill('#goal', 'tidal power');
    await page.click('button:has-text("Start")');
    await page.waitForSelector('text=The server started run');
    await page.click('p.outcome a');
    demoRun = page.url().split('/ui/runs/')[1].split('?')[0];
    // No reload from here: htmx refreshes the live part until the run completes.
    await page.waitForSelector('#live .status-completed', { timeout: DEADLINE });
    await page.screenshot({ path: path.join(shots, 'run.png'), fullPage: true });
    await page.click('text=What the agent did (transcript)');
    await page.waitForSelector('#transcript .turn.tool');
    await page.waitForSelector('#transcript h2.segment');
    await page.screenshot({ path: path.join(shots, 'transcript.png') });
    await page.goto(`${ui}/runs`);
    await page.screenshot({ path: path.join(shots, 'runs.png'), fullPage: true });
  });

  await step('approve one held run from the inbox and reject another with feedback', async () => {
    const held = [];
    for (const goal of ['first', 'second']) {
      await page.goto(`${ui}/runs?start=1`);
      await page.selectOption('#workflow', 'approve');
      await page.fill('#goal', goal);
      await page.click('button:has-text("Start")');
      await page.waitForSelector('text=The server started run');
      held.push(await page.textContent('p.outcome a'));
    }
    await page.goto(`${ui}/approvals`);
    for (let i = 0; i < 60 && (await page.locator('section.approval').count()) < 2; i += 1) {
      await page.waitForTimeout(500);
      await page.reload();
    }
    assert((await page.locator('section.approval').count()) === 2, 'both runs wait for approval');
    await page.screenshot({ path: path.join(shots, 'approvals.png'), fullPage: true });
    // A held step keeps its checkpoint: its transcript shows the conversation.
    await page.goto(`${ui}/runs/${held[0]}/transcript`);
    await page.waitForSelector('.conversation .turn.user');
    assert(await page.locator('.conversation strong:has-text("Prompt")').count() === 1, 'the prompt');
    assert(await page.locator('.conversation .turn.tool').count() > 0, 'the tool calls');
    await page.screenshot({ path: path.join(shots, 'transcript-checkpoint.png') });
    const axeContext = await browser.newContext({ bypassCSP: true });
    await axe(axeContext, `${ui}/runs/${held[0]}/transcript`, 'checkpoint transcript');
    await axeContext.close();
    await page.goto(`${ui}/approvals`);
    const first = page.locator('section.approval', { hasText: held[0] });
    await first.locator('button:has-text("Approve")').click();
    await page.click('button:has-text("Yes, approve")');
    await page.waitForSelector('text=The server approved the step.');
    await page.goto(`${ui}/approvals`);
    const second = page.locator('section.approval', { hasText: held[1] });
    await second.locator('input[name="text"][required]').fill('shorter, please');
    await second.locator('button:has-text("Reject")').click();
    await page.click('button:has-text("Yes, reject")');
    await page.waitForSelector('text=The server rejected the step');
    await page.goto(`${ui}/runs/${held[1]}?all=1`);
    assert(await page.locator('text=StepRejected').count() > 0, 'the rejection is in history');
  });

  await step('cancel a run', async () => {
    await page.goto(`${ui}/runs?start=1`);
    await page.selectOption('#workflow', 'idle');
    await page.fill('#goal', 'to cancel');
    await page.click('button:has-text("Start")');
    await page.click('p.outcome a');
    await page.click('button:has-text("Cancel")');
    await page.click('button:has-text("Yes, cancel")');
    await page.waitForSelector('text=The server accepted the cancel request.');
    await page.click('text=Back');
    await page.waitForSelector('.status-canceled');
  });

  await step('a refusal is shown word for word', async () => {
    await page.goto(`${ui}/runs/${demoRun}`);
    // A closed run offers no actions; post one anyway through a fresh run page form.
    const csrf = await page.getAttribute('input[name="csrf"]', 'value').catch(() => null);
    const token = csrf ?? (await (async () => { await page.goto(`${ui}/runs?start=1`); return page.getAttribute('input[name="csrf"]', 'value'); })());
    const answer = await page.request.post(`${ui}/runs/${demoRun}/act/pause`, { form: { csrf: token, confirmed: '1' } });
    assert(answer.status() === 409, `refused with 409, not ${answer.status()}`);
    assert((await answer.text()).includes('failed precondition'), 'the server\'s words');
  });

  await step('keyboard only: start a run with Tab and Enter', async () => {
    await page.goto(`${ui}/runs?start=1`);
    await page.focus('#workflow');
    await page.keyboard.press('Tab');
    await page.keyboard.type('by keyboard');
    await page.keyboard.press('Tab');
    await page.keyboard.press('Tab');
    await page.keyboard.press('Enter');
    await page.waitForSelector('text=The server started run');
    await page.keyboard.press('Tab');
    const focused = await page.evaluate(() => document.activeElement?.tagName);
    assert(focused === 'A', `focus moves through links, at ${focused}`);
  });

  await step('axe: no serious or critical violations on the main pages', async () => {
    const axeContext = await browser.newContext({ bypassCSP: true });
    for (const [label, url] of [['runs', `${ui}/runs`], ['run', `${ui}/runs/${demoRun}`],
      ['transcript', `${ui}/runs/${demoRun}/transcript`], ['approvals', `${ui}/approvals`],
      ['workflows', `${ui}/workflows`], ['queues', `${ui}/queues`], ['schedules', `${ui}/schedules`],
      ['keys', `${ui}/keys`], ['signin', `${ui}/signin`]]) {
      await axe(axeContext, url, label);
    }
    await axeContext.close();
  });

  await step('a phone-width runs page', async () => {
    const phone = await browser.newContext({ viewport: { width: 390, height: 844 } });
    const p = await phone.newPage();
    watchCsp(p, 'phone');
    await p.goto(`${ui}/runs`);
    await p.screenshot({ path: path.join(shots, 'runs-phone.png'), fullPage: true });
    await phone.close();
  });

  // Under --auth.
  const secured = await startServer(['--auth']);
  const adminKey = fs.readFileSync(path.join(secured.dir, 'data', 'admin.key'), 'utf8').trim();
  const clientKey = execFileSync(bin, ['key', 'create', '--role', 'client', '--server', `http://${secured.grpc}`, '--api-key', adminKey]).toString().trim();

  await step('sign-in under --auth: a wrong key is refused, a client key sees no admin pages', async () => {
    const ctx = await browser.newContext();
    const p = await ctx.newPage();
    watchCsp(p, 'auth');
    await p.goto(`${secured.http}/ui/runs`);
    assert(p.url().endsWith('/ui/signin'), `sent to sign in, at ${p.url()}`);
    await p.screenshot({ path: path.join(shots, 'signin.png') });
    await p.fill('#key', 'ry_wrong_key');
    await p.click('button:has-text("Sign in")');
    await p.waitForSelector('.refusal');
    assert((await p.textContent('.refusal')).includes('unauthenticated'), 'the server\'s refusal');
    await p.fill('#key', clientKey);
    await p.click('button:has-text("Sign in")');
    await p.waitForSelector('h1:has-text("Runs")');
    assert((await p.locator('nav a:has-text("API keys")').count()) === 0, 'no admin pages for a client');
    await p.click('button:has-text("Sign out")');
    await p.waitForSelector('h1:has-text("Sign in")');
    await ctx.close();
  });

  await browser.close();
}

try {
  await main();
} catch (e) {
  failures += 1;
  console.error(`FAIL ${e.stack ?? e}`);
} finally {
  for (const c of children) c.kill('SIGTERM');
}
console.log(failures ? `${failures} failed` : `all passed; screenshots in ${shots}`);
process.exit(failures ? 1 : 0);
