// strata score: teacher forcing over a token sequence, printed as one JSON
// object (top-1 per position, logits at chosen positions, MTP top-1).
#include <cstdio>

#include "cli/commands.h"
#include "cli/common.h"
#include "runtime/score.h"
#include "core/error.h"
#include "core/json.h"

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
      OpenedEngine opened = open_engine(f->engine, f->mtp);
      if (!opened.engine) return opened.status;  // a rank > 0 of --experts-over mpi
      Engine& e = *opened.engine;
      const ModelConfig& c = e.config();
      const std::vector<int32_t> ids = parse_ids(f->ids, c.vocab_size, "--ids");
      const int64_t T = static_cast<int64_t>(ids.size()), V = c.vocab_size;
      std::vector<int32_t> at;
      if (!f->logits_at.empty()) at = parse_ids(f->logits_at, T, "--logits-at");
      const ScoreOutput sc = score(e, ids, f->chunk, f->mtp);
      auto row = [V](const std::vector<float>& l, int64_t p) {
        return std::vector<float>(l.begin() + p * V, l.begin() + (p + 1) * V);
      };
      Json out;
      out["top1"] = Json::array();
      for (int64_t p = 0; p < T; ++p) out["top1"].push_back(argmax(sc.logits.data() + p * V, V));
      out["logits"] = Json::object();
      for (int32_t p : at) out["logits"][std::to_string(p)] = row(sc.logits, p);
      if (f->mtp) {
        out["mtp_top1"] = Json::array();
        for (int64_t p = 0; p < T - 1; ++p) out["mtp_top1"].push_back(argmax(sc.mtp_logits.data() + p * V, V));
        out["mtp_logits"] = Json::object();
        for (int32_t p : at)
          if (p < T - 1) out["mtp_logits"][std::to_string(p)] = row(sc.mtp_logits, p);
      }
      std::printf("%s\n", out.dump().c_str());
      finish_engine(e, f->engine);
      return 0;
    };
  });
}

}  // namespace strata::cli
