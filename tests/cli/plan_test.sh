#!/usr/bin/env bash
# `strata plan` on a fixture's config.json (no weights read): the JSON's
# sizes match the converter (int4 pool below int8), predictions are sane and
# rise with RAM, and the human table and the recommendation print.
# Usage: plan_test.sh STRATA_BINARY
set -euo pipefail
strata=$1
here=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cfg=$here/tests/fixtures/glm5-tiny-bf16/config.json
"$strata" plan --model "$cfg" --disk-gbps 2 --checksum-gbps 0 --mem-gbps 20 --ram 0.05 --headroom 0 --trace-tokens 200 \
  --json >"$tmp/plan.json"
/usr/bin/python3 - "$tmp/plan.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
assert p["schema"] == 1 and p["container"] is False
s4, s8 = p["sizes"]["int4"], p["sizes"]["int8"]
for s in (s4, s8):
    assert set(s) == {"dense_bytes", "expert_pool_bytes", "container_bytes", "expert_blob_bytes", "expert_read_bytes",
                      "dense_bytes_per_token", "expert_bytes_per_token"}, s
    assert s["container_bytes"] > s["dense_bytes"] + s["expert_pool_bytes"] - 1
    assert s["expert_read_bytes"] % 4096 == 0 and s["expert_read_bytes"] >= s["expert_blob_bytes"]
assert s4["expert_pool_bytes"] < s8["expert_pool_bytes"] and s4["dense_bytes"] == s8["dense_bytes"]
assert p["machine"]["disk_gb_s"] == 2 and p["machine"]["mem_gb_s"] == 20
for prec in ("int4", "int8"):
    rows = [r for r in p["rows"] if r["experts"] == prec and r["fits"]]
    assert len(rows) >= 3, rows
    for a, b in zip(rows, rows[1:]):
        assert a["ram_bytes"] < b["ram_bytes"] and a["tok_s"] <= b["tok_s"] + 1e-9 and a["hit_rate"] <= b["hit_rate"] + 1e-9
    for r in rows:
        assert 0 <= r["hit_rate"] <= 1 and r["tok_s"] > 0
        t = r["compute_ms"] + r["disk_ms"]
        assert abs(1000 / t - r["tok_s"]) < 1e-6 * r["tok_s"], r
    assert rows[-1]["hit_rate"] == 1.0 or rows[-1]["expert_budget_bytes"] < (s4 if prec == "int4" else s8)["expert_pool_bytes"]
rec = p["recommendation"]
assert rec["experts"] in ("int4", "int8") and rec["tok_s"] > 0
PY
# doctor's queue-depth curve given by hand: the same hit rates, and every
# row's disk time at or below the flat QD1 rate's (the fixture's small experts
# read several at once: a request of m misses at queue depth min(m, 16)).
"$strata" plan --model "$cfg" --disk-gbps 2 --disk-qd4-gbps 4 --disk-qd16-gbps 8 --checksum-gbps 0 --mem-gbps 20 \
  --ram 0.05 --headroom 0 --trace-tokens 200 --json >"$tmp/plan_qd.json"
/usr/bin/python3 - "$tmp/plan.json" "$tmp/plan_qd.json" <<'PY'
import json, sys
flat, qd = (json.load(open(f)) for f in sys.argv[1:3])
assert [(r["queue_depth"], r["gb_s"]) for r in qd["machine"]["disk_rates"]] == [(1, 2), (4, 4), (16, 8)], qd["machine"]
assert [(r["queue_depth"], r["gb_s"]) for r in flat["machine"]["disk_rates"]] == [(1, 2)], flat["machine"]
faster = 0
for a, b in zip(flat["rows"], qd["rows"]):
    assert a["hit_rate"] == b["hit_rate"] and b["disk_ms"] <= a["disk_ms"] * (1 + 1e-12), (a, b)
    assert a["disk_ms"] == 0 or 2 - 1e-9 <= a["disk_gb_s"] <= 2 + 1e-9, a
    assert b["disk_ms"] == 0 or 2 - 1e-9 <= b["disk_gb_s"] <= 8 + 1e-9, b
    faster += b["disk_ms"] < a["disk_ms"] * 0.99
assert faster > 0, "no row read faster at depth"
PY
# The store's checksum per miss: given by hand, every row's disk time grows by
# its read bytes at that rate (the same hit rates); measured when not given.
"$strata" plan --model "$cfg" --disk-gbps 2 --checksum-gbps 4 --mem-gbps 20 --ram 0.05 --headroom 0 --trace-tokens 200 \
  --json >"$tmp/plan_ck.json"
"$strata" plan --model "$cfg" --disk-gbps 2 --mem-gbps 20 --ram 0.05 --headroom 0 --trace-tokens 200 \
  --json >"$tmp/plan_ckm.json"
