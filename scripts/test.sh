#!/usr/bin/env bash
# Runs the whole test suite: installs dependencies, builds Release and
# ASan/UBSan, runs the unit + model tests in both, then the cross-checks.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test-deps --no-build

echo "== npm packages for the cross-checks"
(cd tools/llama_check && { [ -d node_modules/node-llama-cpp ] || npm ci --no-audit --no-fund; })
(cd tests/server && { [ -d node_modules/openai ] || npm ci --no-audit --no-fund; })
tests/tokenizer/install.sh

echo "== Release build"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build
echo "== Release tests"
# A test that fails is run once more before the run fails: the server tests
# time real sockets and threads on a shared 2-core machine.
(cd build && ctest --output-on-failure -j2 --repeat until-pass:2)

echo "== ASan/UBSan build"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSTRATA_SANITIZE=ON -DSTRATA_PY_TESTS=OFF >/dev/null
ninja -C build-asan strata strata_tests
echo "== ASan/UBSan tests (every gtest, the HTTP server's included; the tmux chat test runs in Release only)"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --output-on-failure -j2 --repeat until-pass:2 -E "chat_tmux")
