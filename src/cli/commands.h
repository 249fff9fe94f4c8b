// Each subcommand lives in its own file and registers itself on the app.
#pragma once
#include <CLI/CLI.hpp>

#include <functional>

namespace strata::cli {

// A registered subcommand runs its callback after parsing; the callback
// returns the process exit code.
using Runner = std::function<int()>;

void add_score_command(CLI::App& app, Runner& run);
void add_generate_command(CLI::App& app, Runner& run);
void add_export_gguf_command(CLI::App& app, Runner& run);
void add_dequantize_command(CLI::App& app, Runner& run);
void add_eval_command(CLI::App& app, Runner& run);
void add_convert_command(CLI::App& app, Runner& run);
void add_tokenize_command(CLI::App& app, Runner& run);
void add_detokenize_command(CLI::App& app, Runner& run);
void add_run_command(CLI::App& app, Runner& run);
void add_chat_command(CLI::App& app, Runner& run);
void add_serve_command(CLI::App& app, Runner& run);
void add_bench_command(CLI::App& app, Runner& run);
void add_doctor_command(CLI::App& app, Runner& run);
void add_plan_command(CLI::App& app, Runner& run);
void add_trace_command(CLI::App& app, Runner& run);

}  // namespace strata::cli
