#include "cli/common.h"

#include <thread>

#include "util/error.h"

namespace strata::cli {

void EngineFlags::add(CLI::App* cmd) {
  cmd->add_option("--model", model, "Model directory (Hugging Face checkpoint)")->required();
  cmd->add_option("--threads", threads, "Compute threads (0 = all cores)")->check(CLI::Range(0, 1024));
  cmd->add_option("--attn", attn, "Attention form: absorbed (decode form) or naive (prefill form)")
      ->check(CLI::IsMember({"absorbed", "naive"}));
  cmd->add_flag("--dense-attention", dense_attention, "Keep every causal key (disable DSA top-k selection)");
}

ForwardOptions EngineFlags::forward_options() const {
  ForwardOptions o;
  o.form = attn == "naive" ? AttentionForm::Naive : AttentionForm::Absorbed;
  o.dense_attention = dense_attention;
  return o;
}

Engine open_engine(const EngineFlags& f, bool load_mtp) {
  Engine e;
  LoadOptions lo;
  lo.load_mtp = load_mtp;
  e.model = load_model(f.model, lo);
  int threads = f.threads > 0 ? f.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  e.pool = std::make_unique<ThreadPool>(threads);
  e.store = std::make_unique<ResidentExpertStore>(e.model->weights);
  e.runner = std::make_unique<ModelRunner>(*e.model, *e.store, *e.pool);
  return e;
}

std::vector<int32_t> parse_ids(const std::string& s, int64_t vocab, const char* flag) {
  std::vector<int32_t> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    const std::string tok = s.substr(i, j - i);
    if (tok.empty() || tok.size() > 10 || tok.find_first_not_of("0123456789") != std::string::npos)
      fail("{}: \"{}\" is not a token id", flag, tok);
    const long long v = std::stoll(tok);
    if (v >= vocab) fail("{}: token id {} is outside the vocabulary of {}", flag, v, vocab);
    out.push_back(static_cast<int32_t>(v));
    i = j + 1;
  }
  if (out.empty()) fail("{}: no token ids given", flag);
  return out;
}

int32_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return static_cast<int32_t>(best);
}

}  // namespace strata::cli
