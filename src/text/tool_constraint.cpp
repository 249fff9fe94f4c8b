#include "text/tool_constraint.h"

#include <algorithm>

#include "text/tokenizer.h"
#include "core/error.h"

namespace strata {

namespace {

constexpr std::array<std::string_view, kToolMarkups> kMarkup = {"<tool_call>", "</tool_call>", "<arg_key>",
                                                               "</arg_key>",  "<arg_value>",  "</arg_value>"};
constexpr uint8_t bit(int m) { return static_cast<uint8_t>(1u << m); }

// Python's str.isspace() (what py_strip removes).
bool py_space(int32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

// The code point of the well-formed UTF-8 sequence at s[i] (len set).
int32_t decode_cp(std::string_view s, size_t i, size_t& len) {
  const uint8_t c = static_cast<uint8_t>(s[i]);
  len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
  if (len == 1) return c;
  int32_t cp = c & (len == 4 ? 0x07 : len == 3 ? 0x0F : 0x1F);
  for (size_t k = 1; k < len && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
  return cp;
}

// The parser keeps a value as raw text when the parameter's `type` is
// "string" or a list with "string" (chat_template.cpp declared_string).
bool declared_string(const OrderedJson& prop) {
  if (!prop.is_object() || !prop.contains("type")) return false;
  const OrderedJson& ty = prop["type"];
  if (ty.is_string()) return ty == "string";
  if (ty.is_array())
    for (const auto& x : ty)
      if (x == "string") return true;
  return false;
}

// A name or key is generated as its bytes and read back stripped, up to the
// next '<': it must survive that.
void check_label(std::string_view s, const std::string& where) {
  if (s.empty()) fail("{}: an empty name cannot be generated", where);
  if (s.find('<') != std::string_view::npos) fail("{}: '{}' contains '<', which cannot be generated in a tool call", where, s);
  if (py_strip(s).size() != s.size()) fail("{}: '{}' has leading or trailing whitespace", where, s);
}

std::string strip_prefix(std::string msg) {
  constexpr std::string_view p = "response_format schema: ";
  if (msg.compare(0, p.size(), p) == 0) msg.erase(0, p.size());
  return msg;
}

}  // namespace

std::string_view tool_markup(int m) { return kMarkup[static_cast<size_t>(m)]; }

std::vector<ForcedToolFunction> forced_tool_functions(const OrderedJson& tools, std::string_view only) {
  std::vector<ForcedToolFunction> out;
  if (!tools.is_array() || tools.empty()) fail("tools: a forced tool call needs at least one tool");
  for (size_t i = 0; i < tools.size(); ++i) {
    const OrderedJson& t = tools[i];
    ForcedToolFunction fn;
    fn.where = fmt::format("tools[{}].function", i);
    if (!t.is_object() || !t.contains("function") || !t["function"].is_object())
      fail("{}: expected an object", fn.where);
    const OrderedJson& f = t["function"];
    if (!f.contains("name") || !f["name"].is_string()) fail("{}.name: expected a string", fn.where);
    fn.name = f["name"].get<std::string>();
    if (!only.empty() && fn.name != only) continue;
    for (const ForcedToolFunction& other : out)
      if (other.name == fn.name) fail("{}.name: '{}' is declared twice", fn.where, fn.name);
    if (f.contains("parameters") && !f["parameters"].is_null()) {
      if (!f["parameters"].is_object()) fail("{}.parameters: expected a JSON Schema object", fn.where);
      fn.params = f["parameters"];
    }
    out.push_back(std::move(fn));
  }
  if (out.empty()) fail("tool_choice: no function named '{}' in tools", only);
  return out;
}

std::shared_ptr<const JsonGrammar> compile_tool_parameters(const OrderedJson& params, const std::string& where) {
  try {
    return JsonGrammar::from_schema(params);
  } catch (const Error& e) {
    fail("{}.parameters: {}", where, strip_prefix(e.what()));
  }
}

std::shared_ptr<const ToolCallGrammar> ToolCallGrammar::build(const OrderedJson& tools, std::string_view only) {
  auto g = std::make_shared<ToolCallGrammar>();
  for (ForcedToolFunction& def : forced_tool_functions(tools, only)) {
    const std::string& where = def.where;
    Function fn;
    fn.name = def.name;
    check_label(fn.name, where + ".name");
    OrderedJson params = def.params.is_null() ? OrderedJson::object() : std::move(def.params);
    // String parameters are raw text: bound them (maxLength, at most the cap).
    if (params.contains("properties") && params["properties"].is_object()) {
      for (auto it = params["properties"].begin(); it != params["properties"].end(); ++it) {
        check_label(it.key(), where + ".parameters.properties");
        if (!declared_string(it.value())) continue;
        OrderedJson& p = it.value();
        uint64_t cap = kToolStringMaxChars;
        if (p.contains("maxLength") && p["maxLength"].is_number() && p["maxLength"].get<double>() >= 0)
          cap = std::min<uint64_t>(cap, static_cast<uint64_t>(p["maxLength"].get<double>()));
        p["maxLength"] = cap;
      }
    }
    fn.grammar = compile_tool_parameters(params, where);
    const JsonGrammar::Node& root = fn.grammar->node(fn.grammar->root());
    if (!(root.types & JsonGrammar::kObject) || root.literals >= 0 || !root.any_of.empty())
      fail("{}.parameters: must be an object schema (type object with properties)", where);
    size_t k = 0;
    if (params.contains("properties")) {
      for (auto it = params["properties"].begin(); it != params["properties"].end(); ++it, ++k) {
        Param p;
        p.key = it.key();
        p.node = root.props[k].node;
        p.required = root.props[k].required;
        p.raw = declared_string(it.value());
        if (p.raw) {
          // Raw text (no '<', no leading or trailing white space, no control
          // characters but tab and newlines) could dead-end a pattern's DFA.
          if (fn.grammar->node(p.node).pattern >= 0)
            fail("{}.parameters.properties.{}: 'pattern' is not supported on tool string parameters (they are "
                 "generated as raw text)",
                 where, p.key);
          // Raw text cannot spell every string: refuse enum/const values it cannot.
          std::vector<const OrderedJson*> lits;
          if (it.value().contains("const")) lits.push_back(&it.value()["const"]);
          if (it.value().contains("enum") && it.value()["enum"].is_array())
            for (const auto& x : it.value()["enum"]) lits.push_back(&x);
          for (const OrderedJson* x : lits) {
            if (!x->is_string()) continue;
            const std::string& v = x->get_ref<const std::string&>();
            const bool ctl = std::any_of(v.begin(), v.end(), [](char ch) {
              return static_cast<uint8_t>(ch) < 0x20 && ch != '\t' && ch != '\n' && ch != '\r';
            });
            if (v.find('<') != std::string::npos || ctl || py_strip(v).size() != v.size())
              fail("{}.parameters.properties.{}: the value \"{}\" cannot be generated as raw text (it has '<', a "
                   "control character or surrounding whitespace)",
                   where, p.key, v);
          }
          JsonState s(*fn.grammar, p.node);
          if (!s.feed('"'))
            fail("{}.parameters.properties.{}: a string parameter whose enum/const has no string cannot be generated",
                 where, p.key);
        }
        fn.params.push_back(std::move(p));
      }
    }
    if (root.props.size() != fn.params.size())
      fail("{}.parameters: list the parameters in 'properties' at the top of the schema (not through $ref)", where);
    fn.req_from = root.req_from;
    g->fns_.push_back(std::move(fn));
  }
  std::sort(g->fns_.begin(), g->fns_.end(), [](const Function& a, const Function& b) { return a.name < b.name; });
  return g;
}

// ------------------------------------------------------------------ state

ToolState::ToolState(const ToolCallGrammar& g, uint8_t atomic)
    : g_(&g), atomic_(atomic), val_(*g.functions().front().grammar) {}

uint8_t ToolState::junction(const ToolCallGrammar::Function& f, uint32_t next) const {
  uint8_t s = 0;
  if (next < f.params.size()) s |= bit(kArgKey);
  if (f.req_from[next] >= f.params.size()) s |= bit(kToolClose);
  return s;
}

bool ToolState::raw_closable() const {
  if (raw_need_ || raw_space_) return false;
  JsonState end(val_);
  return end.feed('"') && end.accepting();
}

uint8_t ToolState::starts() const {
  const auto& fns = g_->functions();
  switch (phase_) {
    case kBound:
      switch (ctx_) {
        case kStart: return bit(kToolOpen);
        case kJunction: return junction(fns[fn_lo_], next_);
        case kKeyEnd: return bit(kArgKeyEnd);
        case kValOpen: return bit(kArgValue);
        case kValEnd: return bit(kArgValueEnd);
      }
      return 0;
    case kName:
      return fns[fn_lo_].name.size() == pos_ ? junction(fns[fn_lo_], 0) : 0;
    case kKey:
      for (uint64_t k = keys_; k; k &= k - 1) {
        const size_t i = static_cast<size_t>(__builtin_ctzll(k));
        if (fns[fn_lo_].params[i].key.size() == pos_) return bit(kArgKeyEnd);
      }
      return 0;
    case kValue: {
      const auto& p = fns[fn_lo_].params[param_];
      return (p.raw ? raw_closable() : val_.accepting()) ? bit(kArgValueEnd) : 0;
    }
    default:
      return 0;
  }
}

void ToolState::commit() {
  const auto& fns = g_->functions();
  switch (phase_) {
    case kName:
      fn_hi_ = fn_lo_ + 1;
      next_ = 0;
      ctx_ = kJunction;
      break;
    case kKey:
      for (uint64_t k = keys_; k; k &= k - 1) {
        const uint32_t i = static_cast<uint32_t>(__builtin_ctzll(k));
        if (fns[fn_lo_].params[i].key.size() == pos_) param_ = i;
      }
      ctx_ = kKeyEnd;
      break;
    case kValue:
      ctx_ = kValEnd;
      break;
    default:
      break;
  }
  phase_ = kBound;
}

void ToolState::enter(int m) {
  const auto& fns = g_->functions();
  pos_ = 0;
  switch (m) {
    case kToolOpen:
      phase_ = kName;
      fn_lo_ = 0;
      fn_hi_ = static_cast<uint32_t>(fns.size());
      break;
    case kArgKey: {
      const auto& f = fns[fn_lo_];
      const uint32_t last = std::min<uint32_t>(f.req_from[next_], static_cast<uint32_t>(f.params.size()) - 1);
      keys_ = 0;
      for (uint32_t i = next_; i <= last; ++i) keys_ |= uint64_t{1} << i;
      phase_ = kKey;
      break;
    }
    case kArgKeyEnd:
      phase_ = kBound;
      ctx_ = kValOpen;
      break;
    case kArgValue: {
      const auto& p = fns[fn_lo_].params[param_];
      val_ = JsonState(*fns[fn_lo_].grammar, p.node);
      if (p.raw) val_.feed('"');  // checked by build()
      raw_cps_ = 0;
      raw_need_ = 0;
      raw_space_ = false;
      raw_cp_ = 0;
      phase_ = kValue;
      break;
    }
    case kArgValueEnd:
      next_ = param_ + 1;
      phase_ = kBound;
      ctx_ = kJunction;
      break;
    case kToolClose:
      phase_ = kDone;
      break;
  }
}

bool ToolState::feed_value(uint8_t c) {
  const auto& p = g_->functions()[fn_lo_].params[param_];
  if (c == '<') return false;
  if (!p.raw) return val_.feed(c);
  // Raw text, checked as the JSON string it stands for.
  bool ok;
  switch (c) {
    case '"': ok = val_.feed("\\\""); break;
    case '\\': ok = val_.feed("\\\\"); break;
    case '\n': ok = val_.feed("\\n"); break;
    case '\t': ok = val_.feed("\\t"); break;
    case '\r': ok = val_.feed("\\r"); break;
    default: ok = c >= 0x20 && val_.feed(c);
  }
  if (!ok) return false;
  // The code point, for the whitespace rules (val_ has checked the UTF-8).
  if (raw_need_ == 0) {
    if (c < 0x80) {
      raw_cp_ = c;
    } else {
      raw_need_ = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : 1;
      raw_cp_ = c & (c >= 0xF0 ? 0x07 : c >= 0xE0 ? 0x0F : 0x1F);
      return true;
    }
  } else {
    raw_cp_ = (raw_cp_ << 6) | (c & 0x3F);
    if (--raw_need_) return true;
  }
  const bool sp = py_space(raw_cp_);
  if (sp && raw_cps_ == 0) return false;  // the parser would strip it
  if (sp && val_.string_room() == 0) return false;  // it could not be followed by anything else
  raw_space_ = sp;
  ++raw_cps_;
  return true;
}

bool ToolState::feed(uint8_t c) {
  if (phase_ == kLit) {
    uint8_t alive = 0;
    for (uint8_t k = lits_; k; k &= static_cast<uint8_t>(k - 1)) {
      const int m = __builtin_ctz(k);
      if (pos_ < kMarkup[static_cast<size_t>(m)].size() && static_cast<uint8_t>(kMarkup[static_cast<size_t>(m)][pos_]) == c)
        alive |= bit(m);
    }
    if (!alive) return false;
    lits_ = alive;
    ++pos_;
    for (uint8_t k = alive; k; k &= static_cast<uint8_t>(k - 1)) {
      const int m = __builtin_ctz(k);
      if (kMarkup[static_cast<size_t>(m)].size() == pos_) {
        enter(m);
        break;
      }
    }
    return true;
  }
  if (c == '<') {
    const uint8_t s = static_cast<uint8_t>(starts() & ~atomic_);
    if (!s) return false;  // names and keys have no '<'; values refuse it
    commit();
    phase_ = kLit;
    lits_ = s;
    pos_ = 1;  // every markup starts with '<'
    return true;
  }
  switch (phase_) {
    case kName: {
      const auto& fns = g_->functions();
      uint32_t lo = fn_hi_, hi = fn_lo_;
      for (uint32_t i = fn_lo_; i < fn_hi_; ++i) {
        const std::string& n = fns[i].name;
        if (n.size() > pos_ && static_cast<uint8_t>(n[pos_]) == c) {
          lo = std::min(lo, i);
          hi = i + 1;
        }
      }
      if (lo >= hi) return false;
      fn_lo_ = lo;
      fn_hi_ = hi;
      ++pos_;
      return true;
    }
    case kKey: {
      const auto& params = g_->functions()[fn_lo_].params;
      uint64_t alive = 0;
      for (uint64_t k = keys_; k; k &= k - 1) {
        const size_t i = static_cast<size_t>(__builtin_ctzll(k));
        if (params[i].key.size() > pos_ && static_cast<uint8_t>(params[i].key[pos_]) == c) alive |= uint64_t{1} << i;
      }
      if (!alive) return false;
      keys_ = alive;
      ++pos_;
      return true;
    }
    case kValue:
      return feed_value(c);
    default:
      return false;
  }
}

int64_t ToolState::raw_room() const {
  if (phase_ != kValue || raw_need_ || !g_->functions()[fn_lo_].params[param_].raw) return -1;
  return val_.string_room();
}

bool ToolState::feed(std::string_view bytes) {
  for (char c : bytes)
    if (!feed(static_cast<uint8_t>(c))) return false;
  return true;
}

bool ToolState::feed_markup(int m) {
  if (phase_ == kLit || !(atomic_ & bit(m)) || !(starts() & bit(m))) return false;
  commit();
  enter(m);
  return true;
}

// ------------------------------------------------------------- constraint

std::array<int32_t, kToolMarkups> tool_markup_ids(const Tokenizer& tok) {
  std::array<int32_t, kToolMarkups> ids{};
  for (int m = 0; m < kToolMarkups; ++m) {
    const auto id = tok.token_id(kMarkup[static_cast<size_t>(m)]);
    ids[static_cast<size_t>(m)] = id && tok.is_added(*id) && tok.token_bytes(*id) == kMarkup[static_cast<size_t>(m)] ? *id : -1;
  }
  return ids;
}

namespace {
uint8_t atomic_of(const std::array<int32_t, kToolMarkups>& ids) {
  uint8_t a = 0;
  for (int m = 0; m < kToolMarkups; ++m)
    if (ids[static_cast<size_t>(m)] >= 0) a |= bit(m);
  return a;
}
}  // namespace

ToolCallConstraint::ToolCallConstraint(std::shared_ptr<const ToolCallGrammar> g, std::shared_ptr<const JsonVocab> v,
                                       std::array<int32_t, kToolMarkups> markup_ids)
    : g_(std::move(g)),
      vocab_(std::move(v)),
      ids_(markup_ids),
      state_(*g_, atomic_of(markup_ids)),
      walk_(state_, vocab_->max_len()),
      saved_(state_) {}

size_t ToolCallConstraint::allowed(std::vector<uint8_t>& out, std::span<const int32_t> stop_ids) {
  const JsonVocab& v = *vocab_;
  out.assign(static_cast<size_t>(v.size()), 0);
  size_t count = 0;
  if (!state_.done()) {
    const int64_t room = state_.raw_room();
    if (room >= 0) {
      // Inside raw text most of the vocabulary fits: plain tokens (whole
      // characters, no quote, backslash or control byte) without '<' are
      // decided by their length and the whitespace at their ends; those with
      // '<' (it may start the closing markup) are fed one by one; the rest
      // is walked.
      if (plain_flags_.empty()) build_plain_flags();
      const bool first = state_.raw_empty();
      const std::span<const int32_t> plain = v.plain();
      const std::span<const uint32_t> cps = v.plain_cps();
      for (size_t k = 0; k < plain.size() && cps[k] <= static_cast<uint64_t>(room); ++k) {
        const uint8_t f = plain_flags_[k];
        if ((f & 1) || (first && (f & 2)) || ((f & 4) && cps[k] == static_cast<uint64_t>(room))) continue;
        out[static_cast<size_t>(plain[k])] = 1;
        ++count;
      }
      for (int32_t id : plain_lt_) {
        if (walk_.accepts(state_, v.bytes(id))) {
          out[static_cast<size_t>(id)] = 1;
          ++count;
        }
      }
      count += walk_.walk(v.rest(), state_, out);
    } else {
      count += walk_.walk(v.all(), state_, out);
    }
    for (int m = 0; m < kToolMarkups; ++m) {
      const int32_t id = ids_[static_cast<size_t>(m)];
      if (id < 0) continue;
      ToolState s(state_);
      allow_token(out, id, s.feed_markup(m), count);
    }
  }
  for (int32_t s : stop_ids) allow_token(out, s, state_.done(), count);
  return count;
}

void ToolCallConstraint::build_plain_flags() {
  const std::span<const int32_t> plain = vocab_->plain();
  plain_flags_.assign(plain.size(), 0);
  plain_lt_.clear();
  for (size_t k = 0; k < plain.size(); ++k) {
    const std::string_view b = vocab_->bytes(plain[k]);
    uint8_t f = b.find('<') != std::string_view::npos ? 1 : 0;
    if (f) plain_lt_.push_back(plain[k]);
    // Plain tokens are whole characters: decode the first and the last.
    size_t len = 0;
    if (py_space(decode_cp(b, 0, len))) f |= 2;
    size_t last = b.size() - 1;
    while (last > 0 && (static_cast<uint8_t>(b[last]) & 0xC0) == 0x80) --last;
    if (py_space(decode_cp(b, last, len))) f |= 4;
    plain_flags_[k] = f;
  }
}

size_t ToolCallConstraint::mask(std::span<float> logits, std::span<const int32_t> stop_ids) {
  if (!cache_.valid_for(stop_ids)) cache_.set(stop_ids, allowed(allowed_, stop_ids));
  mask_logits(logits, allowed_);
  return cache_.count;
}

int32_t ToolCallConstraint::forced(std::span<const int32_t> stop_ids) {
  if (!cache_.valid_for(stop_ids)) cache_.set(stop_ids, allowed(allowed_, stop_ids));
  return only_allowed(allowed_, cache_.count);
}

bool ToolCallConstraint::advance(int32_t token) {
  ToolState next(state_);
  bool ok = false;
  bool markup = false;
  for (int m = 0; m < kToolMarkups && !markup; ++m)
    if (token >= 0 && token == ids_[static_cast<size_t>(m)]) {
      markup = true;
      ok = next.feed_markup(m);
    }
  if (!markup) ok = vocab_->usable(token) && next.feed(vocab_->bytes(token));
  if (!ok) return false;
  state_ = next;
  moved();
  return true;
}

bool ToolCallConstraint::save() {
  saved_ = state_;
  probe_.save();
  return true;
}

void ToolCallConstraint::moved() {
  if (probe_.saving && !probe_.moved) probe_.keep(allowed_, cache_);
  cache_.fresh = false;
}

void ToolCallConstraint::restore() {
  if (probe_.restore(allowed_, cache_)) state_ = saved_;
}

}  // namespace strata