/usr/bin/python3 - "$tmp/plan.json" "$tmp/plan_ck.json" "$tmp/plan_ckm.json" <<'PY'
import json, sys
flat, ck, ckm = (json.load(open(f)) for f in sys.argv[1:4])
assert flat["machine"]["checksum"]["gb_s"] == 0 and ck["machine"]["checksum"]["gb_s"] == 4, ck["machine"]["checksum"]
slower = 0
for a, b in zip(flat["rows"], ck["rows"]):
    assert a["hit_rate"] == b["hit_rate"] and a["checksum_ms"] == 0, (a, b)
    want = b["disk_bytes_per_token"] / 4e6
    assert abs(b["checksum_ms"] - want) <= 1e-9 * max(want, 1e-9), b
    assert abs(b["disk_ms"] - (a["disk_ms"] + want)) <= 1e-9 * max(b["disk_ms"], 1e-9), (a, b)
    slower += want > 0
assert slower > 0, "no row with misses"
m = ckm["machine"]["checksum"]
assert m["gb_s"] > 0 and m["us_per_expert"] > 0 and m["source"].startswith("measured"), m
assert m["expert_bytes"] == ckm["sizes"]["int4"]["expert_read_bytes"] and m["working_set_bytes"] >= m["expert_bytes"], m
PY
# The fixed compute term given by hand: 44 projections in the fixture's
# resident part (a dense layer: q_a, q_b, kv_a, o, the indexer's 3, the MLP's
# 3; each of 3 MoE layers: 7 + router + shared expert's 3; lm_head) plus 3 per
# routed expert (top-2, 3 MoE layers), those over the pool's threshold a
# region each too; MLA's 3 regions and the indexer's per layer; attention's
# multiply-adds at 100 keys (DSA caps the keys at index_topk).
"$strata" plan --model "$cfg" --disk-gbps 2 --checksum-gbps 0 --mem-gbps 20 --ram 0.05 --headroom 0 --trace-tokens 200 \
  --matmul-call-us 10 --matmul-madd-ns 0.5 --region-us 2 --dot-gmadds 0.5 --context 100 --json >"$tmp/plan_c.json"
/usr/bin/python3 - "$tmp/plan_c.json" "$tmp/plan.json" "$cfg" <<'PY'
import json, sys
p, flat, c = (json.load(open(f)) for f in sys.argv[1:4])
w = p["work_per_token"]
assert w["dense_matmuls"] == 44 and w["expert_matmuls"] == 18 and w["regions"] == 4 * 4, w
# On the pool: the matrices over 32768 multiply-adds (kernels/matmul.h), by shape from the config.
h, qa, kvl, H = c["hidden_size"], c["q_lora_rank"], c["kv_lora_rank"], c["num_attention_heads"]
shapes = [(qa, h), (H * (c["qk_nope_head_dim"] + c["qk_rope_head_dim"]), qa), (kvl + c["qk_rope_head_dim"], h),
          (h, H * c["v_head_dim"]), (c["index_n_heads"] * c["index_head_dim"], qa), (c["index_head_dim"], h),
          (c["index_n_heads"], h)]
big = lambda rc: rc[0] * rc[1] > 32768
per_layer = sum(map(big, shapes))
dense_mlp = 3 * big((c["intermediate_size"], h))
shared = 3 * big((c["moe_intermediate_size"] * c["n_shared_experts"], h)) + big((c["n_routed_experts"], h))
want = 4 * per_layer + dense_mlp + 3 * shared + big((c["vocab_size"], h))
assert w["dense_matmuls_on_pool"] == want, (w, want)
ex = 18 if big((c["moe_intermediate_size"], h)) else 0
assert w["expert_matmuls_on_pool"] == ex, w
pool = want + ex
caller = w["dense_caller_madds"] + (0 if ex else 6 * 3 * c["moe_intermediate_size"] * h)
assert 0 < w["dense_caller_madds"] < 44 * 32768, w
H, kvl, keys = c["num_attention_heads"], c["kv_lora_rank"], min(100, c["index_topk"])
madds = 4 * (H * keys * (2 * kvl + c["qk_rope_head_dim"]) + H * (c["qk_nope_head_dim"] + c["v_head_dim"]) * kvl
             + c["index_n_heads"] * c["index_head_dim"] * 100)
