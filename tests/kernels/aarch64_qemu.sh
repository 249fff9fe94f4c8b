#!/usr/bin/env bash
# The AArch64 NEON kernel paths on an x86 machine: cross-compiles src/kernels
# and tests/kernels/neon_kernels_test.cpp (cmake/aarch64-linux-gnu.cmake,
# static) and runs the test under qemu-aarch64 as three CPUs:
#   -cpu max         SDOT and SMMLA: neon, neon-dotprod, neon-i8mm; picks neon-i8mm
#   -cpu cortex-a76  SDOT, no i8mm:  neon, neon-dotprod;            picks neon-dotprod
#   -cpu cortex-a53  ARMv8.0:        neon;                          picks neon
# Every supported path must equal the scalar reference bit for bit. Timings
# under qemu mean nothing, so none are taken.
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
[ "$fail" = 0 ] && echo "== all NEON paths bit-identical to scalar; dispatch as expected"
exit "$fail"
