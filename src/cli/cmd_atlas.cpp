// strata atlas: what a model's router does (docs/cli.md "strata atlas"). The
// routing comes from teacher-forcing token-id files (one per prompt kind,
// recorded through the forward's RoutingObserver as `strata trace record`
// does) or from recorded traces; the arithmetic is runtime/routing_atlas.h,
// the page cli/atlas_page.cpp. Writes DIR/index.html and DIR/atlas.json.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli/atlas_page.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "core/io.h"
#include "dist/placement.h"
#include "runtime/routing_atlas.h"
#include "runtime/routing_trace.h"

namespace strata::cli {

namespace {

// "NAME=PATH" -> {NAME, PATH}; "PATH" -> {the file's stem, PATH}.
std::pair<std::string, std::string> kind_of(const std::string& arg, const char* flag) {
  const size_t eq = arg.find('=');
  if (eq != std::string::npos && eq > 0 && arg.find('/') > eq) return {arg.substr(0, eq), arg.substr(eq + 1)};
  std::string stem = std::filesystem::path(arg).stem().string();
  if (stem.empty()) fail("{} {}: no file name to name the kind by (give NAME=PATH)", flag, arg);
  return {stem, arg};
}

}  // namespace

void add_atlas_command(CLI::App& app, Runner& run) {
  struct Flags {
    EngineFlags engine;
    std::vector<std::string> ids_files, traces;
    std::string out;
    int chunk = 256;
    int64_t max_tokens = 0, window = 0, coact_layer = -1;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand(
      "atlas", "What the router does: expert usage, entropy, co-activation, next-layer recall, shift across prompt kinds "
               "(an HTML page with SVG figures, and atlas.json)");
  f->engine.add(cmd);
  cmd->get_option("--model")->required(false);
  cmd->add_option("--ids-file", f->ids_files,
                  "Token ids of one prompt kind, as NAME=PATH or PATH (named by the file's stem); repeat for several "
                  "kinds (needs --model)")
      ->group(kGroupInput);
  cmd->add_option("--trace", f->traces,
                  "A trace from strata trace record (NAME=PATH or PATH), instead of running the model; repeatable")
      ->group(kGroupInput);
  cmd->add_option("--out", f->out, "The directory to write index.html and atlas.json into (created)")
      ->required()
      ->group(kGroupOutput);
  cmd->add_option("--coact-layer", f->coact_layer, "The MoE layer whose co-activation is drawn (default: the middle one)")
      ->group(kGroupOutput);
  cmd->add_option("--chunk", f->chunk, "Tokens per forward")->check(CLI::Range(1, 1 << 20))->capture_default_str()->group(kGroupInput);
  cmd->add_option("--max-tokens", f->max_tokens, "Use only the first N tokens of each id file (0 = all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->group(kGroupInput);
  cmd->add_option("--window", f->window,
                  "Independent sequences of N tokens each, from position 0 (a model's trained context; 0 = one sequence)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30))
      ->group(kGroupInput);
  cmd->callback([f, &run] {
    run = [f]() -> int {
      if (f->ids_files.empty() && f->traces.empty()) fail("atlas: give --ids-file (with --model) or --trace");
      if (!f->ids_files.empty() && f->engine.model.empty()) fail("atlas: --ids-file needs --model (the model to run)");
      std::vector<std::pair<std::string, RecordedTrace>> kinds;
      std::string command = "strata atlas";
      if (!f->engine.model.empty()) command += " --model " + f->engine.model;
      if (!f->ids_files.empty()) {
        OpenedEngine opened = open_engine(f->engine, false);
        if (!opened.engine) return opened.status;
        Engine& e = *opened.engine;
        const std::string fp = fmt::format("{:016x}", model_fingerprint(e.model()));
        for (const std::string& arg : f->ids_files) {
          auto [name, path] = kind_of(arg, "--ids-file");
          std::vector<int32_t> ids = read_ids_file(path, e.config().vocab_size);
          if (f->max_tokens > 0 && static_cast<int64_t>(ids.size()) > f->max_tokens)
            ids.resize(static_cast<size_t>(f->max_tokens));
          kinds.emplace_back(name, record_routing(e, ids, f->chunk, f->window, f->engine.model, fp));
          command += " --ids-file " + name + "=" + path;
        }
        finish_engine(e, f->engine, false);
      }
      // A trace is of --model when one is given: its fingerprint (trace
      // record's, of the loaded model) against the directory's, computed
      // without loading the weights (dist/placement.h).
      const std::string model_fp =
          f->engine.model.empty() ? std::string() : fmt::format("{:016x}", model_fingerprint(f->engine.model));
      for (const std::string& arg : f->traces) {
        auto [name, path] = kind_of(arg, "--trace");
        kinds.emplace_back(name, read_routing_trace(path));
        const RecordedTrace& t = kinds.back().second;
        if (!model_fp.empty() && !t.fingerprint.empty() && t.fingerprint != model_fp)
          fail("atlas: --trace {} was recorded from model {} (fingerprint {}), not from --model {} (fingerprint {})",
               path, t.model, t.fingerprint, f->engine.model, model_fp);
        command += " --trace " + name + "=" + path;
      }
      if (f->window > 0) command += fmt::format(" --window {}", f->window);
      if (f->max_tokens > 0) command += fmt::format(" --max-tokens {}", f->max_tokens);
      std::vector<AtlasInput> in;
      for (const auto& [name, t] : kinds) in.push_back({name, &t});
      const Atlas a = build_atlas(in);
      int64_t coact = f->coact_layer;
      if (coact < 0) {
        coact = a.layers[a.layers.size() / 2].layer;
      } else {
        bool found = false;
        std::string list;
        for (const AtlasLayer& L : a.layers) {
          found = found || L.layer == coact;
          list += (list.empty() ? "" : ", ") + std::to_string(L.layer);
        }
        if (!found) fail("--coact-layer {}: not an MoE layer of the routing (layers {})", coact, list);
        command += fmt::format(" --coact-layer {}", coact);
      }
      command += " --out " + f->out;
      std::error_code ec;
      std::filesystem::create_directories(f->out, ec);
      if (ec) fail("--out {}: cannot create the directory: {}", f->out, ec.message());
      write_file_atomic(f->out + "/atlas.json", atlas_json(a, coact).dump(1) + "\n");
      write_file_atomic(f->out + "/index.html", atlas_page_html(a, {command, coact}));
      // A short table on stdout: the numbers a reader looks at first.
      std::printf("layer  entropy(norm)  recall@%lld", static_cast<long long>(a.top_k));
      if (a.kinds.size() >= 2) std::printf("  TV(%s vs %s)", a.kinds[0].c_str(), a.kinds[1].c_str());
      std::printf("\n");
      for (const AtlasLayer& L : a.layers) {
        std::printf("%5lld  %13.3f  ", static_cast<long long>(L.layer), L.all.entropy_norm);
        if (L.recall_at.empty())
          std::printf("%*s", static_cast<int>(std::to_string(a.top_k).size()) + 7, "-");
        else
          std::printf("%*.3f", static_cast<int>(std::to_string(a.top_k).size()) + 7, L.recall_at.back());
        if (!L.shifts.empty()) std::printf("  %.3f", L.shifts[0].tv);
        std::printf("\n");
      }
      if (!f->engine.quiet)
        std::fprintf(stderr, "strata: atlas: %zu kinds, %zu MoE layers -> %s/index.html, %s/atlas.json\n", a.kinds.size(),
                     a.layers.size(), f->out.c_str(), f->out.c_str());
      return 0;
    };
  });
}

}  // namespace strata::cli
