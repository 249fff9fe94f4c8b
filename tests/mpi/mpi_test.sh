#!/usr/bin/env bash
# Experts over MPI (docs/distributed.md), every process on this machine over
# shared memory: `mpirun -np 2` and `-np 3` print exactly (byte for byte, so
# every logit ==) what one process prints, on the fixtures (checkpoints: every
# rank holds all experts, serves its share) and on the trained model as a
# container with tiny per-rank budgets (equal, and different per rank); a
# stopped worker gives the named error within --mpi-timeout, a killed one
# ends the job non-zero naming it; ranks that opened different containers
# are refused at start-up; a single-rank mpirun prints what no MPI prints.
# Usage: mpi_test.sh STRATA_BINARY MPI_BUILT(ON|OFF)
set -uo pipefail
S=$1
if [ "${2:-OFF}" != ON ]; then
  echo "skipped: strata was built without MPI (install libopenmpi-dev openmpi-bin and reconfigure)"
  exit 77
fi
if ! command -v mpirun >/dev/null; then
  echo "skipped: no mpirun on PATH (Debian openmpi-bin)"
  exit 77
fi
here=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
# Root in a container needs the two OMPI_ALLOW variables; shared memory only.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
MPI=(mpirun --oversubscribe -np)
fails=0 checks=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { checks=$((checks + 1)); }

# same NAME FILE_A FILE_B
same() {
  if cmp -s "$2" "$3" && [ -s "$2" ]; then ok; else fail "$1: output differs from one process ($(wc -c <"$2") vs $(wc -c <"$3") bytes)"; fi
}

ids=$(python3 -c "print(','.join(str((i*37)%200+3) for i in range(24)))")
at=$(python3 -c "print(','.join(str(i) for i in range(24)))")

# 1. Fixtures (checkpoints): score with every position's logits and MTP.
for fx in glm5-tiny-bf16 glm52-tiny-bf16 glm5-tiny-fp8 dsv3-tiny-fp8 dsv32-tiny-fp8; do
  M=$here/tests/fixtures/$fx
  A=(score --model "$M" --ids "$ids" --logits-at "$at" --mtp --json --threads 1 -q)
  "$S" "${A[@]}" >"$tmp/$fx.1" 2>"$tmp/err" || fail "$fx one process: $(cat "$tmp/err")"
  for np in 2 3; do
    "${MPI[@]}" $np "$S" "${A[@]}" --experts-over mpi >"$tmp/$fx.$np" 2>"$tmp/err" || fail "$fx -np $np: $(tail -3 "$tmp/err")"
    same "$fx -np $np" "$tmp/$fx.1" "$tmp/$fx.$np"
  done
done

# 2. The trained model as a container; tiny budgets (a few experts per layer
# per rank): score (one batch, and 5-row chunks) and greedy generation.
M=$here/models/glm5-strata-tiny
C=$tmp/tiny-c
"$S" convert --in "$M" --out "$C" --experts int8 >/dev/null 2>&1 || fail "convert"
B0=(--model "$C" --threads 1 --no-autopin)
B=("${B0[@]}" --ram 0.0005)
"$S" score "${B[@]}" --ids "$ids" --logits-at "$at" --json >"$tmp/c.score.1" 2>"$tmp/err" || fail "container score: $(cat "$tmp/err")"
"$S" score "${B[@]}" --ids "$ids" --logits-at "$at" --json --chunk 5 >"$tmp/c.chunk.1" 2>/dev/null
"$S" generate "${B[@]}" --ids 3,50,120,7 -n 24 --ignore-eos --json >"$tmp/c.gen.1" 2>/dev/null
# The MPI generates run --spec off: their peer bytes are compared below, and
# under the default (auto) the drafts per step follow measured times, so the
# experts asked for (and the bytes exchanged) can differ between runs. The
# single-process c.gen.1 keeps the default: its output must equal theirs.
for np in 2 3; do
  "${MPI[@]}" $np "$S" score "${B[@]}" --ids "$ids" --logits-at "$at" --json --experts-over mpi >"$tmp/c.score.$np" 2>"$tmp/err" \
    || fail "container score -np $np: $(tail -3 "$tmp/err")"
  same "container score -np $np" "$tmp/c.score.1" "$tmp/c.score.$np"
  "${MPI[@]}" $np "$S" score "${B[@]}" --ids "$ids" --logits-at "$at" --json --chunk 5 --experts-over mpi >"$tmp/c.chunk.$np" 2>/dev/null
  same "container score --chunk 5 -np $np" "$tmp/c.chunk.1" "$tmp/c.chunk.$np"
  "${MPI[@]}" $np "$S" generate "${B[@]}" --ids 3,50,120,7 -n 24 --ignore-eos --json --experts-over mpi --stats \
    --stats-json --spec off >"$tmp/c.gen.$np" 2>"$tmp/gen.err.$np"
  same "container generate -np $np" "$tmp/c.gen.1" "$tmp/c.gen.$np"
