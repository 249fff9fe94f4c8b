#!/usr/bin/env node
// llama.cpp side of bench/compare/run.sh: prefill and decode speed of a GGUF
// through npm node-llama-cpp (tools/llama_check/node_modules), the same
// measurement `strata bench` makes.
//
//   node llama_bench.mjs --gguf F (--ids 1,2,3 | --ids-file F) [--gen 32] [--threads 2] [--ctx 4096]
//                        [--batch 512] [--reps 1] [--warmup 1] [--warmup-tokens N] [--no-mmap]
//
// Prints one JSON line: {"prefill_tok_s_reps": [...], "decode_tok_s_reps": [...],
// "prefill_tok_s", "decode_tok_s" (medians), "llama": {backend, threads, ...}}.
// Prefill: the prompt ids evaluated in batches of --batch; decode: --gen
// tokens, each the sampler's pick fed back one at a time. Each repetition
// starts from an empty sequence. --ids-file: the same comma-separated ids read
// from a file (long contexts: 32768 ids do not fit one command-line argument).
import {createRequire} from "node:module";
import path from "node:path";
import {fileURLToPath} from "node:url";
import {parseArgs} from "node:util";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "../../tools/llama_check/package.json"));
const {getLlama, LlamaLogLevel} = await import(require.resolve("node-llama-cpp"));

const a = parseArgs({
    options: {
        gguf: {type: "string"}, ids: {type: "string"}, "ids-file": {type: "string"}, gen: {type: "string", default: "32"},
        threads: {type: "string", default: "2"}, ctx: {type: "string", default: "4096"},
        batch: {type: "string", default: "512"}, reps: {type: "string", default: "1"},
        warmup: {type: "string", default: "1"}, "warmup-tokens": {type: "string", default: "0"}, "no-mmap": {type: "boolean", default: false},
    },
    strict: true,
}).values;
if (!a.gguf || !(a.ids || a["ids-file"])) {
    process.stderr.write("usage: node llama_bench.mjs --gguf F (--ids 1,2,3 | --ids-file F) [--gen 32] [--threads 2]\n");
    process.exit(2);
}
const idText = a["ids-file"] ? (await import("node:fs")).readFileSync(a["ids-file"], "utf8") : a.ids;
const ids = idText.trim().split(",").map(Number);
const G = Number(a.gen), reps = Number(a.reps), warmup = Number(a.warmup);

const log = [];
const llama = await getLlama({
    gpu: false, build: "never", logLevel: LlamaLogLevel.debug,
    logger: (level, m) => {
        log.push(m);
        if (level === LlamaLogLevel.error || level === LlamaLogLevel.fatal) process.stderr.write(m + "\n");
    },
});
const t0 = performance.now();
const model = await llama.loadModel({modelPath: a.gguf, gpuLayers: 0, useMmap: !a["no-mmap"]});
const context = await model.createContext({
    contextSize: Number(a.ctx), batchSize: Number(a.batch), sequences: 1, threads: Number(a.threads),
});
const loadS = (performance.now() - t0) / 1e3;
const seq = context.getSequence();
const median = (v) => {
    const s = [...v].sort((x, y) => x - y), n = s.length;
    return n === 0 ? 0 : n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
};
const pre = [], dec = [];
for (let r = 0; r < warmup + reps; r++) {
    await seq.clearHistory();
    const p0 = performance.now();
    // A warm-up repetition may use a prefix of the prompt (--warmup-tokens).
    const wt = Number(a["warmup-tokens"]);
    const pr = r < warmup && wt > 0 ? ids.slice(0, wt) : ids;
    const first = await seq.controlledEvaluate(pr.map((t, i) => (i === pr.length - 1 ? [t, {generateNext: {token: true}}] : t)));
    const p1 = performance.now();
    let tok = first[pr.length - 1].next.token;
    const d0 = performance.now();
    for (let i = 0; i < G; i++) {
        const res = await seq.controlledEvaluate([[tok, {generateNext: {token: true}}]]);
        tok = res[0].next.token;
    }
    const d1 = performance.now();
    if (r >= warmup) {
        pre.push(ids.length / ((p1 - p0) / 1e3));
        if (G > 0) dec.push(G / ((d1 - d0) / 1e3));
    }
}
const all = log.join("\n");
if (process.env.LLAMA_BENCH_LOG) (await import("node:fs")).writeFileSync(process.env.LLAMA_BENCH_LOG, all);
const out = {
    prefill_tok_s_reps: pre, decode_tok_s_reps: dec, prefill_tok_s: median(pre), decode_tok_s: median(dec),
    prompt_tokens: ids.length, gen_tokens: G, load_s: loadS,
    llama: {
        package: "node-llama-cpp", threads: context.currentThreads, context_size: context.contextSize,
        batch_size: Number(a.batch), mmap: !a["no-mmap"],
        cpu_backend: (all.match(/loaded CPU backend from \S*?(libggml-cpu-[a-z0-9_]+\.so)/) ?? [])[1] ?? null,
        flash_attention: (all.match(/flash_attn\s*=\s*(\w+)/) ?? [])[1] ?? null,
        // Weights llama.cpp copied into repacked anonymous memory (not mmap'd; cannot stream).
        repack_mib: Number((all.match(/CPU_REPACK model buffer size\s*=\s*([\d.]+) MiB/) ?? [0, 0])[1]),
        // The KV cache(s) llama.cpp allocated (glm-dsa: the MLA cache and the indexer-key cache), as it logs
        // them: "llama_kv_cache: size = X MiB (C cells, L layers, ...), K (f16): ..., V (f16): ...".
        kv_cache_lines: [...all.matchAll(/llama_kv_cache\w*: size = [^\n]*/g)].map((m) => m[0].trim()),
        kv_cache_mib: [...all.matchAll(/llama_kv_cache\w*: size =\s*([\d.]+) MiB/g)].reduce((t, m) => t + Number(m[1]), 0),
    },
};
process.stdout.write(JSON.stringify(out) + "\n");
await context.dispose();
await model.dispose();
await llama.dispose();
