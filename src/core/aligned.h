// Vectors whose data starts on a cache line: the SIMD kernels' full-width
// loads of a row then never straddle two lines when rows are a multiple of
// 64 bytes long (the key caches: kv_lora_rank, rope and indexer widths).
#pragma once
#include <cstddef>
#include <new>
#include <vector>

namespace strata {

template <typename T, std::size_t Align = 64>
struct AlignedAllocator {
  using value_type = T;
  template <typename U>
  struct rebind {
    using other = AlignedAllocator<U, Align>;
  };
  AlignedAllocator() = default;
  template <typename U>
  AlignedAllocator(const AlignedAllocator<U, Align>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{Align})); }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t{Align}); }
  template <typename U>
  bool operator==(const AlignedAllocator<U, Align>&) const noexcept {
    return true;
  }
};

// A vector of floats starting on a 64-byte boundary.
using AlignedFloats = std::vector<float, AlignedAllocator<float>>;

}  // namespace strata
