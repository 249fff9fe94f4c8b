// Load test: 64 clients x LOAD_SECONDS (default 60) against `strata serve` on
// 127.0.0.1, each a bounded loop of mixed requests (chat and completions,
// streaming and not, 1-16 tokens). Passes when every request gets either a
// complete 200 answer or an explicit 429 in OpenAI's error shape (no
// connection errors, no 5xx, no truncated stream), the server answers
// /health afterwards, and its peak resident memory (VmHWM) stays within the
// budget it states in /v1/stats (resident model + expert cache + every
// session it may keep) plus a fixed allowance for code, heap and threads.
// Usage: node tests/server/load.test.mjs path/to/strata [model dir]
import fs from 'node:fs';
import path from 'node:path';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { startServer } from './serve.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../..');
const strata = process.argv[2] || path.join(root, 'build/strata');
const model = process.argv[3] || path.join(root, 'models/glm5-strata-tiny');
const seconds = Number(process.env.LOAD_SECONDS || 60);
const clients = Number(process.env.LOAD_CLIENTS || 64);
const allowanceMB = 64;   // code, tokenizer, allocator, HTTP threads and buffers
const watchdog = setTimeout(() => { console.error('not ok - timeout'); process.exit(1); }, (seconds + 120) * 1000);

const server = await startServer(strata, ['--model', model, '--threads', '2', '--ctx', '512',
  '--parallel', '4', '--queue', '16', '--timeout', '60']);
const base = server.base;
function vm(field) {
  const m = fs.readFileSync(`/proc/${server.proc.pid}/status`, 'utf8').match(new RegExp(`${field}:\\s+(\\d+) kB`));
  return m ? Number(m[1]) * 1024 : 0;
}

const words = ['moon', 'river', 'stone', 'light', 'winter', 'music', 'paper', 'garden', 'machine', 'ocean'];
let seed = 12345;
const rnd = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return (seed >>> 16) % n; };
function request() {
  const stream = rnd(2) === 0;
  const max_tokens = 1 + rnd(16);
  const text = Array.from({ length: 3 + rnd(12) }, () => words[rnd(words.length)]).join(' ');
  if (rnd(2) === 0)
    return ['/v1/chat/completions', { messages: [{ role: 'user', content: text }], max_tokens, stream,
      temperature: rnd(2) ? 0 : 0.8, enable_thinking: false }];
  return ['/v1/completions', { prompt: text, max_tokens, stream, temperature: 0.7, seed: rnd(1000) }];
}

const counts = { ok: 0, rejected: 0, failed: 0, streamed: 0 };
const failures = [];
async function one() {
  const [url, body] = request();
  let r;
  try {
    r = await fetch(base + url, { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body) });
  } catch (e) {
    throw new Error(`${url}: connection error ${e.cause?.code || e}`);
  }
  const text = await r.text();
  if (r.status === 429) {
    const j = JSON.parse(text);
    assert.ok(j.error && typeof j.error.message === 'string', `429 without an error body: ${text}`);
    counts.rejected++;
    return false;
  }
  assert.equal(r.status, 200, `${url}: HTTP ${r.status}: ${text.slice(0, 200)}`);
  if (body.stream) {
    assert.ok(text.endsWith('data: [DONE]\n\n'), `${url}: stream did not end with [DONE]`);
    const events = text.split('\n\n').filter((e) => e && e !== 'data: [DONE]').map((e) => JSON.parse(e.slice(6)));
    assert.ok(events.some((e) => e.choices?.[0]?.finish_reason), `${url}: no finish_reason in the stream`);
    counts.streamed++;
  } else {
    const j = JSON.parse(text);
    assert.ok(j.choices?.[0]?.finish_reason, `${url}: no finish_reason`);
    assert.ok(j.usage.completion_tokens <= body.max_tokens);
  }
  counts.ok++;
  return true;
}

const rss = [];
const sampler = setInterval(() => rss.push(vm('VmRSS')), 250);
const end = Date.now() + seconds * 1000;
const t0 = Date.now();
await Promise.all(Array.from({ length: clients }, async () => {
  while (Date.now() < end) {
    try {
      if (!(await one())) await new Promise((r) => setTimeout(r, 20 + rnd(80)));  // back off after a 429
    } catch (e) {
      counts.failed++;
      if (failures.length < 5) failures.push(String(e.message || e));
    }
  }
}));
clearInterval(sampler);
const elapsed = (Date.now() - t0) / 1000;
let failed = 0;
try {
  const health = await fetch(base + '/health');
  assert.equal(health.status, 200, 'the server does not answer /health after the load');
  const st = await (await fetch(base + '/v1/stats')).json();
  const m = st.memory;
  const budget = m.resident_bytes + (m.cache_bytes || 0) + (m.pinned_bytes || 0) + m.session_budget_bytes;
  const hwm = vm('VmHWM');
  const MB = (b) => (b / 1048576).toFixed(1);
  console.log(`${clients} clients x ${elapsed.toFixed(0)} s: ${counts.ok} answered (${counts.streamed} streamed, ` +
              `${(counts.ok / elapsed).toFixed(1)}/s), ${counts.rejected} refused with 429, ${counts.failed} failed; ` +
              `server: ${st.generated_tokens} tokens generated, ${st.rejected} rejected, ${st.timeouts} timeouts`);
  console.log(`memory: peak RSS ${MB(hwm)} MB (samples max ${MB(Math.max(...rss))} MB); budget ${MB(budget)} MB ` +
              `(resident ${MB(m.resident_bytes)} + sessions ${MB(m.session_budget_bytes)}` +
              `${m.cache_bytes !== undefined ? ` + experts ${MB(m.cache_bytes + m.pinned_bytes)}` : ''}) + ${allowanceMB} MB allowance`);
  assert.equal(counts.failed, 0, `requests lost: ${failures.join(' | ')}`);
  assert.ok(counts.ok > clients, `only ${counts.ok} requests answered`);
  assert.equal(st.rejected, counts.rejected, 'the server counted other 429s than the clients saw');
  assert.ok(hwm <= budget + allowanceMB * 1048576, `peak RSS ${MB(hwm)} MB above the budget`);
  console.log('ok - load');
} catch (e) {
  failed++;
  console.log(`not ok - ${e.stack || e}`);
}
await server.stop();
clearTimeout(watchdog);
process.exit(failed ? 1 : 0);
