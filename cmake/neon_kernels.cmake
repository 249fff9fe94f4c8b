# The AArch64 NEON kernel sources and their per-file flags, shared by
# CMakeLists.txt (native AArch64 builds) and tests/kernels/CMakeLists.txt (the
# qemu cross-build). Set STRATA_ROOT to the repository root before including.
set(STRATA_NEON_KERNELS ${STRATA_ROOT}/src/kernels/qgemm_neon.cpp ${STRATA_ROOT}/src/kernels/qgemm_neon_dotprod.cpp
                        ${STRATA_ROOT}/src/kernels/qgemm_neon_i8mm.cpp)
# Every fused multiply-add is written out (vfmaq_f32), so no contraction may
# add others. The extensions are per-file ISAs: the other files (baseline
# AArch64, or -march=native) never get them, and the dispatcher runs these
# only where the kernel reports them (getauxval, cpu_features.cpp).
set_property(SOURCE ${STRATA_NEON_KERNELS} APPEND PROPERTY COMPILE_OPTIONS -ffp-contract=off)
set_property(SOURCE ${STRATA_ROOT}/src/kernels/qgemm_neon_dotprod.cpp APPEND PROPERTY COMPILE_OPTIONS
                                                                             -march=armv8.2-a+dotprod)
set_property(SOURCE ${STRATA_ROOT}/src/kernels/qgemm_neon_i8mm.cpp APPEND PROPERTY COMPILE_OPTIONS
                                                                          -march=armv8.2-a+dotprod+i8mm)
