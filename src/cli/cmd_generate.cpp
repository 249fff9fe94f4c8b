// strata generate: greedy continuation of token ids (the library's
// generation step without a tokenizer).
#include <cstdio>

#include "cli/commands.h"
#include "cli/common.h"
#include "runtime/generation.h"
#include "core/error.h"
#include "core/json.h"

namespace strata::cli {

void add_generate_command(CLI::App& app, Runner& run) {
  struct Flags {
    EngineFlags engine;
    std::string ids;
    int n = 16;
    double temperature = 0.0;
    bool json = false, ignore_eos = false;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("generate", "Greedy generation from token ids");
  f->engine.spec = kSpecGenerating;  // the generating commands speculate by default
  f->engine.add(cmd);
  cmd->add_option("--ids", f->ids, "Comma-separated prompt token ids")->required();
  cmd->add_option("-n", f->n, "Tokens to generate")->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--temperature", f->temperature, "Only 0 (greedy) is implemented so far");
  cmd->add_flag("--ignore-eos", f->ignore_eos, "Keep generating past end-of-sequence tokens");
  cmd->add_flag("--json", f->json, "Print JSON (the only output format)");
  cmd->callback([f, &run] {
    run = [f]() -> int {
      if (f->temperature != 0.0)
        fail("--temperature {}: sampling is not implemented yet; only --temperature 0 (greedy) works", f->temperature);
      OpenedEngine opened = open_engine(f->engine, false);
      if (!opened.engine) return opened.status;  // a rank > 0 of --experts-over mpi
      Engine& e = *opened.engine;
      const ModelConfig& c = e.config();
      const std::vector<int32_t> prompt = parse_ids(f->ids, c.vocab_size, "--ids");
      const int64_t P = static_cast<int64_t>(prompt.size());
      const int64_t ctx = P + f->n;
      if (ctx > c.max_position_embeddings)
        fail("prompt ({}) + -n ({}) exceeds max_position_embeddings {}", P, f->n, c.max_position_embeddings);
      // Token ids only (no tokenizer): the end-of-sequence ids of config.json
      // end it, and appear as the last id. --ignore-eos: plain argmax over
      // every id (an end-of-sequence id is generated and fed like any other).
      std::vector<int32_t> eos;
      if (!f->ignore_eos) eos.assign(c.eos_token_ids.begin(), c.eos_token_ids.end());
      Sequence seq(c, ctx, nullptr, eos, &e.speculator(), e.options().forward.kv);
      GenerationParams p;
      p.sampling.temperature = 0.0;
      p.max_tokens = f->n;
      seq.begin(prompt, p);
      Json out;
      out["ids"] = Json::array();
      run_turn(
          e, seq, [&](const StepOutput& o) { for (int32_t t : o.tokens) out["ids"].push_back(t); }, [] { return false; },
          std::max<int64_t>(1, P));
      std::printf("%s\n", out.dump().c_str());
      finish_engine(e, f->engine);
      return 0;
    };
  });
}

}  // namespace strata::cli
