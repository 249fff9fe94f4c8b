// strata atlas on the bundled model with two small prompt kinds (prose, code;
// ids from `strata tokenize`), its page opened in headless Chromium (Debian
// `chromium`, npm `playwright-core` from tests/server): no console or script
// errors, no request leaving the file, every figure present with one cell or
// bar per layer / expert / kind, axis labels and a legend; atlas.json's
// numbers consistent with the tokens routed.
// Usage: node tests/cli/atlas_page.test.mjs path/to/strata [screenshot.png]
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../..');
const strata = process.argv[2] || path.join(root, 'build/strata');
const shot = process.argv[3];
const chromiumPath = process.env.CHROMIUM || '/usr/bin/chromium';
if (!fs.existsSync(chromiumPath)) {
  console.log(`SKIP: no Chromium at ${chromiumPath} (apt-get install chromium)`);
  process.exit(77);
}
const { chromium } = createRequire(path.join(root, 'tests/server/package.json'))('playwright-core');
const model = path.join(root, 'models/glm5-strata-tiny');
const cfg = JSON.parse(fs.readFileSync(path.join(model, 'config.json'), 'utf8'));
const moeLayers = cfg.num_hidden_layers - (cfg.first_k_dense_replace || 0);
const E = cfg.n_routed_experts, K = cfg.num_experts_per_tok;

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'strata-atlas-'));
const watchdog = setTimeout(() => { console.error('not ok - timeout'); process.exit(1); }, 120000);
let failed = 0;
const check = async (name, fn) => {
  try {
    await fn();
    console.log(`ok - ${name}`);
  } catch (e) {
    failed++;
    console.log(`not ok - ${name}: ${e.stack || e}`);
  }
};

const texts = {
  prose: 'Abandon, v. t. To give up wholly; to forsake. The house stood at the end of a long road, and the ' +
         'garden behind it was full of old trees. Feather, n. One of the light growths that form the covering of a bird.',
  code: 'int main(int argc, char** argv) {\n  for (int i = 0; i < argc; ++i) {\n    printf("%s\\n", argv[i]);\n  }\n' +
        '  return 0;\n}\nstatic void swap(int* a, int* b) { int t = *a; *a = *b; *b = t; }\n',
};
const idFiles = [];
for (const [kind, text] of Object.entries(texts)) {
  const out = execFileSync(strata, ['tokenize', '--tokenizer', model, '--jsonl', '-'], { input: JSON.stringify(text) + '\n' });
  const ids = JSON.parse(out.toString().trim());
  assert.ok(ids.length > 20, `${kind}: ${ids.length} ids`);
  const f = path.join(tmp, `${kind}.txt`);
  fs.writeFileSync(f, ids.join(','));
  idFiles.push(f);
}
const out = path.join(tmp, 'atlas');
const table = execFileSync(strata, ['atlas', '--model', model, '--threads', '1', '-q', '--ids-file', idFiles[0],
  '--ids-file', `code=${idFiles[1]}`, '--out', out]).toString();

await check('atlas.json', () => {
  const j = JSON.parse(fs.readFileSync(path.join(out, 'atlas.json'), 'utf8'));
  assert.equal(j.format, 'strata-atlas');
  assert.equal(j.version, 1);
  assert.deepEqual(j.kinds.map((k) => k.name), ['prose', 'code']);
  assert.equal(j.experts, E);
  assert.equal(j.top_k, K);
  assert.equal(j.layers.length, moeLayers);
  const tokens = j.kinds.reduce((s, k) => s + k.tokens, 0);
  for (const l of j.layers) {
    assert.equal(l.usage.counts.reduce((s, c) => s + c, 0), tokens * K, `layer ${l.layer}: usage counts`);
    assert.ok(l.usage.entropy_norm > 0 && l.usage.entropy_norm <= 1, `layer ${l.layer}: entropy ${l.usage.entropy_norm}`);
    assert.equal(l.shift.length, 1);
    assert.ok(l.shift[0].tv >= 0 && l.shift[0].tv <= 1);
  }
  assert.equal(j.layers[0].recall_at, null, 'the first MoE layer has no prediction');
  for (const l of j.layers.slice(1)) {
    assert.equal(l.recall_at.length, K);
    assert.equal(l.predicted_tokens, tokens);
    for (let k = 1; k < K; k++) assert.ok(l.recall_at[k] >= l.recall_at[k - 1], 'recall@k grows with k');
  }
  assert.equal(j.coactivation.together.length, E);
  assert.match(table, /^layer +entropy\(norm\) +recall@4 +TV\(prose vs code\)$/m);
});

