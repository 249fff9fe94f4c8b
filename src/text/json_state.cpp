#include "text/json_state.h"

#include <algorithm>
#include <string>
#include <vector>

namespace strata {

namespace {

// Frame kinds and phases.
enum Kind : uint8_t { kRoot, kObj, kArr, kStr, kKey, kNum, kLit };
enum RootPhase : uint8_t { R_START, R_VAL, R_DONE };
enum ObjPhase : uint8_t { O_START, O_NEXTKEY, O_INKEY, O_COLON, O_VALUE, O_INVAL, O_AFTER };
enum ArrPhase : uint8_t { A_START, A_NEXT, A_INVAL, A_AFTER };
enum StrPhase : uint8_t { S_BODY, S_ESC, S_HEX };
enum NumPhase : uint8_t { N_BEGIN, N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };

constexpr uint8_t kStrIsKey = 1, kStrHexD = 2;  // Str flags
constexpr uint8_t kNumIntOnly = 1;              // Num flags

bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

}  // namespace

JsonState::JsonState(const JsonGrammar& g) : JsonState(g, g.root()) {}

JsonState::JsonState(const JsonGrammar& g, int32_t node) : g_(&g) {
  Frame r{};
  r.node = node;
  r.kind = kRoot;
  r.phase = R_START;
  fr_[0] = r;
  depth_ = 1;
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
  const uint8_t cls = JsonGrammar::class_of(c);
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

}  // namespace strata
