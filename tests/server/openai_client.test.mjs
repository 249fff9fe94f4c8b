// strata serve driven by the official OpenAI Node client (npm `openai` v7).
// Starts `strata serve` itself on 127.0.0.1 with a free port over the tiny
// fixture + byte-level tokenizer (raw template), runs the checks, stops it;
// then a second server on the bundled GLM-template model
// (models/glm5-strata-tiny) for a tool call round trip.
// Usage: node tests/server/openai_client.test.mjs path/to/strata
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { startServer } from './serve.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../..');
const strata = process.argv[2] || path.join(root, 'build/strata');

// A model directory: the fixture's files plus a tokenizer.
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'strata-serve-'));
const fixture = path.join(root, 'tests/fixtures/glm5-tiny-bf16');
for (const f of ['config.json', 'generation_config.json', 'model.safetensors'])
  fs.symlinkSync(path.join(fixture, f), path.join(dir, f));
fs.copyFileSync(path.join(root, 'tests/chat/byte-tokenizer.json'), path.join(dir, 'tokenizer.json'));

const server = spawn(strata, ['serve', '--model', dir, '--port', '0', '--chat-template', 'raw', '--threads', '1',
  '--ctx', '512', '--api-key', 'test-key', '--model-id', 'tiny'], { stdio: ['ignore', 'ignore', 'pipe'] });
const killer = setTimeout(() => {
  console.error('timeout');
  server.kill('SIGKILL');
  globalThis.glmServer?.proc.kill('SIGKILL');
  process.exit(1);
}, 240000);
const port = await new Promise((resolve, reject) => {
  let err = '';
  server.stderr.on('data', (d) => {
    err += d;
    const m = err.match(/http:\/\/127\.0\.0\.1:(\d+)/);
    if (m) resolve(Number(m[1]));
  });
  server.on('exit', (code) => reject(new Error(`strata serve exited (${code}): ${err}`)));
});

const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'test-key', maxRetries: 0 });
let failed = 0;
async function check(name, fn) {
  try {
    await fn();
    console.log(`ok - ${name}`);
  } catch (e) {
    failed++;
    console.log(`not ok - ${name}: ${e.stack || e}`);
  }
}

const greedy = { temperature: 0, ignore_eos: true };
await check('models', async () => {
  const list = await client.models.list();
  assert.equal(list.data[0].id, 'tiny');
});
let chatText;
await check('chat, non-streaming, usage', async () => {
  const r = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'hello' }],
    max_tokens: 6, ...greedy });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.deepEqual([r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens], [5, 6, 11]);
  chatText = r.choices[0].message.content;
});
await check('chat, streaming == non-streaming, include_usage', async () => {
  const stream = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'hello' }],
    max_tokens: 6, stream: true, stream_options: { include_usage: true }, ...greedy });
  let text = '', finish = null, usage = null;
  for await (const c of stream) {
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      text += ch.delta.content ?? '';
      finish = ch.finish_reason ?? finish;
    }
  }
  assert.equal(text, chatText);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 6);
});
await check('completions', async () => {
  const r = await client.completions.create({ model: 'tiny', prompt: 'abc', max_tokens: 4, ...greedy });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.usage.prompt_tokens, 3);
  assert.equal(r.usage.completion_tokens, 4);
});
await check('seed reproducibility', async () => {
  const req = { model: 'tiny', prompt: 'seed', max_tokens: 8, temperature: 1, seed: 7, ignore_eos: true };
  const a = await client.completions.create(req), b = await client.completions.create(req);
  assert.equal(a.choices[0].text, b.choices[0].text);
});
await check('errors come back as OpenAI errors', async () => {
  await assert.rejects(client.chat.completions.create({ model: 'tiny', messages: [], max_tokens: 2 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && typeof e.message === 'string');
  await assert.rejects(client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'x' }], n: 2 }),
    (e) => e.status === 400);
  const bad = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
});

