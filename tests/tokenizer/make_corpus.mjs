// Writes tests/tokenizer/corpus.jsonl: the strings the tokenizer exactness
// test runs through strata and transformers.js. Deterministic (seeded PRNG),
// so the committed file regenerates byte for byte:
//   node tests/tokenizer/make_corpus.mjs > tests/tokenizer/corpus.jsonl
// Each line is {"kind": ..., "t": text} or {"kind": ..., "b64": bytes} for
// byte strings that are not valid UTF-8.

let seed = 0x5eed1234;
function rand() {
  // mulberry32
  seed = (seed + 0x6d2b79f5) | 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const ri = (n) => Math.floor(rand() * n);
const pick = (a) => a[ri(a.length)];
const cp = (n) => String.fromCodePoint(n);

const out = [];
const add = (kind, t) => out.push({ kind, t });
const addBytes = (kind, bytes) => out.push({ kind, b64: Buffer.from(bytes).toString("base64") });

// ---------------------------------------------------------------- prose
const prose = [
  "The quick brown fox jumps over the lazy dog.",
  "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness.",
  "Mixture-of-Experts models route each token to a few experts, so only a fraction of the weights is read per token.",
  "She said, \"I'll be there at 5 o'clock,\" but didn't show up until half past six.",
  "We're testing contractions: don't, won't, can't, shouldn't've, y'all, it's, they're, we've, I'm, you'll, he'd.",
  "UPPER CASE CONTRACTIONS: DON'T, I'M, YOU'LL, THEY'RE, WE'VE, HE'D, IT'S.",
  "Mixed Case: Don'T, I'M, You'Ll, They'Re, We'Ve, He'D, It'S, O'Neil, rock'n'roll.",
  "Curly quotes: \u2018single\u2019 and \u201cdouble\u201d, it\u2019s a \u201ctest\u201d\u2026",
  "Numbers like 3.14159, 2,718, 1e-9, -42, +7, 0x1F, 1_000_000 and 12:30:45 appear in text.",
  "Email me at someone@example.com or visit https://example.org/path?query=1&x=y#frag.",
  "In 1969, Apollo 11 landed on the Moon; 600 million people watched.",
  "A sentence with trailing spaces.   ",
  "   A sentence with leading spaces.",
  "Tabs\tbetween\twords\tand\ttrailing\t",
  "Line one.\nLine two.\r\nLine three.\rLine four.",
  "Paragraph one.\n\nParagraph two.\n\n\nParagraph three.",
  "Hyphenated-words, em\u2014dashes, en\u2013dashes and non\u2011breaking hyphens.",
  "Caf\u00e9, na\u00efve, r\u00e9sum\u00e9, fa\u00e7ade, co\u00f6perate, \u00c5ngstr\u00f6m, Stra\u00dfe.",
  "What?! Really?? Yes!!! ... Okay.",
  "(Parentheses), [brackets], {braces}, <angles> and \"quotes\".",
  "The price is $19.99 (\u20ac17.50, \u00a315.00, \u00a52,000).",
  "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua.",
  "To be, or not to be, that is the question: Whether 'tis nobler in the mind to suffer.",
  "#hashtag @mention $cashtag %percent ^caret &ampersand *star ~tilde `backtick` |pipe|",
  "Ellipsis\u2026 and bullet \u2022 points \u00b7 middle dots.",
  "Short.",
  "a",
  "I",
  "OK",
];
for (const p of prose) add("prose", p);
for (let i = 0; i < 180; i++) {
  const n = 1 + ri(4);
  let s = "";
  for (let k = 0; k < n; k++) s += (k ? pick([" ", "  ", "\n", "\n\n", "\t", " \n"]) : "") + pick(prose);
  add("prose", s);
}

// ---------------------------------------------------------------- code
const code = [
  '#include <cstdio>\nint main(int argc, char** argv) {\n  std::printf("hello %d\\n", argc);\n  return 0;\n}\n',
  "template <typename T>\nT clamp(T x, T lo, T hi) { return x < lo ? lo : (x > hi ? hi : x); }\n",
  "def fib(n: int) -> int:\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\nprint([fib(i) for i in range(10)])\n",
  "class Foo:\n\tdef __init__(self):\n\t\tself.x = {'a': 1, \"b\": [2, 3]}\n",
  "const add = (a, b) => a + b;\nexport default function main() {\n  console.log(`sum=${add(1, 2)}`);\n}\n",
  "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}\n",
  "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hello, \u4e16\u754c\")\n}\n",
  "public class Hello {\n    public static void main(String[] args) {\n        System.out.println(\"Hi\");\n    }\n}\n",
  "SELECT u.id, COUNT(*) AS n FROM users u JOIN orders o ON o.user_id = u.id WHERE o.total > 100 GROUP BY u.id;\n",
  "<!DOCTYPE html>\n<html>\n  <body>\n    <div class=\"x\">Hello &amp; welcome</div>\n  </body>\n</html>\n",
  '{"name": "strata", "version": "0.1.0", "tags": ["moe", "glm"], "nested": {"a": null, "b": true}}',
  "#!/usr/bin/env bash\nset -euo pipefail\nfor f in *.txt; do\n  wc -l \"$f\" | awk '{print $1}'\ndone\n",
  ".btn:hover { color: #ff00aa; margin: 0 auto; }\n@media (max-width: 600px) { .btn { display: none; } }\n",
  "main :: IO ()\nmain = mapM_ print $ takeWhile (< 100) $ map (^2) [1..]\n",
  "\\begin{equation}\n  E = mc^2 \\quad \\int_0^\\infty e^{-x^2}\\,dx = \\frac{\\sqrt{\\pi}}{2}\n\\end{equation}\n",
  "    indented(by, four);\n        eight();\n\t\ttabs();\n",
  "x=1;y=2;z=x+y*3/4-5%6**7//8<<9>>10&11|12^13~14",
  "if (a != b && c >= d || !e) { return a->b.c[d]; }",
  "// comment\n/* block\n   comment */\n# python comment\n-- sql comment\n",
  "lambda x: x if x else None  # noqa: E731",
  "arr[i][j] += mat[k][l] * 0.5f; ptr->next = nullptr;",
  "    \n    \n\n  return;\n",
  "my_var_name = some_function_call(arg_one, arg_two)\nCONSTANT_VALUE = 0xDEADBEEF\n",
  "println!(\"{}\", \"\u{1F600} emoji in code\");",
];
for (const c of code) add("code", c);
for (let i = 0; i < 150; i++) {
  const c = pick(code);
  const lines = c.split("\n");
  const a = ri(lines.length), b = a + 1 + ri(lines.length - a);
  add("code", lines.slice(a, b).join(pick(["\n", "\r\n", "\n\n"])));
}

// ---------------------------------------------------------------- scripts
const scripts = [
  "\u4eca\u5929\u5929\u6c14\u5f88\u597d\uff0c\u6211\u4eec\u53bb\u516c\u56ed\u6563\u6b65\u5427\u3002",
  "\u6df7\u5408\u4e13\u5bb6\u6a21\u578b\uff08MoE\uff09\u6bcf\u4e2a token \u53ea\u6fc0\u6d3b\u5c11\u6570\u4e13\u5bb6\u3002",
  "\u4e2d\u6587\u6807\u70b9\uff1a\u201c\u5f15\u53f7\u201d\u3001\u987f\u53f7\uff1b\u5206\u53f7\uff01\u95ee\u53f7\uff1f\u300a\u4e66\u540d\u53f7\u300b\u2026\u2026",
  "\u7e41\u9ad4\u4e2d\u6587\u8207\u7c21\u9ad4\u4e2d\u6587\u6df7\u5408\uff1a\u81fa\u7063\u3001\u53f0\u6e7e\u3002",
  "\u65e5\u672c\u8a9e\u306e\u6587\u7ae0\u3067\u3059\u3002\u30ab\u30bf\u30ab\u30ca\u3068\u3072\u3089\u304c\u306a\u3068\u6f22\u5b57\u3002",
  "\u30b3\u30f3\u30d4\u30e5\u30fc\u30bf\u30fc\u30fb\u30b5\u30a4\u30a8\u30f3\u30b9\u3092\u52c9\u5f37\u3057\u3066\u3044\u307e\u3059\u3002",
  "\uff8a\uff9d\uff76\uff78\uff76\uff80\uff76\uff85 half-width katakana \uff76\uff9e\uff77\uff9e",
  "\ud55c\uad6d\uc5b4 \ubb38\uc7a5\uc785\ub2c8\ub2e4. \uc548\ub155\ud558\uc138\uc694!",
  "\u0627\u0644\u0644\u063a\u0629 \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u062c\u0645\u064a\u0644\u0629\u060c \u0623\u0644\u064a\u0633 \u0643\u0630\u0644\u0643\u061f",
  "\u0645\u064e\u0631\u0652\u062d\u064e\u0628\u064b\u0627 \u0628\u0650\u0627\u0644\u0639\u064e\u0627\u0644\u064e\u0645\u0650 (with harakat)",
  "\u0939\u093f\u0928\u094d\u0926\u0940 \u092d\u093e\u0937\u093e \u092c\u0939\u0941\u0924 \u0938\u0941\u0902\u0926\u0930 \u0939\u0948\u0964",
  "\u0915\u093c \u0916\u093c \u0917\u093c nukta forms and \u0915\u094d\u0937 conjuncts",
  "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22\u0e44\u0e21\u0e48\u0e21\u0e35\u0e01\u0e32\u0e23\u0e40\u0e27\u0e49\u0e19\u0e27\u0e23\u0e23\u0e04\u0e23\u0e30\u0e2b\u0e27\u0e48\u0e32\u0e07\u0e04\u0e33",
  "\u0420\u0443\u0441\u0441\u043a\u0438\u0439 \u0442\u0435\u043a\u0441\u0442 \u0441 \u0431\u0443\u043a\u0432\u043e\u0439 \u0451 \u0438 \u0419.",
  "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac: \u03ba\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1 \u03ba\u03cc\u03c3\u03bc\u03b5; \u03a3\u03af\u03c3\u03c5\u03c6\u03bf\u03c2",
  "\u05e2\u05d1\u05e8\u05d9\u05ea \u05e0\u05db\u05ea\u05d1\u05ea \u05de\u05d9\u05de\u05d9\u05df \u05dc\u05e9\u05de\u05d0\u05dc.",
  "Ti\u1ebfng Vi\u1ec7t c\u00f3 nhi\u1ec1u d\u1ea5u: \u0111\u01b0\u1eddng, ng\u01b0\u1eddi, Nguy\u1ec5n.",
  "T\u00fcrk\u00e7e: \u0130stanbul, \u0131\u015f\u0131k, \u011f\u00fc\u015f.",
  "Deutsch: Gr\u00fc\u00dfe aus M\u00fcnchen, \u00c4rger, \u00d6l, \u1e9e.",
  "\u10e5\u10d0\u10e0\u10d7\u10e3\u10da\u10d8 \u0570\u0561\u0575\u0565\u0580\u0565\u0576 \u12a0\u121b\u122d\u129b \u1781\u17d2\u1798\u17c2\u179a \u0ea5\u0eb2\u0ea7 \u1019\u103c\u1014\u103a\u1019\u102c",
  "\u0ba4\u0bae\u0bbf\u0bb4\u0bcd \u0c24\u0c46\u0c32\u0c41\u0c17\u0c41 \u0c95\u0ca8\u0ccd\u0ca8\u0ca1 \u0d2e\u0d32\u0d2f\u0d3e\u0d33\u0d02 \u0a2a\u0a70\u0a1c\u0a3e\u0a2c\u0a40 \u0997\u09be\u0982\u09b2\u09be",
  "\ud835\udc07\ud835\udc1e\ud835\udc25\ud835\udc25\ud835\udc28 \ud835\udd73\ud835\udd8a\ud835\udd91 mathematical alphanumerics \u2115\u211d\u2124",
  "\u00bd \u00bc \u00b2 \u00b3 \u2075 \u2081\u2082 \u2160\u2161\u2162 \u216b \u3007 \u4e00\u4e8c\u4e09",
  "\uff26\uff55\uff4c\uff4c\uff57\uff49\uff44\uff54\uff48 \uff10\uff11\uff12\uff13\uff14\uff15 \uff01\uff1f",
  "\u0661\u0662\u0663 \u06f4\u06f5\u06f6 \u0967\u0968\u0969 \u0e51\u0e52\u0e53 Arabic-Indic, Devanagari and Thai digits",
  "\ud840\udc00\ud840\udc01 \ud869\udede CJK extension B \ud87e\udc00",
  "\uf900\uf901\uf902 CJK compatibility ideographs \u2f00\u2f01 radicals",
];
for (const s of scripts) add("scripts", s);
for (let i = 0; i < 274; i++) {
  const n = 1 + ri(3);
  let s = "";
  for (let k = 0; k < n; k++) {
    let piece = pick(scripts);
    const chars = Array.from(piece);
    const a = ri(chars.length), b = a + 1 + ri(chars.length - a);
    piece = chars.slice(a, b).join("");
    s += (k ? pick(["", " ", "\n", "\u3000"]) : "") + piece;
  }
  add("scripts", s);
}

// ---------------------------------------------------------------- emoji
const emoji = [
  "\u{1F600}", "\u{1F602}", "\u{1F44D}", "\u{1F44D}\u{1F3FD}", "\u{1F469}\u200D\u{1F4BB}",
  "\u{1F468}\u200D\u{1F469}\u200D\u{1F467}\u200D\u{1F466}", "\u{1F3F3}\uFE0F\u200D\u{1F308}", "\u{1F1FA}\u{1F1F8}",
  "\u{1F1E8}\u{1F1F3}", "\u{1F1EF}\u{1F1F5}", "1\uFE0F\u20E3", "#\uFE0F\u20E3", "\u2764\uFE0F", "\u2764",
  "\u{1F9D1}\u{1F3FF}\u200D\u{1F91D}\u200D\u{1F9D1}\u{1F3FB}", "\u{1F3F4}\u{E0067}\u{E0062}\u{E0073}\u{E0063}\u{E0074}\u{E007F}",
  "\u263A\uFE0E", "\u{1F525}", "\u{1FAE0}", "\u{1FAF6}\u{1F3FC}", "\u2705", "\u{1F680}", "\u{1F916}",
];
for (const e of emoji) add("emoji", e);
for (let i = 0; i < 110; i++) {
  const n = 1 + ri(8);
  let s = "";
  for (let k = 0; k < n; k++) s += pick(["", "", " ", "a", "\u4e2d", "!", "\n"]) + pick(emoji);
  add("emoji", s);
}

// ---------------------------------------------------------------- whitespace
const ws = [" ", "  ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2028", "\u2029", "\u200b", "\ufeff",
  "\u2003", "\u202f", "\u0085", "\u000b", "\u000c", "\u180e", "\u205f", "\u1680"];
for (const n of [1, 2, 3, 4, 5, 7, 8, 15, 16, 31, 32, 33, 63, 64, 100, 255, 256, 1000]) {
  add("whitespace", " ".repeat(n));
  add("whitespace", "x" + " ".repeat(n) + "y");
  add("whitespace", "\n".repeat(Math.min(n, 300)));
  add("whitespace", "\t".repeat(Math.min(n, 300)) + "end");
}
for (let i = 0; i < 150; i++) {
  const n = 1 + ri(10);
  let s = "";
  for (let k = 0; k < n; k++) {
    s += pick(ws).repeat(1 + ri(5));
    if (rand() < 0.6) s += pick(["word", "x", "1", "\u4e2d", ".", "'s", "\u{1F600}", "def", "!", "\u0301"]);
  }
  add("whitespace", s);
}

// ---------------------------------------------------------------- numbers
for (let len = 1; len <= 40; len++) {
  let d = "";
  for (let k = 0; k < len; k++) d += String(ri(10));
  add("numbers", d);
  add("numbers", "x" + d + "y");
  add("numbers", " " + d + " ");
}
for (let i = 0; i < 120; i++) {
  const f = pick([
    () => String(ri(1e9) - 5e8),
    () => (rand() * 1e6).toFixed(ri(8)),
    () => ri(1e6).toLocaleString("en-US"),
    () => `${ri(2100)}-${1 + ri(12)}-${1 + ri(28)}`,
    () => `${ri(256)}.${ri(256)}.${ri(256)}.${ri(256)}`,
    () => `v${ri(10)}.${ri(100)}.${ri(1000)}`,
    () => rand().toExponential(ri(10)),
    () => "0x" + ri(2 ** 31).toString(16),
    () => "\uff11\uff12\uff13" + ri(1000),
    () => "\u0661\u0662" + ri(100) + "\u0663",
    () => "\u00b2\u00b3\u00b9" + ri(100) + "\u2155",
    () => "+1 (" + ri(1000) + ") 555-" + ri(10000),
    () => ri(100) + "%",
    () => "$" + (rand() * 1000).toFixed(2),
  ]);
  add("numbers", f());
}

// ---------------------------------------------------------------- special-token look-alikes
const specials = [
  "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|user|>", "<|assistant|>", "<|system|>", "<|observation|>",
  "[gMASK]", "[sMASK]", "[MASK]", "<sop>", "<eop>", "<think>", "</think>", "<tool_call>", "</tool_call>",
  "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "<tool_response>", "</tool_response>",
  "<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>", "<\uff5cUser\uff5c>",
  "<\uff5cAssistant\uff5c>", "<\uff5ctool\u2581sep\uff5c>", "<\uff5ctool\u2581calls\u2581begin\uff5c>",
  "<|EOT|>", "<\uff5cfim\u2581hole\uff5c>", "<|vision_start|>", "<|image_pad|>", "<|fim_prefix|>", "<tool_call>",
  "<|lstrip|>", "<|rstrip|>", "<|both|>",
];
const partials = ["<|im_", "<|im_start", "|im_start|>", "<|user", "user|>", "<|", "|>", "<\uff5cbegin\u2581of",
  "\u2581of\u2581sentence\uff5c>", "<\uff5c", "\uff5c>", "[gMAS", "gMASK]", "<so", "<sop", "</think", "<think",
  "<|IM_START|>", "<|User|>", "<THINK>", "< think>", "<think >", "<|im start|>", "<<|im_start|>>", "<|<|user|>|>"];
for (const s of specials) add("special", s);
for (const s of partials) add("special", s);
for (let i = 0; i < 260; i++) {
  const n = 1 + ri(6);
  let s = "";
  for (let k = 0; k < n; k++) {
    const r = rand();
    s += r < 0.45 ? pick(specials) : r < 0.65 ? pick(partials) : pick(["Hello", " world", "\n", "  ", " ", "\u4f60\u597d",
      "x", "\t", "{\"a\": 1}", "123", " \n ", "system", "\u{1F600}"]);
  }
  add("special", s);
}
add("special", "[gMASK]<sop><|system|>You are helpful.<|user|>Hi<|assistant|><think>ok</think>Hello!");
add("special", "<|user|>\nweather?<|assistant|>\n<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call><|observation|><tool_response>sunny</tool_response>");
add("special", "<\uff5cbegin\u2581of\u2581sentence\uff5c>You are a helpful assistant.<\uff5cUser\uff5c>Hi<\uff5cAssistant\uff5c>Hello<\uff5cend\u2581of\u2581sentence\uff5c>");
add("special", "<|im_start|>system\nYou are Qwen.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello<|im_end|>");

// ---------------------------------------------------------------- combining marks, normalization
const marks = ["\u0300", "\u0301", "\u0302", "\u0303", "\u0308", "\u030a", "\u0327", "\u0328", "\u0323", "\u031b",
  "\u0345", "\u05b4", "\u064b", "\u0651", "\u093c", "\u094d", "\u0e31", "\u0e48", "\u20d7", "\u0489", "\u1ab0", "\u3099", "\u309a"];
const bases = ["a", "e", "o", "A", "u", "n", "c", "i", "\u0391", "\u03c9", "\u05d0", "\u0627", "\u0915", "\u0e01", "\u304b", "\u30cf", " ", "1", "\u4e2d"];
for (let i = 0; i < 130; i++) {
  const n = 1 + ri(6);
  let s = "";
  for (let k = 0; k < n; k++) {
    s += pick(bases);
    const m = ri(4);
    for (let j = 0; j < m; j++) s += pick(marks);
    if (rand() < 0.3) s += " ";
  }
  add("combining", s);
}
for (const s of ["e\u0301", "\u00e9", "A\u030a", "\u212b", "\u2126", "\u1e9b\u0323", "\u1100\u1161\u11a8", "\u1100\u1161",
  "\uac00\u11a8", "\u1112\u1161\u11ab\u1100\u1173\u11af", "\u0344", "\u0958", "\u0f73", "\ufb2c", "\u{1d15e}",
  "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034da\u0357\u0369\u0301l\u0313g\u0351o\u0358",
  "\u0915\u093c", "\u0915\u094d\u200d\u0937", "\u0041\u0300\u0316", "\u0041\u0316\u0300", "\u00e0\u0316", "\u1ec7", "e\u0323\u0302"]) {
  add("combining", s);
}

// ---------------------------------------------------------------- random mixes
const palette = [
  () => pick("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"),
  () => pick("0123456789"),
  () => pick(" \t\n\r"),
  () => pick("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"),
  () => pick(["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M", "'Ll", "'D"]),
  () => cp(0x4e00 + ri(0x5200)),
  () => cp(0x3040 + ri(0xc0)),
  () => cp(0xac00 + ri(0x2ba4)),
  () => cp(0x0600 + ri(0x100)),
  () => cp(0x0900 + ri(0x80)),
  () => cp(0x0e00 + ri(0x80)),
  () => cp(0x0300 + ri(0x70)),
  () => cp(0x1f300 + ri(0x300)),
  () => cp(0x2000 + ri(0x70)),
  () => cp(0x00a0 + ri(0x160)),
  () => cp(0xff00 + ri(0xf0)),
  () => cp(0x20000 + ri(0x2000)),
  () => cp(0x31350 + ri(0x80)),   // CJK extension H (Unicode 15)
  () => cp(0x2ebf0 + ri(0x20)),   // CJK extension I (Unicode 15.1)
  () => cp(0x11f00 + ri(0x5a)),   // Kawi (Unicode 15)
  () => cp(0x1e4d0 + ri(0x2a)),   // Nag Mundari (Unicode 15)
  () => cp(0x16d40 + ri(0x3a)),   // Kirat Rai (Unicode 16)
  () => cp(0x1cc00 + ri(0xf0)),   // Symbols for Legacy Computing Supplement (Unicode 16)
  () => cp(0xe000 + ri(0x100)),   // private use
  () => cp(0x0000 + ri(0x20)),    // C0 controls
  () => cp(0x0080 + ri(0x20)),    // C1 controls
  () => {
    // any scalar value outside the surrogates
    let c;
    do c = ri(0x110000); while (c >= 0xd800 && c < 0xe000);
    return cp(c);
  },
];
for (let i = 0; i < 620; i++) {
  const n = 1 + ri(i < 300 ? 12 : 60);
  const weights = palette.map(() => rand());
  let s = "";
  for (let k = 0; k < n; k++) {
    let r = rand() * weights.reduce((a, b) => a + b), j = 0;
    while (r > weights[j]) r -= weights[j++];
    s += palette[Math.min(j, palette.length - 1)]();
  }
  add("random", s);
}

// ---------------------------------------------------------------- single characters
for (let c = 0; c < 128; c++) add("single", cp(c));
for (const c of [0x80, 0x85, 0xa0, 0xad, 0xff, 0x100, 0x2028, 0x3000, 0xfeff, 0xfffd, 0xffff, 0x1f600, 0x10ffff, 0xe0001]) {
  add("single", cp(c));
}
add("single", "");

// ---------------------------------------------------------------- long strings
add("long", " ".repeat(5000));
add("long", "\n".repeat(3000) + "x");
add("long", "a".repeat(4000));
add("long", "\u4e2d".repeat(3000));
add("long", "1234567890".repeat(300));
add("long", "\u{1F600}".repeat(1000));
add("long", "ab".repeat(2000) + " " + "\u00e9".repeat(1000));
add("long", prose.join(" ").repeat(8));
add("long", code.join("\n").repeat(3));
add("long", scripts.join("\n").repeat(4));
add("long", (" \t").repeat(2000) + "end");
add("long", "'s".repeat(1500));
add("long", "e\u0301".repeat(1500));

// ---------------------------------------------------------------- invalid UTF-8
const enc = (s) => [...Buffer.from(s, "utf8")];
const bad = [
  [0x80], [0xbf], [0xc0, 0x80], [0xc1, 0xbf], [0xc2], [0xc2, 0x41], [0xe0, 0x80, 0x80], [0xe0, 0xa0], [0xe2, 0x82],
  [0xed, 0xa0, 0x80], [0xed, 0xbf, 0xbf], [0xf0, 0x80, 0x80, 0x80], [0xf0, 0x9f, 0x98], [0xf4, 0x90, 0x80, 0x80],
  [0xf5, 0x80, 0x80, 0x80], [0xf8, 0x88, 0x80, 0x80, 0x80], [0xfc, 0x84, 0x80, 0x80, 0x80, 0x80], [0xfe], [0xff],
  [0xfe, 0xff], [0xef, 0xbb, 0xbf], [0xe4, 0xb8], [0xe4, 0xb8, 0xad, 0xe4], [0xc3, 0xc3, 0xa9], [0x00],
];
for (const b of bad) addBytes("invalid", b);
for (let i = 0; i < 140; i++) {
  const parts = [];
  const n = 1 + ri(6);
  for (let k = 0; k < n; k++) {
    if (rand() < 0.5) parts.push(...pick(bad));
    else parts.push(...enc(pick(["hello", " world", "\u4e2d\u6587", "\u{1F600}", "<|im_start|>", "[gMASK]", "  ",
      "\n", "caf\u00e9", "123", "'s", "<\uff5cUser\uff5c>"])));
  }
  // Sometimes cut a valid multi-byte sequence short.
  if (rand() < 0.3 && parts.length > 1) parts.length = parts.length - 1;
  addBytes("invalid", parts);
}

for (const e of out) process.stdout.write(JSON.stringify(e) + "\n");
process.stderr.write(`${out.length} strings\n`);
