// strata: one binary, one subcommand per front end. Exit status (cli/usage.h,
// docs/cli.md): 0 success, 1 runtime error, 2 usage error, 130 interrupted.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/atlas_page.h"
#include "cli/commands.h"
#include "cli/usage.h"
#include "core/error.h"
#include "strata_version.h"

namespace {

std::vector<std::string> subcommand_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; })) names.push_back(s->get_name());
  return names;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace strata::cli;
  CLI::App app{"strata: run GLM-5-class Mixture-of-Experts models on ordinary machines", "strata"};
  app.set_version_flag("--version", std::string("strata ") + STRATA_VERSION + " (" + STRATA_GIT + ")",
                       "Print the version and exit");
  app.require_subcommand(1);
  app.footer(
      "Run 'strata SUBCOMMAND --help' (or 'strata help SUBCOMMAND') for its flags.\n"
      "Exit status: 0 success, 1 error, 2 usage error, 130 interrupted.");
  Runner run;
  add_run_command(app, run);
  add_chat_command(app, run);
  add_serve_command(app, run);
  add_convert_command(app, run);
  add_bench_command(app, run);
  add_doctor_command(app, run);
  add_plan_command(app, run);
  add_trace_command(app, run);
  add_atlas_command(app, run);
  add_score_command(app, run);
  add_generate_command(app, run);
  add_eval_command(app, run);
  add_export_gguf_command(app, run);
  add_dequantize_command(app, run);
  add_tokenize_command(app, run);
  add_detokenize_command(app, run);

  const std::vector<std::string> names = subcommand_names(app);
  const auto known = [&names](const std::string& s) { return std::find(names.begin(), names.end(), s) != names.end(); };
  if (argc < 2) {
    std::fputs(app.help().c_str(), stderr);
    return kExitUsage;
  }
  const std::string first = argv[1];
  if (first == "help") {  // `strata help [SUBCOMMAND]`
    if (argc == 2) {
      std::fputs(app.help().c_str(), stdout);
      return 0;
    }
    if (!known(argv[2])) {
      std::fprintf(stderr, "strata: error: unknown subcommand '%s'%s\n", argv[2], did_you_mean(argv[2], names).c_str());
      return kExitUsage;
    }
    std::fputs(app.get_subcommand(argv[2])->help().c_str(), stdout);
    return 0;
  }
  if (!first.empty() && first[0] != '-' && !known(first)) {
    std::fprintf(stderr, "strata: error: unknown subcommand '%s'%s\nRun 'strata help' for the subcommands.\n",
                 first.c_str(), did_you_mean(first, names).c_str());
    return kExitUsage;
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --help-all, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string where, message = e.what();
    if (known(first)) {
      where = " " + first;
      const std::string flag = unknown_flag_error(*app.get_subcommand(first), std::vector<std::string>(argv + 2, argv + argc));
      if (!flag.empty()) message = flag;
    }
    std::fprintf(stderr, "strata%s: error: %s\nRun 'strata%s --help' for the flags.\n", where.c_str(), message.c_str(),
                 where.c_str());
    return kExitUsage;
  }
  try {
    return run ? run() : kExitRuntime;
  } catch (const strata::Error& e) {
    std::fprintf(stderr, "strata: error: %s\n", e.what());
    return kExitRuntime;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "strata: error: out of memory\n");
    return kExitRuntime;
  }
}
