#!/bin/sh
# Reproduce models/glm5-strata-tiny end to end (Debian bookworm, 2 CPU cores, ~1.5-2 h).
# Everything runs with Debian's /usr/bin/python3 (python3-torch 1.13, python3-numpy, python3-regex).
set -eu
cd "$(dirname "$0")/../.."
NAME=glm5-strata-tiny
RUN=tools/train/runs/$NAME
apt-get install -y --no-install-recommends dict-gcide dict-jargon dict-devil dict-foldoc dict-vera \
    fortunes fortunes-min python3-regex python3-matplotlib
# 1. corpus (prints sizes + sha256; see the model card)
/usr/bin/python3 tools/train/build_corpus.py --out tools/train/data
# 2. tokenizer: byte-level BPE, 4076 merges-derived tokens + 20 GLM special tokens = 4096
/usr/bin/python3 tools/train/bpe.py train --text tools/train/data/train.txt --vocab 4096 --out tools/train/runs/tok4k
# 3. token files
/usr/bin/python3 tools/train/prepare_data.py --tok tools/train/runs/tok4k/tokenizer.json --data tools/train/data
# 4. train (72 min of training time; rerun the same command to resume from $RUN/ckpt.pt)
mkdir -p $RUN
OMP_WAIT_POLICY=PASSIVE nice -n 19 /usr/bin/python3 tools/train/train.py --out $RUN --minutes 72 --lr 2e-3 \
    --warmup 20 --b1 4 --b2 2 --idx_rows 1 --bias_rate 3e-3 \
    --config '{"num_attention_heads":4,"num_key_value_heads":4,"moe_intermediate_size":128,"intermediate_size":512}' \
    >> $RUN/train.log 2>&1
# 5. export (bf16 HF layout) and evaluate the bf16 checkpoint
/usr/bin/python3 tools/train/export.py --ckpt $RUN/ckpt.pt --tok tools/train/runs/tok4k/tokenizer.json --out models/$NAME
/usr/bin/python3 tools/train/eval_ppl.py --model models/$NAME --ids tools/train/data/heldout.bin
/usr/bin/python3 tools/train/eval_routing.py --model models/$NAME --ids tools/train/data/heldout.bin
/usr/bin/python3 tools/train/compare_strata.py --model models/$NAME --ids tools/train/data/heldout.bin
/usr/bin/python3 tools/train/plot_curve.py --metrics $RUN/metrics.jsonl --out models/$NAME/training_curve.png
# 6. MTP-only distillation (the released MTP layer): only model.layers.6.* trains, towards the main
#    model's own next-token distribution over the MTP chain (depths 1-2), on text mixed 1:1 with
#    windows of the model's own greedy output; the trunk stays byte-identical (export --same-trunk-as).
#    The released run was stopped by hand after its step-44 checkpoint (19.1 min): add --max_steps 44.
/usr/bin/python3 tools/train/self_generate.py --strata build/strata --model models/$NAME --data tools/train/data \
    --n 256 --out tools/train/data/selfgen.bin
mkdir -p $RUN-mtp
cp -r models/$NAME $RUN-mtp/base
OMP_WAIT_POLICY=PASSIVE nice -n 19 /usr/bin/python3 tools/train/train.py --out $RUN-mtp --init $RUN-mtp/base \
    --mtp_only --distill 1 --mtp_weight 0 --dense_frac 0 --ctx2 256 --b2 2 --idx_rows 1 --lr 1.5e-3 --warmup 3 \
    --mtp_depth 2 --selfgen tools/train/data/selfgen.bin --selfgen_eval 8 --minutes 25 --max_steps 44 \
    --ckpt_every_s 180 --eval_every_s 100000 >> $RUN-mtp/train.log 2>&1
/usr/bin/python3 tools/train/export.py --ckpt $RUN-mtp/ckpt.pt --tok tools/train/runs/tok4k/tokenizer.json \
    --out models/$NAME --same-trunk-as $RUN-mtp/base
# 7. Long-window MTP distillation (the released MTP layer since 2026-12-07): the same MTP-only training,
#    continued from step 6's layer on windows of 1024 positions (the model's own greedy output 7:3 with
#    text), the chain to depth 3 in the loss, so drafts stay good past the 256 positions step 6 saw.
#    The released run was stopped by hand after its step-94 checkpoint (38.5 min): add --max_steps 94.
/usr/bin/python3 tools/train/self_generate.py --strata build/strata --model models/$NAME --data tools/train/data \
    --n 136 --ctx 1024 --out tools/train/data/selfgen1024.bin
mkdir -p $RUN-mtp2
cp -r models/$NAME $RUN-mtp2/base
OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 tools/train/train.py --out $RUN-mtp2 --init $RUN-mtp2/base \
    --tok models/$NAME/tokenizer.json --mtp_only --distill 1 --mtp_weight 0 --dense_frac 0 --ctx2 1024 --b2 1 \
    --idx_rows 1 --lr 1e-3 --warmup 3 --mtp_depth 3 --selfgen tools/train/data/selfgen1024.bin --selfgen_frac 0.7 \
    --selfgen_eval 8 --minutes 40 --max_steps 94 --ckpt_every_s 180 --eval_every_s 100000 >> $RUN-mtp2/train.log 2>&1
/usr/bin/python3 tools/train/export.py --ckpt $RUN-mtp2/ckpt.pt --tok models/$NAME/tokenizer.json \
    --out models/$NAME --same-trunk-as $RUN-mtp2/base
