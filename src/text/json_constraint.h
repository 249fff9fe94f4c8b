// Constrained decoding for `response_format` (docs/server.md): an incremental
// JSON recogniser over bytes and the per-token masks built from it.
//
// JsonGrammar: what may be generated, compiled once per request from
//   json_object mode (any JSON object at top level) or a JSON-Schema subset:
//   type (one or a list), properties, required, additionalProperties, enum,
//   const, items, minItems/maxItems, minLength/maxLength, anyOf (branches of
//   different JSON types), $defs/definitions + local $ref (not recursive).
//   Annotations (title, description, default, examples, $schema, $id,
//   $comment, deprecated, readOnly, writeOnly) are ignored; any other
//   keyword throws strata::Error naming it and where it is.
// JsonState: a pushdown automaton that accepts exactly the byte prefixes of
//   the JSON texts the grammar generates. The generated language is a subset
//   of what the schema validates, chosen so generation can always finish:
//   - no whitespace before or after the top-level value; between tokens at
//     most ONE whitespace byte (a space or a newline);
//   - numbers: at most 16 integer digits, 16 fraction digits and 2 exponent
//     digits (so every number fits a double); `integer` has no fraction or exponent;
//   - strings: valid UTF-8 (no overlongs, no surrogates), escapes \" \\ \/
//     \b \f \n \r \t \uXXXX (not \uD800-\uDFFF); min/maxLength count code
//     points (an escape is one);
//   - objects with `properties`: only the listed keys, in schema order,
//     each at most once, every `required` one present (optional ones may be
//     skipped); `additionalProperties` then changes nothing in what is
//     generated (true or a schema still validates every output). Objects
//     without `properties` take any keys (unless additionalProperties is
//     false: then only {}), values per additionalProperties (any JSON when
//     true or absent); such free keys are not checked for duplicates;
//   - enum/const values are generated exactly as their compact serialization
//     (objects with their keys in the order given) and take precedence over
//     the other keywords of their schema (`type` filters them);
//   - nesting at most 32 containers deep.
// JsonVocab: every token's bytes and a byte trie over them, built once per
//   tokenizer and shared by all requests.
// JsonConstraint: one request's state; masks logits (tokens that would leave
//   the language get -inf; stop tokens only when the value is complete; added
//   and special tokens never) and advances with each sampled token.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"

namespace strata {

class Tokenizer;

// What the scheduler needs of a constrained-decoding request (Job::constraint):
// response_format's JsonConstraint, tool_choice's ToolCallConstraint.
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets every token that may not come next to -inf; returns how many remain.
  virtual size_t mask(std::span<float> logits, std::span<const int32_t> stop_ids) = 0;
  // Feeds a sampled token; false if it is refused (the state is then unchanged).
  virtual bool advance(int32_t token) = 0;
  // Complete and nothing may follow: the answer ends here.
  virtual bool done() const = 0;
  // The request field it enforces, for error messages.
  virtual const char* what() const = 0;
};

constexpr int kJsonMaxDepth = 32;       // containers
constexpr int kJsonMaxIntDigits = 16;
constexpr int kJsonMaxFracDigits = 16;
constexpr int kJsonMaxExpDigits = 2;  // so every number fits a double
constexpr int kJsonMaxProperties = 64;  // per object schema

class JsonGrammar {
 public:
  enum Type : uint8_t { kObject = 1, kArray = 2, kString = 4, kNumber = 8, kInteger = 16, kBoolean = 32, kNull = 64 };
  struct Prop {
    std::string key;  // the name as it appears between the quotes (JSON-escaped)
    int32_t node = 0;
    bool required = false;
  };
  struct Node {
    uint8_t types = 0;       // Type bits
    uint8_t claims = 0;      // first-byte classes it can start with (Type bits, integer folded into number)
    int32_t literals = -1;   // enum/const: index into literal tables
    std::vector<Prop> props;
    std::vector<uint8_t> req_from;  // req_from[i]: first required property index >= i (props.size(): none)
    bool free_keys = true;   // no `properties`: any key
    bool no_keys = false;    // no `properties` and additionalProperties false: only {}
    int32_t extra = 0;       // value node of free keys
    int32_t items = 0;
    uint32_t min_items = 0, max_items = UINT32_MAX;
    uint32_t min_len = 0, max_len = UINT32_MAX;
    std::vector<int32_t> any_of;
  };

  // Any JSON object (response_format json_object).
  static std::shared_ptr<const JsonGrammar> any_object();
  // Any JSON value.
  static std::shared_ptr<const JsonGrammar> any_value();
  // The subset above; throws strata::Error for unsupported keywords or
  // schemas that cannot be satisfied.
  // `schema` in its original key order: properties are generated in it.
  static std::shared_ptr<const JsonGrammar> from_schema(const nlohmann::ordered_json& schema);
  // The same; a Json has lost the order (its keys are sorted).
  static std::shared_ptr<const JsonGrammar> from_schema(const Json& schema);

  const Node& node(int32_t i) const { return nodes_[static_cast<size_t>(i)]; }
  const std::vector<std::string>& literals(int32_t t) const { return lits_[static_cast<size_t>(t)]; }
  int32_t root() const { return root_; }

