#include "text/json_constraint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "text/tokenizer.h"
#include "core/error.h"

namespace strata {

namespace {

using SJson = nlohmann::ordered_json;  // schemas keep their key order (properties in schema order)

// Frame kinds and phases.
enum Kind : uint8_t { kRoot, kObj, kArr, kStr, kKey, kNum, kLit };
enum RootPhase : uint8_t { R_START, R_VAL, R_DONE };
enum ObjPhase : uint8_t { O_START, O_NEXTKEY, O_INKEY, O_COLON, O_VALUE, O_INVAL, O_AFTER };
enum ArrPhase : uint8_t { A_START, A_NEXT, A_INVAL, A_AFTER };
enum StrPhase : uint8_t { S_BODY, S_ESC, S_HEX };
enum NumPhase : uint8_t { N_BEGIN, N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };

constexpr uint8_t kStrIsKey = 1, kStrHexD = 2;  // Str flags
constexpr uint8_t kNumIntOnly = 1;              // Num flags

uint8_t class_of(uint8_t c) {
  switch (c) {
    case '{': return JsonGrammar::kObject;
    case '[': return JsonGrammar::kArray;
    case '"': return JsonGrammar::kString;
    case 't':
    case 'f': return JsonGrammar::kBoolean;
    case 'n': return JsonGrammar::kNull;
    default: return (c == '-' || (c >= '0' && c <= '9')) ? JsonGrammar::kNumber : 0;
  }
}

uint8_t claims_of_types(uint8_t t) {
  uint8_t c = t & ~JsonGrammar::kInteger;
  if (t & JsonGrammar::kInteger) c |= JsonGrammar::kNumber;
  return c;
}

bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

}  // namespace

// ------------------------------------------------------------------ grammar

JsonGrammar::JsonGrammar() {
  Node any;
  any.types = kObject | kArray | kString | kNumber | kInteger | kBoolean | kNull;
  any.claims = claims_of_types(any.types);
  nodes_.push_back(any);  // kAnyNode
  lits_.push_back({"false", "true"});
  lits_.push_back({"null"});
}

std::shared_ptr<const JsonGrammar> JsonGrammar::any_value() {
  auto g = std::shared_ptr<JsonGrammar>(new JsonGrammar());
  g->root_ = kAnyNode;
  return g;
}

std::shared_ptr<const JsonGrammar> JsonGrammar::any_object() {
  auto g = std::shared_ptr<JsonGrammar>(new JsonGrammar());
  Node obj;
  obj.types = kObject;
  obj.claims = kObject;
  g->nodes_.push_back(obj);
  g->root_ = 1;
  return g;
}

struct JsonSchemaCompiler {
  const SJson& doc;
  JsonGrammar& g;
  std::map<std::string, int32_t> refs_done;
  std::set<std::string> refs_active;

  [[noreturn]] static void bad(const std::string& path, const std::string& what) {
    fail("response_format schema: {} (at {})", what, path.empty() ? "#" : path);
  }

  static uint32_t get_count(const SJson& s, const char* key, const std::string& path) {
    const SJson& v = s[key];
    if (!v.is_number_integer() && !v.is_number_unsigned() &&
        !(v.is_number_float() && std::isfinite(v.get<double>()) && v.get<double>() == std::floor(v.get<double>())))
      bad(path, fmt::format("'{}' must be a non-negative integer", key));
    const double d = v.get<double>();
    if (d < 0) bad(path, fmt::format("'{}' must be a non-negative integer", key));
    return d >= static_cast<double>(UINT32_MAX) ? UINT32_MAX : static_cast<uint32_t>(d);
  }

  static uint8_t type_bit(const SJson& t, const std::string& path) {
    if (!t.is_string()) bad(path, "'type' must be a string or an array of strings");
    const std::string s = t.get<std::string>();
    if (s == "object") return JsonGrammar::kObject;
    if (s == "array") return JsonGrammar::kArray;
    if (s == "string") return JsonGrammar::kString;
    if (s == "number") return JsonGrammar::kNumber;
    if (s == "integer") return JsonGrammar::kInteger;
    if (s == "boolean") return JsonGrammar::kBoolean;
    if (s == "null") return JsonGrammar::kNull;
    bad(path, fmt::format("unknown type '{}'", s));
  }

  static bool literal_has_type(const SJson& v, uint8_t types) {
    using G = JsonGrammar;
    if (v.is_object()) return types & G::kObject;
    if (v.is_array()) return types & G::kArray;
    if (v.is_string()) return types & G::kString;
    if (v.is_boolean()) return types & G::kBoolean;
    if (v.is_null()) return types & G::kNull;
    if (v.is_number_integer() || v.is_number_unsigned()) return types & (G::kNumber | G::kInteger);
    if (v.is_number_float()) return types & G::kNumber;
    return false;
  }

  int32_t add(JsonGrammar::Node n) {
    g.nodes_.push_back(std::move(n));
    return static_cast<int32_t>(g.nodes_.size() - 1);
  }

