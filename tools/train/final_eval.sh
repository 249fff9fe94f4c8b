#!/bin/sh
# Export the final checkpoint and evaluate the bf16 model directory (all numbers in the model card).
set -eu
cd "$(dirname "$0")/../.."
NAME=${NAME:-glm5-strata-tiny}
RUN=tools/train/runs/$NAME
M=models/$NAME
/usr/bin/python3 tools/train/export.py --ckpt $RUN/ckpt.pt --tok tools/train/runs/tok4k/tokenizer.json --out $M
mkdir -p $M/eval
/usr/bin/python3 tools/train/eval_ppl.py --model $M --ids $M/eval/heldout_ids.txt > $M/eval/ppl_heldout.json &
/usr/bin/python3 tools/train/eval_ppl.py --model $M --ids $M/eval/heldout_ids.txt --dense > $M/eval/ppl_heldout_dense.json &
/usr/bin/python3 tools/train/eval_routing.py --model $M --ids $M/eval/heldout_ids.txt --max-windows 16 > $M/eval/routing_heldout.json
/usr/bin/python3 tools/train/compare_strata.py --model $M --ids $M/eval/heldout_ids.txt --n 300 > $M/eval/strata_vs_oracle.json || echo "strata comparison FAILED"
/usr/bin/python3 tools/train/tokenizer_crosscheck.py --model $M > $M/eval/tokenizer_crosscheck.txt 2>&1 || echo "tokenizer crosscheck FAILED (needs node + @huggingface/tokenizers)"
/usr/bin/python3 tools/train/plot_curve.py --metrics $RUN/metrics.jsonl --out $M/training_curve.png > $M/eval/loss_table.md
wait
echo done
