// Helpers for the forward's scratch (Workspace, forward.h).
#pragma once
#include <cstddef>
#include <vector>

#include "core/error.h"

namespace strata {

// A buffer that is part of a larger one (Workspace::phase): its floats are
// laid out by the phase that uses them (ModelRunner::set_phase) and never
// grow on their own.
struct ScratchView {
  float* p = nullptr;
  size_t n = 0;  // floats
  float* data() const { return p; }
  size_t size() const { return n; }
};

// Grows `v` to at least n elements (never shrinks) and returns its data: a
// buffer sized by the largest batch seen, allocated once.
template <typename T, typename A>
T* grow(std::vector<T, A>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// A view is laid out for the phase's rows before use: asking it for more is a
// bug in that layout, reported rather than written past.
inline float* grow(ScratchView& v, size_t n) {
  if (n > v.n) fail("forward scratch: {} floats asked of a {}-float view (phase laid out for fewer rows)", n, v.n);
  return v.p;
}

// A per-key buffer of one row (scores, key order): sized to the row's
// session capacity the first time, so a context that grows by one key per
// decode step never reallocates it. `keys` <= capacity.
template <typename T, typename A>
T* grow_keys(std::vector<T, A>& v, size_t keys, size_t capacity) {
  return grow(v, keys > capacity ? keys : capacity);
}

}  // namespace strata