  int32_t ref(const std::string& r, const std::string& path, int depth) {
    if (auto it = refs_done.find(r); it != refs_done.end()) return it->second;
    if (refs_active.count(r)) bad(path, fmt::format("recursive '$ref' '{}' is not supported", r));
    std::string ptr;
    if (r.rfind("#/$defs/", 0) == 0 || r.rfind("#/definitions/", 0) == 0) ptr = r.substr(1);
    else if (r == "#") ptr = "";
    else bad(path, fmt::format("only local '$ref's (#/$defs/NAME, #/definitions/NAME) are supported, not '{}'", r));
    const SJson* target = nullptr;
    try {
      target = &doc.at(SJson::json_pointer(ptr));
    } catch (const std::exception&) {
      bad(path, fmt::format("'$ref' '{}' points nowhere", r));
    }
    refs_active.insert(r);
    const int32_t n = compile(*target, r, depth + 1);  // a chain of $refs counts as nesting (bounded recursion)
    refs_active.erase(r);
    refs_done[r] = n;
    return n;
  }

  int32_t compile(const SJson& s, const std::string& path, int depth) {
    using G = JsonGrammar;
    if (depth >= kJsonMaxDepth) bad(path, fmt::format("the schema nests deeper than {} levels", kJsonMaxDepth));
    if (s.is_boolean()) {
      if (!s.get<bool>()) bad(path, "the schema 'false' accepts nothing");
      return G::kAnyNode;
    }
    if (!s.is_object()) bad(path, "a schema must be an object");
    static const std::set<std::string> kAnnotations = {"title",   "description", "default",    "examples",
                                                      "$schema", "$id",         "$comment",   "deprecated",
                                                      "readOnly", "writeOnly",  "$defs",      "definitions"};
    static const std::set<std::string> kKeywords = {
        "type",  "properties", "required", "additionalProperties", "enum",      "const",
        "items", "minItems",   "maxItems", "minLength",            "maxLength", "anyOf", "$ref"};
    bool has_other = false;
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (kAnnotations.count(it.key())) continue;
      if (!kKeywords.count(it.key())) bad(path, fmt::format("unsupported JSON Schema keyword '{}'", it.key()));
      if (it.key() != "$ref" && it.key() != "anyOf") has_other = true;
    }
    if (s.contains("$ref")) {
      if (!s["$ref"].is_string()) bad(path, "'$ref' must be a string");
      if (has_other || s.contains("anyOf")) bad(path, "'$ref' with other keywords is not supported");
      return ref(s["$ref"].get<std::string>(), path + "/$ref", depth);
    }
    if (s.contains("anyOf")) {
      const SJson& a = s["anyOf"];
      if (has_other) bad(path, "'anyOf' with other keywords beside it is not supported");
      if (!a.is_array() || a.empty()) bad(path, "'anyOf' must be a non-empty array");
      std::vector<int32_t> branches;
      uint8_t claimed = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        const int32_t b = compile(a[i], fmt::format("{}/anyOf/{}", path, i), depth + 1);
        const uint8_t c = g.nodes_[static_cast<size_t>(b)].claims;
        if (c & claimed)
          bad(path, "'anyOf' branches must start with different JSON types (object, array, string, number, "
                    "boolean, null)");
        claimed |= c;
        branches.push_back(b);
      }
      if (branches.size() == 1) return branches[0];
      G::Node n;
      n.any_of = std::move(branches);
      n.claims = claimed;
      for (int32_t b : n.any_of) n.types |= g.nodes_[static_cast<size_t>(b)].types;
      return add(std::move(n));
    }

