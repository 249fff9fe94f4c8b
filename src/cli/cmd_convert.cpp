// `strata convert`: a Hugging Face glm_moe_dsa checkpoint (bf16/f32 or
// block-FP8 safetensors, single or sharded) into a strata container
// (docs/container.md); `strata convert --verify DIR` checks one.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "format/convert.h"
#include "format/verify.h"
#include "core/error.h"

namespace strata::cli {

namespace {

std::string human_bytes(double b) {
  if (b >= 1e12) return fmt::format("{:.2f} TB", b / 1e12);
  if (b >= 1e9) return fmt::format("{:.2f} GB", b / 1e9);
  if (b >= 1e6) return fmt::format("{:.1f} MB", b / 1e6);
  if (b >= 1e3) return fmt::format("{:.1f} kB", b / 1e3);
  return fmt::format("{:.0f} B", b);
}

std::string human_time(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const uint64_t t = static_cast<uint64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60);
  return fmt::format("{}:{:02}", t / 60, t % 60);
}

// Renders a conversion's reports on stderr: notes as lines; progress as one
// updating line on a terminal (4 updates a second at most), a line every 5
// seconds otherwise.
class ProgressPrinter {
 public:
  ProgressPrinter() : tty_(::isatty(STDERR_FILENO) == 1) {}

  void operator()(const ConvertProgress& p) {
    switch (p.kind) {
      case ConvertProgress::Kind::Note: std::fprintf(stderr, "convert: %s\n", p.text.c_str()); break;
      case ConvertProgress::Kind::Bytes:
        if (p.seconds - last_ < (tty_ ? 0.25 : 5.0)) return;
        last_ = p.seconds;
        print(p);
        break;
      case ConvertProgress::Kind::Finished:
        if (tty_ && printed_) {
          print(p);
          std::fputc('\n', stderr);
        }
        break;
    }
  }

 private:
  void print(const ConvertProgress& p) {
    const double el = p.seconds;
    const double rate = el > 0 ? static_cast<double>(p.done_bytes - p.skipped_bytes) / el : 0.0;
    const double left = static_cast<double>(p.total_bytes - std::min(p.done_bytes, p.total_bytes));
    const double pct =
        p.total_bytes ? 100.0 * static_cast<double>(p.done_bytes) / static_cast<double>(p.total_bytes) : 100.0;
    const std::string line = fmt::format("convert: {} / {} ({:.0f}%)  {}/s  ETA {}",
                                         human_bytes(static_cast<double>(p.done_bytes)),
                                         human_bytes(static_cast<double>(p.total_bytes)), pct, human_bytes(rate),
                                         rate > 0 ? human_time(left / rate) : std::string("?"));
    if (tty_)
      std::fprintf(stderr, "\r%s\033[K", line.c_str());
    else
      std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
    printed_ = true;
  }
  bool tty_, printed_ = false;
  double last_ = 0.0;  // seconds of the last line printed
};

void print_summary(const ConvertOptions& o, const ConvertResult& res) {
  const double converted = static_cast<double>(res.source_bytes);
  std::fprintf(stderr,
               "convert: done: %s -> %s: %d files written%s, container %s, %s of source tensors in %.1f s "
               "(%s/s), peak RSS %s\n",
               o.in_dir.c_str(), o.out_dir.c_str(), res.files_written,
               res.files_skipped ? fmt::format(" ({} kept from the interrupted run)", res.files_skipped).c_str() : "",
               human_bytes(static_cast<double>(res.container_bytes)).c_str(), human_bytes(converted).c_str(),
               res.seconds, human_bytes(res.seconds > 0 ? converted / res.seconds : 0).c_str(),
               human_bytes(static_cast<double>(res.peak_rss_bytes)).c_str());
}

struct ConvertFlags {
  ConvertOptions opt;
  std::string experts = "int4";
  std::string verify;
  bool quiet = false;
};

int run_convert(ConvertFlags& f) {
  if (!f.verify.empty()) {
    if (!f.opt.in_dir.empty() || !f.opt.out_dir.empty())
      fail("convert: --verify DIR checks an existing container and takes no --in/--out");
    const VerifyResult r = verify_container(f.verify);
    if (!f.quiet)
      for (const std::string& n : r.ok_files) std::printf("OK %s\n", n.c_str());
    for (const std::string& p : r.problems) std::fprintf(stderr, "BAD %s\n", p.c_str());
    if (!r.ok) {
      std::fprintf(stderr, "strata: error: %s: %zu of %d files failed verification\n", f.verify.c_str(),
                   r.problems.size(), r.files);
      return 1;
    }
    std::printf("OK %s: %d files, %llu bytes verified\n", f.verify.c_str(), r.files,
                static_cast<unsigned long long>(r.bytes));
    return 0;
  }
  f.opt.expert_bits = f.experts == "int8" ? 8 : 4;
  if (!f.quiet) f.opt.on_progress = ProgressPrinter();
  const ConvertResult res = convert_checkpoint(f.opt);
  if (!f.quiet && !res.already_complete) print_summary(f.opt, res);
  return 0;
}

}  // namespace

