#include "core/aligned.h"

#include <cstdlib>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace strata {

namespace {
constexpr std::size_t kHuge = std::size_t{2} << 20;
std::size_t round_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }
}  // namespace

void* alloc_streamed(std::size_t bytes, std::size_t align) {
  if (bytes == 0) bytes = 1;
  const std::size_t n = round_up(bytes, align);
  void* p = nullptr;
  if (::posix_memalign(&p, bytes < kHuge ? align : kHuge, n) != 0) return nullptr;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // The whole 2 MiB pages only: a huge page over the tail would be backed
  // in full when touched, up to 2 MiB more than asked for (the expert
  // cache's budget counts the bytes asked for). Advice only: where THP is
  // "never", or the kernel lacks it, this fails and the buffer stays on base
  // pages (same contents, same results).
  if (bytes >= kHuge) (void)::madvise(p, bytes / kHuge * kHuge, MADV_HUGEPAGE);
#endif
  return p;
}

void free_streamed(void* p) noexcept { std::free(p); }

}  // namespace strata
