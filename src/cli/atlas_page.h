// strata atlas (cli/cmd_atlas.cpp) and its page: one self-contained HTML
// file (no network, no script) whose figures are SVG written here, over an
// Atlas (runtime/routing_atlas.h).
#pragma once
#include <cstdint>
#include <string>

#include "cli/commands.h"
#include "runtime/routing_atlas.h"

namespace strata::cli {

struct AtlasPageInfo {
  std::string command;      // the command line that made it (shown on the page)
  int64_t coact_layer = 0;  // the model layer whose co-activation is drawn
};

std::string atlas_page_html(const Atlas& a, const AtlasPageInfo& info);

// Registers `strata atlas` (declared here rather than in commands.h: the
// subcommand and its page are one unit).
void add_atlas_command(CLI::App& app, Runner& run);

}  // namespace strata::cli
