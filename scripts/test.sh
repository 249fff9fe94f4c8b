#!/usr/bin/env bash
# Runs the whole test suite: installs dependencies, builds Release and
# ASan/UBSan, runs the unit + model tests in both, then the cross-checks.
#
# Every phase runs even when an earlier one failed, so one run reports every
# failure (a test phase after a failed build runs what was built; the build's
# failure is reported either way). The exit status is non-zero when any phase
# failed, after a summary that names them.
set -euo pipefail
cd "$(dirname "$0")/.."

failed=()
timings=()
# phase NAME COMMAND...: runs one phase and records its failure. A command
# tested by `||` runs without errexit (bash ignores set -e there), so each
# phase's steps are chained with && and the first failing step ends it.
# Each phase's wall time is printed after it and in the summary (CI's budget is
# ~40 minutes on 2 cores: the summary shows where it goes).
phase() {
  local name=$1 rc=0 t0=$SECONDS
  shift
  echo "== $name"
  "$@" || rc=$?
  local took=$((SECONDS - t0))
  timings+=("$(printf '%5d s  %s' "$took" "$name")")
  if [ "$rc" -ne 0 ]; then
    echo "== $name: FAILED (exit status $rc, $took s)"
    failed+=("$name (exit status $rc)")
  else
    echo "== $name: passed in $took s"
  fi
}

npm_packages() {
  (cd tools/llama_check && { [ -d node_modules/node-llama-cpp ] || npm ci --no-audit --no-fund; }) &&
    (cd tests/server && { [ -d node_modules/@langchain/openai ] || npm ci --no-audit --no-fund; }) &&
    tests/tokenizer/install.sh
}

# ninja -k 0: build every target that can be built, so a test phase after a
# failed build still runs the tests of the targets that did build. Warnings
# are errors here (STRATA_WERROR), never in a user's build (scripts/setup.sh).
release_build() {
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_WERROR=ON >/dev/null && ninja -C build -k 0
}

# A test that fails is run once more before the run fails: the server tests
# time real sockets and threads on a shared 2-core machine.
release_tests() {
  (cd build && ctest --output-on-failure -j2 --repeat until-pass:2)
}

# The sanitizer build registers the gtests (the HTTP server's included), the
# chat tests (chat_attach, chat_template_jinja; chat_tmux is excluded below)
# and bench_json. Not the Python-oracle tests (no strata code in them), the
# Node tests, or the peak-RSS test (ASan's shadow memory is not the program's
# RSS): CMake prints the list it leaves out. The hot layers (core, kernels,
# model) are compiled at -O1 there (STRATA_SANITIZE_OPT): the gtests that run
# the forward pass many times take half the time they take at -O0.
asan_build() {
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSTRATA_SANITIZE=ON \
    -DSTRATA_PY_TESTS=OFF -DSTRATA_NODE_TESTS=OFF >/dev/null &&
    ninja -C build-asan -k 0 strata strata_tests strata_alloc_test strata_constraint_bench
}

# The tmux chat test runs in Release only (its waits are sized for it).
# mpi_experts runs on its own without leak detection: OpenMPI's libraries
# (libmpi, libopen-pal and their plugins) leave allocations at exit that
# LeakSanitizer reports in every rank; ASan and UBSan still check every access.
asan_tests() {
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --output-on-failure -j2 --repeat until-pass:2 -E "chat_tmux|mpi_experts") &&
    (cd build-asan && ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 \
      ctest --output-on-failure --repeat until-pass:2 -R "^mpi_experts$")
}

# Every libFuzzer target (tests/fuzz) for a short bounded time from its
# committed corpus, so a regression in a file reader or the request parser
# shows; clang + sanitizers in build-fuzz, only the sources the harnesses
# need. The campaign itself is bench/fuzz/run.py --runs 1000000
# (docs/security.md "Fuzzing").
fuzz_smoke() {
  python3 bench/fuzz/run.py --seconds 12
}

phase "dependencies (scripts/setup.sh --test-deps)" scripts/setup.sh --test-deps --no-build
phase "npm packages for the cross-checks" npm_packages
phase "Release build" release_build
phase "Release tests" release_tests
phase "ASan/UBSan build" asan_build
phase "ASan/UBSan tests (every gtest, the HTTP server's included; chat_attach, chat_template_jinja, bench_json)" asan_tests
phase "Fuzz targets (clang + libFuzzer + ASan/UBSan, 12 s each: bench/fuzz/run.py)" fuzz_smoke

echo "== wall time per phase ($SECONDS s in all):"
printf '   %s\n' "${timings[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "== FAILED: ${#failed[@]} phase(s):"
  printf '   %s\n' "${failed[@]}"
  exit 1
fi
echo "== all phases passed"
