// `strata convert`: a Hugging Face glm_moe_dsa checkpoint (bf16/f32 or
// block-FP8 safetensors, single file or sharded) into a strata container
// (src/format/container.h, docs/container.md).
//
// The conversion reads one source tensor at a time (one expert's three
// matrices for routed experts), so memory stays near the largest tensor.
// Where each tensor goes and in which precision is planned first
// (format/convert_plan.h). Every output file is written as NAME.tmp, fsynced
// and renamed when complete; manifest.json is written last. DIR/
// convert-state.json (format/convert_state.h) records the options, the source
// identity and every finished file (size + checksums), so an interrupted
// conversion can be resumed and yields byte-identical files.
//
// The library prints nothing: what the user should see arrives through
// ConvertOptions::on_progress, which the CLI renders (src/cli/cmd_convert.cpp).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/json.h"

namespace strata {

// One report of a running conversion.
struct ConvertProgress {
  enum class Kind {
    Note,      // a line for the user, in `text` (e.g. a file rewritten on resume)
    Bytes,     // more source bytes were converted
    Finished,  // every output file is written (the manifest comes next)
  };
  Kind kind = Kind::Note;
  std::string text;            // Note only
  uint64_t done_bytes = 0;     // source tensor bytes converted or kept so far
  uint64_t skipped_bytes = 0;  // of those, kept from an interrupted run
  uint64_t total_bytes = 0;    // source tensor bytes of the whole conversion
  double seconds = 0.0;        // since the output files began
};

// Precision flags use bits: 4 = int4, 8 = int8, 16 = bf16.
struct ConvertOptions {
  std::string in_dir, out_dir;
  int expert_bits = 4;      // routed experts of decoder layers: 4 | 8
  int64_t group_size = 32;  // 0 = one scale per row; every int-quantized tensor
  int attn_bits = 8;        // q_a, q_b, kv_a, indexer wq_b / wk: 4 | 8 | 16
  int o_bits = 8;           // o_proj
  int kvb_bits = 8;         // kv_b_proj
  int shared_bits = 8;      // shared experts
  int dense_mlp_bits = 8;   // MLPs of the dense (non-MoE) layers
  int mtp_bits = 8;         // every matrix of the MTP layer(s), routed experts included
  int embed_bits = 16;      // embed_tokens: 8 | 16
  int head_bits = 8;        // lm_head: 4 | 8 | 16
  // Group scales of the int8/int4 tensors: bf16 (2 bytes, Q4_0's / Q8_0's
  // bytes per weight; docs/container.md) | f32. A manifest without "scales"
  // was written with f32 scales (the default before 2026-12-04).
  std::string scales = "bf16";
  int threads = 0;          // 0 = all cores (output does not depend on it)
  bool force = false;       // overwrite a complete container / restart an unfinished one
  bool resume = false;      // continue an unfinished conversion into out_dir
  // Progress and notes; empty = silent. Called on the converting thread.
  std::function<void(const ConvertProgress&)> on_progress;
  // Test hook: after this many output files are complete, the next one is
  // written half way and the process kills itself with SIGKILL. < 0 = off.
  int test_kill_after_files = -1;

  // The "options" object of the manifest and of convert-state.json.
  Json to_json() const;
  // Its inverse: the precision options a container was converted with (its
  // manifest's "options"; a field absent keeps convert's default, except
  // "scales": absent is f32, which to_json omits). Throws strata::Error naming a field of the wrong type;
  // validate() judges the values.
  static ConvertOptions from_json(const Json& j);
  // Throws strata::Error naming the flag when a value is not allowed.
  void validate() const;
};

struct ConvertResult {
  bool already_complete = false;  // --resume on a finished container: nothing to do
  uint64_t source_bytes = 0;      // source tensor bytes converted (this run + skipped)
  uint64_t bytes_written = 0;     // output bytes written by this run
  uint64_t container_bytes = 0;   // total size of the container's files
  int files_written = 0, files_skipped = 0;
  double seconds = 0.0;
  uint64_t peak_rss_bytes = 0;
  std::vector<std::string> unused_tensors;  // checkpoint tensors strata does not use
};

ConvertResult convert_checkpoint(const ConvertOptions& opts);

}  // namespace strata
