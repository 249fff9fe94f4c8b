// Usage errors and exit statuses (docs/cli.md "Exit status"): what the binary
// says when a subcommand or a flag is unknown or misspelled.
#pragma once
#include <CLI/CLI.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace strata::cli {

// 0 success; 1 runtime error (bad file, model, request...); 2 usage error
// (unknown subcommand or flag, bad or missing flag value); 130 interrupted
// (Ctrl-C: 128 + SIGINT, as shells report it).
inline constexpr int kExitRuntime = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitInterrupted = 130;

// The candidates closest to `word` (edit distance with transpositions, at
// most 1 for words under 5 characters and 2 from 5 on, leading dashes
// ignored; or `word` a prefix of at least 3 characters), best first; empty
// when none is close.
std::vector<std::string> suggestions(std::string_view word, const std::vector<std::string>& candidates);

// "; did you mean 'x'?" / "; did you mean 'x' or 'y'?" / "".
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

// Every long and short flag name of `cmd` ("--temperature", "-n").
std::vector<std::string> flag_names(const CLI::App& cmd);

// The first argument in `args` that looks like a flag (--name[=v], or -x with
// a letter) and is none of `cmd`'s or its parent's, with a suggestion:
// "unknown flag '--temprature'; did you mean '--temperature'?"; "" when every
// flag is known. Arguments after "--" are not flags.
std::string unknown_flag_error(const CLI::App& cmd, const std::vector<std::string>& args);

}  // namespace strata::cli
