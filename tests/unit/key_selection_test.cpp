// The DSA key selection (model/key_selection.h) against a full sort by the
// same order -- higher score first, the lower position on an exact tie -- on
// random scores where ties are forced (scores drawn from a few values, runs of
// equal scores, all equal, +0.0 against -0.0), where only the last bits
// differ, with infinities, denormals and huge values, all negative, and on
// plain random ones; every 10th row up to 40000 keys long. Long rows keeping
// few keys take the candidates path (model/indexer.cpp): tested separately
// with rows built against its sample.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "model/key_selection.h"

namespace strata::key_selection_test {
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
  for (int trial = 0; trial < 1200; ++trial) {
    // Every 10th trial long (a 40k context against GLM-5's index_topk 2048).
    const int64_t n = 1 + static_cast<int64_t>(rng() % (trial % 10 == 9 ? 40000 : 3000));
    const int64_t k = 1 + static_cast<int64_t>(rng() % static_cast<uint32_t>(n));
    std::vector<float> s(static_cast<size_t>(n));
    const int kind = trial % 8;
    const int levels = 1 + static_cast<int>(rng() % 8);
    for (int64_t i = 0; i < n; ++i) {
      switch (kind) {
        case 0: s[i] = static_cast<float>(rng() % static_cast<uint32_t>(levels)) * 0.25f; break;  // few values
        case 1: s[i] = static_cast<float>((i / 37) % levels);  break;                              // runs of ties
        case 2: s[i] = 1.5f; break;                                                                // all equal
        case 3: {  // +0.0 and -0.0 (equal scores) with a few higher ones
          const uint32_t v = rng() % 3;
          s[i] = v == 0 ? 0.0f : v == 1 ? -0.0f : 0.5f;
          break;
        }
        case 4: {  // neighbours in the last bits (every radix digit decides), both signs
          const float base = (rng() % 2 ? 1.0f : -1.0f) * 0.75f;
          s[i] = std::nextafter(base, static_cast<float>(rng() % 2 ? 2 : -2));
          for (uint32_t steps = rng() % 300; steps > 0; --steps) s[i] = std::nextafter(s[i], 2.0f);
          break;
        }
        case 5: {  // infinities, zeros of both signs, denormals and huge values mixed
          const float pick[] = {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(), 0.0f,
                                -0.0f, std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min(),
                                3e38f, -3e38f, 1.0f};
          s[i] = pick[rng() % 9];
          break;
        }
        case 6: s[i] = -static_cast<float>(rng() % 1000) * 1e-3f; break;                          // all negative
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
  EXPECT_EQ(cases, 1200);
  EXPECT_GT(tied_at_boundary, 400) << "the trials must exercise ties at the selection boundary";
}

TEST(KeySelection, LongRowsEqualFullSortWhicheverPathDecides) {
  // Rows of 4096-40000 scores keeping at most a quarter (a long context
  // against index_topk): selected from candidates above a threshold placed
  // by a sample of the scores, or, where the sample misleads it, by the full
  // partition. Both must give the full sort's set: the same kinds of scores
  // as above (ties at the cut, +0.0 against -0.0, neighbours in the last
  // bits), and rows built against the sample -- the sampled positions
  // (evenly spaced) scoring lowest (the threshold lets almost everything
  // through) or highest (it lets through fewer than k) -- and rows where
  // exactly k, k - 1 or k + 1 scores beat a run of ties.
  std::mt19937 rng(20261207);
  std::vector<int32_t> scratch, got;
  int cases = 0;
  for (int trial = 0; trial < 240; ++trial) {
    const int64_t n = 4096 + static_cast<int64_t>(rng() % 36000);
    const int64_t k = 1 + static_cast<int64_t>(rng() % static_cast<uint32_t>(n / 4));
    std::vector<float> s(static_cast<size_t>(n));
    const int kind = trial % 8;
    const auto sampled = [&](int64_t i) {  // one of the evenly spaced positions a sample of 1024 reads
      const int64_t q = i * 1024 / n;
      return q * n / 1024 == i || (q + 1) * n / 1024 == i;
    };
    for (int64_t i = 0; i < n; ++i) {
      switch (kind) {
        case 0: s[i] = static_cast<float>(rng() % 5) * 0.25f; break;                      // few values
        case 1: s[i] = static_cast<float>(rng() % 3 == 0 ? 0.0f : -0.0f) + (rng() % 50 == 0 ? 1.0f : 0.0f); break;
        case 2: {  // neighbours in the last bits
          s[i] = 0.75f;
          for (uint32_t steps = rng() % 200; steps > 0; --steps) s[i] = std::nextafter(s[i], 2.0f);
          break;
        }
        case 3: s[i] = sampled(i) ? -1.0f - static_cast<float>(rng() % 100) : static_cast<float>(rng() % 1000); break;
        case 4: s[i] = sampled(i) ? 1e6f + static_cast<float>(rng() % 100) : static_cast<float>(rng() % 1000); break;
        case 5:
        case 6: {  // a long run of ties at 0.5 (a few scores above it: below)
          s[i] = 0.5f;
          break;
        }
        default: s[i] = std::normal_distribution<float>(0.0f, 1.0f)(rng); break;
      }
    }
    if (kind == 5 || kind == 6) {  // exactly k - 1, k or k + 1 scores above the ties
      const int64_t above = std::min<int64_t>(n, k - 1 + static_cast<int64_t>(rng() % 3));
      for (int64_t a = 0; a < above; ++a) s[rng() % static_cast<uint32_t>(n)] = 2.0f + static_cast<float>(a);
    }
    scratch.assign(static_cast<size_t>(n), -1);
    got.clear();
    select_top_keys(s.data(), n, k, scratch.data(), got);
    ASSERT_EQ(got, by_full_sort(s, k)) << "trial " << trial << " n " << n << " k " << k << " kind " << kind;
    ++cases;
  }
  EXPECT_EQ(cases, 240);
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
}  // namespace strata::key_selection_test
