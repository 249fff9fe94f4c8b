#include "runtime/text_model.h"

#include <algorithm>

#include "core/error.h"

namespace strata {

bool TextModel::is_stop(int32_t t) const { return std::find(stop_ids.begin(), stop_ids.end(), t) != stop_ids.end(); }

TextModel open_text_model(const std::string& dir, const ModelConfig& c, const std::string& chat_template, bool raw) {
  TextModel tm{Tokenizer::load(dir), load_generation_config(dir), ChatTemplate{}, {}};
  if (tm.tok.vocab_size() > c.vocab_size)
    fail("{}: the tokenizer knows {} token ids but the model's vocabulary has {}", dir, tm.tok.vocab_size(),
         c.vocab_size);
  if (raw || chat_template == "raw") {
    tm.tmpl.dialect = ChatDialect::Raw;
    tm.tmpl.source = raw ? "--raw" : "--chat-template raw";
  } else {
    tm.tmpl = load_chat_template(dir, chat_template);
  }
  for (const std::string& s : tm.tmpl.special_tokens()) {
    if (!tm.tok.token_id(s))
      fail(
          "{}: the {} chat template needs the special token {} and this tokenizer has no such token; use "
          "--chat-template raw (run: --raw) for plain text",
          dir, chat_dialect_name(tm.tmpl.dialect), s);
  }
  auto add_stop = [&](int64_t id) {
    if (id >= 0 && id < c.vocab_size && !tm.is_stop(static_cast<int32_t>(id)))
      tm.stop_ids.push_back(static_cast<int32_t>(id));
  };
  for (int64_t id : c.eos_token_ids) add_stop(id);
  for (int64_t id : tm.gen.eos_token_ids) add_stop(id);
  for (const std::string& s : tm.tmpl.stop_tokens())
    if (auto id = tm.tok.token_id(s)) add_stop(*id);
  return tm;
}

SamplerOptions default_sampling(const GenerationConfig& g) {
  SamplerOptions o;
  const bool greedy_default = g.do_sample.has_value() && !*g.do_sample;
  o.temperature = greedy_default ? 0.0 : g.temperature.value_or(1.0);
  o.top_p = g.top_p.value_or(1.0);
  o.top_k = g.top_k.value_or(0);
  o.min_p = g.min_p.value_or(0.0);
  o.repetition_penalty = g.repetition_penalty.value_or(1.0);
  return o;
}

int64_t context_size(const ModelConfig& c, int64_t requested) {
  if (requested > c.max_position_embeddings)
    fail("--ctx {}: the model's max_position_embeddings is {}", requested, c.max_position_embeddings);
  return requested > 0 ? requested : std::min<int64_t>(4096, c.max_position_embeddings);
}

}  // namespace strata