    G::Node n;
    bool explicit_type = false;
    if (s.contains("type")) {
      explicit_type = true;
      const SJson& t = s["type"];
      if (t.is_array()) {
        if (t.empty()) bad(path, "'type' must not be an empty array");
        for (const SJson& x : t) n.types |= type_bit(x, path);
      } else {
        n.types = type_bit(t, path);
      }
      if ((n.types & G::kNumber) && (n.types & G::kInteger)) n.types &= ~G::kInteger;
    } else {
      // No type: the keywords present say which (a restriction of what the
      // schema validates, so every output is still valid).
      if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties"))
        n.types |= G::kObject;
      if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) n.types |= G::kArray;
      if (s.contains("minLength") || s.contains("maxLength")) n.types |= G::kString;
      if (!n.types) n.types = G::kObject | G::kArray | G::kString | G::kNumber | G::kBoolean | G::kNull;
    }

    // enum / const.
    if (s.contains("enum") || s.contains("const")) {
      std::vector<SJson> values;
      if (s.contains("enum")) {
        if (!s["enum"].is_array() || s["enum"].empty()) bad(path, "'enum' must be a non-empty array");
        for (const SJson& v : s["enum"]) values.push_back(v);
      }
      if (s.contains("const")) {
        if (s.contains("enum")) {
          const SJson c = s["const"];
          std::erase_if(values, [&](const SJson& v) { return v != c; });
        } else {
          values.push_back(s["const"]);
        }
      }
      std::vector<std::string> lits;
      for (const SJson& v : values) {
        if (explicit_type && !literal_has_type(v, n.types)) continue;
        if (v.is_number_float() && !std::isfinite(v.get<double>())) continue;
        lits.push_back(v.dump(-1, ' ', false, SJson::error_handler_t::strict));
      }
      if (lits.empty()) bad(path, "no 'enum'/'const' value matches the schema's 'type'");
      std::sort(lits.begin(), lits.end());
      lits.erase(std::unique(lits.begin(), lits.end()), lits.end());
      g.lits_.push_back(std::move(lits));
      n.literals = static_cast<int32_t>(g.lits_.size() - 1);
      n.claims = 0;
      for (const std::string& l : g.lits_.back()) n.claims |= class_of(static_cast<uint8_t>(l[0]));
      n.types = 0;
      for (const SJson& v : values) {
        if (v.is_object()) n.types |= G::kObject;
        else if (v.is_array()) n.types |= G::kArray;
        else if (v.is_string()) n.types |= G::kString;
        else if (v.is_boolean()) n.types |= G::kBoolean;
        else if (v.is_null()) n.types |= G::kNull;
        else n.types |= G::kNumber;
      }
      // Compile the rest for its errors only (unsupported keywords below).
    }

    // Strings.
    if (s.contains("minLength")) n.min_len = get_count(s, "minLength", path);
    if (s.contains("maxLength")) n.max_len = get_count(s, "maxLength", path);
    if (n.min_len > n.max_len) bad(path, "'minLength' is larger than 'maxLength'");

    // Arrays.
    if (s.contains("minItems")) n.min_items = get_count(s, "minItems", path);
    if (s.contains("maxItems")) n.max_items = get_count(s, "maxItems", path);
    if (n.min_items > n.max_items) bad(path, "'minItems' is larger than 'maxItems'");
    if (s.contains("items")) {
      const SJson& it = s["items"];
      if (it.is_array()) bad(path, "'items' as an array (tuple validation) is not supported");
      n.items = compile(it, path + "/items", depth + 1);
    }

    // Objects.
    if (s.contains("properties")) {
      const SJson& p = s["properties"];
      if (!p.is_object()) bad(path, "'properties' must be an object");
      if (p.size() > static_cast<size_t>(kJsonMaxProperties))
        bad(path, fmt::format("at most {} properties per object are supported", kJsonMaxProperties));
      for (auto it = p.begin(); it != p.end(); ++it) {
        G::Prop pr;
        const std::string quoted = SJson(it.key()).dump(-1, ' ', false, SJson::error_handler_t::strict);
        pr.key = quoted.substr(1, quoted.size() - 2);
        pr.node = compile(it.value(), path + "/properties/" + it.key(), depth + 1);
        n.props.push_back(std::move(pr));
      }
    }
    if (s.contains("required")) {
      const SJson& r = s["required"];
      if (!r.is_array()) bad(path, "'required' must be an array of strings");
      std::set<std::string> seen;
      for (const SJson& x : r) {
        if (!x.is_string()) bad(path, "'required' must be an array of strings");
        const std::string name = x.get<std::string>();
        if (!seen.insert(name).second) continue;
        const std::string quoted = SJson(name).dump(-1, ' ', false, SJson::error_handler_t::strict);
        const std::string key = quoted.substr(1, quoted.size() - 2);
        auto it = std::find_if(n.props.begin(), n.props.end(), [&](const G::Prop& pr) { return pr.key == key; });
        if (it == n.props.end())
          bad(path, fmt::format("required property '{}' is not in 'properties' (only listed properties are generated)",
                                name));
        it->required = true;
      }
    }
    // With properties: only those (additionalProperties is checked, not
    // used). Without: any keys, valued per additionalProperties, or none.
    n.free_keys = n.props.empty();
    if (s.contains("additionalProperties")) {
      const SJson& a = s["additionalProperties"];
      if (a.is_boolean()) {
        if (!a.get<bool>() && n.props.empty()) n.no_keys = true;
      } else if (a.is_object()) {
        const int32_t x = compile(a, path + "/additionalProperties", depth + 1);
        if (n.free_keys) n.extra = x;
      } else {
        bad(path, "'additionalProperties' must be a boolean or a schema");
      }
    }
    if (n.no_keys) n.free_keys = false;
    n.req_from.assign(n.props.size() + 1, static_cast<uint8_t>(n.props.size()));
    for (size_t i = n.props.size(); i-- > 0;)
      n.req_from[i] = n.props[i].required ? static_cast<uint8_t>(i) : n.req_from[i + 1];
    if (n.literals < 0) n.claims = claims_of_types(n.types);
    return add(std::move(n));
  }
};

