#include "text/json_grammar.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "core/error.h"

namespace strata {

namespace {

using SJson = nlohmann::ordered_json;  // schemas keep their key order (properties in schema order)

uint8_t claims_of_types(uint8_t t) {
  uint8_t c = t & ~JsonGrammar::kInteger;
  if (t & JsonGrammar::kInteger) c |= JsonGrammar::kNumber;
  return c;
}

}  // namespace

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

  static void compile_format(const SJson& s, JsonGrammar::Node& n, const std::string& path) {
    using G = JsonGrammar;
    const SJson& f = s["format"];
    if (!f.is_string()) bad(path, "'format' must be a string");
    const std::string name = f.get<std::string>();
    if (name == "date") n.format = G::kFmtDate;
    else if (name == "time") n.format = G::kFmtTime;
    else if (name == "date-time") n.format = G::kFmtDateTime;
    else if (name == "uuid") n.format = G::kFmtUuid;
    else if (name == "email") n.format = G::kFmtEmail;
    else bad(path, fmt::format("unsupported JSON Schema keyword 'format' value '{}' (supported: date, time, "
                               "date-time, uuid, email)", name));
    if (s.contains("minLength") || s.contains("maxLength"))
      bad(path, "'format' with 'minLength'/'maxLength' is not supported");
  }

  // Numbers strata generates have at most kJsonMaxIntDigits integer digits.
  static constexpr int64_t kMaxMag = 9999999999999999;  // 16 nines
  static constexpr double kBig = 1e17;

  static void compile_bounds(const SJson& s, JsonGrammar::Node& n, const std::string& path) {
    using G = JsonGrammar;
    const bool any = s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
                     s.contains("exclusiveMaximum") || s.contains("multipleOf");
    if (!any) return;
    auto num = [&](const char* key) -> const SJson& {
      const SJson& v = s[key];
      if (!v.is_number() || (v.is_number_float() && !std::isfinite(v.get<double>())))
        bad(path, fmt::format("'{}' must be a number", key));
      return v;
    };
    // The smallest integer >= v (or > v when `strict`), the largest <= v (< v).
    auto ceil_of = [](const SJson& v, bool strict) -> int64_t {
      if (v.is_number_float()) {
        const double d = std::clamp(v.get<double>(), -kBig, kBig);
        return strict ? static_cast<int64_t>(std::floor(d)) + 1 : static_cast<int64_t>(std::ceil(d));
      }
      const double d = v.get<double>();
      if (d > kBig) return static_cast<int64_t>(kBig);
      if (d < -kBig) return static_cast<int64_t>(-kBig);
      return v.get<int64_t>() + (strict ? 1 : 0);
    };
    auto floor_of = [](const SJson& v, bool strict) -> int64_t {
      if (v.is_number_float()) {
        const double d = std::clamp(v.get<double>(), -kBig, kBig);
        return strict ? static_cast<int64_t>(std::ceil(d)) - 1 : static_cast<int64_t>(std::floor(d));
      }
      const double d = v.get<double>();
      if (d > kBig) return static_cast<int64_t>(kBig);
      if (d < -kBig) return static_cast<int64_t>(-kBig);
      return v.get<int64_t>() - (strict ? 1 : 0);
    };
    int64_t lo = -kMaxMag, hi = kMaxMag;
    int64_t frac_pos_max = kMaxMag, frac_neg_min = -kMaxMag;  // no bound: any fraction
    // Draft-4 form: exclusiveMinimum/exclusiveMaximum booleans modify minimum/maximum.
    bool ex_min_flag = false, ex_max_flag = false;
    if (s.contains("exclusiveMinimum") && s["exclusiveMinimum"].is_boolean()) {
      ex_min_flag = s["exclusiveMinimum"].get<bool>();
      if (!s.contains("minimum")) bad(path, "'exclusiveMinimum' true needs 'minimum'");
    }
    if (s.contains("exclusiveMaximum") && s["exclusiveMaximum"].is_boolean()) {
      ex_max_flag = s["exclusiveMaximum"].get<bool>();
      if (!s.contains("maximum")) bad(path, "'exclusiveMaximum' true needs 'maximum'");
    }
    auto lower = [&](const SJson& v, bool strict) {
      lo = std::max(lo, ceil_of(v, strict));
      // Negative values with a fraction, -(I + f) for f in [0, 1): need -(I+1) >= v.
      frac_neg_min = std::max(frac_neg_min, ceil_of(v, false) + 1);
    };
    auto upper = [&](const SJson& v, bool strict) {
      hi = std::min(hi, floor_of(v, strict));
      // Positive values I + f for f in [0, 1): need I + 1 <= v.
      frac_pos_max = std::min(frac_pos_max, floor_of(v, false) - 1);
    };
    if (s.contains("minimum")) lower(num("minimum"), ex_min_flag);
    if (s.contains("exclusiveMinimum") && !s["exclusiveMinimum"].is_boolean()) lower(num("exclusiveMinimum"), true);
    if (s.contains("maximum")) upper(num("maximum"), ex_max_flag);
    if (s.contains("exclusiveMaximum") && !s["exclusiveMaximum"].is_boolean()) upper(num("exclusiveMaximum"), true);
    int64_t mult = 1;
    if (s.contains("multipleOf")) {
      const SJson& m = num("multipleOf");
      const double d = m.get<double>();
      if (!(d > 0)) bad(path, "'multipleOf' must be greater than 0");
      if (n.types & G::kNumber)
        bad(path, "'multipleOf' is only supported for type 'integer' (not 'number')");
      if (d != std::floor(d) || d > static_cast<double>(kMaxMag))
        bad(path, "'multipleOf' is only supported as a whole number up to 16 digits");
      mult = static_cast<int64_t>(d);
    }
    lo = std::max(lo, -kMaxMag);
    hi = std::min(hi, kMaxMag);
    auto floor_div = [](int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); };
    if (lo > hi || floor_div(hi, mult) * mult < lo)
      bad(path, "the numeric bounds ('minimum'/'maximum'/'exclusiveMinimum'/'exclusiveMaximum'/'multipleOf') "
                "leave no integer of at most 16 digits (strata generates a bounded number's integer values, and "
                "fractions only where the whole unit interval is in range)");
    n.bounded = true;
    n.int_lo = lo;
    n.int_hi = hi;
    n.frac_pos_max = frac_pos_max;
    n.frac_neg_min = frac_neg_min;
    n.multiple = mult;
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
        "items", "minItems",   "maxItems", "minLength",            "maxLength", "anyOf", "$ref",
        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "format", "pattern"};
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
      if (s.contains("minLength") || s.contains("maxLength") || s.contains("format") || s.contains("pattern"))
        n.types |= G::kString;
      if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
          s.contains("exclusiveMaximum"))
        n.types |= G::kNumber;
      if (s.contains("multipleOf")) n.types |= G::kInteger;
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
      for (const std::string& l : g.lits_.back()) n.claims |= G::class_of(static_cast<uint8_t>(l[0]));
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
    if (s.contains("format")) compile_format(s, n, path);
    if (s.contains("pattern")) {
      const SJson& pt = s["pattern"];
      if (!pt.is_string()) bad(path, "'pattern' must be a string");
      if (s.contains("format")) bad(path, "'pattern' with 'format' is not supported");
      try {
        g.patterns_.push_back(JsonPattern::compile(pt.get<std::string>(), n.min_len, n.max_len));
      } catch (const Error& e) {
        bad(path, e.what());
      }
      n.pattern = static_cast<int32_t>(g.patterns_.size() - 1);
    }
    compile_bounds(s, n, path);

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

}  // namespace strata
