#!/usr/bin/env bash
# strata's first contact (docs/cli.md "Exit status"): --version, `strata help`,
# unknown subcommands and misspelled flags named with a suggestion, usage
# errors exit 2, runtime errors exit 1. No model is loaded: it takes a second.
set -uo pipefail
S=$1
FX=$(cd "$(dirname "$0")/../fixtures" && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# expect NAME RC PATTERN(stdout+stderr, grep -E) -- ARGS...
expect() {
  local name=$1 want=$2 pat=$3; shift 4
  "$S" "$@" >"$tmp/out" 2>&1; local rc=$?
  [ "$rc" -eq "$want" ] || fail "$name: exit status $rc, expected $want: $(head -c 400 "$tmp/out")"
  grep -Eq -- "$pat" "$tmp/out" || fail "$name: output does not match /$pat/: $(head -c 400 "$tmp/out")"
}

expect version 0 '^strata [0-9]+\.[0-9]+\.[0-9]+ \((git [0-9a-zA-Z.-]+|no git)\)$' -- --version
expect help 0 'Subcommands:' -- help
expect help-usage 0 '^Usage: strata \[OPTIONS\] SUBCOMMAND' -- help
expect run-usage 0 '^Usage: strata run \[OPTIONS\] \[prompt...\]' -- run --help
expect help-run 0 '--model' -- help run
# --help in groups, every default shown, --model says what it takes.
for g in 'Input' 'Model' 'Cache and streaming \(containers\)' 'Generation' 'Sampling' 'Chat template' 'Output'; do
  expect "run-group-$g" 0 "^$g:\$" -- run --help
done
expect run-model-help 0 '--model.*checkpoint directory, a strata container.*config\.json' -- run --help
expect run-think 0 '--think TEXT:\{on,off\}=on' -- run --help
expect chat-group 0 '^Attach to a server:$' -- chat --help
expect serve-group 0 '^Server:$' -- serve --help
expect serve-port 0 '--port INT:INT in \[0 - 65535\]=8080' -- serve --help
expect serve-host 0 '--host TEXT=127\.0\.0\.1 ' -- serve --help
expect serve-parallel 0 '--parallel INT:INT in \[1 - 256\]=4' -- serve --help
expect serve-queue 0 '--queue INT:INT in \[0 - 4096\]=16' -- serve --help
expect serve-ceiling 0 '--max-tokens-ceiling INT:INT in \[1 - 16777216\]=4096' -- serve --help
expect serve-think 0 '--think TEXT:\{on,off\}=on' -- serve --help
expect serve-log 0 '--log-format [^ ]*=text' -- serve --help
expect no-args 2 'Subcommands:' --
expect typo-run 2 "unknown subcommand 'runn'; did you mean 'run'\?" -- runn
expect typo-help 2 "unknown subcommand 'chta'; did you mean 'chat'\?" -- help chta
expect unknown-far 2 "unknown subcommand 'list'$" -- list
expect typo-flag 2 "unknown flag '--temprature'; did you mean '--temperature'\?" -- run --model "$FX/glm5-tiny-bf16" --temprature 0.5 -p hi
expect typo-flag-eq 2 "unknown flag '--logits-att'; did you mean '--logits-at'\?" -- score --model x --ids 1 --logits-att=0
expect bad-value 2 "strata generate: error: .*-n" -- generate --model x --ids 1 -n abc
expect missing 2 "strata score: error: .*--model.*required" -- score --ids 1
expect runtime 1 "strata: error: .*nonexistent" -- generate --model "$tmp/nonexistent" --ids 1 -q

[ "$fails" -eq 0 ] && echo "OK: usage" || exit 1