await check('index.html is self-contained', () => {
  const html = fs.readFileSync(path.join(out, 'index.html'), 'utf8');
  assert.ok(!/<script/i.test(html), 'the page holds a script');
  const urls = [...html.matchAll(/(?:src|href)\s*=\s*"([^"]*)"/g)].map((m) => m[1]);
  for (const u of urls) assert.ok(u === 'atlas.json' || u.startsWith('#') || u.startsWith('url(#'), `reference to ${u}`);
  for (const m of html.matchAll(/https?:\/\/[^"'\s<]+/g))
    assert.equal(m[0], 'http://www.w3.org/2000/svg', `network address ${m[0]}`);
});

const browser = await chromium.launch({ executablePath: chromiumPath,
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
    '--no-first-run', '--disable-sync'] });
try {
  const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(`pageerror: ${e}`));
  page.on('console', (m) => { if (m.type() === 'error' || m.type() === 'warning') errors.push(`console ${m.type()}: ${m.text()}`); });
  page.on('request', (r) => { if (!r.url().startsWith('file://')) errors.push(`request to ${r.url()}`); });
  await page.goto('file://' + path.join(out, 'index.html'));
  await check('figures render', async () => {
    const figs = { 'fig-usage': ['.cells rect', moeLayers * E], 'fig-entropy': ['.bars rect', moeLayers * 3],
      'fig-coact': ['.cells rect', E * E], 'fig-recall': ['.bars rect', (moeLayers - 1) * (K + 1)],
      'fig-shift': ['.bars rect', moeLayers], 'fig-shift-map': ['.cells rect', moeLayers * E] };
    for (const [id, [sel, n]] of Object.entries(figs)) {
      const f = await page.evaluate(([id, sel]) => {
        const fig = document.getElementById(id);
        if (!fig) return null;
        const svg = fig.querySelector('svg');
        const box = svg.getBoundingClientRect();
        const marks = [...svg.querySelectorAll(sel)];
        const painted = marks.filter((r) => r.getBBox().width > 0 && r.getBBox().height > 0).length;
        const fills = new Set(marks.map((r) => r.getAttribute('fill')));
        return { w: box.width, h: box.height, marks: marks.length, painted, fills: fills.size,
          legend: svg.querySelectorAll('.legend text').length, text: svg.textContent,
          caption: fig.querySelector('figcaption')?.textContent.length || 0 };
      }, [id, sel]);
      assert.ok(f, `figure #${id} missing`);
      assert.ok(f.w > 100 && f.h > 100, `#${id}: ${f.w}x${f.h} px`);
      assert.equal(f.marks, n, `#${id}: ${f.marks} marks, expected ${n}`);
      assert.equal(f.painted, n, `#${id}: ${f.painted} of ${n} marks painted`);
      assert.ok(f.fills > 1 || sel === '.bars rect', `#${id}: one colour for every cell`);
      assert.ok(f.legend >= (sel === '.bars rect' ? 1 : 2), `#${id}: no legend`);
      assert.ok(f.caption > 40, `#${id}: no caption`);
      const axis = id === 'fig-coact' ? /expert.*expert/s : id.startsWith('fig-recall') ? /predicted layer/ : /layer/;
      assert.match(f.text, axis, `#${id}: axis label`);
    }
  });
  await check('no console, script or network errors', () => assert.deepEqual(errors, []));
  if (shot) await page.screenshot({ path: shot, fullPage: true });
} finally {
  await browser.close();
  fs.rmSync(tmp, { recursive: true, force: true });
  clearTimeout(watchdog);
}
process.exit(failed ? 1 : 0);
