// `strata convert`: a Hugging Face glm_moe_dsa checkpoint (bf16/f32 or
// block-FP8 safetensors, single or sharded) into a strata container
// (docs/container.md); `strata convert --verify DIR` checks one.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "format/container_writer.h"
#include "core/error.h"

namespace strata::cli {

namespace {

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
  f.opt.progress = !f.quiet;
  convert_checkpoint(f.opt);
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
  cmd->add_option("--head-bits", o.head_bits, "lm_head: 8 (default) or 16");
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
