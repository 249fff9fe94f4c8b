#!/usr/bin/env bash
# Terminal test of `strata chat`: drives it in a real terminal (tmux send-keys /
# capture-pane) and asserts on the screen: two turns (the second re-using the
# KV cache; with the GLM template, thinking on: the reasoning dimmed between
# marker lines, no literal <think>), :reset, Ctrl-C in the middle of an answer (the turn ends, the
# engine stays up), a further turn that still answers, then two Ctrl-C while
# idle quit with status 0; then line editing (libedit): an edited line, a
# """ block as one turn, the history file and its recall by a second session.
# Every wait is bounded; the tmux session is removed on exit.
#
# Models:
#   * the tiny fixture tests/fixtures/glm5-tiny-bf16 with the byte-level
#     tokenizer tests/chat/byte-tokenizer.json (vocab 256 has no room for GLM's
#     special tokens, so the chat runs with --chat-template raw), after a
#     `strata run --raw` check (seeded reproducibility, the refusal of a GLM
#     template without GLM tokens);
#   * the trained default model models/glm5-strata-tiny (committed; or
#     $STRATA_CHAT_MODEL) through its GLM chat template, after a sampling check
#     of `strata run`: equal seeds give equal text, different seeds different
#     text, and a sample is not the greedy answer. A missing model fails.
# Both get a copy of config.json with a longer max_position_embeddings so the
# interrupted answer is long enough to be interrupted on a fast machine.
#
# Usage: tests/chat/tmux_test.sh path/to/strata
set -euo pipefail

STRATA=$(realpath "${1:?usage: tmux_test.sh path/to/strata}")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TRAINED=${STRATA_CHAT_MODEL:-$ROOT/models/glm5-strata-tiny}
CTX=16384
WAIT=${STRATA_CHAT_WAIT:-120}  # seconds, per wait

command -v tmux >/dev/null || { echo "FAIL: tmux is not installed (scripts/setup.sh --test-deps installs it)"; exit 1; }
if [ ! -f "$TRAINED/config.json" ] || [ ! -f "$TRAINED/tokenizer.json" ]; then
  echo "FAIL: the chat model $TRAINED (config.json, tokenizer.json) is missing (STRATA_CHAT_MODEL names another)"
  exit 1
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/strata-chat-XXXXXX")
SESSION="strata-chat-test-$$"
export TMUX_TMPDIR="$WORK"  # a private tmux server: nothing shared with the user's
cleanup() {
  tmux kill-server 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*"
  if tmux has-session -t "$SESSION" 2>/dev/null; then
    echo "---- screen ----"
    screen
    echo "----------------"
  fi
  exit 1
}

