#!/usr/bin/env bash
# Runs the llama.cpp cross-check over several fixtures and configurations and
# prints a Markdown table (the one in docs/llama-cpp-crosscheck.md).
#
#   tools/llama_check/matrix.sh [FIXTURE_DIR ...]    (default: tests/fixtures/*)
#
# Environment: TYPES (default "f32 f16 bf16"), KV_TYPES (default "f32 f16"),
# FLASH (default "off on"), TOL, STRATA, THREADS as for crosscheck.sh.
# Exit status: 1 when any configuration has an unexplained disagreement.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
strata=${STRATA:-$root/build/strata}
tol=${TOL:-0.05}
fixtures=("$@")
[[ ${#fixtures[@]} -gt 0 ]] || fixtures=("$root"/tests/fixtures/*/)
[[ -x "$strata" ]] || { echo "matrix: $strata not found" >&2; exit 2; }
[[ -d "$here/node_modules/node-llama-cpp" ]] || (cd "$here" && npm ci --no-audit --no-fund >&2)

work=$(mktemp -d "${TMPDIR:-/tmp}/llama_matrix.XXXXXX")
trap 'rm -rf "$work"' EXIT
threads_arg=()
[[ -n "${THREADS:-}" ]] && threads_arg=(--threads "$THREADS")

status=0
echo "| fixture | export | KV cache | flash attn | top-1 agree | greedy match | max margin diff | result |"
echo "|---|---|---|---|---|---|---|---|"
for fx in "${fixtures[@]}"; do
  fx=${fx%/}
  name=$(basename "$fx")
  read -r ids prompt n_new < <(node -e '
    const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    console.log(r.ids.join(","), r.greedy.prompt.join(","), r.greedy.ids.length);
  ' "$fx/reference.json")
  for type in ${TYPES:-f32 f16 bf16}; do
    gguf="$work/$name.$type.gguf"
    "$strata" export-gguf -q --model "$fx" --out "$gguf" --type "$type"
    for kv in ${KV_TYPES:-f32 f16}; do
      for fa in ${FLASH:-off on}; do
        if ! node "$here/run.mjs" --gguf "$gguf" --ids "$ids" --prompt "$prompt" -n "$n_new" --kv-type "$kv" \
            --flash-attention "$fa" "${threads_arg[@]}" --json > "$work/llama.json" 2> "$work/err.txt"; then
          echo "| $name | $type | $kv | $fa | llama.cpp failed: $(tail -1 "$work/err.txt") | | | FAIL |"
          status=1
          continue
        fi
        rc=0
        node "$here/compare.mjs" "$fx/reference.json" "$work/llama.json" --tol "$tol" --json > "$work/cmp.json" || rc=$?
        [[ $rc -eq 0 ]] || status=1
        node -e '
          const c = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
          const [name, type, kv, fa] = process.argv.slice(2);
          const nt = c.top1.near_tie_differences.length, un = c.top1.unexplained_differences.length;
          let top1 = `${c.top1.agree}/${c.top1.of}`;
          if (nt || un) top1 += ` (${[...c.top1.near_tie_differences, ...c.top1.unexplained_differences].map((d) =>
            `pos ${d.pos}: ref margin ${d.ref_margin.toFixed(3)}, llama ${d.llama_margin.toFixed(3)}`).join("; ")})`;
          let g = `${c.greedy.match}/${c.greedy.length}`;
          if (c.greedy.first_difference) { const d = c.greedy.first_difference;
            g += ` (step ${d.step}: ref margin ${d.ref_margin.toFixed(3)}, llama ${d.llama_margin.toFixed(3)})`; }
          console.log(`| ${name} | ${type} | ${kv} | ${fa} | ${top1} | ${g} | ` +
            `${c.top1.max_margin_diff_where_agreeing.toExponential(1)} | ${c.ok ? "pass" : "FAIL"} |`);
        ' "$work/cmp.json" "$name" "$type" "$kv" "$fa"
      done
    done
  done
done
exit $status
