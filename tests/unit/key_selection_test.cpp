// The DSA key selection (model/key_selection.h) against a full sort by the
// same order -- higher score first, the lower position on an exact tie -- on
// random scores where ties are forced (scores drawn from a few values, runs of
// equal scores, all equal) and on plain random ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "model/key_selection.h"

namespace strata {
namespace {

std::vector<int32_t> by_full_sort(const std::vector<float>& s, int64_t k) {
  std::vector<int32_t> ord(s.size());
  for (size_t i = 0; i < ord.size(); ++i) ord[i] = static_cast<int32_t>(i);
  std::sort(ord.begin(), ord.end(), [&](int32_t a, int32_t b) { return s[a] != s[b] ? s[a] > s[b] : a < b; });
  std::vector<int32_t> sel(ord.begin(), ord.begin() + k);
  std::sort(sel.begin(), sel.end());
  return sel;
}

TEST(KeySelection, EqualsFullSortWithForcedTies) {
  std::mt19937 rng(20261202);
  std::vector<int32_t> scratch, got;
  int cases = 0, tied_at_boundary = 0;
  for (int trial = 0; trial < 600; ++trial) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 3000);
    const int64_t k = 1 + static_cast<int64_t>(rng() % static_cast<uint32_t>(n));
    std::vector<float> s(static_cast<size_t>(n));
    const int kind = trial % 4;
    const int levels = 1 + static_cast<int>(rng() % 8);
    for (int64_t i = 0; i < n; ++i) {
      switch (kind) {
        case 0: s[i] = static_cast<float>(rng() % static_cast<uint32_t>(levels)) * 0.25f; break;  // few values
        case 1: s[i] = static_cast<float>((i / 37) % levels);  break;                              // runs of ties
        case 2: s[i] = 1.5f; break;                                                                // all equal
        default: s[i] = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng); break;            // plain
      }
    }
    scratch.assign(static_cast<size_t>(n), -1);
    got.clear();
    select_top_keys(s.data(), n, k, scratch.data(), got);
    const std::vector<int32_t> want = by_full_sort(s, k);
    ASSERT_EQ(got, want) << "trial " << trial << " n " << n << " k " << k << " kind " << kind;
    ++cases;
    // Count the cases where the k-th and (k+1)-th scores tie: there the
    // tie rule alone decides membership.
    if (k < n) {
      std::vector<float> sorted = s;
      std::sort(sorted.begin(), sorted.end(), std::greater<float>());
      tied_at_boundary += sorted[static_cast<size_t>(k - 1)] == sorted[static_cast<size_t>(k)];
    }
  }
  EXPECT_EQ(cases, 600);
  EXPECT_GT(tied_at_boundary, 200) << "the trials must exercise ties at the selection boundary";
}

TEST(KeySelection, ReservedOutputDoesNotReallocate) {
  std::vector<float> s(5000);
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<float>((i * 7919) % 101);
  std::vector<int32_t> scratch(s.size()), out;
  out.reserve(2048);
  const int32_t* before = out.data();
  select_top_keys(s.data(), static_cast<int64_t>(s.size()), 2048, scratch.data(), out);
  EXPECT_EQ(out.data(), before);
  EXPECT_EQ(out, by_full_sort(s, 2048));
}

}  // namespace
}  // namespace strata