# A model directory: links to SRC's files, config.json with a longer context.
make_model() {
  local src=$1 dst=$2 f
  mkdir -p "$dst"
  for f in "$src"/*; do ln -s "$(realpath "$f")" "$dst/$(basename "$f")"; done
  rm "$dst/config.json"
  sed -E 's/"max_position_embeddings": *[0-9]+/"max_position_embeddings": '"$CTX"'/' "$src/config.json" >"$dst/config.json"
  grep -q "\"max_position_embeddings\": $CTX" "$dst/config.json" || fail "could not set max_position_embeddings in $dst"
}

screen() { tmux capture-pane -p -J -t "$SESSION" -S - 2>/dev/null || true; }
count() { screen | grep -o -- "$1" | wc -l; }

# wait_count PATTERN N: until PATTERN (grep -o) appears at least N times.
wait_count() {
  local deadline=$((SECONDS + WAIT))
  while [ "$(count "$1")" -lt "$2" ]; do
    [ $SECONDS -lt $deadline ] || fail "timed out after ${WAIT}s waiting for $2 x '$1'"
    sleep 0.2
  done
}

type_line() {
  tmux send-keys -t "$SESSION" -l -- "$1"
  tmux send-keys -t "$SESSION" Enter
}

last_footer() { screen | grep -- "tok/s" | tail -n 1; }

chat_test() {
  local model=$1 name=$2 think=$3
  shift 3
  echo "== chat on $name"
  tmux new-session -d -s "$SESSION" -x 160 -y 50 \
    "'$STRATA' chat --model '$model' --ctx $CTX --temperature 0 --ignore-eos -n 24 --threads 2 $*; echo CHAT-EXITED rc=\$?; sleep 600"
  wait_count "Ctrl-C stops an answer" 1

  type_line "hello there"
  wait_count "tok/s" 1
  last_footer | grep -q "\[24 tokens" || fail "turn 1 did not answer 24 tokens: $(last_footer)"
  if [ "$think" = 1 ]; then  # the reasoning between marker lines, dimmed (SGR 2), no literal tags
    screen | grep -q '^Thinking\.\.\.$' || fail "no 'Thinking...' line with thinking on"
    screen | grep -q '<think>\|</think>' && fail "a literal think tag on the screen"
    tmux capture-pane -p -e -J -t "$SESSION" -S - | grep -q $'\e\[2mThinking\.\.\.' ||
      fail "the reasoning is not dimmed"
  fi
  type_line "and a second turn"
  wait_count "tok/s" 2
  last_footer | grep -q "\[24 tokens" || fail "turn 2 did not answer 24 tokens: $(last_footer)"
  last_footer | grep -Eq "\+ [1-9][0-9]* cached" || fail "turn 2 did not re-use the cache: $(last_footer)"

  type_line ":reset"
  wait_count "(history and context cleared)" 1

  type_line ":set n 1000000"
  wait_count "(n 1000000" 1
  type_line "now a very long answer please"
  # Ctrl-C once the answer is streaming.
  local deadline=$((SECONDS + WAIT)) after
  while :; do
    after=$(screen | sed -n '/now a very long answer please/,$p' | tail -n +2 | tr -d '\n')
    [ "${#after}" -ge 40 ] && break
    [ "$(count "tok/s")" -lt 3 ] || fail "the long answer ended before Ctrl-C: $(last_footer)"
    [ $SECONDS -lt $deadline ] || fail "the long answer did not start streaming"
    sleep 0.1
  done
  tmux send-keys -t "$SESSION" C-c
  wait_count "tok/s" 3
  last_footer | grep -q "interrupted" || fail "Ctrl-C did not end the answer as interrupted: $(last_footer)"
  screen | grep -q "CHAT-EXITED" && fail "Ctrl-C during an answer ended the program"

  sleep 1.2  # a Ctrl-C within a second of the last one would count as the second of a quit
  type_line ":set n 16"
  wait_count "(n 16," 1
  type_line "are you still there"
  wait_count "tok/s" 4
  last_footer | grep -q "\[16 tokens" || fail "the turn after Ctrl-C did not answer: $(last_footer)"
  last_footer | grep -q "interrupted" && fail "the turn after Ctrl-C was interrupted: $(last_footer)"

  # Two Ctrl-C while idle quit cleanly.
  tmux send-keys -t "$SESSION" C-c
  wait_count "Ctrl-C again or :q to quit" 1
  tmux send-keys -t "$SESSION" C-c
  wait_count "CHAT-EXITED" 1
  screen | grep -q "CHAT-EXITED rc=0" || fail "chat did not exit with status 0"
  tmux kill-session -t "$SESSION"
  echo "ok: chat on $name"
}

# ---- the fixture with a byte-level tokenizer
FIX="$WORK/fixture"
make_model "$ROOT/tests/fixtures/glm5-tiny-bf16" "$FIX"
cp "$ROOT/tests/chat/byte-tokenizer.json" "$FIX/tokenizer.json"

echo "== run --raw on the fixture"
a=$("$STRATA" run --model "$FIX" --raw -p "Hello, strata" -n 16 --seed 5 --top-p 0.9 --threads 2 --ignore-eos 2>"$WORK/err") ||
  fail "strata run --raw failed: $(cat "$WORK/err")"
b=$("$STRATA" run --model "$FIX" --raw -p "Hello, strata" -n 16 --seed 5 --top-p 0.9 --threads 2 --ignore-eos 2>"$WORK/err") ||
  fail "strata run --raw failed: $(cat "$WORK/err")"
[ -n "$a" ] || fail "strata run --raw printed nothing"
[ "$a" = "$b" ] || fail "the same seed gave different text"
if "$STRATA" run --model "$FIX" -p hi -n 1 --chat-template glm 2>"$WORK/err" >/dev/null; then
  fail "a GLM template was used with a tokenizer without GLM tokens"
fi
grep -q "special token" "$WORK/err" || fail "unexpected refusal message: $(cat "$WORK/err")"
echo "ok: run --raw"

chat_test "$FIX" "the fixture (byte tokenizer, raw template)" 0 --chat-template raw

# ---- the trained default model, through its GLM chat template
TM="$WORK/trained"
make_model "$TRAINED" "$TM"

# Sampling: 32 tokens at temperature 1 from a model trained on text spread over
# many tokens, so two seeds (or a sample and the greedy answer) agreeing on all
# 32 would be a sampler that ignores its seed or its temperature, not chance.
echo "== run: seeds on $(basename "$TRAINED")"
sample() { "$STRATA" run --model "$TM" --raw -p "Once upon a time" -n 32 --threads 2 --ignore-eos "$@" 2>"$WORK/err"; }
s5=$(sample --seed 5 --temperature 1) || fail "strata run --seed 5 failed: $(cat "$WORK/err")"
s5b=$(sample --seed 5 --temperature 1) || fail "strata run --seed 5 failed: $(cat "$WORK/err")"
s6=$(sample --seed 6 --temperature 1) || fail "strata run --seed 6 failed: $(cat "$WORK/err")"
greedy=$(sample --temperature 0) || fail "strata run --temperature 0 failed: $(cat "$WORK/err")"
[ -n "$s5" ] || fail "strata run printed nothing"
[ "$s5" = "$s5b" ] || fail "the same seed gave different text: '$s5' vs '$s5b'"
[ "$s5" != "$s6" ] || fail "seeds 5 and 6 gave the same text: '$s5'"
[ "$s5" != "$greedy" ] || fail "seed 5 at temperature 1 gave the greedy text: '$s5'"
[ "$s6" != "$greedy" ] || fail "seed 6 at temperature 1 gave the greedy text: '$s6'"
echo "ok: seeds (5: '${s5:0:40}...', 6: '${s6:0:40}...', greedy: '${greedy:0:40}...')"

chat_test "$TM" "$(basename "$TRAINED") (GLM template)" 1

# ---- line editing (libedit): an edited line, a """ block as one turn, the
# history saved (bounded, mode 600) and recalled by a second session.
echo "== line editing and history"
STATE="$WORK/state"
edit_session() {
  tmux new-session -d -s "$SESSION" -x 160 -y 50 \
    "XDG_STATE_HOME='$STATE' '$STRATA' chat --model '$TM' --temperature 0 --think off -n 4 --threads 2 -q; echo CHAT-EXITED rc=\$?; sleep 600"
  wait_count "Ctrl-C stops an answer" 1
}
edit_session
type_line '"""first line'
wait_count "^\.\.\. " 1  # the continuation prompt
type_line 'second line"""'
wait_count "tok/s" 1
last_footer | grep -Eq "prompt 1[0-9] new" || fail "the two-line block was not one turn: $(last_footer)"
tmux send-keys -t "$SESSION" -l "helo"
tmux send-keys -t "$SESSION" Left
tmux send-keys -t "$SESSION" -l "l"
tmux send-keys -t "$SESSION" Enter
wait_count "tok/s" 2
type_line ":q"
wait_count "CHAT-EXITED" 1
H="$STATE/strata/chat_history"
[ -f "$H" ] || fail "no history file at $H"
grep -qx "hello" "$H" || fail "the edited line is not 'hello' in the history: $(cat "$H")"
grep -q 'first.040line.012second.040line' "$H" || fail "the block is not one history entry: $(cat "$H")"
[ "$(stat -c %a "$H")" = 600 ] || fail "the history file is not mode 600"
tmux kill-session -t "$SESSION"
edit_session
tmux send-keys -t "$SESSION" Up  # :q
tmux send-keys -t "$SESSION" Up  # hello
tmux send-keys -t "$SESSION" Enter
wait_count "tok/s" 1
screen | grep -q "^> hello" || fail "Up did not recall the previous session's line"
tmux send-keys -t "$SESSION" C-c
wait_count "Ctrl-C again or :q to quit" 1
tmux send-keys -t "$SESSION" C-c
wait_count "CHAT-EXITED rc=0" 1
tmux kill-session -t "$SESSION"
echo "ok: line editing and history"
echo "PASS"
