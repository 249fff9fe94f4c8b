// Reading tokenizer.json: a streaming parse that stores the two big members,
// model.vocab and model.merges, straight into flat vectors and builds an
// ordinary JSON tree for the rest. A tree of a 150k-token vocabulary costs
// over a second and a few hundred MB; this is several times cheaper.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/json.h"

namespace strata::tok {

struct TokenizerJson {
  Json doc;  // everything but model.vocab and model.merges
  bool has_vocab = false, has_merges = false;
  std::vector<std::pair<std::string, int64_t>> vocab;  // in file order
  // Each merge as written: "a b" (second empty, `legacy` true) or ["a", "b"].
  struct Merge {
    std::string a, b;
    bool legacy;
  };
  std::vector<Merge> merges;
};

// Throws strata::Error naming `origin` and the offending member on invalid
// JSON, nesting deeper than kMaxJsonDepth, duplicate keys, or vocab/merges
// entries of the wrong type.
TokenizerJson parse_tokenizer_json(std::string_view text, const std::string& origin);

}  // namespace strata::tok
