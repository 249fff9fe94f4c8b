// strata score: teacher forcing over a token sequence, printed as one JSON
// object (top-1 per position, logits at chosen positions, MTP top-1).
#include <cstdio>

#include "cli/commands.h"
#include "cli/common.h"
#include "util/error.h"
#include "util/json.h"

namespace strata::cli {

void add_score_command(CLI::App& app, Runner& run) {
  struct Flags {
    EngineFlags engine;
    std::string ids, logits_at;
    bool mtp = false, json = false;
    int chunk = 0;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("score", "Teacher-forced scoring of a token sequence");
  f->engine.add(cmd);
  cmd->add_option("--ids", f->ids, "Comma-separated token ids")->required();
  cmd->add_option("--logits-at", f->logits_at, "Comma-separated positions whose full logits to print");
  cmd->add_flag("--mtp", f->mtp, "Also score the MTP layer (next-next token)");
  cmd->add_option("--chunk", f->chunk, "Rows per forward call (0 = the whole sequence in one batch)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_flag("--json", f->json, "Print JSON (the only output format)");
  cmd->callback([f, &run] {
    run = [f]() -> int {
      Engine e = open_engine(f->engine, f->mtp);
      const ModelConfig& c = e.model->config;
      const std::vector<int32_t> ids = parse_ids(f->ids, c.vocab_size, "--ids");
      const int64_t T = static_cast<int64_t>(ids.size()), V = c.vocab_size, D = c.hidden_size;
      std::vector<int32_t> at;
      if (!f->logits_at.empty()) {
        at = parse_ids(f->logits_at, T, "--logits-at");
      }
      Session s(c, T, f->mtp);
      const ForwardOptions fo = f->engine.forward_options();
      std::vector<float> logits(static_cast<size_t>(T * V)), hidden(static_cast<size_t>(T * D));
      const int64_t chunk = f->chunk > 0 ? f->chunk : T;
      const uint64_t t0 = now_ns();
      for (int64_t p0 = 0; p0 < T; p0 += chunk) {
        std::vector<Row> rows;
        for (int64_t p = p0; p < std::min(T, p0 + chunk); ++p) rows.push_back({&s, static_cast<int32_t>(p), ids[p], true});
        e.runner->forward(rows, fo, logits.data() + p0 * V, hidden.data() + p0 * D);
      }
      e.prompt_ns += now_ns() - t0;
      e.prompt_tokens += static_cast<uint64_t>(T);
      Json out;
      out["top1"] = Json::array();
      for (int64_t p = 0; p < T; ++p) out["top1"].push_back(argmax(logits.data() + p * V, V));
      out["logits"] = Json::object();
      for (int32_t p : at) out["logits"][std::to_string(p)] = std::vector<float>(logits.begin() + p * V, logits.begin() + (p + 1) * V);
      if (f->mtp) {
        if (c.num_nextn_predict_layers < 1) fail("--mtp: the model has no MTP layer");
        std::vector<float> mlog(static_cast<size_t>(std::max<int64_t>(T - 1, 1) * V));
        out["mtp_top1"] = Json::array();
        for (int64_t p0 = 0; p0 < T - 1; p0 += chunk) {
          std::vector<Row> rows;
          for (int64_t p = p0; p < std::min(T - 1, p0 + chunk); ++p)
            rows.push_back({&s, static_cast<int32_t>(p), ids[p + 1], true});
          e.runner->forward_mtp(rows, hidden.data() + p0 * D, fo, mlog.data() + p0 * V);
        }
        for (int64_t p = 0; p < T - 1; ++p) out["mtp_top1"].push_back(argmax(mlog.data() + p * V, V));
        out["mtp_logits"] = Json::object();
        for (int32_t p : at)
          if (p < T - 1) out["mtp_logits"][std::to_string(p)] = std::vector<float>(mlog.begin() + p * V, mlog.begin() + (p + 1) * V);
      }
      std::printf("%s\n", out.dump().c_str());
      finish_engine(e, f->engine);
      return 0;
    };
  });
}

}  // namespace strata::cli
