// The dashboard in headless Chromium (Debian `chromium`, npm `playwright-core`)
// against a live `strata serve` on a container of the bundled model with a
// small expert cache and an API key, while requests run: the page must show
// live numbers (tokens/s above zero at some poll, tokens generated, TTFT),
// every memory tier, one heat row per MoE layer with one cell per expert and
// some heat, no script errors; without the key it must say 401.
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
const moeLayers = cfg.num_hidden_layers - (cfg.first_k_dense_replace || 0);

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
  await page.goto(`${base}/#key=k3y`);
  // Requests while the page polls.
  let busy = true;
  const load = (async () => {
    while (busy) {
      const r = await fetch(`${base}/v1/completions`, { method: 'POST',
        headers: { 'content-type': 'application/json', authorization: 'Bearer k3y' },
        body: JSON.stringify({ prompt: 'The meaning of the word', max_tokens: 48, temperature: 0.8, ignore_eos: true }) });
      assert.equal(r.status, 200, await r.text());
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
  const mem = await page.$$eval('#mem tr', (rows) => rows.map((r) => [r.cells[0]?.textContent || r.querySelector('th').textContent,
    r.querySelector('td').textContent]));
  const tiers = Object.fromEntries(mem);
  for (const t of ['resident (dense)', 'pinned experts', 'expert cache', 'experts on disk', 'sessions (KV)']) {
    assert.ok(t in tiers, `memory tier '${t}' missing`);
    assert.match(tiers[t], /^\d+(\.\d)? (B|KB|MB|GB|TB)$/, `memory tier '${t}' shows '${tiers[t]}'`);
  }
  const heat = await page.$$eval('#heat tr', (rows) => rows.map((r) => [...r.querySelectorAll('td.cell')].map((c) => Number(c.title))));
  assert.equal(heat.length, moeLayers, `heat rows ${heat.length}, MoE layers ${moeLayers}`);
  for (const row of heat) assert.equal(row.length, cfg.n_routed_experts);
  assert.ok(heat.flat().some((v) => v > 0), 'no expert heat after the requests');
  assert.equal(await page.textContent('#err'), '', 'the page shows an error');
  assert.deepEqual(errors, [], 'script errors on the page');
  await page.screenshot({ path: shot, fullPage: true });
  console.log(`ok - live dashboard: peak ${maxRate} tok/s shown, ${heat.length} heat rows x ${heat[0].length} experts, ` +
              `tiers ${JSON.stringify(tiers)}; screenshot ${shot}`);

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