std::shared_ptr<const JsonGrammar> JsonGrammar::from_schema(const Json& schema) {
  return from_schema(SJson::parse(schema.dump()));
}

std::shared_ptr<const JsonGrammar> JsonGrammar::from_schema(const SJson& schema) {
  auto g = std::shared_ptr<JsonGrammar>(new JsonGrammar());
  JsonSchemaCompiler c{schema, *g, {}, {}};
  if (!schema.is_object() && !schema.is_boolean()) fail("response_format schema: the schema must be an object");
  for (const char* defs : {"$defs", "definitions"})
    if (schema.is_object() && schema.contains(defs) && !schema[defs].is_object())
      fail("response_format schema: '{}' must be an object", defs);
  g->root_ = c.compile(schema, "", 0);
  return g;
}

// -------------------------------------------------------------------- state

JsonState::JsonState(const JsonGrammar& g) : JsonState(g, g.root()) {}

JsonState::JsonState(const JsonGrammar& g, int32_t node) : g_(&g) {
  Frame r{};
  r.node = node;
  r.kind = kRoot;
  r.phase = R_START;
  fr_[0] = r;
  depth_ = 1;
}

void JsonState::assign(const JsonState& o) {
  g_ = o.g_;
  depth_ = o.depth_;
  containers_ = o.containers_;
  ws_ = o.ws_;
  std::memcpy(fr_.data(), o.fr_.data(), sizeof(Frame) * static_cast<size_t>(o.depth_));
}

bool JsonState::push(const Frame& f) {
  if (depth_ >= kMaxFrames) return false;
  fr_[static_cast<size_t>(depth_++)] = f;
  if (f.kind == kObj || f.kind == kArr) ++containers_;
  return true;
}

void JsonState::pop_done() {
  const Frame& f = fr_[static_cast<size_t>(--depth_)];
  if (f.kind == kObj || f.kind == kArr) --containers_;
  Frame& p = fr_[static_cast<size_t>(depth_ - 1)];
  switch (p.kind) {
    case kRoot: p.phase = R_DONE; break;
    case kObj:
      if (p.phase == O_INKEY) {
        p.phase = O_COLON;
      } else {
        p.phase = O_AFTER;
      }
      break;
    case kArr:
      ++p.a;
      p.phase = A_AFTER;
      break;
    default: break;
  }
}

bool JsonState::take_ws() {
  if (ws_) return false;
  ws_ = true;
  return true;
}

bool JsonState::scalar_complete(const Frame& f) const {
  if (f.kind == kNum) return f.phase == N_ZERO || f.phase == N_INT || f.phase == N_FRAC || f.phase == N_EXP;
  if (f.kind == kLit) return g_->literals(f.node)[f.a].size() == f.mask;
  return false;
}

bool JsonState::start_value(int32_t node, uint8_t c) {
  const JsonGrammar::Node& n = g_->node(node);
  const uint8_t cls = class_of(c);
  if (!(n.claims & cls)) return false;
  if (!n.any_of.empty()) {
    for (int32_t b : n.any_of)
      if (g_->node(b).claims & cls) return start_value(b, c);
    return false;
  }
  Frame f{};
  f.node = node;
  bool redispatch = false;
  if (n.literals >= 0) {
    f.kind = kLit;
    f.node = n.literals;
    f.a = 0;
    f.b = static_cast<uint32_t>(g_->literals(n.literals).size());
    f.mask = 0;
    if (!push(f)) return false;
    return lit_feed(fr_[static_cast<size_t>(depth_ - 1)], c, redispatch) && !redispatch;
  }
  switch (cls) {
    case JsonGrammar::kObject:
      if (containers_ >= kJsonMaxDepth) return false;
      f.kind = kObj;
      f.phase = O_START;
      return push(f);
    case JsonGrammar::kArray:
      if (containers_ >= kJsonMaxDepth) return false;
      f.kind = kArr;
      f.phase = A_START;
      return push(f);
    case JsonGrammar::kString:
      f.kind = kStr;
      f.phase = S_BODY;
      return push(f);
    case JsonGrammar::kNumber:
      f.kind = kNum;
      f.phase = N_BEGIN;
      f.flags = (n.types & JsonGrammar::kNumber) ? 0 : kNumIntOnly;
      if (!push(f)) return false;
      return num_feed(fr_[static_cast<size_t>(depth_ - 1)], c, redispatch) && !redispatch;
    case JsonGrammar::kBoolean:
    case JsonGrammar::kNull:
      f.kind = kLit;
      f.node = cls == JsonGrammar::kBoolean ? JsonGrammar::kBoolTable : JsonGrammar::kNullTable;
      f.a = 0;
      f.b = static_cast<uint32_t>(g_->literals(f.node).size());
      if (!push(f)) return false;
      return lit_feed(fr_[static_cast<size_t>(depth_ - 1)], c, redispatch) && !redispatch;
    default: return false;
  }
}