assert abs(w["attention_madds"] - madds) < 1e-6 * madds, (w, madds)
m = p["machine"]["compute"]
assert (m["matmul_call_us"], m["matmul_madd_ns"], m["region_us"], m["dot_gmadd_s"], m["source"]) == (10, 0.5, 2, 0.5, "given"), m
assert p["context"] == 100
for r, f in zip(p["rows"], flat["rows"]):
    assert abs(r["fixed_ms"] - (62 * 10 + caller * 0.5e-3 + (pool + 16) * 2) / 1000) < 1e-9, (r, pool, caller)
    assert abs(r["attention_ms"] - madds / 0.5e9 * 1e3) < 1e-9, r
    assert abs(r["compute_ms"] - (r["weights_ms"] + r["fixed_ms"] + r["attention_ms"])) < 1e-9, r
    # the calling thread's projections leave the bandwidth term when they have a per-multiply-add cost
    assert r["weights_ms"] < f["weights_ms"] + 1e-12 and r["disk_ms"] == f["disk_ms"], (r, f)
# measured (the first run): every term positive
mc = flat["machine"]["compute"]
assert mc["matmul_call_us"] + mc["matmul_madd_ns"] > 0 and mc["region_us"] > 0 and mc["dot_gmadd_s"] > 0 and mc["source"].startswith("measured"), mc
assert all(r["fixed_ms"] > 0 and r["attention_ms"] > 0 for r in flat["rows"] if r["fits"])
PY
set +e
"$strata" plan --model "$cfg" --disk-qd4-gbps 4 --mem-gbps 20 >/dev/null 2>"$tmp/err.txt"; rc=$?
set -e
[ "$rc" = 2 ] || { echo "--disk-qd4-gbps without --disk-gbps: exit $rc"; cat "$tmp/err.txt"; exit 1; }
"$strata" plan --model "$(dirname "$cfg")" --disk-gbps 2 --mem-gbps 20 --ram 0.05 --headroom 0 --experts int4 --trace-tokens 100 >"$tmp/plan.txt"
grep -q "recommended here: convert with --experts int4" "$tmp/plan.txt"
grep -q "this machine" "$tmp/plan.txt"
if "$strata" plan --model "$tmp" --disk-gbps 1 --mem-gbps 1 >/dev/null 2>"$tmp/err.txt"; then echo "plan accepted a dir without config.json"; exit 1; fi
grep -q "no config.json" "$tmp/err.txt"
# --trace: a recorded trace (here written by hand: 3 MoE layers of the
# fixture's shape, every token the same experts) replaces the independent
# draws; every counted request after the first token hits at any budget.
cfgj=$(/usr/bin/python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); print(c["n_routed_experts"], c["num_experts_per_tok"])' "$cfg")
read -r E K <<<"$cfgj"
/usr/bin/python3 - "$tmp/t.jsonl" "$E" "$K" <<'PY'
import json, sys
path, E, K = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = [list(range(K))] * 3
with open(path, "w") as f:
    f.write(json.dumps({"format": "strata-routing-trace", "version": 1, "model": "hand", "fingerprint": "0" * 16,
                        "layers": [1, 2, 3], "experts": E, "top_k": K, "tokens": 20}) + "\n")
    for t in range(20):
        f.write(json.dumps({"t": t, "chosen": rows, "predicted": [[]] + rows[1:]}) + "\n")
PY
"$strata" plan --model "$cfg" --disk-gbps 2 --mem-gbps 20 --ram 0.05 --headroom 0 --trace "$tmp/t.jsonl" --trace-warmup 1 \
  --json >"$tmp/plan_t.json"
/usr/bin/python3 - "$tmp/plan_t.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
assert p["trace_kind"] == "recorded" and "recorded from hand" in p["trace"], p["trace"]
rows = [r for r in p["rows"] if r["fits"]]
assert rows and all(r["hit_rate"] == 1.0 for r in rows if r["lru_slots_per_layer"] >= p["model_shape"]["top_k"]), rows
PY
# A malformed trace (an expert named twice by one token) is refused naming
# the file and the field; --trace with --usage is a usage error (exit 2).
sed -i '3s/"chosen": \[\[0, 1/"chosen": [[0, 0/' "$tmp/t.jsonl"
set +e
"$strata" plan --model "$cfg" --disk-gbps 2 --mem-gbps 20 --trace "$tmp/t.jsonl" >/dev/null 2>"$tmp/err.txt"; rc=$?
"$strata" plan --model "$cfg" --disk-gbps 2 --mem-gbps 20 --trace "$tmp/t.jsonl" --usage "$cfg" >/dev/null 2>"$tmp/err2.txt"; rc2=$?
set -e
[ "$rc" = 1 ] || { echo "malformed trace: exit $rc"; cat "$tmp/err.txt"; exit 1; }
grep -q "$tmp/t.jsonl: token 1: \"chosen\"\[0\] names expert 0 twice" "$tmp/err.txt" || { cat "$tmp/err.txt"; exit 1; }
[ "$rc2" = 2 ] || { echo "--trace with --usage: exit $rc2"; cat "$tmp/err2.txt"; exit 1; }
# --calibrate: the compute per token measured by decoding the container
# (the container's precision's rows use it; the others stay modelled);
# --compute-ms gives it for every row; a checkpoint is refused by name.
"$strata" convert --in "$here/tests/fixtures/glm5-tiny-bf16" --out "$tmp/c8" --experts int8 -q >/dev/null
"$strata" plan --model "$tmp/c8" --disk-gbps 2 --mem-gbps 20 --ram 0.05 --headroom 0 --trace-tokens 50 --calibrate 3 \
  --json >"$tmp/plan_c.json" 2>"$tmp/err.txt" || { cat "$tmp/err.txt"; exit 1; }
