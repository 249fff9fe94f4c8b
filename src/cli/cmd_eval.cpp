// strata eval: quality of a model (usually a quantized container) against a
// reference model on token ids: KL divergence, top-1 agreement, perplexity.
#include <cmath>
#include <memory>
#include <cstdio>
#include <sstream>

#include "cli/commands.h"
#include "cli/common.h"
#include "runtime/score.h"
#include "core/error.h"
#include "core/io.h"
#include "core/json.h"

namespace strata::cli {

namespace {

// log-softmax in double.
void log_softmax(const float* x, int64_t n, std::vector<double>& out) {
  out.resize(static_cast<size_t>(n));
  double m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, static_cast<double>(x[i]));
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(x[i]) - m);
  const double lse = m + std::log(s);
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = static_cast<double>(x[i]) - lse;
}

}  // namespace

void add_eval_command(CLI::App& app, Runner& run) {
  struct Flags {
    EngineFlags engine;
    std::string ref, ids_file;
    int ctx = 256;
    bool json = false;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("eval", "Perplexity, and KL divergence / top-1 agreement against a reference model");
  f->engine.add(cmd);
  cmd->add_option("--ref", f->ref, "Reference model directory (e.g. the unquantized Hugging Face checkpoint)");
  cmd->add_option("--ids-file", f->ids_file, "Token ids (comma/whitespace separated, or a JSON array)")->required();
  cmd->add_option("--ctx", f->ctx, "Window length: the ids are scored in independent windows of this many tokens")
      ->check(CLI::Range(2, 1 << 20));
  cmd->add_flag("--json", f->json, "Print one JSON object");
  cmd->callback([f, &run] {
    run = [f]() -> int {
      OpenedEngine opened = open_engine(f->engine, false);
      if (!opened.engine) return opened.status;  // a rank > 0 of --experts-over mpi
      Engine& e = *opened.engine;
      std::unique_ptr<Engine> r;
      if (!f->ref.empty()) {
        if (f->engine.experts_over == "mpi") fail("eval --ref: not with --experts-over mpi (one model per job)");
        EngineFlags rf = f->engine;
        rf.model = f->ref;
        rf.kv_type = "f32";  // the reference keeps the exact key cache (--kv-type applies to the model)
        r = std::make_unique<Engine>(rf.options(false));
        if (r->config().vocab_size != e.config().vocab_size)
          fail("--ref {}: vocabulary {} differs from the model's {}", f->ref, r->config().vocab_size,
               e.config().vocab_size);
      }
      const ModelConfig& c = e.config();
      const auto ids = read_ids_file(f->ids_file, c.vocab_size);
      const int64_t V = c.vocab_size, W = std::min<int64_t>(f->ctx, c.max_position_embeddings);
      std::vector<double> pa, pb;
      double nll_a = 0, nll_b = 0, kl_sum = 0, kl_max = 0;
      int64_t n_pred = 0, n_pos = 0, agree = 0;
      for (size_t w0 = 0; w0 + 1 < ids.size(); w0 += static_cast<size_t>(W)) {
        const int64_t T = std::min<int64_t>(W, static_cast<int64_t>(ids.size() - w0));
        const std::span<const int32_t> window(ids.data() + w0, static_cast<size_t>(T));
        const std::vector<float> la = score(e, window, 0, false).logits;
        const std::vector<float> lb = r ? score(*r, window, 0, false).logits : std::vector<float>{};
        for (int64_t p = 0; p < T; ++p) {
          log_softmax(la.data() + p * V, V, pa);
          if (p + 1 < T) {
            nll_a -= pa[static_cast<size_t>(ids[w0 + p + 1])];
            ++n_pred;
          }
          if (!r) continue;
          log_softmax(lb.data() + p * V, V, pb);
          if (p + 1 < T) nll_b -= pb[static_cast<size_t>(ids[w0 + p + 1])];
          double kl = 0;
          int64_t ta = 0, tb = 0;
          for (int64_t i = 0; i < V; ++i) {
            kl += std::exp(pb[static_cast<size_t>(i)]) * (pb[static_cast<size_t>(i)] - pa[static_cast<size_t>(i)]);
            if (pa[static_cast<size_t>(i)] > pa[static_cast<size_t>(ta)]) ta = i;
            if (pb[static_cast<size_t>(i)] > pb[static_cast<size_t>(tb)]) tb = i;
          }
          kl_sum += kl;
          kl_max = std::max(kl_max, kl);
          agree += ta == tb;
          ++n_pos;
        }
      }
      Json out;
      out["tokens"] = ids.size();
      out["window"] = W;
      out["predictions"] = n_pred;
      out["ppl"] = std::exp(nll_a / static_cast<double>(n_pred));
      if (r) {
        out["ref_ppl"] = std::exp(nll_b / static_cast<double>(n_pred));
        out["kl_mean"] = kl_sum / static_cast<double>(n_pos);
        out["kl_max"] = kl_max;
        out["top1_agreement"] = static_cast<double>(agree) / static_cast<double>(n_pos);
      }
      if (f->json) {
        std::printf("%s\n", out.dump().c_str());
      } else {
        std::printf("perplexity %.4f over %lld predictions", out["ppl"].get<double>(), (long long)n_pred);
        if (r)
          std::printf(" | reference %.4f | KL mean %.3g max %.3g | top-1 agreement %.2f%%", out["ref_ppl"].get<double>(),
                      out["kl_mean"].get<double>(), kl_max, 100.0 * out["top1_agreement"].get<double>());
        std::printf("\n");
      }
      finish_engine(e, f->engine);
      return 0;
    };
  });
}

}  // namespace strata::cli
