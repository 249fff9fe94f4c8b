// Constrained decoding for `response_format` (docs/server.md): the masks
// that keep an answer inside the JSON a schema allows. The entry point other
// layers include; the parts live in their own headers:
//
// JsonGrammar (json_grammar.h): what may be generated, compiled once per
//   request from json_object mode or a JSON-Schema subset (the keywords it
//   supports and refuses are listed there).
// JsonState (json_state.h): a pushdown automaton that accepts exactly the
//   byte prefixes of the JSON texts the grammar generates (the generated
//   language -- whitespace, number, string, object and nesting limits -- is
//   spelled out there).
// JsonVocab, TokenConstraint (token_mask.h): every token's bytes and a byte
//   trie over them, built once per tokenizer and shared by all requests, and
//   the mask walk over it.
// JsonConstraint: one request's state; masks logits (tokens that would leave
//   the language get -inf; stop tokens only when the value is complete; added
//   and special tokens never) and advances with each sampled token.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "text/json_grammar.h"
#include "text/json_state.h"
#include "text/token_mask.h"

namespace strata {

class JsonConstraint final : public TokenConstraint {
 public:
  JsonConstraint(std::shared_ptr<const JsonGrammar> g, std::shared_ptr<const JsonVocab> v);

  // allowed[i] = 1 for the tokens that may come next (vocab().size()
  // entries). Stop ids are allowed only when the value is complete. Returns
  // how many are allowed.
  size_t allowed(std::vector<uint8_t>& allowed, std::span<const int32_t> stop_ids);
  // Sets every token that may not come next to -inf; returns how many remain.
  size_t mask(std::span<float> logits, std::span<const int32_t> stop_ids) override;
  // Feeds a sampled (ordinary) token; false if the grammar refuses it (the
  // state is then unchanged).
  bool advance(int32_t token) override;
  bool accepting() const { return state_.accepting(); }
  bool done() const override { return state_.done(); }
  const char* what() const override { return "response_format"; }
  int32_t forced(std::span<const int32_t> stop_ids) override;
  bool save() override;
  void restore() override;
  const JsonState& state() const { return state_; }
  const JsonVocab& vocab() const { return *vocab_; }

 private:
  std::shared_ptr<const JsonGrammar> g_;
  std::shared_ptr<const JsonVocab> vocab_;
  JsonState state_;
  TrieWalk<JsonState> walk_;
  std::vector<uint8_t> allowed_;
  AllowedCache cache_;     // allowed_ is the current state's (forced(), then mask() at the same state)
  JsonState saved_;      // speculation: save() / restore()
  ConstraintProbe probe_;  // ... and the saved state's allowed set
  void moved();            // the state changed: the cached set is stale (kept if it was the saved state's)
};

}  // namespace strata
