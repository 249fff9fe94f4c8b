// What turns text into a model's tokens and back, for one model directory:
// its tokenizer, chat template, generation defaults and end-of-turn ids.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "text/chat_template.h"
#include "text/generation_config.h"
#include "text/sampler.h"
#include "text/tokenizer.h"

namespace strata {

struct TextModel {
  Tokenizer tok;
  GenerationConfig gen;
  ChatTemplate tmpl;
  std::vector<int32_t> stop_ids;  // config.json + generation_config.json eos, the template's turn ends
  bool is_stop(int32_t t) const;
  bool raw() const { return tmpl.dialect == ChatDialect::Raw; }
};

// `chat_template`: "auto" (detect the model's, refusing unknown ones), a
// dialect name ("glm", "glm45", "qwen3") or "raw"; `raw` forces no template
// (plain text in, plain text out).
TextModel open_text_model(const std::string& dir, const ModelConfig& c, const std::string& chat_template, bool raw);

// The sampling defaults a request starts from: generation_config.json where
// it says something, else SamplerOptions' own (greedy when do_sample is false).
SamplerOptions default_sampling(const GenerationConfig& g);

// The context a front end uses when none is asked for: min(4096,
// max_position_embeddings); a request above the model's limit is refused.
int64_t context_size(const ModelConfig& c, int64_t requested);

}  // namespace strata