done
# The runs above taught the container its routing usage (usage.json).
[ -s "$C/usage.json" ] && ok || fail "no usage.json after the single-process runs"
# --mpi-replicate: the 16 hottest of the 80 experts are rank 0's besides its
# share; same bytes out, fewer bytes between ranks than without.
peer_bytes() { python3 -c "
import json, sys
for l in open(sys.argv[1]):
    if l.startswith('{') and 'peer_bytes' in l: print(json.loads(l)['peer_bytes']); break
else: print(0)" "$1"; }
for np in 2 3; do
  "${MPI[@]}" $np "$S" score "${B[@]}" --ids "$ids" --logits-at "$at" --json --experts-over mpi --mpi-replicate 16 \
    >"$tmp/c.rscore.$np" 2>"$tmp/err" || fail "container score -np $np --mpi-replicate 16: $(tail -3 "$tmp/err")"
  same "container score -np $np --mpi-replicate 16" "$tmp/c.score.1" "$tmp/c.rscore.$np"
  "${MPI[@]}" $np "$S" generate "${B[@]}" --ids 3,50,120,7 -n 24 --ignore-eos --json --experts-over mpi --mpi-replicate 16 \
    --stats-json --spec off >"$tmp/c.rgen.$np" 2>"$tmp/rgen.err.$np"
  same "container generate -np $np --mpi-replicate 16" "$tmp/c.gen.1" "$tmp/c.rgen.$np"
  plain=$(peer_bytes "$tmp/gen.err.$np") rep=$(peer_bytes "$tmp/rgen.err.$np")
  echo "-np $np generate: $plain bytes between ranks, $rep with --mpi-replicate 16"
  if [ "$rep" -gt 0 ] && [ "$rep" -lt "$plain" ]; then ok; else
    fail "-np $np --mpi-replicate 16 did not cut the exchange: $plain -> $rep bytes"; fi
done
grep -q "mpi-replicate 16: the 16 hottest experts (.*) are rank 0's" "$tmp/rgen.err.3" && ok \
  || fail "-np 3 --mpi-replicate: no replication line: $(cat "$tmp/rgen.err.3")"
grep -q "experts over MPI: 3 ranks" "$tmp/gen.err.3" && grep -q "rank 2 (.*pid [0-9]*): [0-9]* experts" "$tmp/gen.err.3" \
  && grep -q "experts over MPI: exchanged" "$tmp/gen.err.3" && ok || fail "-np 3: no placement or exchange lines: $(cat "$tmp/gen.err.3")"
# Different budgets per rank (MPMD): rank 0 four times the others'.
"${MPI[@]}" 1 "$S" score "${B0[@]}" --ram 0.002 --ids "$ids" --logits-at "$at" --json --experts-over mpi : \
  -np 2 "$S" score "${B[@]}" --ids "$ids" --logits-at "$at" --json --experts-over mpi >"$tmp/c.mpmd" 2>"$tmp/mpmd.err"
same "container score, budgets 2:0.5:0.5 MB" "$tmp/c.score.1" "$tmp/c.mpmd"
grep -q "rank 0 .*budget 2.0 MB" "$tmp/mpmd.err" && ok || fail "MPMD budgets not in the placement: $(cat "$tmp/mpmd.err")"

# 3. One rank behaves like no MPI.
"${MPI[@]}" 1 "$S" score "${B[@]}" --ids "$ids" --logits-at "$at" --json --experts-over mpi >"$tmp/c.np1" 2>/dev/null
same "-np 1" "$tmp/c.score.1" "$tmp/c.np1"

# 4. Different containers: rank 1 opens a copy whose files differ.
cp -r "$C" "$tmp/other-c"
python3 - "$tmp/other-c/manifest.json" <<'PY'
import json, sys
p = sys.argv[1]; m = json.load(open(p)); m["config"]["rms_norm_eps"] = 2e-5; json.dump(m, open(p, "w"))
PY
start=$(date +%s)
"${MPI[@]}" 1 "$S" score --model "$C" --ids 3,4 --json -q --experts-over mpi : -np 1 "$S" score --model "$tmp/other-c" \
  --ids 3,4 --json -q --experts-over mpi >/dev/null 2>"$tmp/mismatch.err"
rc=$?
if [ $rc -ne 0 ] && grep -q "rank 1 opened a different model than rank 0" "$tmp/mismatch.err"; then ok; else
  fail "mismatched containers: exit $rc: $(cat "$tmp/mismatch.err")"; fi

# 5. A worker that stops answering: chat reads its turn from a pipe; the
# worker (its pid from the placement line) is stopped before the turn. The
# named error must come with a non-zero exit; the job must end within 60 s of
# the turn (--mpi-timeout 2 plus the prompt's prefill and mpirun's clean-up,
# which under a load of 20 on 2 cores took up to ~17 s): what is asserted is
# "no hang", not a speed.
chat_with_fault() {  # SIGNAL -> $tmp/fault.err, $tmp/fault.rc, $tmp/fault.s
  local sig=$1
  rm -f "$tmp/fifo"; mkfifo "$tmp/fifo"
  local t0
  "${MPI[@]}" 2 "$S" chat --model "$C" --threads 1 --experts-over mpi --mpi-timeout 2 -n 8 <"$tmp/fifo" \
    >/dev/null 2>"$tmp/fault.err" &
  local job=$!
  exec 3>"$tmp/fifo"
  local pid="" i
  for i in $(seq 1 300); do
    pid=$(sed -n 's/.*rank 1 ([^,]*, pid \([0-9]*\)).*/\1/p' "$tmp/fault.err" | head -1)
    [ -n "$pid" ] && grep -q "strata chat:" "$tmp/fault.err" && break
    sleep 0.1
  done
  [ -n "$pid" ] || { fail "$sig: no worker pid in: $(cat "$tmp/fault.err")"; kill $job; exec 3>&-; return; }
  pids+=("$pid")
  kill -"$sig" "$pid"
  t0=$(date +%s.%N)
  echo "Hello there" >&3
  # mpirun must end by itself: wait at most 90 s (a loaded 2-core CI box
  # took 11-17 s for what takes 4 s on a quiet one).
  for i in $(seq 1 900); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
  if kill -0 $job 2>/dev/null; then fail "$sig: the job still runs 90 s after the turn (a hang)"; kill -KILL $job; fi
  wait $job; echo $? >"$tmp/fault.rc"
  python3 -c "import time; print(f'{time.time() - $t0:.1f}')" >"$tmp/fault.s"
  exec 3>&-
}
chat_with_fault STOP
rc=$(cat "$tmp/fault.rc"); s=$(cat "$tmp/fault.s")
echo "stopped worker: exit $rc after $s s: $(grep -m1 "did not answer" "$tmp/fault.err")"
if [ "$rc" -ne 0 ] && grep -q "experts over MPI: rank 1 did not answer layer [0-9]* within 2 s" "$tmp/fault.err" &&
  python3 -c "import sys; sys.exit(0 if $s < 60 else 1)"; then ok; else
  fail "stopped worker: exit $rc after $s s: $(cat "$tmp/fault.err")"; fi
chat_with_fault KILL
rc=$(cat "$tmp/fault.rc"); s=$(cat "$tmp/fault.s")
echo "killed worker: exit $rc after $s s: $(grep -m1 "rank 1 with PID\|rank 1 did not" "$tmp/fault.err")"
if [ "$rc" -ne 0 ] && grep -Eq "rank 1 (with PID [0-9]+ )?.*(exited|killed|did not answer)|rank 1 did not answer" "$tmp/fault.err"; then ok; else
  fail "killed worker: exit $rc: $(cat "$tmp/fault.err")"; fi

echo "$checks passed, $fails failed"
[ $fails -eq 0 ]
