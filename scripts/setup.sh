#!/usr/bin/env bash
# Installs strata's build and test dependencies (Debian packages; idempotent)
# and builds build/strata. Usage: scripts/setup.sh [--test-deps] [--no-build]
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
build=1
for a in "$@"; do
  case "$a" in
    --test-deps) want_test=1 ;;
    --no-build) build=0 ;;
    *) echo "setup.sh: unknown option $a" >&2; exit 2 ;;
  esac
done

# Build: compiler, CMake, Ninja, and the libraries (see README "Dependencies"); OpenMPI for
# --experts-over mpi (optional: without it the build still works and that flag refuses).
pkgs=(g++ cmake ninja-build pkg-config nlohmann-json3-dev libfmt-dev libcli11-dev libgtest-dev libgmock-dev libxxhash-dev libpcre2-dev libutf8proc-dev liburing-dev libcpp-httplib-dev libboost-dev libbenchmark-dev libedit-dev libopenmpi-dev openmpi-bin)
# Tests: the PyTorch reference oracle (Debian's torch; there is no pip here),
# OpenBLAS so it runs at a useful speed, Node.js for the llama.cpp cross-check,
# Jinja2 for the chat-template test, tmux for the terminal chat test.
if [ "$want_test" = 1 ]; then
  pkgs+=(python3 python3-torch python3-numpy libopenblas0-pthread python3-jinja2 tmux)
  # The dashboard test drives Debian's Chromium with npm playwright-core.
  pkgs+=(chromium)
  # The fuzz targets (tests/fuzz, bench/fuzz/run.py): clang with libFuzzer and
  # its sanitizer runtimes (-fsanitize=fuzzer,address,undefined).
  pkgs+=(clang libclang-rt-14-dev libfuzzer-14-dev)
  # The AArch64 NEON kernels: cross-compiled and run under qemu-user
  # (tests/kernels/aarch64_qemu.sh; qemu 7.2's -cpu max has dotprod and i8mm).
  if [ "$(uname -m)" = x86_64 ]; then pkgs+=(g++-aarch64-linux-gnu qemu-user); fi
  # Node.js: any node + npm on PATH will do (some images ship their own build,
  # whose npm conflicts with Debian's npm package).
  command -v node >/dev/null && command -v npm >/dev/null || pkgs+=(nodejs npm)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Only what running needs: the `strata` binary (scripts/test.sh builds the
# tests). Warnings stay warnings here (STRATA_WERROR is CI's), so a newer
# compiler's new warning never stops a build.
if [ "$build" = 1 ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_WERROR=OFF >/dev/null
  ninja -C build strata
fi