bool JsonState::lit_feed(Frame& f, uint8_t c, bool& redispatch) {
  const std::vector<std::string>& t = g_->literals(f.node);
  const size_t pos = f.mask;
  // [a, b) share their first `pos` bytes and are sorted: the one of length
  // pos (if any) comes first, then they are ordered by their byte at pos.
  size_t lo = f.a, hi = f.b;
  if (lo < hi && t[lo].size() == pos) ++lo;
  auto key = [&](size_t i) { return static_cast<uint8_t>(t[i][pos]); };
  size_t l = lo, h = hi;
  while (l < h) {  // first with byte >= c
    const size_t m = (l + h) / 2;
    if (key(m) < c) l = m + 1;
    else h = m;
  }
  size_t e = l, eh = hi;
  while (e < eh) {  // first with byte > c
    const size_t m = (e + eh) / 2;
    if (key(m) <= c) e = m + 1;
    else eh = m;
  }
  if (l == e) {
    if (scalar_complete(f)) {
      pop_done();
      redispatch = true;
      return true;
    }
    return false;
  }
  f.a = static_cast<uint32_t>(l);
  f.b = static_cast<uint32_t>(e);
  f.mask = pos + 1;
  if (e - l == 1 && t[l].size() == pos + 1) pop_done();
  return true;
}

bool JsonState::num_feed(Frame& f, uint8_t c, bool& redispatch) {
  const bool int_only = f.flags & kNumIntOnly;
  const bool d = is_digit(c);
  switch (f.phase) {
    case N_BEGIN:
      if (c == '-') return f.phase = N_MINUS, true;
      [[fallthrough]];
    case N_MINUS:
      if (c == '0') return f.phase = N_ZERO, f.a = 1, true;
      if (d) return f.phase = N_INT, f.a = 1, true;
      return false;
    case N_INT:
      if (d) {
        if (f.a >= static_cast<uint32_t>(kJsonMaxIntDigits)) return false;
        ++f.a;
        return true;
      }
      [[fallthrough]];
    case N_ZERO:
      if (!int_only && c == '.') return f.phase = N_DOT, true;
      if (!int_only && (c == 'e' || c == 'E')) return f.phase = N_E, true;
      break;
    case N_DOT:
      if (d) return f.phase = N_FRAC, f.b = 1, true;
      return false;
    case N_FRAC:
      if (d) {
        if (f.b >= static_cast<uint32_t>(kJsonMaxFracDigits)) return false;
        ++f.b;
        return true;
      }
      if (c == 'e' || c == 'E') return f.phase = N_E, true;
      break;
    case N_E:
      if (c == '+' || c == '-') return f.phase = N_ESIGN, true;
      [[fallthrough]];
    case N_ESIGN:
      if (d) return f.phase = N_EXP, f.small = 1, true;
      return false;
    case N_EXP:
      if (d) {
        if (f.small >= kJsonMaxExpDigits) return false;
        ++f.small;
        return true;
      }
      break;
    default: return false;
  }
  if (scalar_complete(f)) {
    pop_done();
    redispatch = true;
    return true;
  }
  return false;
}

bool JsonState::str_feed(Frame& f, uint8_t c) {
  const bool key = f.flags & kStrIsKey;
  const JsonGrammar::Node* n = key ? nullptr : &g_->node(f.node);
  switch (f.phase) {
    case S_BODY: {
      // f.b: UTF-8 continuation bytes still needed (low byte), then the
      // range allowed for the next one (lo, hi).
      const uint32_t need = f.b & 0xff;
      if (need) {
        const uint8_t lo = static_cast<uint8_t>(f.b >> 8), hi = static_cast<uint8_t>(f.b >> 16);
        if (c < lo || c > hi) return false;
        f.b = need - 1 ? ((need - 1) | (0x80u << 8) | (0xBFu << 16)) : 0;
        return true;
      }
      if (c == '"') {
        if (n && f.a < n->min_len) return false;
        pop_done();
        return true;
      }
      if (n && f.a >= n->max_len) return false;
      if (c == '\\') {
        f.phase = S_ESC;
        ++f.a;
        return true;
      }
      if (c < 0x20) return false;
      if (c < 0x80) {
        ++f.a;
        return true;
      }
      uint32_t nd = 0, lo = 0x80, hi = 0xBF;
      if (c >= 0xC2 && c <= 0xDF) nd = 1;
      else if (c == 0xE0) nd = 2, lo = 0xA0;
      else if (c == 0xED) nd = 2, hi = 0x9F;
      else if (c >= 0xE1 && c <= 0xEF) nd = 2;
      else if (c == 0xF0) nd = 3, lo = 0x90;
      else if (c >= 0xF1 && c <= 0xF3) nd = 3;
      else if (c == 0xF4) nd = 3, hi = 0x8F;
      else return false;
      f.b = nd | (lo << 8) | (hi << 16);
      ++f.a;
      return true;
    }
    case S_ESC:
      if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
        f.phase = S_BODY;
        return true;
      }
      if (c == 'u') {
        f.phase = S_HEX;
        f.small = 0;
        f.flags &= static_cast<uint8_t>(~kStrHexD);
        return true;
      }
      return false;
    case S_HEX:
      if (!is_hex(c)) return false;
      if (f.small == 0 && (c == 'd' || c == 'D')) f.flags |= kStrHexD;
      if (f.small == 1 && (f.flags & kStrHexD) && !(c >= '0' && c <= '7')) return false;  // no surrogates
      if (++f.small == 4) f.phase = S_BODY;
      return true;
    default: return false;
  }
}

