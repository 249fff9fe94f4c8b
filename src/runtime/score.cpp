#include "runtime/score.h"

#include <algorithm>

#include "core/error.h"
#include "runtime/engine.h"

namespace strata {

ScoreOutput score(Engine& e, std::span<const int32_t> ids, int64_t chunk, bool mtp) {
  const ModelConfig& c = e.config();
  const int64_t T = static_cast<int64_t>(ids.size()), V = c.vocab_size, D = c.hidden_size;
  if (T < 1) fail("score: no token ids");
  if (mtp && c.num_nextn_predict_layers < 1) fail("--mtp: the model has no MTP layer");
  Session s(c, T, mtp, e.options().forward.kv);
  ScoreOutput out;
  out.logits.resize(static_cast<size_t>(T * V));
  out.hidden.resize(static_cast<size_t>(T * D));
  const int64_t step = chunk > 0 ? chunk : T;
  std::vector<Row> rows;
  for (int64_t p0 = 0; p0 < T; p0 += step) {
    rows.clear();
    for (int64_t p = p0; p < std::min(T, p0 + step); ++p)
      rows.push_back({&s, static_cast<int32_t>(p), ids[static_cast<size_t>(p)], true});
    e.forward(rows, out.logits.data() + p0 * V, out.hidden.data() + p0 * D, static_cast<int64_t>(rows.size()));
  }
  if (!mtp) return out;
  out.mtp_logits.resize(static_cast<size_t>(std::max<int64_t>(T - 1, 1) * V));
  for (int64_t p0 = 0; p0 < T - 1; p0 += step) {
    rows.clear();
    for (int64_t p = p0; p < std::min(T - 1, p0 + step); ++p)
      rows.push_back({&s, static_cast<int32_t>(p), ids[static_cast<size_t>(p + 1)], true});
    e.forward_mtp(rows, out.hidden.data() + p0 * D, out.mtp_logits.data() + p0 * V);
  }
  return out;
}

}  // namespace strata
