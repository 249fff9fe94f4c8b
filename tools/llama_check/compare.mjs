#!/usr/bin/env node
// Compares llama.cpp's output (run.mjs --json) with a fixture's reference.json.
//
//   node compare.mjs REFERENCE.json LLAMA.json [--tol 0.05] [--json]
//
// A teacher-forced position where the two top-1 tokens differ is explained
// by a near-tie when the reference's top-1/top-2 logit gap plus llama.cpp's
// own top-1/top-2 gap is below --tol (logit units): for the two to pick
// different tokens, their logits must differ by at least that sum, so a sum
// below the numeric noise level means a tie that rounding may flip. Any other
// disagreement fails.
// Greedy continuations are compared up to their first difference; after it
// the prefixes differ, so later tokens are not compared. That difference is
// explained the same way, by the margins at that step.
//
// Every field compared is required (reference: ids, top1, top1_margin,
// greedy.ids, greedy.margins; llama.cpp: top1, top1_margin, greedy,
// greedy_margin): a missing one is bad input, never a skipped comparison.
//
// Exit status: 0 when every disagreement is explained, 1 otherwise, 2 on bad
// input.
import fs from "node:fs";
import {parseArgs} from "node:util";

function die(msg) {
    process.stderr.write(`compare.mjs: ${msg}\n`);
    process.exit(2);
}

let parsed;
try {
    parsed = parseArgs({
        allowPositionals: true,
        options: {tol: {type: "string", default: "0.05"}, json: {type: "boolean", default: false}},
    });
} catch (e) {
    die(e.message);
}
const [refPath, llamaPath] = parsed.positionals;
if (!refPath || !llamaPath) die("usage: node compare.mjs REFERENCE.json LLAMA.json [--tol 0.05] [--json]");
const tol = Number(parsed.values.tol);
if (!(tol >= 0)) die("--tol must be a non-negative number");

function load(p) {
    try {
        return JSON.parse(fs.readFileSync(p, "utf8"));
    } catch (e) {
        die(`${p}: ${e.message}`);
    }
}
const ref = load(refPath);
const got = load(llamaPath);
function need(obj, path, file, length) {
    const v = path.split(".").reduce((o, k) => (o == null ? undefined : o[k]), obj);
    if (!Array.isArray(v)) die(`${file}: missing array "${path}"`);
    if (length !== undefined && v.length !== length) die(`${file}: "${path}" has ${v.length} entries, expected ${length}`);
    return v;
}
need(ref, "ids", refPath);
const refTop1 = need(ref, "top1", refPath);
need(ref, "top1_margin", refPath, refTop1.length);
const refGreedy = need(ref, "greedy.ids", refPath);
need(ref, "greedy.margins", refPath, refGreedy.length);
need(got, "top1", llamaPath, refTop1.length);
need(got, "top1_margin", llamaPath, refTop1.length);
// llama.cpp may have generated more greedy tokens than the reference holds; only the first are compared.
if (need(got, "greedy", llamaPath).length < refGreedy.length)
    die(`llama.cpp produced ${got.greedy.length} greedy tokens, the reference has ${refGreedy.length}`);
need(got, "greedy_margin", llamaPath, got.greedy.length);

const fmt = (x) => (x == null ? "n/a" : Number(x).toFixed(4));
const nearTie = (a, b) => typeof a === "number" && typeof b === "number" && a + b < tol;

const tf = {positions: ref.top1.length, agree: 0, explained: [], unexplained: []};
for (let i = 0; i < ref.top1.length; i++) {
    if (ref.top1[i] === got.top1[i]) {
        tf.agree++;
        continue;
    }
    const rm = ref.top1_margin[i], lm = got.top1_margin[i];
    const item = {pos: i, reference: ref.top1[i], llama: got.top1[i], ref_margin: rm ?? null, llama_margin: lm ?? null};
    (nearTie(rm, lm) ? tf.explained : tf.unexplained).push(item);
}
let maxMarginDiff = 0;
for (let i = 0; i < ref.top1.length; i++)
    if (ref.top1[i] === got.top1[i])
        maxMarginDiff = Math.max(maxMarginDiff, Math.abs(ref.top1_margin[i] - got.top1_margin[i]));

const g = {length: refGreedy.length, match: 0, first_difference: null, explained: true};
let k = 0;
while (k < refGreedy.length && refGreedy[k] === got.greedy[k]) k++;
g.match = k;
if (k < refGreedy.length) {
    const rm = ref.greedy.margins[k], lm = got.greedy_margin[k];
    g.first_difference = {step: k, reference: refGreedy[k], llama: got.greedy[k], ref_margin: rm ?? null,
        llama_margin: lm ?? null};
    g.explained = nearTie(rm, lm);
}

const ok = tf.unexplained.length === 0 && g.explained;
const summary = {
    ok,
    tol,
    top1: {agree: tf.agree, of: tf.positions, near_tie_differences: tf.explained, unexplained_differences: tf.unexplained,
        max_margin_diff_where_agreeing: maxMarginDiff},
    greedy: g,
};
if (parsed.values.json) {
    process.stdout.write(JSON.stringify(summary) + "\n");
} else {
    process.stdout.write(`teacher-forced top-1: ${tf.agree}/${tf.positions} agree` +
        (tf.explained.length ? `, ${tf.explained.length} near-tie difference(s)` : "") +
        (tf.unexplained.length ? `, ${tf.unexplained.length} UNEXPLAINED` : "") +
        ` (max |margin diff| where agreeing ${maxMarginDiff.toExponential(2)})\n`);
    for (const d of [...tf.explained, ...tf.unexplained])
        process.stdout.write(`  pos ${d.pos}: reference ${d.reference} (margin ${fmt(d.ref_margin)}), ` +
            `llama.cpp ${d.llama} (margin ${fmt(d.llama_margin)})\n`);
    process.stdout.write(`greedy: ${g.match}/${g.length} tokens match`);
    if (g.first_difference) {
        const d = g.first_difference;
        process.stdout.write(`; first difference at step ${d.step}: reference ${d.reference} ` +
            `(margin ${fmt(d.ref_margin)}), llama.cpp ${d.llama} (margin ${fmt(d.llama_margin)})` +
            (g.explained ? " -- near-tie" : " -- UNEXPLAINED"));
    }
    process.stdout.write("\n");
    process.stdout.write(ok ? "PASS\n" : "FAIL\n");
}
process.exit(ok ? 0 : 1);