bool JsonState::begin_key(Frame& f) {
  const JsonGrammar::Node& n = g_->node(f.node);
  Frame k{};
  if (n.free_keys) {
    k.kind = kStr;
    k.phase = S_BODY;
    k.flags = kStrIsKey;
    k.node = -1;
  } else {
    if (n.no_keys) return false;
    const size_t np = n.props.size(), next = f.a;
    if (next >= np) return false;
    const size_t last = std::min<size_t>(n.req_from[next], np - 1);  // may not skip a required one
    const uint64_t upto = last >= 63 ? ~uint64_t{0} : ((uint64_t{1} << (last + 1)) - 1);
    k.mask = upto & ~((uint64_t{1} << next) - 1);
    k.kind = kKey;
    k.node = f.node;
    k.a = 0;
  }
  f.phase = O_INKEY;
  return push(k);
}

bool JsonState::key_feed(Frame& f, uint8_t c) {
  const JsonGrammar::Node& n = g_->node(f.node);
  const size_t pos = f.a;
  uint64_t keep = 0;
  for (uint64_t m = f.mask; m; m &= m - 1) {
    const int p = __builtin_ctzll(m);
    const std::string& k = n.props[static_cast<size_t>(p)].key;
    if (k.size() > pos && static_cast<uint8_t>(k[pos]) == c) keep |= uint64_t{1} << p;
  }
  // A quote inside a candidate is escaped (content); otherwise it closes.
  if (!keep && c == '"') {
    for (uint64_t m = f.mask; m; m &= m - 1) {
      const int p = __builtin_ctzll(m);
      if (n.props[static_cast<size_t>(p)].key.size() == pos) {
        --depth_;
        Frame& o = fr_[static_cast<size_t>(depth_ - 1)];
        o.a = static_cast<uint32_t>(p + 1);
        o.b = static_cast<uint32_t>(p);
        o.phase = O_COLON;
        return true;
      }
    }
    return false;
  }
  if (!keep) return false;
  f.mask = keep;
  f.a = static_cast<uint32_t>(pos + 1);
  return true;
}

bool JsonState::obj_feed(Frame& f, uint8_t c) {
  if (c == ' ' || c == '\n') return take_ws();
  ws_ = false;
  const JsonGrammar::Node& n = g_->node(f.node);
  auto can_close = [&] { return n.free_keys || n.no_keys || n.req_from[f.a] >= n.props.size(); };
  auto close = [&] {
    pop_done();
    return true;
  };
  switch (f.phase) {
    case O_START:
      if (c == '}') return can_close() && close();
      if (c == '"') return begin_key(f);
      return false;
    case O_NEXTKEY: return c == '"' && begin_key(f);
    case O_COLON:
      if (c != ':') return false;
      f.phase = O_VALUE;
      return true;
    case O_VALUE: {
      f.phase = O_INVAL;
      const int32_t v = n.free_keys ? n.extra : n.props[f.b].node;
      return start_value(v, c);
    }
    case O_AFTER:
      if (c == '}') return can_close() && close();
      if (c == ',') {
        if (!n.free_keys && f.a >= n.props.size()) return false;
        f.phase = O_NEXTKEY;
        return true;
      }
      return false;
    default: return false;
  }
}

bool JsonState::arr_feed(Frame& f, uint8_t c) {
  if (c == ' ' || c == '\n') return take_ws();
  ws_ = false;
  const JsonGrammar::Node& n = g_->node(f.node);
  switch (f.phase) {
    case A_START:
      if (c == ']') {
        if (f.a < n.min_items) return false;
        pop_done();
        return true;
      }
      if (n.max_items == 0) return false;
      [[fallthrough]];
    case A_NEXT: f.phase = A_INVAL; return start_value(n.items, c);
    case A_AFTER:
      if (c == ']') {
        if (f.a < n.min_items) return false;
        pop_done();
        return true;
      }
      if (c == ',') {
        if (f.a >= n.max_items) return false;
        f.phase = A_NEXT;
        return true;
      }
      return false;
    default: return false;
  }
}

