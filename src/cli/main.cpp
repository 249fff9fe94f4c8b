// strata: one binary, one subcommand per front end.
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"strata: run GLM-5-class Mixture-of-Experts models on ordinary machines"};
  app.require_subcommand(1);
  strata::cli::Runner run;
  strata::cli::add_score_command(app, run);
  strata::cli::add_generate_command(app, run);
  strata::cli::add_export_gguf_command(app, run);
  strata::cli::add_dequantize_command(app, run);
  strata::cli::add_eval_command(app, run);
  strata::cli::add_convert_command(app, run);
  strata::cli::add_tokenize_command(app, run);
  strata::cli::add_detokenize_command(app, run);
  strata::cli::add_run_command(app, run);
  strata::cli::add_chat_command(app, run);
  strata::cli::add_serve_command(app, run);
  strata::cli::add_bench_command(app, run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return run ? run() : 1;
  } catch (const strata::Error& e) {
    std::fprintf(stderr, "strata: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "strata: error: out of memory\n");
    return 1;
  }
}
