// Renders the dashboard in headless Chromium (Debian `chromium`) against a
// running `strata serve` and saves docs/dashboard.png.
// Usage: node tests/server/screenshot.mjs http://127.0.0.1:PORT/ [out.png]
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const url = process.argv[2];
const out = process.argv[3] || path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../docs/dashboard.png');
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox'] });
const page = await browser.newPage({ viewport: { width: 1000, height: 760 } });
const errors = [];
page.on('pageerror', (e) => errors.push(String(e)));
page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
await page.goto(url);
await page.waitForFunction(() => document.querySelector('#cards').children.length > 0 &&
  Number(document.getElementById('hist-gen').dataset.points) > 0, null, { timeout: 10000 });
await page.waitForTimeout(2500);
await page.screenshot({ path: out, fullPage: true });
await browser.close();
if (errors.length) { console.error(errors.join('\n')); process.exit(1); }
console.log('saved', out);