// response_format json_schema: the answer parses and validates (a hand-written
// validator for this schema; every field forces the answer to end).
const schema = {
  type: 'object',
  properties: {
    color: { enum: ['red', 'green', 'blue'] },
    count: { type: 'integer' },
    ok: { type: 'boolean' },
    name: { type: 'string', maxLength: 6 },
    sizes: { type: 'array', items: { type: 'number' }, maxItems: 2 },
  },
  required: ['color', 'count', 'ok', 'name', 'sizes'],
  additionalProperties: false,
};
function validate(v) {
  assert.equal(typeof v, 'object');
  assert.ok(v !== null && !Array.isArray(v));
  assert.deepEqual(Object.keys(v), ['color', 'count', 'ok', 'name', 'sizes']);  // schema order
  assert.ok(['red', 'green', 'blue'].includes(v.color), v.color);
  assert.ok(Number.isInteger(v.count), String(v.count));
  assert.equal(typeof v.ok, 'boolean');
  assert.equal(typeof v.name, 'string');
  assert.ok([...v.name].length <= 6, v.name);
  assert.ok(Array.isArray(v.sizes) && v.sizes.length <= 2);
  for (const x of v.sizes) assert.equal(typeof x, 'number');
}
const rf = { type: 'json_schema', json_schema: { name: 'thing', schema, strict: true } };
await check('response_format json_schema: chat JSON and streaming, completions', async () => {
  for (const seed of [1, 2]) {
    const req = { model: 'tiny', messages: [{ role: 'user', content: 'describe a thing' }], max_tokens: 300,
      temperature: 1, seed, response_format: rf };
    const r = await client.chat.completions.create(req);
    assert.equal(r.choices[0].finish_reason, 'stop');
    const text = r.choices[0].message.content;
    validate(JSON.parse(text));
    const stream = await client.chat.completions.create({ ...req, stream: true });
    let streamed = '';
    for await (const c of stream) for (const ch of c.choices) streamed += ch.delta.content ?? '';
    assert.equal(streamed, text);
  }
  const c = await client.completions.create({ model: 'tiny', prompt: 'thing:', max_tokens: 300, temperature: 1, seed: 3,
    response_format: rf });
  assert.equal(c.choices[0].finish_reason, 'stop');
  validate(JSON.parse(c.choices[0].text));
});
await check('response_format errors', async () => {
  await assert.rejects(client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'x' }],
    response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', pattern: '(a)\\1' } } } }),
  (e) => e instanceof OpenAI.BadRequestError && /pattern/.test(e.message) && e.param === 'response_format.json_schema.schema');
  await assert.rejects(client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'x' }],
    response_format: { type: 'yaml' } }), (e) => e.status === 400);
});

server.kill('SIGTERM');
await new Promise((r) => server.on('exit', r));

// A tool call round trip on the GLM-template model: tool_choice forces the
// call (named and required), its arguments validate against the function's
// schema, and the follow-up with the tool's result is an ordinary answer.
const glm = await startServer(strata, ['--model', path.join(root, 'models/glm5-strata-tiny'), '--threads', '1',
  '--ctx', '1024', '--model-id', 'glm-tiny']);