bool JsonState::feed(uint8_t c) {
  for (;;) {
    Frame& f = fr_[static_cast<size_t>(depth_ - 1)];
    bool redispatch = false;
    switch (f.kind) {
      case kRoot:
        if (f.phase != R_START) return false;
        f.phase = R_VAL;
        ws_ = false;
        return start_value(f.node, c);
      case kObj: return obj_feed(f, c);
      case kArr: return arr_feed(f, c);
      case kStr: return str_feed(f, c);
      case kKey: return key_feed(f, c);
      case kNum:
        if (!num_feed(f, c, redispatch)) return false;
        break;
      case kLit:
        if (!lit_feed(f, c, redispatch)) return false;
        break;
      default: return false;
    }
    if (!redispatch) return true;
  }
}

bool JsonState::feed(std::string_view bytes) {
  for (char ch : bytes)
    if (!feed(static_cast<uint8_t>(ch))) return false;
  return true;
}

bool JsonState::accepting() const {
  const Frame& t = fr_[static_cast<size_t>(depth_ - 1)];
  if (t.kind == kRoot) return t.phase == R_DONE;
  return depth_ == 2 && scalar_complete(t);
}

int64_t JsonState::string_room() const {
  const Frame& t = fr_[static_cast<size_t>(depth_ - 1)];
  if (t.kind != kStr || t.phase != S_BODY || (t.b & 0xff)) return -1;
  if (t.flags & kStrIsKey) return INT64_MAX;
  const uint32_t mx = g_->node(t.node).max_len;
  if (mx == UINT32_MAX) return INT64_MAX;
  return t.a >= mx ? 0 : static_cast<int64_t>(mx - t.a);
}

bool JsonState::can_continue() const {
  JsonState probe(*g_);
  for (int c = 0; c < 256; ++c) {
    probe.assign(*this);
    if (probe.feed(static_cast<uint8_t>(c))) return true;
  }
  return false;
}

// -------------------------------------------------------------------- vocab

std::shared_ptr<const JsonVocab> JsonVocab::build(const Tokenizer& tok, int64_t vocab) {
  if (!tok.is_byte_level())
    fail("response_format needs a byte-level tokenizer (its decoder is not ByteLevel)");
  auto v = std::make_shared<JsonVocab>();
  v->size_ = vocab;
  v->bytes_.resize(static_cast<size_t>(vocab));
  v->usable_.assign(static_cast<size_t>(vocab), 0);
  const int64_t n = std::min(vocab, tok.vocab_size());
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = static_cast<int32_t>(i);
    if (tok.is_added(id) || tok.is_special(id)) continue;
    v->bytes_[static_cast<size_t>(i)] = std::string(tok.token_bytes(id));
    v->usable_[static_cast<size_t>(i)] = !v->bytes_[static_cast<size_t>(i)].empty();
  }
  v->build_tries();
  return v;
}

std::shared_ptr<const JsonVocab> JsonVocab::from_bytes(std::vector<std::string> bytes) {
  auto v = std::make_shared<JsonVocab>();
  v->size_ = static_cast<int64_t>(bytes.size());
  v->usable_.resize(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) v->usable_[i] = !bytes[i].empty();
  v->bytes_ = std::move(bytes);
  v->build_tries();
  return v;
}

namespace {
// Code points of `s` if it is whole string characters with no '"', '\\' or
// control byte (valid UTF-8 as JsonState reads it); -1 otherwise.
int64_t plain_code_points(std::string_view s) {
  int64_t n = 0;
  for (size_t i = 0; i < s.size();) {
    const uint8_t c = static_cast<uint8_t>(s[i]);
    if (c < 0x80) {
      if (c < 0x20 || c == '"' || c == '\\' || c == 0x7f) return -1;
      ++i, ++n;
      continue;
    }
    size_t need = 0;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c == 0xE0) need = 2, lo = 0xA0;
    else if (c == 0xED) need = 2, hi = 0x9F;
    else if (c >= 0xE1 && c <= 0xEF) need = 2;
    else if (c == 0xF0) need = 3, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) need = 3;
    else if (c == 0xF4) need = 3, hi = 0x8F;
    else return -1;
    if (i + need >= s.size()) return -1;
    for (size_t k = 1; k <= need; ++k) {
      const uint8_t d = static_cast<uint8_t>(s[i + k]);
      if (d < (k == 1 ? lo : 0x80) || d > (k == 1 ? hi : 0xBF)) return -1;
    }
    i += need + 1;
    ++n;
  }
  return n;
}
}  // namespace

void JsonVocab::build_tries() {
  std::vector<int32_t> all, rest;
  std::vector<std::pair<uint32_t, int32_t>> plain;
  for (int64_t i = 0; i < size_; ++i) {
    std::string& b = bytes_[static_cast<size_t>(i)];
    if (b.size() > 0xfff0) usable_[static_cast<size_t>(i)] = 0;
    if (!usable_[static_cast<size_t>(i)]) continue;
    const int32_t id = static_cast<int32_t>(i);
    all.push_back(id);
    max_len_ = std::max(max_len_, b.size());
    const int64_t cps = plain_code_points(b);
    if (cps > 0) plain.emplace_back(static_cast<uint32_t>(cps), id);
    else rest.push_back(id);
  }
  std::sort(plain.begin(), plain.end());
  plain_.clear();
  plain_cps_.clear();
  for (auto [n, id] : plain) {
    plain_cps_.push_back(n);
    plain_.push_back(id);
  }
  build_trie(all_, std::move(all));
  build_trie(rest_, std::move(rest));
}

