#!/usr/bin/env bash
# Cross-checks a fixture checkpoint between its PyTorch reference
# (reference.json) and llama.cpp: exports the checkpoint with
# `strata export-gguf`, runs the GGUF through llama.cpp (run.mjs, npm
# node-llama-cpp) and compares teacher-forced top-1 at every position and the
# greedy continuation (compare.mjs). See docs/llama-cpp-crosscheck.md.
#
#   tools/llama_check/crosscheck.sh FIXTURE_DIR
#
# Environment:
#   STRATA      strata binary (default: build/strata at the repository root)
#   GGUF_TYPE   f32 (default), f16 or bf16: storage type of the exported matrices
#   KV_TYPE     f32 (default) or f16 (llama.cpp's own default): KV cache type
#   FLASH_ATTN  off (default), on or auto (llama.cpp's default, which is on
#               for the CPU): off gives the tightest comparison, see the doc
#   TOL         near-tie tolerance in logits (default 0.05), see compare.mjs
#   THREADS     llama.cpp threads (default: all CPUs)
#   KEEP_DIR    keep the GGUF and JSON outputs in this directory
#
# Exit status: 0 agreement (differences only at near-ties), 1 disagreement,
# 2 setup error (missing build, fixture or npm install).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

if [[ $# -ne 1 ]]; then
  echo "usage: $0 FIXTURE_DIR" >&2
  exit 2
fi
[[ -d "$1" ]] || { echo "crosscheck: $1 is not a directory" >&2; exit 2; }
fixture=$(cd "$1" && pwd)
strata=${STRATA:-$root/build/strata}
gguf_type=${GGUF_TYPE:-f32}
kv_type=${KV_TYPE:-f32}
flash=${FLASH_ATTN:-off}
tol=${TOL:-0.05}

[[ -f "$fixture/reference.json" ]] || { echo "crosscheck: $fixture/reference.json not found" >&2; exit 2; }
[[ -x "$strata" ]] || { echo "crosscheck: $strata not found; build it first (cmake -S . -B build -G Ninja && ninja -C build)" >&2; exit 2; }
command -v node >/dev/null || { echo "crosscheck: node is required" >&2; exit 2; }

if [[ ! -d "$here/node_modules/node-llama-cpp" ]]; then
  echo "crosscheck: installing node-llama-cpp (npm ci) in $here" >&2
  (cd "$here" && npm ci --no-audit --no-fund >&2) || { echo "crosscheck: npm ci failed" >&2; exit 2; }
fi

if [[ -n "${KEEP_DIR:-}" ]]; then
  work=$KEEP_DIR
  mkdir -p "$work"
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/llama_check.XXXXXX")
  trap 'rm -rf "$work"' EXIT
fi
name=$(basename "$fixture")
gguf="$work/$name.$gguf_type.gguf"

"$strata" export-gguf --model "$fixture" --out "$gguf" --type "$gguf_type"

# Token ids, greedy prompt and length from the reference.
read -r ids prompt n_new < <(node -e '
  const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
  if (!r.greedy || !Array.isArray(r.greedy.prompt) || !Array.isArray(r.greedy.ids))
    throw new Error(`${process.argv[1]}: no "greedy": {"prompt", "ids"}`);
  console.log(r.ids.join(","), r.greedy.prompt.join(","), r.greedy.ids.length);
' "$fixture/reference.json")

threads_arg=()
[[ -n "${THREADS:-}" ]] && threads_arg=(--threads "$THREADS")
node "$here/run.mjs" --gguf "$gguf" --ids "$ids" --prompt "$prompt" -n "$n_new" \
  --kv-type "$kv_type" --flash-attention "$flash" "${threads_arg[@]}" --json > "$work/llama.json" || {
  echo "crosscheck: llama.cpp run failed (see the messages above)" >&2
  exit 1
}

echo "fixture $name: export $gguf_type, llama.cpp KV $kv_type," \
  "$(node -e 'const j=JSON.parse(require("fs").readFileSync(process.argv[1],"utf8")).llama; console.log(`flash attention ${j.flash_attention ? "on" : "off"}, ${j.threads} threads, CPU backend ${j.cpu_backend}`)' "$work/llama.json")"
node "$here/compare.mjs" "$fixture/reference.json" "$work/llama.json" --tol "$tol"