globalThis.glmServer = glm;
const tc = new OpenAI({ baseURL: `${glm.base}/v1`, apiKey: 'none', maxRetries: 0 });
const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'Current weather for a city',
    parameters: { type: 'object', properties: {
      city: { type: 'string', maxLength: 32 },
      unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
      days: { type: 'integer' } }, required: ['city', 'days'] } } },
  { type: 'function', function: { name: 'get_time', parameters: { type: 'object',
    properties: { zone: { type: 'string' } }, required: ['zone'] } } },
];
function validateCall(call) {
  assert.equal(call.type, 'function');
  assert.equal(typeof call.id, 'string');
  const args = JSON.parse(call.function.arguments);
  assert.ok(args && typeof args === 'object' && !Array.isArray(args));
  if (call.function.name === 'get_weather') {
    assert.equal(typeof args.city, 'string');
    assert.ok([...args.city].length <= 32 && args.city === args.city.trim(), args.city);
    assert.ok(Number.isInteger(args.days), String(args.days));
    if ('unit' in args) assert.ok(['celsius', 'fahrenheit'].includes(args.unit), args.unit);
    for (const k of Object.keys(args)) assert.ok(['city', 'unit', 'days'].includes(k), k);
  } else {
    assert.equal(call.function.name, 'get_time');
    assert.deepEqual(Object.keys(args), ['zone']);
    assert.equal(typeof args.zone, 'string');
  }
  return args;
}
const ask = [{ role: 'user', content: 'What is the weather in Paris for the next 3 days?' }];
await check('tool call round trip (named tool_choice, then the tool result)', async () => {
  const r = await tc.chat.completions.create({ model: 'glm-tiny', messages: ask, tools, temperature: 0, max_tokens: 200,
    tool_choice: { type: 'function', function: { name: 'get_weather' } } });
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  const msg = r.choices[0].message;
  assert.equal(msg.tool_calls.length, 1);
  assert.equal(msg.tool_calls[0].function.name, 'get_weather');
  validateCall(msg.tool_calls[0]);
  const follow = await tc.chat.completions.create({ model: 'glm-tiny', tools, temperature: 0, max_tokens: 32,
    messages: [...ask, { role: 'assistant', content: msg.content || null, tool_calls: msg.tool_calls },
      { role: 'tool', tool_call_id: msg.tool_calls[0].id, content: JSON.stringify({ temperature_c: 21, sky: 'clear' }) }] });
  assert.ok(['stop', 'length', 'tool_calls'].includes(follow.choices[0].finish_reason), follow.choices[0].finish_reason);
  if (follow.choices[0].finish_reason === 'tool_calls') follow.choices[0].message.tool_calls.forEach(validateCall);
  else assert.equal(typeof follow.choices[0].message.content, 'string');
});
await check('tool_choice required: sampled and streamed calls validate', async () => {
  for (const seed of [1, 2, 3]) {
    const req = { model: 'glm-tiny', messages: ask, tools, tool_choice: 'required', temperature: 1, seed, max_tokens: 200 };
    const r = await tc.chat.completions.create(req);
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
    const args = validateCall(r.choices[0].message.tool_calls[0]);
    const stream = await tc.chat.completions.create({ ...req, stream: true });
    const calls = [];
    let finish = null;
    for await (const c of stream)
      for (const ch of c.choices) {
        for (const d of ch.delta.tool_calls ?? []) calls.push(d);
        finish = ch.finish_reason ?? finish;
      }
    assert.equal(finish, 'tool_calls');
    assert.equal(calls.length, 1);
    assert.equal(calls[0].function.name, r.choices[0].message.tool_calls[0].function.name);
    assert.deepEqual(validateCall({ ...calls[0], type: 'function' }), args);
  }
});
// Stop strings on the trained model, whose greedy answer is English text: the
// stop string is a word taken from the second half of that answer, so it is
// certain to occur; the answer must end just before its first occurrence.
await check('stop strings', async () => {
  const req = { model: 'glm-tiny', prompt: 'The weather in Paris is', max_tokens: 32, ...greedy };
  const full = (await tc.completions.create(req)).choices[0].text;
  const later = [...full.matchAll(/[A-Za-z]{2,}/g)].filter((m) => m.index >= full.length / 2);
  assert.ok(later.length > 0, `no word in the second half of the answer ${JSON.stringify(full)}`);
  const stop = later[0][0];
  const r = await tc.completions.create({ ...req, stop: [stop] });
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.choices[0].text, full.slice(0, full.indexOf(stop)));
  assert.ok(r.usage.completion_tokens < 32, `${r.usage.completion_tokens} tokens`);
  // The same through the chat endpoint, streamed: the stop string never reaches the client.
  const chatReq = { model: 'glm-tiny', messages: [{ role: 'user', content: 'Tell me about the sea.' }], max_tokens: 32,
    ...greedy, enable_thinking: false };
  const chatFull = (await tc.chat.completions.create(chatReq)).choices[0].message.content;
  const chatLater = [...chatFull.matchAll(/[A-Za-z]{2,}/g)].filter((m) => m.index >= chatFull.length / 2);
  assert.ok(chatLater.length > 0, `no word in the second half of the answer ${JSON.stringify(chatFull)}`);
  const chatStop = chatLater[0][0];
  const want = chatFull.slice(0, chatFull.indexOf(chatStop));
  const cut = await tc.chat.completions.create({ ...chatReq, stop: chatStop });
  assert.equal(cut.choices[0].finish_reason, 'stop');
  assert.equal(cut.choices[0].message.content, want.trim());  // a message's content is stripped
  const stream = await tc.chat.completions.create({ ...chatReq, stop: chatStop, stream: true });
  let text = '', finish = null;
  for await (const c of stream)
    for (const ch of c.choices) {
      text += ch.delta.content ?? '';
      finish = ch.finish_reason ?? finish;
    }
  assert.equal(finish, 'stop');
  // Streamed deltas are the text as generated, so whitespace before the stop
  // string is kept (the whole answer above was stripped at its start).
  assert.equal(text.trimStart(), want);
});
// Seeded sampling on the trained model (temperature 1, 32 tokens: its answers
// spread over many tokens, so two seeds or a sample and the greedy answer
// agreeing on 32 tokens would be a broken sampler, not chance).
await check('seeds: equal seeds equal, different seeds differ, sampling is not greedy', async () => {
  const req = { model: 'glm-tiny', prompt: 'Once upon a time', max_tokens: 32, temperature: 1, ignore_eos: true };
  const text = async (extra) => (await tc.completions.create({ ...req, ...extra })).choices[0].text;
  const [a, b, c, g] = [await text({ seed: 7 }), await text({ seed: 7 }), await text({ seed: 8 }), await text(greedy)];
  assert.equal(a, b, 'the same seed gave different text');
  assert.notEqual(a, c, `seeds 7 and 8 gave the same text: ${JSON.stringify(a)}`);
  assert.notEqual(a, g, `seed 7 gave the greedy text: ${JSON.stringify(a)}`);
  assert.notEqual(c, g, `seed 8 gave the greedy text: ${JSON.stringify(c)}`);
});
await check('tool_choice errors', async () => {
  await assert.rejects(tc.chat.completions.create({ model: 'glm-tiny', messages: ask, tools,
    tool_choice: { type: 'function', function: { name: 'nope' } } }),
  (e) => e instanceof OpenAI.BadRequestError && e.param === 'tool_choice.function.name');
  await assert.rejects(tc.chat.completions.create({ model: 'glm-tiny', messages: ask, tool_choice: 'required',
    tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object',
      properties: { a: { type: 'string', pattern: 'x' } } } } }] }),
  (e) => e instanceof OpenAI.BadRequestError && /pattern/.test(e.message));
});
await glm.stop();
clearTimeout(killer);
fs.rmSync(dir, { recursive: true, force: true });
console.log(failed ? `${failed} failed` : 'all passed');
process.exit(failed ? 1 : 0);
