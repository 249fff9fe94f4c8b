#!/usr/bin/env bash
# `strata bench --context N` on the trained tiny model (models/glm5-strata-tiny,
# converted to an int8 container here): the JSON context line carries every
# documented field, its KV bytes per token equal the formula from config.json
# (f32 latent + rope key + indexer key per layer), the split adds up, the
# indexer's time is a part of attention's, the human output has the context
# lines, and a context past the model's max_position_embeddings is refused
# with the limit named.
# Usage: bench_context_test.sh STRATA_BINARY
set -euo pipefail
strata=$1
here=$(cd "$(dirname "$0")/../.." && pwd)
model=$here/models/glm5-strata-tiny
tmp=$(mktemp -d)
trap 'rc=$?; if [ $rc -ne 0 ]; then for f in "$tmp"/*.err; do [ -f "$f" ] && { echo "== $f"; tail -n 20 "$f"; }; done; fi; rm -rf "$tmp"' EXIT
"$strata" convert --in "$model" --out "$tmp/c" --experts int8 -q
common=(--model "$tmp/c" --pin all --gen-tokens 8 --reps 1 --warmup 0 --membw-mib 0 --disk-mib 0 --threads 2 --no-autopin -q)
"$strata" bench "${common[@]}" --context 300 --json >"$tmp/ctx.jsonl" 2>"$tmp/ctx.err"
"$strata" bench "${common[@]}" --context 300 >"$tmp/ctx.txt" 2>"$tmp/txt.err"
/usr/bin/python3 - "$tmp" "$model/config.json" <<'PY'
import json, math, sys
tmp, cfg_path = sys.argv[1], sys.argv[2]
cfg = json.load(open(cfg_path))
lines = {l["bench"]: l for l in map(json.loads, open(f"{tmp}/ctx.jsonl"))}
assert {"config", "prefill", "decode", "context"} <= set(lines), sorted(lines)
c = lines["context"]
assert c["schema"] == 1
want = {"context", "gen_tokens", "token_ids", "seed", "prefill_s", "prefill_tok_s", "decode_tok_s",
        "prefill_split_ms_per_token", "decode_split_ms_per_token", "kv_layers", "kv_index_key_layers",
        "kv_layer_bytes_per_token", "kv_bytes_per_token", "kv_bytes_at_context", "kv_session_bytes",
        "llama_cpp_kv_bytes_per_token", "llama_cpp_kv_bytes_at_context"}
assert want <= set(c), sorted(want - set(c))
N, G = 300, 8
assert c["context"] == N and c["gen_tokens"] == G and lines["config"]["prompt_tokens"] == N
for k in ("prefill_s", "prefill_tok_s", "decode_tok_s"):
    assert isinstance(c[k], (int, float)) and math.isfinite(c[k]) and c[k] > 0, (k, c[k])
assert abs(c["prefill_tok_s"] * c["prefill_s"] - N) < 1e-6 * N, c
assert c["decode_tok_s"] == lines["decode"]["tok_s"] and c["prefill_tok_s"] == lines["prefill"]["tok_s"]
for ph in ("prefill", "decode"):
    s = c[f"{ph}_split_ms_per_token"]
    assert set(s) == {"total", "attention", "indexer", "experts", "other"}, s
    assert all(v >= 0 for v in s.values()), s
    # The indexer is timed inside attention: a part of it, and at context 300 with
    # index_topk 64 it scores and selects, so it takes time in both phases.
    assert 0 < s["indexer"] < s["attention"], (ph, s)
    parts = s["attention"] + s["experts"] + s["other"]
    assert abs(parts - s["total"]) <= 1e-9 + 1e-9 * s["total"], (ph, s, parts)
    assert abs(s["total"] - lines[ph]["ms_per_token"]["total"]) <= 1e-9 + 1e-9 * s["total"], (s, lines[ph])
    assert s["attention"] > 0 and s["experts"] > 0, (ph, s)
    # The split regroups the decode / prefill line's phases.
    ms = lines[ph]["ms_per_token"]
    assert abs(s["experts"] - (ms["router"] + ms["expert_wait"] + ms["expert_matmul"])) <= 1e-9 + 1e-9 * s["total"], (s, ms)
# KV: glm_moe_dsa caches per layer and token an f32 latent (kv_lora_rank), an f32
# roped key (qk_rope_head_dim) and, every layer being an indexer-full layer here,
# an f32 indexer key (index_head_dim).
L = cfg["num_hidden_layers"]
per_layer = {"latent": 4 * cfg["kv_lora_rank"], "rope_key": 4 * cfg["qk_rope_head_dim"], "index_key": 4 * cfg["index_head_dim"]}
assert c["kv_layers"] == L and c["kv_index_key_layers"] == L, c
assert c["kv_layer_bytes_per_token"] == per_layer, c["kv_layer_bytes_per_token"]
total = L * sum(per_layer.values())
kb = c["kv_bytes_per_token"]
assert kb == {"latent": L * per_layer["latent"], "rope_key": L * per_layer["rope_key"],
              "index_key": L * per_layer["index_key"], "gqa_kv": 0, "total": total}, kb
assert c["kv_bytes_at_context"] == total * N, c
# The session holds context + decoded tokens, its indexer keys in whole blocks of 16 positions.
held = N + G
pad = (held + 15) // 16 * 16 - held
assert c["kv_session_bytes"] == total * held + L * per_layer["index_key"] * pad, c
# llama.cpp: f16 K row of kv_lora_rank + qk_rope_head_dim, no V, f16 indexer key row.
llama = L * 2 * (cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"] + cfg["index_head_dim"])
assert c["llama_cpp_kv_bytes_per_token"] == llama and c["llama_cpp_kv_bytes_at_context"] == llama * N, c
txt = open(f"{tmp}/ctx.txt").read()
assert "context 300: prefill" in txt and "context 300: decode" in txt and "attention+indexer" in txt, txt
assert txt.count("; indexer ") == 2, txt
assert f"KV per context token {total} B" in txt and f"llama.cpp f16: {llama} B/token" in txt, txt
print(f"bench --context: fields present, KV {total} B/token (llama.cpp {llama}), split adds up")
PY
# Past the model's limit: refused, naming the limit.
limit=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['max_position_embeddings'])" "$model/config.json")
if "$strata" bench "${common[@]}" --context $((limit - 4)) >"$tmp/over.out" 2>"$tmp/over.err"; then
  echo "FAIL: --context $((limit - 4)) + 8 generated tokens was accepted"; exit 1
fi
grep -q "exceeds the model's max_position_embeddings $limit" "$tmp/over.err" || { echo "FAIL: no limit in the error:"; cat "$tmp/over.err"; exit 1; }
# --context and --ids / --prompt-tokens are exclusive.
if "$strata" bench "${common[@]}" --context 16 --ids 1,2,3 >/dev/null 2>"$tmp/excl.err"; then
  echo "FAIL: --context with --ids was accepted"; exit 1
fi
echo "bench --context: over-limit and conflicting options refused"
