// The dashboard in headless Chromium (Debian `chromium`, npm `playwright-core`)
// against a live `strata serve` on a container of the bundled model with a
// small expert cache and an API key, while requests run: the page must show
// live numbers (tokens/s above zero at some poll, tokens generated, TTFT);
// every memory tier as a bar against its budget (the expert cache partly
// used, never above its capacity); the server-side history (generated and
// prefilled tokens/s, hit rate, disk GB/s) with data over a time axis from
// the start, still there after a reload when nothing runs any more; one
// labelled heat row per MoE layer with one cell per expert, some heat and a
// legend up to the hottest cell; the recent requests with their tokens; no
// script or console errors. Without the key it must say 401.
// Usage: node tests/server/dashboard.test.mjs path/to/strata [screenshot.png]
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { startServer } from './serve.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../..');
const strata = process.argv[2] || path.join(root, 'build/strata');
const shot = process.argv[3] || path.join(os.tmpdir(), 'strata-dashboard-test.png');
const chromiumPath = process.env.CHROMIUM || '/usr/bin/chromium';
if (!fs.existsSync(chromiumPath)) {
  console.log(`SKIP: no Chromium at ${chromiumPath} (apt-get install chromium)`);
  process.exit(77);
}
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'strata-dash-'));
const watchdog = setTimeout(() => { console.error('not ok - timeout'); process.exit(1); }, 180000);
const container = path.join(tmp, 'tiny.strata');
execFileSync(strata, ['convert', '--in', path.join(root, 'models/glm5-strata-tiny'), '--out', container, '-q'],
  { stdio: 'inherit' });
const cfg = JSON.parse(fs.readFileSync(path.join(root, 'models/glm5-strata-tiny/config.json'), 'utf8'));
// Heat rows: the MoE layers, and the MTP layer after them (serve's default --spec auto loads it).
const moeLayers = cfg.num_hidden_layers - (cfg.first_k_dense_replace || 0) + (cfg.num_nextn_predict_layers || 0);

const server = await startServer(strata, ['--model', container, '--threads', '1', '--api-key', 'k3y',
  '--ram', '0.004', '--no-autopin', '--ctx', '512']);
const base = server.base;

let failed = 0;
const browser = await chromium.launch({ executablePath: chromiumPath,
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
    '--no-first-run', '--disable-sync'] });
