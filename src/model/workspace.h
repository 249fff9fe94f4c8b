// Helpers for the forward's scratch (Workspace, forward.h).
#pragma once
#include <cstddef>
#include <vector>

namespace strata {

// Grows `v` to at least n elements (never shrinks) and returns its data: a
// buffer sized by the largest batch seen, allocated once.
template <typename T, typename A>
T* grow(std::vector<T, A>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// A per-key buffer of one row (scores, key order): sized to the row's
// session capacity the first time, so a context that grows by one key per
// decode step never reallocates it. `keys` <= capacity.
template <typename T, typename A>
T* grow_keys(std::vector<T, A>& v, size_t keys, size_t capacity) {
  return grow(v, keys > capacity ? keys : capacity);
}

}  // namespace strata