void JsonVocab::build_trie(Trie& t, std::vector<int32_t> ids) const {
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    const std::string& x = bytes_[static_cast<size_t>(a)];
    const std::string& y = bytes_[static_cast<size_t>(b)];
    return x != y ? x < y : a < b;
  });
  t.byte.assign(1, 0);
  t.depth.assign(1, 0);
  t.skip.assign(1, 0);
  t.tok_start.assign(1, 0);
  t.toks.clear();
  std::vector<uint32_t> path{0};  // node per depth
  std::string_view prev;
  for (int32_t id : ids) {
    const std::string& s = bytes_[static_cast<size_t>(id)];
    size_t l = 0;
    while (l < prev.size() && l < s.size() && prev[l] == s[l]) ++l;
    const uint32_t count = static_cast<uint32_t>(t.byte.size());
    while (path.size() > l + 1) {
      t.skip[path.back()] = count;
      path.pop_back();
    }
    for (size_t k = l; k < s.size(); ++k) {
      path.push_back(static_cast<uint32_t>(t.byte.size()));
      t.byte.push_back(static_cast<uint8_t>(s[k]));
      t.depth.push_back(static_cast<uint16_t>(k + 1));
      t.skip.push_back(0);
      t.tok_start.push_back(static_cast<uint32_t>(t.toks.size()));
    }
    t.toks.push_back(id);  // at the last node made (or the same node as prev)
    prev = s;
  }
  const uint32_t count = static_cast<uint32_t>(t.byte.size());
  for (uint32_t p : path) t.skip[p] = count;
  t.tok_start.push_back(static_cast<uint32_t>(t.toks.size()));
}

// ---------------------------------------------------------------- constraint

JsonConstraint::JsonConstraint(std::shared_ptr<const JsonGrammar> g, std::shared_ptr<const JsonVocab> v)
    : g_(std::move(g)), vocab_(std::move(v)), state_(*g_) {
  stack_.assign(vocab_->max_len() + 1, state_);
}

size_t JsonConstraint::walk(const JsonVocab::Trie& t, std::vector<uint8_t>& out) {
  size_t count = 0;
  stack_[0].assign(state_);
  const uint32_t n = static_cast<uint32_t>(t.byte.size());
  for (uint32_t i = 1; i < n;) {
    const size_t d = t.depth[i];
    JsonState& s = stack_[d];
    s.assign(stack_[d - 1]);
    if (!s.feed(t.byte[i])) {
      i = t.skip[i];
      continue;
    }
    for (uint32_t k = t.tok_start[i]; k < t.tok_start[i + 1]; ++k) {
      out[static_cast<size_t>(t.toks[k])] = 1;
      ++count;
    }
    ++i;
  }
  return count;
}

size_t JsonConstraint::allowed(std::vector<uint8_t>& out, std::span<const int32_t> stop_ids) {
  const JsonVocab& v = *vocab_;
  out.assign(static_cast<size_t>(v.size_), 0);
  size_t count = 0;
  const int64_t room = state_.string_room();
  if (room >= 0) {
    // Plain tokens fit by length alone; walk only the others.
    for (size_t k = 0; k < v.plain_.size() && v.plain_cps_[k] <= static_cast<uint64_t>(room); ++k) {
      out[static_cast<size_t>(v.plain_[k])] = 1;
      ++count;
    }
    count += walk(v.rest_, out);
  } else {
    count += walk(v.all_, out);
  }
  const bool acc = state_.accepting();
  for (int32_t s : stop_ids) {
    if (s < 0 || s >= v.size_) continue;
    uint8_t& a = out[static_cast<size_t>(s)];
    if (a != acc) {
      count = acc ? count + 1 : count - 1;
      a = acc;
    }
  }
  return count;
}

size_t JsonConstraint::mask(std::span<float> logits, std::span<const int32_t> stop_ids) {
  const size_t count = allowed(allowed_, stop_ids);
  const size_t n = std::min(logits.size(), allowed_.size());
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < n; ++i)
    if (!allowed_[i]) logits[i] = kNegInf;
  for (size_t i = n; i < logits.size(); ++i) logits[i] = kNegInf;
  return count;
}

bool JsonConstraint::advance(int32_t token) {
  if (!vocab_->usable(token)) return false;
  JsonState next(state_);
  if (!next.feed(vocab_->bytes(token))) return false;
  state_.assign(next);
  return true;
}

}  // namespace strata
