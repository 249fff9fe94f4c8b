// JSON-schema compile + constrained walk (text/json_grammar.h,
// text/json_constraint.h). The input is a schema, a NUL byte, then walk
// bytes: the schema is compiled as the server compiles response_format's
// (parsed with the depth limit, then in key order), and each walk byte picks
// one of the tokens the mask allows (repository tokenizer's vocabulary),
// which advance() must then accept. Up to 24 steps; every few steps the
// state is saved, probed ahead with forced() and restored, as speculative
// decoding does.
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "fuzz_util.h"
#include "text/generation_config.h"
#include "text/json_constraint.h"
#include "text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  static const Tokenizer tok = Tokenizer::load(fuzz::tiny_model_dir());
  static const std::shared_ptr<const JsonVocab> vocab = JsonVocab::build(tok, tok.vocab_size());
  static const int32_t eos = static_cast<int32_t>(load_generation_config(fuzz::tiny_model_dir()).eos_token_ids.at(0));
  const uint8_t* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  const size_t schema_len = nul ? static_cast<size_t>(nul - data) : size;
  const std::string_view schema_text = fuzz::as_text(data, schema_len);
  const uint8_t* walk = nul ? nul + 1 : data + size;
  const size_t walk_len = static_cast<size_t>(data + size - walk);
  std::shared_ptr<const JsonGrammar> g;
  try {
    const Json j = parse_json(schema_text, "schema");
    (void)j;
    g = JsonGrammar::from_schema(nlohmann::ordered_json::parse(schema_text));
  } catch (const Error&) {
    return 0;
  }
  JsonConstraint c(g, vocab);
  std::vector<uint8_t> allowed;
  const int32_t stops[] = {eos};
  for (size_t step = 0; step < std::min<size_t>(walk_len, 24); ++step) {
    if (c.done()) break;
    const size_t n = c.allowed(allowed, stops);
    // A compiled schema never strands the walk: something may always come next.
    STRATA_FUZZ_CHECK(n > 0);
    size_t pick = walk[step] % n;
    int32_t tok_id = -1;
    for (size_t i = 0; i < allowed.size(); ++i)
      if (allowed[i] && pick-- == 0) {
        tok_id = static_cast<int32_t>(i);
        break;
      }
    STRATA_FUZZ_CHECK(tok_id >= 0);
    if (tok_id == eos) {
      STRATA_FUZZ_CHECK(c.accepting());
      break;
    }
    if (step % 5 == 4 && c.save()) {
      const int32_t f = c.forced(stops);
      if (f >= 0 && f != eos) STRATA_FUZZ_CHECK(c.advance(f));
      c.restore();
    }
    STRATA_FUZZ_CHECK(c.advance(tok_id));
  }
  return 0;
}
