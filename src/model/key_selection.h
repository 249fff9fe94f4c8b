// The DSA key selection of one query row (model/indexer.cpp): the positions
// of the k highest of n indexer scores, in ascending position order. The
// order is strict and total -- higher score first, the lower position on an
// exactly equal score -- so the selected set is the first k of a full sort by
// that order; a partial selection (nth_element) finds it in O(n). A long row
// keeping at most a quarter of its keys is first tried from the candidates
// above a threshold a sample of its scores places (the same set, no sort;
// the full partition where the sample misleads it). No order is defined
// among NaN scores: either way the k positions are valid and ascending.
#pragma once
#include <cstdint>
#include <vector>

namespace strata {

// order: scratch of n ints (overwritten). out: the k positions, ascending;
// with capacity k reserved it does not allocate. Requires 0 < k <= n.
void select_top_keys(const float* scores, int64_t n, int64_t k, int32_t* order, std::vector<int32_t>& out);

}  // namespace strata
