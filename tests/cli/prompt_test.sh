#!/usr/bin/env bash
# strata run takes the prompt as --prompt, as positional arguments (joined by
# spaces), from -f FILE, or from stdin when it is not a terminal; each gives
# the same greedy answer on the bundled tiny model, and another prompt gives
# another answer (the prompt is used). No prompt on a terminal: usage error 2.
set -uo pipefail
S=$1
M=$(cd "$(dirname "$0")/../../models/glm5-strata-tiny" && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
A=(--model "$M" -n 8 --temperature 0 --threads 2 -q)

"$S" run "${A[@]}" --prompt "Hello there" >"$tmp/flag" </dev/null || fail "--prompt: exit status $?"
"$S" run "${A[@]}" Hello there >"$tmp/words" </dev/null || fail "positional: exit status $?"
echo "Hello there" | "$S" run "${A[@]}" >"$tmp/stdin" || fail "stdin: exit status $?"
printf 'Hello there\r\n' >"$tmp/prompt.txt"
"$S" run "${A[@]}" -f "$tmp/prompt.txt" >"$tmp/file" </dev/null || fail "-f: exit status $?"
"$S" run "${A[@]}" "Good morning to you" >"$tmp/other" </dev/null || fail "other prompt: exit status $?"
[ -s "$tmp/flag" ] || fail "--prompt printed nothing"
for k in words stdin file; do
  cmp -s "$tmp/flag" "$tmp/$k" || fail "$k: answer differs from --prompt's: '$(cat "$tmp/$k")' vs '$(cat "$tmp/flag")'"
done
cmp -s "$tmp/flag" "$tmp/other" && fail "another prompt gave the same answer (is the prompt used?)"

"$S" run "${A[@]}" </dev/null >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 1 ] && grep -q "stdin: the prompt is empty" "$tmp/err" || fail "empty stdin: exit $rc: $(cat "$tmp/err")"
"$S" run "${A[@]}" --prompt x y >/dev/null 2>"$tmp/err" </dev/null; rc=$?
[ "$rc" -eq 2 ] || fail "--prompt and a positional prompt: exit $rc, expected 2: $(cat "$tmp/err")"
if command -v script >/dev/null; then  # stdin a terminal (util-linux script)
  script -qec "'$S' run --model '$M' -q" /dev/null </dev/null >"$tmp/tty" 2>&1; rc=$?
  [ "$rc" -eq 2 ] && grep -q "a prompt: .* is required" "$tmp/tty" || fail "no prompt on a terminal: exit $rc: $(cat "$tmp/tty")"
else
  echo "note: util-linux 'script' missing: the terminal case is not checked"
fi
[ "$fails" -eq 0 ] && echo "OK: prompt sources" || exit 1
