// Teacher forcing: the model's logits at every position of a token
// sequence (strata score, strata eval), and the MTP layer's next-next-token
// logits over the same positions.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace strata {

class Engine;

struct ScoreOutput {
  std::vector<float> logits;      // [T, vocab]
  std::vector<float> hidden;      // [T, hidden]: final-normed hidden states (with mtp)
  std::vector<float> mtp_logits;  // [T - 1, vocab] (with mtp): position p predicts ids[p + 2]
};

// `chunk` rows per forward (0: the whole sequence in one). `mtp` needs an
// engine opened with the MTP layer.
ScoreOutput score(Engine& e, std::span<const int32_t> ids, int64_t chunk, bool mtp);

}  // namespace strata
