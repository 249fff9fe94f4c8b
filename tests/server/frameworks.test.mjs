// strata serve driven by the client frameworks people build with: the Vercel
// AI SDK (`ai` + `@ai-sdk/openai-compatible`) and LangChain JS
// (`@langchain/openai`), with zod schemas as their users write them. Runs
// against the bundled GLM-template model (models/glm5-strata-tiny): text,
// streaming with usage, a structured object whose schema has an integer
// field with bounds (zod emits minimum/maximum), and a forced tool call.
// Usage: node tests/server/frameworks.test.mjs path/to/strata
import path from 'node:path';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { generateText, streamText, generateObject, tool } from 'ai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { ChatOpenAI } from '@langchain/openai';
import { z } from 'zod';
import { startServer } from './serve.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../..');
const strata = process.argv[2] || path.join(root, 'build/strata');

const server = await startServer(strata, ['--model', path.join(root, 'models/glm5-strata-tiny'), '--threads', '1',
  '--ctx', '1024', '--model-id', 'glm-tiny', '--api-key', 'k1']);
const killer = setTimeout(() => {
  console.error('timeout');
  server.proc.kill('SIGKILL');
  process.exit(1);
}, 240000);

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

// The schema users of both frameworks write: an integer with bounds, an
// enum, a bounded string, a described field.
const Forecast = z.object({
  city: z.string().max(24).describe('the city'),
  days: z.number().int().min(1).max(14),
  unit: z.enum(['celsius', 'fahrenheit']),
});
function checkForecast(o) {
  assert.equal(typeof o.city, 'string');
  assert.ok([...o.city].length <= 24, o.city);
  assert.ok(Number.isInteger(o.days) && o.days >= 1 && o.days <= 14, String(o.days));
  assert.ok(['celsius', 'fahrenheit'].includes(o.unit), o.unit);
}

// ---------------------------------------------------------------- AI SDK
const provider = createOpenAICompatible({ name: 'strata', baseURL: `${server.base}/v1`, apiKey: 'k1',
  includeUsage: true, supportsStructuredOutputs: true });
const model = provider('glm-tiny');
const prompt = 'What is the weather in Paris for the next 3 days?';

await check('AI SDK generateText', async () => {
  const r = await generateText({ model, prompt, temperature: 0, maxOutputTokens: 16, maxRetries: 0 });
  assert.equal(typeof r.text, 'string');
  assert.ok(r.usage.inputTokens > 0 && r.usage.outputTokens > 0 && r.usage.outputTokens <= 16, JSON.stringify(r.usage));
  assert.ok(['stop', 'length'].includes(r.finishReason), r.finishReason);
});

await check('AI SDK streamText with usage (reasoning and text parts)', async () => {
  // The bundled model thinks by default: its short answers are mostly
  // reasoning, which the SDK streams as reasoning parts.
  const r = streamText({ model, prompt, temperature: 0, maxOutputTokens: 16, maxRetries: 0 });
  let text = '';
  let reasoning = '';
  let parts = 0;
  for await (const p of r.fullStream) {
    if (p.type === 'text-delta') text += p.text, parts++;
    if (p.type === 'reasoning-delta') reasoning += p.text, parts++;
    if (p.type === 'error') throw p.error;
  }
  const usage = await r.usage;
  assert.ok(parts >= 1, 'no text or reasoning parts');
  assert.ok(usage.outputTokens > 0 && usage.outputTokens <= 16, JSON.stringify(usage));
  // Streamed and not streamed: the same greedy answer.
  const whole = await generateText({ model, prompt, temperature: 0, maxOutputTokens: 16, maxRetries: 0 });
  assert.equal(text, whole.text);
  assert.equal(reasoning, whole.reasoningText ?? '');
});

await check('AI SDK generateObject with a zod schema (int with bounds)', async () => {
  for (const temperature of [0, 1]) {
    const r = await generateObject({ model, schema: Forecast, prompt, temperature, seed: 7, maxOutputTokens: 120,
      maxRetries: 0 });
    checkForecast(r.object);
  }
});

await check('AI SDK forced tool call', async () => {
  const r = await generateText({
    model, prompt, temperature: 0, maxOutputTokens: 120, maxRetries: 0,
    tools: { get_weather: tool({ description: 'Current weather for a city', inputSchema: Forecast }) },
    toolChoice: { type: 'tool', toolName: 'get_weather' },
  });
  assert.equal(r.toolCalls.length, 1, JSON.stringify(r.toolCalls));
  assert.equal(r.toolCalls[0].toolName, 'get_weather');
  checkForecast(r.toolCalls[0].input);
});

await check('AI SDK: a wrong key is an error', async () => {
  const bad = createOpenAICompatible({ name: 'strata', baseURL: `${server.base}/v1`, apiKey: 'wrong' })('glm-tiny');
  await assert.rejects(generateText({ model: bad, prompt, maxOutputTokens: 4, maxRetries: 0 }),
    (e) => e.statusCode === 401);
});

// ---------------------------------------------------------------- LangChain
const chat = new ChatOpenAI({ model: 'glm-tiny', apiKey: 'k1', temperature: 0, maxTokens: 16, maxRetries: 0,
  configuration: { baseURL: `${server.base}/v1` } });

await check('LangChain invoke', async () => {
  const m = await chat.invoke(prompt);
  assert.equal(typeof m.content, 'string');
  assert.ok(m.usage_metadata.input_tokens > 0 && m.usage_metadata.output_tokens > 0, JSON.stringify(m.usage_metadata));
});

await check('LangChain stream with usage', async () => {
  let text = '';
  let usage = null;
  for await (const c of await chat.stream(prompt, { stream_options: { include_usage: true } })) {
    text += c.content;
    if (c.usage_metadata) usage = c.usage_metadata;
  }
  assert.ok(usage && usage.output_tokens > 0 && usage.output_tokens <= 16, JSON.stringify(usage));
  const whole = await chat.invoke(prompt);
  assert.equal(text, whole.content);
});

await check('LangChain withStructuredOutput (json_schema and function calling)', async () => {
  const big = new ChatOpenAI({ model: 'glm-tiny', apiKey: 'k1', temperature: 0, maxTokens: 120, maxRetries: 0,
    configuration: { baseURL: `${server.base}/v1` } });
  for (const method of ['jsonSchema', 'functionCalling']) {
    const o = await big.withStructuredOutput(Forecast, { method, name: 'forecast' }).invoke(prompt);
    checkForecast(o);
  }
});

await check('LangChain bindTools with a forced tool', async () => {
  const big = new ChatOpenAI({ model: 'glm-tiny', apiKey: 'k1', temperature: 0, maxTokens: 120, maxRetries: 0,
    configuration: { baseURL: `${server.base}/v1` } });
  const m = await big.bindTools([{ type: 'function', function: { name: 'get_weather',
    description: 'Current weather for a city', parameters: z.toJSONSchema(Forecast) } }],
  { tool_choice: { type: 'function', function: { name: 'get_weather' } } }).invoke(prompt);
  assert.equal(m.tool_calls.length, 1, JSON.stringify(m.tool_calls));
  assert.equal(m.tool_calls[0].name, 'get_weather');
  checkForecast(m.tool_calls[0].args);
});

clearTimeout(killer);
await server.stop();
if (failed) {
  console.log(`${failed} check(s) failed`);
  process.exit(1);
}
console.log('all framework checks passed');
