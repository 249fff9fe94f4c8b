// Conversations survive kill -9 (docs/server.md, "Persistent conversations").
// 1. A server without --kv-dir answers turn 1 and turn 2 of a chat: the
//    uninterrupted reference.
// 2. A server with --kv-dir answers turn 1, starts streaming turn 2 and is
//    killed with SIGKILL after the first chunk.
// 3. A new server over the same --kv-dir answers turn 2: byte-identical to
//    the reference, with the saved positions loaded from disk (cached_tokens,
//    prefilled_tokens and positions_loaded checked) instead of prefilled.
// Usage: node tests/server/persist_kill9.test.mjs path/to/strata [model dir]
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { startServer } from './serve.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../..');
const strata = process.argv[2] || path.join(root, 'build/strata');
const model = process.argv[3] || path.join(root, 'models/glm5-strata-tiny');
const kvDir = fs.mkdtempSync(path.join(os.tmpdir(), 'strata-kv-'));
const watchdog = setTimeout(() => { console.error('not ok - timeout'); process.exit(1); }, 240000);

const start = (extra) => startServer(strata, ['--model', model, '--threads', '1', '--ctx', '1024', ...extra]);
// The killed request asks for many tokens (ignore_eos) so that the kill
// lands in the middle of the turn, whatever the machine's speed.
async function chat(port, messages, stream = false, max_tokens = 24) {
  const r = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages, max_tokens, temperature: 0, stream, enable_thinking: false,
      ignore_eos: max_tokens > 24 }),
  });
  assert.equal(r.status, 200, await (stream ? '' : r.clone().text()));
  return stream ? r : r.json();
}
async function stats(port) { return (await fetch(`http://127.0.0.1:${port}/v1/stats`)).json(); }

const turn1 = [{ role: 'user', content: 'What is the moon made of?' }];
const next = (a1) => [...turn1, { role: 'assistant', content: a1 }, { role: 'user', content: 'And the sun?' }];
let failed = 0;
try {
  // 1. The reference: one server, both turns.
  const ref = await start([]);
  const rport = ref.port;
  const r1 = await chat(rport, turn1);
  const a1 = r1.choices[0].message.content;
  const r2 = await chat(rport, next(a1));
  await ref.stop();
  console.log(`reference: turn 1 ${r1.usage.prompt_tokens} prompt tokens; turn 2 ${r2.usage.prompt_tokens} prompt ` +
              `tokens, ${r2.usage.prompt_tokens_details.cached_tokens} reused from memory`);

  // 2. Turn 1 saved, then kill -9 in the middle of turn 2.
  const s1 = await start(['--kv-dir', kvDir]);
  const p1 = s1.port;
  const t1 = await chat(p1, turn1);
  assert.equal(t1.choices[0].message.content, a1, 'turn 1 differs from the reference');
  const streaming = await chat(p1, next(a1), true, 900);
  const reader = streaming.body.getReader();
  const first = await reader.read();
  assert.ok(!first.done && first.value.length > 0, 'no streamed chunk before the kill');
  await s1.stop('SIGKILL');
  console.log('ok - killed with SIGKILL after the first streamed chunk of turn 2');

  // 3. Restart over the same directory: turn 2 again.
  const s2 = await start(['--kv-dir', kvDir]);
  const p2 = s2.port;
  const before = await stats(p2);
  assert.equal(before.kv_store.conversations, 1,
    `expected turn 1 saved and the killed turn 2 not: ${JSON.stringify(before.kv_store)}`);
  const t0 = performance.now();
  const t2 = await chat(p2, next(a1));
  const ms = performance.now() - t0;
  const after = await stats(p2);
  await s2.stop();
  assert.equal(t2.choices[0].message.content, r2.choices[0].message.content, 'turn 2 differs from the reference');
  assert.equal(t2.choices[0].finish_reason, r2.choices[0].finish_reason);
  const cached = t2.usage.prompt_tokens_details.cached_tokens;
  assert.ok(cached >= r1.usage.prompt_tokens, `only ${cached} tokens resumed; turn 1 alone had ${r1.usage.prompt_tokens}`);
  assert.equal(cached, r2.usage.prompt_tokens_details.cached_tokens, 'resumed less than the uninterrupted server reused');
  assert.equal(after.kv_store.positions_loaded, cached);
  assert.equal(after.prefilled_tokens, t2.usage.prompt_tokens - cached, 'saved positions were prefilled again');
  console.log(`ok - turn 2 after the restart equals the reference (${t2.usage.completion_tokens} tokens); ` +
              `${cached} of ${t2.usage.prompt_tokens} prompt positions loaded from disk, ` +
              `${after.prefilled_tokens} prefilled; request took ${ms.toFixed(0)} ms`);
} catch (e) {
  failed++;
  console.log(`not ok - ${e.stack || e}`);
} finally {
  fs.rmSync(kvDir, { recursive: true, force: true });
  clearTimeout(watchdog);
}
process.exit(failed ? 1 : 0);
