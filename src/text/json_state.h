// The response_format recogniser: a pushdown automaton over bytes that
// accepts exactly the byte prefixes of the JSON texts a JsonGrammar
// (json_grammar.h) generates. The generated language is a subset of what the
// schema validates, chosen so generation can always finish:
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
//   - numbers with minimum/maximum/exclusiveMinimum/exclusiveMaximum: every
//     digit keeps the integer part completable within the bounds (and a
//     multiple of an integer multipleOf); the number may end only in range;
//     no exponent; a fraction only after an integer part I whose whole unit
//     interval (I to I+1, or -I-1 to -I) is in range. So `number` bounds
//     are exact for integers and sound (never violated) for fractions, but
//     a fraction such as 0.5 under minimum 0.2 is not generated;
//   - strings with a format: date YYYY-MM-DD (days per month, leap years),
//     time HH:MM:SS[.1-9 digits](Z|+HH:MM|-HH:MM) (no leap second),
//     date-time DATE'T'TIME, uuid 8-4-4-4-12 lowercase hex, email (a
//     documented subset: json_state.cpp);
//   - strings with a pattern (json_pattern.h): the decoded characters (an
//     escape is its character) step the pattern's DFA; a byte is taken only
//     if some completion of its character keeps a match reachable within
//     maxLength, the closing quote only on a match (minLength is in the DFA);
//   - nesting at most 32 containers deep.
// The mask walk (token_mask.h) copies a state per trie depth, so a state is
// a fixed array of frames and a copy moves only the frames in use.
#pragma once
#include <array>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "text/json_grammar.h"

namespace strata {

// Cheap to copy (only the frames in use are copied by assign()). After
// feed() returns false the state is unspecified: feed a copy when probing.
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
  void assign(const JsonState& o) {
    g_ = o.g_;
    depth_ = o.depth_;
    containers_ = o.containers_;
    ws_ = o.ws_;
    std::memcpy(fr_.data(), o.fr_.data(), sizeof(Frame) * static_cast<size_t>(o.depth_));
  }

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
  bool num_feed_bounded(Frame& f, uint8_t c, bool& redispatch);
  bool str_feed(Frame& f, uint8_t c);
  bool fmt_feed(Frame& f, uint8_t c);
  bool pat_feed(Frame& f, uint8_t c);
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

}  // namespace strata