try {
  const page = await browser.newPage({ viewport: { width: 1000, height: 800 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  await page.goto(`${base}/#key=k3y`);
  // Requests while the page polls.
  let busy = true, finished = 0;
  const load = (async () => {
    while (busy || finished < 2) {
      const r = await fetch(`${base}/v1/completions`, { method: 'POST',
        headers: { 'content-type': 'application/json', authorization: 'Bearer k3y' },
        body: JSON.stringify({ prompt: 'The meaning of the word', max_tokens: 48, temperature: 0.8, ignore_eos: true }) });
      assert.equal(r.status, 200, await r.text());
      finished++;
    }
  })();
  const card = (name) => page.evaluate((n) => {
    for (const c of document.querySelectorAll('#cards .card'))
      if (c.querySelector('.k').textContent === n) return c.querySelector('.v').textContent;
    return null;
  }, name);
  let maxRate = 0;
  for (let i = 0; i < 40 && maxRate === 0; i++) {
    await page.waitForTimeout(250);
    maxRate = Math.max(maxRate, Number(await card('tokens/s')) || 0);
  }
  busy = false;
  await load;
  await page.waitForTimeout(1300);  // one more poll after the last request
  assert.ok(maxRate > 0, 'tokens/s never rose above 0 while requests ran');
  assert.ok(Number(await card('tokens generated')) > 0, 'no tokens generated shown');
  assert.match(await card('time to first token (avg)'), /^\d+ ms$/);
  assert.match(await card('expert hit rate'), /^\d+(\.\d)?%$/);
  // Memory: one bar per tier, filled to used / budget.
  const tiers = Object.fromEntries(await page.$$eval('#mem tr.tier', (rows) => rows.map((r) => [r.dataset.tier, {
    used: Number(r.dataset.used), budget: Number(r.dataset.budget), text: r.querySelector('td.v').textContent,
    fill: [...r.querySelectorAll('.fill')].map((f) => parseFloat(f.style.width)) }])));
  for (const t of ['total', 'resident (dense)', 'pinned experts', 'expert cache', 'sessions (KV)']) {
    assert.ok(t in tiers, `memory tier '${t}' missing`);
    assert.match(tiers[t].text, /^\d+(\.\d)? (B|KB|MB|GB|TB)( \/ \d+(\.\d)? (B|KB|MB|GB|TB))?$/, `tier '${t}' shows '${tiers[t].text}'`);
  }
  const cache = tiers['expert cache'];
  assert.ok(cache.used > 0 && cache.used <= cache.budget, `expert cache ${cache.used} of ${cache.budget}`);
  assert.ok(Math.abs(cache.fill[0] - 100 * cache.used / cache.budget) < 0.01, `cache bar ${cache.fill[0]}%`);
  assert.ok(tiers['resident (dense)'].used > 0 && tiers['sessions (KV)'].budget > 0);
  assert.ok(tiers['sessions (KV)'].used <= tiers['sessions (KV)'].budget);
  assert.equal(tiers.total.fill.length, 4, 'the total bar stacks resident, pinned, cache and sessions');
  assert.match(await page.textContent('#memnote'), /peak RSS \d+(\.\d)? MB/);
  // The history charts: data, and a time axis from the start.
  const charts = () => page.$$eval('canvas', (cs) => Object.fromEntries(cs.map((c) => [c.id,
    { points: Number(c.dataset.points), max: Number(c.dataset.max), span: Number(c.dataset.span) }])));
  const hist = await charts();
  for (const id of ['hist-gen', 'hist-prefill', 'hist-hit', 'hist-disk'])
    assert.ok(hist[id] && hist[id].points >= 1, `chart ${id}: ${JSON.stringify(hist[id])}`);
  assert.ok(hist['hist-gen'].max > 0 && hist['hist-prefill'].max > 0 && hist['hist-disk'].max > 0,
            `history without throughput: ${JSON.stringify(hist)}`);
  assert.ok(hist['hist-hit'].max >= 0 && hist['hist-hit'].max <= 1);
  // The heat map: labelled rows and columns and a legend.
  const heat = await page.$$eval('#heat tbody tr', (rows) => rows.map((r) => ({ layer: r.querySelector('th').textContent,
    cells: [...r.querySelectorAll('td.cell')].map((c) => Number(c.dataset.v)) })));
  assert.equal(heat.length, moeLayers, `heat rows ${heat.length}, MoE layers ${moeLayers}`);
  for (const row of heat) assert.equal(row.cells.length, cfg.n_routed_experts);
  assert.deepEqual(heat.map((r) => Number(r.layer)),
                   Array.from({ length: moeLayers }, (_, i) => i + (cfg.first_k_dense_replace || 0)), 'layer labels');
  const hottest = Math.max(...heat.flatMap((r) => r.cells));
  assert.ok(hottest > 0, 'no expert heat after the requests');
  const cols = await page.$$eval('#heat thead th span', (s) => s.map((x) => x.textContent));
  assert.equal(cols[0], '0', 'expert labels');
  assert.ok(cols.length >= 2, 'expert labels');
  assert.equal(Number(await page.textContent('#legend-max')), hottest, 'the legend ends at the hottest cell');
  // Recent requests from the request log.
  const reqs = await page.$$eval('#reqs tbody tr', (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent)));
  const done = reqs.filter((r) => r[1] === 'POST /v1/completions' && r[2] === '200');
  assert.ok(done.length >= 2, `recent requests: ${JSON.stringify(reqs)}`);
  for (const r of done) {
    assert.match(r[3], /^\d+/, 'prompt tokens');
    assert.equal(r[4], '48', 'completion tokens');
    assert.ok(Number(r[6]) > 0, 'ms');
  }
  assert.ok(reqs.length <= 20);
  assert.equal(await page.textContent('#err'), '', 'the page shows an error');
  assert.deepEqual(errors, [], 'script errors on the page');
  await page.screenshot({ path: shot, fullPage: true });
  console.log(`ok - live dashboard: peak ${maxRate} tok/s shown, ${heat.length} heat rows x ${heat[0].cells.length} experts, ` +
              `expert cache ${cache.used}/${cache.budget} B, history ${JSON.stringify(hist)}, ${done.length} requests listed; ` +
              `screenshot ${shot}`);

  // Later, nothing running: a reloaded page still shows the history.
  await page.waitForTimeout(2000);
  await page.reload();
  await page.waitForFunction(() => Number(document.getElementById('hist-gen').dataset.points) > 0, null, { timeout: 10000 });
  assert.equal(await card('tokens/s'), '0.0', 'still generating?');
  const again = await charts();
  assert.ok(again['hist-gen'].max >= hist['hist-gen'].max && again['hist-gen'].span > hist['hist-gen'].span,
            `after the reload: ${JSON.stringify(again)}, before ${JSON.stringify(hist)}`);
  assert.ok(again['hist-gen'].points >= hist['hist-gen'].points + 1);
  assert.deepEqual(errors, [], 'script errors on the page');
  console.log(`ok - after a reload the history is there: ${JSON.stringify(again['hist-gen'])}`);

  const anon = await browser.newPage();
  await anon.goto(`${base}/`);
  await anon.waitForFunction(() => document.getElementById('err').textContent.length > 0, null, { timeout: 10000 });
  assert.match(await anon.textContent('#err'), /401/);
  console.log('ok - without the key the page says 401');
} catch (e) {
  failed++;
  console.log(`not ok - ${e.stack || e}`);
} finally {
  await browser.close();
  await server.stop();
  fs.rmSync(tmp, { recursive: true, force: true });
  clearTimeout(watchdog);
}
process.exit(failed ? 1 : 0);
