// transformers.js side of bench/tokenizer/run.sh: encodes every line of a
// JSON-lines file of strings REPEAT times (single thread) and prints
// {"bytes", "seconds", "cpu_seconds", "mb_per_s"} like `strata tokenize --time`.
// Usage: node bench/tokenizer/bench.mjs TOKENIZER_DIR INPUT.jsonl REPEAT
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const require = createRequire(path.resolve("tests/tokenizer/package.json"));
const { TokenizerLoader } = require("@lenml/tokenizers");
const [dir, input, repeatArg] = process.argv.slice(2);
const repeat = Number(repeatArg ?? 1);
const read = (f) => JSON.parse(fs.readFileSync(path.join(dir, f), "utf8"));
const tok = TokenizerLoader.fromPreTrained({
  tokenizerJSON: read("tokenizer.json"),
  tokenizerConfig: fs.existsSync(path.join(dir, "tokenizer_config.json")) ? read("tokenizer_config.json") : {},
});
const texts = fs.readFileSync(input, "utf8").split("\n").filter((l) => l).map((l) => JSON.parse(l));
const bytes = texts.reduce((n, t) => n + Buffer.byteLength(t, "utf8"), 0);
let sink = 0;
const c0 = process.cpuUsage();
const t0 = process.hrtime.bigint();
for (let r = 0; r < repeat; r++) for (const t of texts) sink += tok.encode(t, { add_special_tokens: false }).length;
const secs = Number(process.hrtime.bigint() - t0) / 1e9;
const cpu = process.cpuUsage(c0);
const total = bytes * repeat;
// cpu_seconds counts every thread of the process (V8's GC helpers too).
console.error(JSON.stringify({ bytes: total, seconds: secs, cpu_seconds: (cpu.user + cpu.system) / 1e6,
  mb_per_s: total / 1e6 / secs, tokens: sink }));
