// strata generate: greedy continuation of token ids (sampling arrives with
// the text front end).
#include <cstdio>

#include "cli/commands.h"
#include "cli/common.h"
#include "util/error.h"
#include "util/json.h"

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
      Engine e = open_engine(f->engine, false);
      const ModelConfig& c = e.model->config;
      const std::vector<int32_t> prompt = parse_ids(f->ids, c.vocab_size, "--ids");
      const int64_t P = static_cast<int64_t>(prompt.size()), V = c.vocab_size;
      const int64_t ctx = P + f->n;
      if (ctx > c.max_position_embeddings)
        fail("prompt ({}) + -n ({}) exceeds max_position_embeddings {}", P, f->n, c.max_position_embeddings);
      Session s(c, ctx, false);
      const ForwardOptions fo = f->engine.forward_options();
      std::vector<float> logits(static_cast<size_t>(V));
      std::vector<Row> rows;
      for (int64_t p = 0; p < P; ++p) rows.push_back({&s, static_cast<int32_t>(p), prompt[p], p == P - 1});
      uint64_t t0 = now_ns();
      e.runner->forward(rows, fo, logits.data(), nullptr);
      e.prompt_ns += now_ns() - t0;
      e.prompt_tokens += static_cast<uint64_t>(P);
      Json out;
      out["ids"] = Json::array();
      for (int64_t i = 0; i < f->n; ++i) {
        const int32_t tok = argmax(logits.data(), V);
        out["ids"].push_back(tok);
        if (!f->ignore_eos && std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), tok) != c.eos_token_ids.end())
          break;
        if (i + 1 == f->n) break;
        Row r{&s, static_cast<int32_t>(P + i), tok, true};
        t0 = now_ns();
        e.runner->forward({&r, 1}, fo, logits.data(), nullptr);
        e.decode_ns += now_ns() - t0;
        ++e.decode_tokens;
      }
      std::printf("%s\n", out.dump().c_str());
      finish_engine(e, f->engine);
      return 0;
    };
  });
}

}  // namespace strata::cli
