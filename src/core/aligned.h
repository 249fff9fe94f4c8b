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

// Memory for large, streamed, read-mostly buffers (the resident weights, the
// expert cache's slots): from 2 MiB on, 2 MiB-aligned with its whole 2 MiB
// pages marked MADV_HUGEPAGE before the first touch, so that where
// transparent huge pages are "madvise" (a common default) the kernel backs
// them with 2 MiB pages: a GEMV streaming the buffer then takes a TLB miss
// per 2 MiB instead of per 4 KiB (docs/kernels.md, "Huge pages"). Below
// 2 MiB: `align`-aligned. The size is rounded up to `align` only, so nothing
// past the request is ever backed. nullptr when out of memory; free with
// free_streamed (or std::free). `align`: a power of two, a multiple of
// sizeof(void*), at most 2 MiB.
void* alloc_streamed(std::size_t bytes, std::size_t align);

template <typename T>
struct StreamedAllocator {
  using value_type = T;
  StreamedAllocator() = default;
  template <typename U>
  StreamedAllocator(const StreamedAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    void* p = alloc_streamed(n * sizeof(T), 64);
    if (!p) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t) noexcept;
  template <typename U>
  bool operator==(const StreamedAllocator<U>&) const noexcept {
    return true;
  }
};

void free_streamed(void* p) noexcept;
template <typename T>
void StreamedAllocator<T>::deallocate(T* p, std::size_t) noexcept {
  free_streamed(p);
}

// Bytes in alloc_streamed memory (Model::dense_blob).
using StreamedBytes = std::vector<unsigned char, StreamedAllocator<unsigned char>>;

// A forward's scratch (model/forward.h's Workspace): alloc_streamed memory
// (2 MiB pages for the large buffers, so that the first forward of a long
// prompt takes a page fault per 2 MiB rather than per 4 KiB as its buffers
// grow) whose elements a resize leaves uninitialised instead of zeroing
// them: every user writes a buffer before reading it. The first 512-row
// prefill of the GLM-5.2 slice grows ~0.5 GB of it; zeroing that on the
// calling thread, with 4 KiB faults, made it ~20% slower than the next one
// (docs/kernels.md, "The first prefill").
template <typename T>
struct ScratchAllocator : StreamedAllocator<T> {
  using value_type = T;
  template <typename U>
  struct rebind {
    using other = ScratchAllocator<U>;
  };
  ScratchAllocator() = default;
  template <typename U>
  ScratchAllocator(const ScratchAllocator<U>&) noexcept {}
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    if constexpr (sizeof...(Args) == 0)
      ::new (static_cast<void*>(p)) U;  // default-initialised: no zeroing
    else
      ::new (static_cast<void*>(p)) U(static_cast<Args&&>(args)...);
  }
  template <typename U>
  bool operator==(const ScratchAllocator<U>&) const noexcept {
    return true;
  }
};

using ScratchFloats = std::vector<float, ScratchAllocator<float>>;

}  // namespace strata