"$strata" plan --model "$tmp/c8" --disk-gbps 2 --mem-gbps 20 --ram 0.05 --headroom 0 --trace-tokens 50 --compute-ms 7.5 \
  --json >"$tmp/plan_g.json"
/usr/bin/python3 - "$tmp/plan_c.json" "$tmp/plan_g.json" <<'PY'
import json, sys
p, g = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
cal = p["machine"]["calibration"]
assert cal["tokens"] == 3 and cal["experts"] == "int8" and cal["compute_ms"] > 0 and cal["context"] == 32 + 2 + 3, cal
rows = [r for r in p["rows"] if r["fits"]]
for r in rows:
    if r["experts"] == "int8":
        assert abs(r["compute_ms"] - cal["compute_ms"]) <= 1e-9 * cal["compute_ms"], (r, cal)
    else:  # modelled: the sum of its terms
        assert abs(r["compute_ms"] - (r["weights_ms"] + r["fixed_ms"] + r["attention_ms"])) <= 1e-9 * r["compute_ms"], r
assert g["machine"]["calibration"] is None
assert all(r["compute_ms"] == 7.5 for r in g["rows"] if r["fits"]), g["rows"]
PY
set +e
"$strata" plan --model "$here/tests/fixtures/glm5-tiny-bf16" --disk-gbps 2 --mem-gbps 20 --calibrate 2 >/dev/null 2>"$tmp/err.txt"; rc=$?
set -e
[ "$rc" = 1 ] || { echo "--calibrate on a checkpoint: exit $rc"; cat "$tmp/err.txt"; exit 1; }
grep -q "is not a strata container" "$tmp/err.txt" || { cat "$tmp/err.txt"; exit 1; }
# Sizes follow the conversion: a checkpoint is sized as `strata convert`
# writes it by default (bf16 scales), --scales f32 sizes f32 scales (larger);
# a container is sized with its own options (here bf16 scales and int4
# attention), its own precision's container bytes exactly those on disk.
"$strata" plan --model "$cfg" --disk-gbps 2 --checksum-gbps 0 --mem-gbps 20 --ram 0.05 --headroom 0 --trace-tokens 50 \
  --scales f32 --json >"$tmp/plan_f.json"
cp "$tmp/plan.json" "$tmp/plan_b.json"
"$strata" convert --in "$here/tests/fixtures/glm5-tiny-bf16" --out "$tmp/cb" --experts int4 --scales bf16 --attn-bits 4 \
  -q >/dev/null
"$strata" plan --model "$tmp/cb" --disk-gbps 2 --checksum-gbps 0 --mem-gbps 20 --ram 0.05 --headroom 0 --trace-tokens 50 \
  --json >"$tmp/plan_cb.json"
"$strata" plan --model "$tmp/cb" --disk-gbps 2 --checksum-gbps 0 --mem-gbps 20 --ram 0.05 --headroom 0 --trace-tokens 50 \
  --scales f32 >"$tmp/plan_cb.txt"
/usr/bin/python3 - "$tmp/plan_f.json" "$tmp/plan_b.json" "$tmp/plan_cb.json" <<'PY'
import json, sys
f32, b16, cb = (json.load(open(f)) for f in sys.argv[1:4])
assert f32["sizes_options"]["group-size"] == 32 and "scales" not in f32["sizes_options"], f32["sizes_options"]
assert b16["sizes_options"]["scales"] == "bf16", b16["sizes_options"]
for prec in ("int4", "int8"):
    a, b = f32["sizes"][prec], b16["sizes"][prec]
    assert b["expert_blob_bytes"] < a["expert_blob_bytes"] and b["dense_bytes"] < a["dense_bytes"], (a, b)
assert cb["sizes_options"]["scales"] == "bf16" and cb["sizes_options"]["attn-bits"] == 4, cb["sizes_options"]
assert cb["sizes"]["int4"]["container_bytes"] == cb["container_bytes_actual"], cb
assert cb["sizes"]["int4"]["dense_bytes"] < b16["sizes"]["int4"]["dense_bytes"], "int4 attention not sized"
PY
grep -q "sizes: this container's conversion options, group size 32, f32 scales" "$tmp/plan_cb.txt" || { cat "$tmp/plan_cb.txt"; exit 1; }
echo "plan ok"