  static constexpr int32_t kAnyNode = 0;
  static constexpr int32_t kBoolTable = 0;  // {"false", "true"}
  static constexpr int32_t kNullTable = 1;  // {"null"}

 private:
  friend struct JsonSchemaCompiler;
  JsonGrammar();
  std::vector<Node> nodes_;
  std::vector<std::vector<std::string>> lits_;  // each sorted, unique
  int32_t root_ = 0;
};

// The recogniser. Cheap to copy (only the frames in use are copied by
// assign()). After feed() returns false the state is unspecified: feed a copy
// when probing.
class JsonState {
 public:
  explicit JsonState(const JsonGrammar& g);
  // A value of `node` (no whitespace around it) instead of the root.
  JsonState(const JsonGrammar& g, int32_t node);
  JsonState(const JsonState& o) { assign(o); }
  JsonState& operator=(const JsonState& o) {
    assign(o);
    return *this;
  }
  void assign(const JsonState& o);

  bool feed(uint8_t c);
  bool feed(std::string_view bytes);
  // A complete JSON text (the answer may end here).
  bool accepting() const;
  // Some byte may follow.
  bool can_continue() const;
  // Complete and nothing may follow.
  bool done() const { return accepting() && !can_continue(); }
  int depth() const { return depth_; }
  // Inside a string between characters (not in an escape or a UTF-8
  // sequence): how many more code points it may take; -1 otherwise.
  int64_t string_room() const;

 private:
  struct Frame {
    int32_t node;
    uint8_t kind, phase, flags, small;
    uint32_t a, b;
    uint64_t mask;
  };
  static constexpr int kMaxFrames = kJsonMaxDepth + 3;

  bool start_value(int32_t node, uint8_t c);
  bool push(const Frame& f);
  void pop_done();  // pops the top frame; its parent sees a finished value
  bool lit_feed(Frame& f, uint8_t c, bool& redispatch);
  bool num_feed(Frame& f, uint8_t c, bool& redispatch);
  bool str_feed(Frame& f, uint8_t c);
  bool key_feed(Frame& f, uint8_t c);
  bool obj_feed(Frame& f, uint8_t c);
  bool arr_feed(Frame& f, uint8_t c);
  bool begin_key(Frame& f);
  bool take_ws();
  bool scalar_complete(const Frame& f) const;

  const JsonGrammar* g_;
  int depth_ = 0;       // frames in use
  int containers_ = 0;  // objects and arrays open
  bool ws_ = false;     // the last byte was inter-token whitespace
  std::array<Frame, kMaxFrames> fr_;
};

// Token bytes and a byte trie in preorder (each node: its byte, its depth and
// where its subtree ends), so a mask walks the trie once, feeding one byte per
// node to a stack of states and skipping every subtree the grammar refuses.
// Inside a string (most of the vocabulary is allowed there) "plain" tokens --
// whole characters, none of them '"', '\' or a control byte -- are allowed
// by their code-point count alone, and only the rest is walked (a second trie).
class JsonVocab {
 public:
  // `vocab`: the model's vocabulary size (the length of a logits row). Only
  // ordinary (not added, not special) tokens with non-empty bytes can be
  // generated inside JSON. Throws strata::Error if the tokenizer is not
  // byte-level.
  static std::shared_ptr<const JsonVocab> build(const Tokenizer& tok, int64_t vocab);
  // For tests: token i has bytes[i]; an empty entry is never allowed.
  static std::shared_ptr<const JsonVocab> from_bytes(std::vector<std::string> bytes);

  int64_t size() const { return size_; }
  std::string_view bytes(int32_t id) const {
    return id >= 0 && id < size_ ? std::string_view(bytes_[static_cast<size_t>(id)]) : std::string_view();
  }
  bool usable(int32_t id) const { return id >= 0 && id < size_ && usable_[static_cast<size_t>(id)]; }
  size_t trie_nodes() const { return all_.byte.size(); }
  size_t plain_tokens() const { return plain_.size(); }
  size_t max_len() const { return max_len_; }

 private:
  friend class JsonConstraint;
  friend class ToolCallConstraint;
  struct Trie {
    std::vector<uint8_t> byte;
    std::vector<uint16_t> depth;
    std::vector<uint32_t> skip;       // first node after the subtree
    std::vector<uint32_t> tok_start;  // tokens ending at node i: toks[tok_start[i], tok_start[i + 1])
    std::vector<int32_t> toks;
  };
  void build_tries();
  void build_trie(Trie& t, std::vector<int32_t> ids) const;
  int64_t size_ = 0;
  std::vector<std::string> bytes_;
  std::vector<uint8_t> usable_;
  size_t max_len_ = 0;
  Trie all_;                         // every usable token
  Trie rest_;                        // the usable tokens that are not plain
  std::vector<int32_t> plain_;       // plain tokens by code-point count
  std::vector<uint32_t> plain_cps_;  // their counts, ascending
};

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
  const JsonState& state() const { return state_; }
  const JsonVocab& vocab() const { return *vocab_; }

 private:
  std::shared_ptr<const JsonGrammar> g_;
  std::shared_ptr<const JsonVocab> vocab_;
  JsonState state_;
  size_t walk(const JsonVocab::Trie& t, std::vector<uint8_t>& out);
  std::vector<JsonState> stack_;  // one per trie depth
  std::vector<uint8_t> allowed_;
};

}  // namespace strata
