// The GEMM driver every SIMD path shares: how a call's outputs y[r][o]
// (activation row r, weight row o) are cut into the tiles a path's kernel
// computes, plus the scalar walk over an integer weight row's superblocks.
// Written once, compiled by each path with its own ISA: it is included
// inside the SIMD file's anonymous namespace, under its `#pragma GCC target`
// (x86) or per-file -march (AArch64), after every standard header and
// kernels/qgemm.h. So it includes nothing and instantiates no library
// template: no function here may be compiled for one ISA and picked by the
// linker for generic callers (qgemm_avx512_impl.h).
//
// Tiling sets the speed only, never a result: every output is the dot16 of
// one weight row and one activation row (qgemm.h), whichever tile computed
// it, so a path may pick any tile sizes and still equal the scalar reference.

#pragma once

// A tile's extent as a type, so the kernel gets it as a constant: Extent<N>::n.
template <int N>
struct Extent {
  static constexpr int n = N;
};

// Activation rows per pass over the weights: a block of about 256 KiB of
// rows of row_bytes, which stays in L2 while every weight row streams past
// it once; a multiple of `multiple` (a path's row tile), at least one tile.
inline int64_t row_block(int64_t row_bytes, int64_t multiple = 4) {
  const int64_t rb = (256 << 10) / (row_bytes > 0 ? row_bytes : 1) / multiple * multiple;
  return rb < multiple ? multiple : rb;
}

// tile(Extent<NR>{}, r) over rows [r, r1) in whole tiles of NR rows, then
// the k < NR rows left as one tile, tile(Extent<k>{}, r).
template <int NR, class Tile>
inline void row_tiles(int64_t r, int64_t r1, const Tile& tile) {
  for (; r + NR <= r1; r += NR) tile(Extent<NR>{}, r);
  if constexpr (NR > 1) {
    if (r < r1) row_tiles<NR - 1>(r, r1, tile);
  }
}

// Covers o < nout, r < nrows with tile(Extent<nw>{}, Extent<nr>{}, o, r),
// which computes weight rows [o, o + nw) against activation rows [r, r + nr):
// activation rows in blocks of rb (row_block); within a block, weight rows
// in tiles of NW (the rest one at a time), each against the block's rows in
// tiles of NR (the rest as one smaller tile). A tile keeps its NW x NR
// accumulators in registers and uses each weight vector it loads NR times.
template <int NW, int NR, class Tile>
inline void gemm_tiles(int64_t nout, int64_t nrows, int64_t rb, const Tile& tile) {
  for (int64_t r0 = 0; r0 < nrows; r0 += rb) {
    const int64_t r1 = nrows - r0 < rb ? nrows : r0 + rb;
    int64_t o = 0;
    for (; o + NW <= nout; o += NW) row_tiles<NR>(r0, r1, [&](auto nr, int64_t r) { tile(Extent<NW>{}, nr, o, r); });
    for (; o < nout; ++o) row_tiles<NR>(r0, r1, [&](auto nr, int64_t r) { tile(Extent<1>{}, nr, o, r); });
  }
}

// ---- integer weights, for paths that load whole superblocks (AVX2, NEON) ----

// The weight scale of each of a superblock's 16 blocks, b0 .. b0 + 15 (0
// past the row's nb blocks); m = group / 32, 0 for one scale per row.
template <class Scales>  // const float* or ScaleRow
inline void block_scales(const Scales& ws, int64_t b0, int64_t nb, int64_t m, float* wsb) {
  if (m == 0) {
    for (int j = 0; j < 16; ++j) wsb[j] = j < nb ? ws[0] : 0.0f;
  } else {  // block b0 + j has weight scale (b0 + j) / m
    int64_t g = b0 / m, k = b0 % m;
    for (int j = 0; j < 16; ++j) {
      wsb[j] = j < nb ? ws[g] : 0.0f;
      if (++k == m) k = 0, ++g;
    }
  }
}

// Superblock sb's weight bytes of row wrow; a row's last partial superblock
// is copied zero-padded to `tail` (the activations there are zero too).
template <int BITS>
inline const uint8_t* super_weights(const QWeight& w, const uint8_t* wrow, int64_t sb, uint8_t* tail) {
  constexpr int64_t SB = kQSuper * BITS / 8;
  const int64_t off = sb * SB;
  if (off + SB <= w.row_bytes) return wrow + off;
  __builtin_memset(tail, 0, SB);
  __builtin_memcpy(tail, wrow + off, static_cast<size_t>(w.row_bytes - off));
  return tail;
}
