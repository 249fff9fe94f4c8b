# Toolchain file: cross-compiling for AArch64 Linux with Debian's
# g++-aarch64-linux-gnu; programs run under qemu-aarch64 (Debian qemu-user).
# Used by tests/kernels/aarch64_qemu.sh (only src/kernels is cross-built: the
# whole engine would need arm64 builds of its -dev libraries).
#   cmake -S tests/kernels -B build-aarch64-qemu -G Ninja \
#         -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
find_program(STRATA_QEMU_AARCH64 qemu-aarch64)
if(STRATA_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${STRATA_QEMU_AARCH64})
endif()
