#!/usr/bin/env node
// Runs token ids through llama.cpp (npm node-llama-cpp, pinned in package.json)
// for the strata cross-check: teacher-forced top-1 at every position, and a
// greedy continuation.
//
//   node run.mjs --gguf model.gguf --ids 1,2,3 [-n 20] [--prompt 1,2] [--json]
//
// --ids       token ids for teacher forcing: top1[i] is llama.cpp's argmax
//             after ids[0..i]
// --prompt    prompt for the greedy continuation (default: --ids)
// -n          greedy tokens to generate (default 20; 0 skips greedy)
// --threads   CPU threads (default: all)
// --kv-type   KV cache type: f16 (llama.cpp's default) or f32
// --flash-attention   on | off | auto (default auto)
// --json      print one JSON object:
//             {"top1": [...], "top1_margin": [...], "greedy": [...],
//              "greedy_margin": [...], "llama": {...}}
//             where a margin is ln p(top1) - ln p(top2), i.e. the logit gap.
//
// Greedy decoding is done here (argmax, no EOS stop, no penalties), so it is
// comparable with a reference that generates a fixed number of tokens.
//
// AMX: on CPUs with AMX the prebuilt package loads its "sapphirerapids" CPU
// backend, whose AMX buffer type takes the 3-D attn_k_b/attn_v_b tensors and
// then aborts glm-dsa at context creation
// (GGML_ASSERT(*cur_backend_id != -1) in ggml-backend.cpp). On such a CPU this
// script renames that one library in node_modules (".disabled-by-llama-check")
// so ggml picks its AVX-512 build; set LLAMA_CHECK_ALLOW_AMX=1 to skip that.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {createRequire} from "node:module";
import {fileURLToPath} from "node:url";
import {parseArgs} from "node:util";
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

function usage(msg) {
    if (msg) process.stderr.write(`run.mjs: ${msg}\n`);
    process.stderr.write("usage: node run.mjs --gguf FILE --ids 1,2,3 [-n 20] [--prompt 1,2] [--threads N] " +
        "[--kv-type f16|f32] [--flash-attention on|off|auto] [--json] [--verbose]\n");
    process.exit(2);
}

function parseIds(s, what) {
    if (s == null || s.trim() === "") usage(`${what} is empty`);
    return s.split(",").map((x) => {
        const t = x.trim();
        if (!/^\d+$/.test(t)) usage(`${what}: "${t}" is not a token id`);
        return Number(t);
    });
}

let args;
try {
    args = parseArgs({
        options: {
            gguf: {type: "string"},
            ids: {type: "string"},
            prompt: {type: "string"},
            n: {type: "string", short: "n", default: "20"},
            threads: {type: "string"},
            "kv-type": {type: "string", default: "f16"},
            "flash-attention": {type: "string", default: "auto"},
            json: {type: "boolean", default: false},
            verbose: {type: "boolean", default: false},
            help: {type: "boolean", short: "h", default: false},
        },
        strict: true,
    }).values;
} catch (e) {
    usage(e.message);
}
if (args.help) usage();
if (!args.gguf) usage("--gguf is required");
const ids = parseIds(args.ids, "--ids");
const prompt = args.prompt != null ? parseIds(args.prompt, "--prompt") : ids;
const nNew = Number(args.n);
if (!Number.isInteger(nNew) || nNew < 0) usage("-n must be a non-negative integer");
const kvType = args["kv-type"].toUpperCase();
if (kvType !== "F16" && kvType !== "F32") usage("--kv-type must be f16 or f32");
const fa = {on: true, off: false, auto: "auto"}[args["flash-attention"]];
if (fa === undefined) usage("--flash-attention must be on, off or auto");

function cpuHasAmx() {
    try {
        return /\bamx_(tile|bf16|int8)\b/.test(fs.readFileSync("/proc/cpuinfo", "utf8"));
    } catch {
        return false;
    }
}

// Returns a note when the AMX backend library was set aside.
function avoidAmxBackend() {
    if (process.platform !== "linux" || process.arch !== "x64" || process.env.LLAMA_CHECK_ALLOW_AMX === "1" || !cpuHasAmx())
        return null;
    let binsDir;
    try {
        // Resolved the way node-llama-cpp itself finds its prebuilt binaries.
        const require = createRequire(fileURLToPath(import.meta.resolve("node-llama-cpp")));
        const entry = require.resolve("@node-llama-cpp/linux-x64");
        binsDir = path.join(path.dirname(entry), "..", "bins", "linux-x64");
    } catch (e) {
        process.stderr.write(`run.mjs: warning: CPU has AMX but the prebuilt binaries were not found (${e.message})\n`);
        return null;
    }
    const lib = path.join(binsDir, "libggml-cpu-sapphirerapids.so");
    if (!fs.existsSync(lib)) return null;
    fs.renameSync(lib, lib + ".disabled-by-llama-check");
    return `renamed ${lib} (AMX backend aborts on glm-dsa)`;
}

