// Helpers for the forward's scratch (Workspace, forward.h).
#pragma once
#include <cstddef>
#include <vector>

namespace strata {

// Grows `v` to at least n elements (never shrinks) and returns its data: a
// buffer sized by the largest batch seen, allocated once.
template <typename T>
T* grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

}  // namespace strata