void add_convert_command(CLI::App& app, Runner& run) {
  auto f = std::make_shared<ConvertFlags>();
  ConvertOptions& o = f->opt;
  CLI::App* cmd = app.add_subcommand(
      "convert", "Convert a Hugging Face glm_moe_dsa checkpoint into a strata container, or --verify one");
  cmd->add_option("--in", o.in_dir, "Checkpoint directory (config.json + safetensors; bf16/f32 or block-FP8)");
  cmd->add_option("--out", o.out_dir, "Container directory to write");
  cmd->add_option("--verify", f->verify, "Re-read container DIR and check every file's size and XXH3-64 checksum");
  cmd->add_option("--experts", f->experts, "Routed experts: int4 (default) or int8")
      ->check(CLI::IsMember({"int4", "int8"}));
  cmd->add_option("--group-size", o.group_size,
                  "Columns per scale of every int-quantized tensor: 0 (one per row), 32 (default), 64, 128");
  cmd->add_option("--attn-bits", o.attn_bits, "q_a, q_b, kv_a, indexer wq_b and wk: 4, 8 (default) or 16 (bf16)");
  cmd->add_option("--o-bits", o.o_bits, "o_proj: 4, 8 (default) or 16");
  cmd->add_option("--kvb-bits", o.kvb_bits, "kv_b_proj: 4, 8 (default) or 16");
  cmd->add_option("--shared-bits", o.shared_bits, "Shared experts: 4, 8 (default) or 16");
  cmd->add_option("--dense-mlp-bits", o.dense_mlp_bits, "MLPs of the dense layers: 4, 8 (default) or 16");
  cmd->add_option("--mtp-bits", o.mtp_bits,
                  "Every matrix of the MTP layer, its routed experts included: 4, 8 (default) or 16");
  cmd->add_option("--embed-bits", o.embed_bits, "embed_tokens: 8 or 16 (default)");
  cmd->add_option("--head-bits", o.head_bits, "lm_head: 4, 8 (default) or 16");
  cmd->add_option("--scales", o.scales,
                  "Group scales of the int8/int4 tensors: bf16 (default; 2 bytes: int4 gs32 0.5625 bytes per weight like "
                  "Q4_0, each scale rounded to bf16 before its group is quantized) or f32")
      ->check(CLI::IsMember({"f32", "bf16"}));
  cmd->add_option("--threads", o.threads, "Quantization threads (default: all cores; the output does not depend on it)");
  auto* force = cmd->add_flag("--force", o.force, "Overwrite an existing container or restart an unfinished conversion");
  cmd->add_flag("--resume", o.resume, "Continue an interrupted conversion into --out (same options and source)")
      ->excludes(force);
  cmd->add_flag("-q,--quiet", f->quiet, "No progress or summary on stderr");
  // Test hook (hidden): SIGKILL the process half way through the file after N.
  cmd->add_option("--test-kill-after-files", o.test_kill_after_files)->group("");
  cmd->callback([f, &run] { run = [f] { return run_convert(*f); }; });
}

}  // namespace strata::cli