const amxNote = avoidAmxBackend();
if (amxNote != null) process.stderr.write(`run.mjs: ${amxNote}\n`);

const logLines = [];
const llama = await getLlama({
    gpu: false,
    build: "never",
    logLevel: LlamaLogLevel.debug,  // captured (the CPU backend is reported); printed only with --verbose
    logger: (level, message) => {
        logLines.push(message);
        if (args.verbose || level === LlamaLogLevel.error || level === LlamaLogLevel.fatal)
            process.stderr.write(message.endsWith("\n") ? message : message + "\n");
    },
});

const model = await llama.loadModel({modelPath: args.gguf, gpuLayers: 0, useMmap: true});
const nVocab = model.fileInfo.tensorInfo?.find((t) => t.name === "token_embd.weight")?.dimensions?.[1];
for (const t of [...ids, ...prompt]) {
    if (nVocab != null && t >= Number(nVocab)) usage(`token id ${t} is outside the model's vocabulary (${nVocab})`);
}
const contextSize = Math.max(ids.length, prompt.length + nNew) + 16;
const context = await model.createContext({
    contextSize,
    batchSize: contextSize,
    sequences: 1,
    threads: args.threads != null ? Number(args.threads) : os.availableParallelism(),
    flashAttention: fa,
    experimentalKvCacheKeyType: kvType,
    experimentalKvCacheValueType: kvType,
});
const seq = context.getSequence();

// ln p1 - ln p2 from node-llama-cpp's probability map (sorted, highest first).
function top2(probabilities) {
    const it = probabilities.entries();
    const first = it.next().value;
    const second = it.next().value;
    const margin = second == null ? null : Math.log(first[1]) - Math.log(second[1]);
    return {token: first[0], margin};
}

const want = {generateNext: {token: true, probabilities: true}};

// Teacher forcing: logits at every position.
const tf = await seq.controlledEvaluate(ids.map((t) => [t, want]));
const top1 = [];
const top1Margin = [];
for (let i = 0; i < ids.length; i++) {
    const out = tf[i];
    if (out?.next?.probabilities == null) throw new Error(`no logits returned for position ${i}`);
    const {token, margin} = top2(out.next.probabilities);
    if (out.next.token != null && out.next.token !== token && margin !== 0)
        throw new Error(`position ${i}: sampler picked ${out.next.token} but the top probability is token ${token}`);
    top1.push(token);
    top1Margin.push(margin);
}

// Greedy continuation from a fresh sequence state.
const greedy = [];
const greedyMargin = [];
if (nNew > 0) {
    await seq.clearHistory();
    let res = await seq.controlledEvaluate(prompt.map((t, i) => (i === prompt.length - 1 ? [t, want] : t)));
    let last = res[prompt.length - 1];
    for (let step = 0; step < nNew; step++) {
        const {token, margin} = top2(last.next.probabilities);
        greedy.push(token);
        greedyMargin.push(margin);
        if (step === nNew - 1) break;
        res = await seq.controlledEvaluate([[token, want]]);
        last = res[0];
    }
}

const result = {
    top1,
    top1_margin: top1Margin,
    greedy,
    greedy_margin: greedyMargin,
    llama: {
        package: "node-llama-cpp",
        threads: context.currentThreads,
        kv_type: kvType.toLowerCase(),
        flash_attention: (() => {
            const m = [...logLines.join("\n").matchAll(/Flash Attention (enabled|disabled)/g)];
            return m.length ? m[m.length - 1][1] === "enabled" : context.flashAttention;
        })(),
        context_size: context.contextSize,
        cpu_backend: (logLines.join("\n").match(/loaded CPU backend from \S*?(libggml-cpu-[a-z0-9_]+\.so)/) ?? [])[1] ?? null,
        cpu_has_amx: cpuHasAmx(),
    },
};

if (args.json) {
    process.stdout.write(JSON.stringify(result) + "\n");
} else {
    process.stdout.write(`top1   (${top1.length}): ${top1.join(" ")}\n`);
    process.stdout.write(`greedy (${greedy.length}): ${greedy.join(" ")}\n`);
    process.stdout.write(`min top1 margin ${Math.min(...top1Margin.filter((m) => m != null)).toFixed(5)}\n`);
}

await context.dispose();
await model.dispose();
await llama.dispose();
