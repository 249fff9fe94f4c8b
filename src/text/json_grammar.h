// What response_format may generate (docs/server.md): a JsonGrammar compiled
// once per request from json_object mode (any JSON object at top level) or a
// JSON-Schema subset, read by the recogniser (json_state.h).
//
// Supported keywords: type (one or a list), properties, required,
// additionalProperties, enum, const, items, minItems/maxItems,
// minLength/maxLength, anyOf (branches of different JSON types),
// $defs/definitions + local $ref (not recursive), minimum/maximum/
// exclusiveMinimum/exclusiveMaximum (integer and number), multipleOf
// (integers), format date/time/date-time/uuid/email, pattern (a regex
// subset compiled to a DFA: json_pattern.h). Annotations (title,
// description, default, examples, $schema, $id, $comment, deprecated,
// readOnly, writeOnly) are ignored; any other keyword throws strata::Error
// naming it and where it is.
//
// The compiled nodes keep what the recogniser needs: the JSON types a value
// may have and the first-byte classes it may start with (anyOf branches must
// differ in those, so one byte picks the branch), the literal tables of
// enum/const (their compact serializations, sorted), an object's listed
// properties in schema order with where the next required one is, and the
// array and string bounds.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/json.h"
#include "text/json_pattern.h"

namespace strata {

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
    // Numeric bounds (minimum/maximum/exclusive*/multipleOf), as the integers
    // a number may take, and for `number` the fraction rule: a '.' may follow
    // integer part I only if every value I.xxx is in range (positive: I in
    // [int_lo, frac_pos_max]; negative -I in [frac_neg_min, int_hi]).
    bool bounded = false;
    int64_t int_lo = 0, int_hi = 0, frac_pos_max = 0, frac_neg_min = 0, multiple = 1;
    uint8_t format = 0;  // Format (strings)
    int32_t pattern = -1;  // strings: index into patterns()
  };
  enum Format : uint8_t { kFmtNone, kFmtDate, kFmtTime, kFmtDateTime, kFmtUuid, kFmtEmail };

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
  const JsonPattern& pattern(int32_t i) const { return patterns_[static_cast<size_t>(i)]; }

  // The first-byte class of a value starting with `c` (a Type bit; number
  // for '-' and digits; 0 when no value starts so).
  static uint8_t class_of(uint8_t c) {
    switch (c) {
      case '{': return kObject;
      case '[': return kArray;
      case '"': return kString;
      case 't':
      case 'f': return kBoolean;
      case 'n': return kNull;
      default: return (c == '-' || (c >= '0' && c <= '9')) ? kNumber : 0;
    }
  }

  static constexpr int32_t kAnyNode = 0;
  static constexpr int32_t kBoolTable = 0;  // {"false", "true"}
  static constexpr int32_t kNullTable = 1;  // {"null"}

 private:
  friend struct JsonSchemaCompiler;
  JsonGrammar();
  std::vector<Node> nodes_;
  std::vector<std::vector<std::string>> lits_;  // each sorted, unique
  std::vector<JsonPattern> patterns_;
  int32_t root_ = 0;
};

}  // namespace strata
