#!/usr/bin/env bash
# The AArch64 NEON kernel paths on an x86 machine: cross-compiles src/kernels
# and tests/kernels/neon_kernels_test.cpp (cmake/aarch64-linux-gnu.cmake,
# static) and runs the test under qemu-aarch64 as three CPUs:
#   -cpu max         SDOT and SMMLA: neon, neon-dotprod, neon-i8mm; picks neon-i8mm
#   -cpu cortex-a76  SDOT, no i8mm:  neon, neon-dotprod;            picks neon-dotprod
#   -cpu cortex-a53  ARMv8.0:        neon;                          picks neon
# Every supported path must equal the scalar reference bit for bit. Then the
# same test built for the host (x86: scalar, avx2, avx512, avx512-vnni) and
# the AArch64 build print a fingerprint of every path's outputs on a fixed
# suite (--digest): all must be equal, x86 and AArch64 alike. Timings under
# qemu mean nothing, so none are taken.
# Usage: tests/kernels/aarch64_qemu.sh [BUILD_DIR]   (exit 77: tools missing, skipped)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${1:-$root/build-aarch64-qemu}"

missing=()
for t in aarch64-linux-gnu-g++ qemu-aarch64 cmake ninja; do command -v "$t" >/dev/null || missing+=("$t"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "SKIP: ${missing[*]} not found; the NEON kernels are not tested." \
       "Install with: apt-get install g++-aarch64-linux-gnu qemu-user (scripts/setup.sh --test-deps)"
  exit 77
fi

echo "== cross-building the kernels for AArch64 in $out"
cmake -S "$root/tests/kernels" -B "$out" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="$root/cmake/aarch64-linux-gnu.cmake" >/dev/null
ninja -C "$out" -j"${JOBS:-2}" neon_kernels_test
bin="$out/neon_kernels_test"

fail=0
run() {  # CPU, expected best path, the NEON paths it must support
  echo "== qemu-aarch64 -cpu $1 (want $2; supported: $3)"
  if ! qemu-aarch64 -cpu "$1" "$bin" --expect-best "$2" --expect-supported "$3"; then
    echo "FAILED under -cpu $1"
    fail=1
  fi
}
run max neon-i8mm neon,neon-dotprod,neon-i8mm
run cortex-a76 neon-dotprod neon,neon-dotprod
run cortex-a53 neon neon

if [ "$(uname -m)" = x86_64 ]; then
  echo "== the same bits on x86 and AArch64 (--digest)"
  host="$out/host_digest_test"
  srcs=("$root/tests/kernels/neon_kernels_test.cpp" "$root"/src/kernels/{qgemm_scalar,ops,cpu_features,qgemm_avx2,qgemm_avx512,qgemm_avx512vnni}.cpp)
  stale=1
  if [ -x "$host" ]; then
    stale=0
    for f in "${srcs[@]}" "$root"/src/kernels/*.h; do [ "$f" -nt "$host" ] && stale=1; done
  fi
  # The engine's kernel flags (CMakeLists.txt); the SIMD files carry their ISA in target pragmas.
  if [ "$stale" = 1 ]; then
    c++ -std=c++20 -O3 -ffp-contract=off -w -I"$root/src" "${srcs[@]}" -o "$host" ||
      { echo "FAILED: building the host digest test"; exit 1; }
  fi
  # digest LABEL PATHS COMMAND...: COMMAND --digest must exit 0 and print one
  # well-formed "digest PATH HEX16" line per supported path; PATHS is the exact
  # comma-separated list expected, or "x86" for the host (scalar first, then
  # whichever x86 paths this CPU has).
  digests=""
  digest() {
    local label=$1 want=$2 out rc=0 paths
    shift 2
    out=$("$@" --digest) || rc=$?
    if [ "$rc" != 0 ]; then
      echo "FAILED: $label --digest exited with status $rc"
      fail=1
      return 0
    fi
    if [ -z "$out" ] || printf '%s\n' "$out" | grep -Evq '^digest [a-z0-9-]+ [0-9a-f]{16}$'; then
      echo "FAILED: $label --digest printed no or malformed lines: '$out'"
      fail=1
      return 0
    fi
    paths=$(printf '%s\n' "$out" | awk '{print $2}' | paste -sd, -)
    if [ "$want" = x86 ]; then
      [[ "$paths" =~ ^scalar(,avx2)?(,avx512)?(,avx512-vnni)?$ ]] || {
        echo "FAILED: $label --digest paths '$paths', expected scalar then x86 paths"
        fail=1
        return 0
      }
    elif [ "$paths" != "$want" ]; then
      echo "FAILED: $label --digest paths '$paths', expected '$want'"
      fail=1
      return 0
    fi
    digests+="$out"$'\n'
  }
  digest "host $(uname -m)" x86 "$host"
  digest "qemu -cpu max" scalar,neon,neon-dotprod,neon-i8mm qemu-aarch64 -cpu max "$bin"
  digest "qemu -cpu cortex-a76" scalar,neon,neon-dotprod qemu-aarch64 -cpu cortex-a76 "$bin"
  digest "qemu -cpu cortex-a53" scalar,neon qemu-aarch64 -cpu cortex-a53 "$bin"
  printf '%s' "$digests" | sort | uniq -c
  distinct=$(printf '%s' "$digests" | awk '{print $3}' | sort -u | wc -l)
  if [ "$distinct" != 1 ]; then
    echo "FAILED: the paths' outputs differ between x86 and AArch64 ($distinct distinct digests)"
    fail=1
  fi
fi
[ "$fail" = 0 ] && echo "== all NEON paths bit-identical to scalar and to x86; dispatch as expected"
exit "$fail"
