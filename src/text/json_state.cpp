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

constexpr uint8_t kStrIsKey = 1, kStrHexD = 2, kStrFmt = 4, kStrPat = 8;  // Str flags
constexpr uint8_t kNumIntOnly = 1, kNumBounded = 2, kNumNeg = 4;  // Num flags

bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

// Some integer in [a, b] within the node's bounds (and a multiple).
bool hits(const JsonGrammar::Node& n, int64_t a, int64_t b) {
  a = std::max(a, n.int_lo);
  b = std::min(b, n.int_hi);
  return a <= b && (n.multiple == 1 || floor_div(b, n.multiple) * n.multiple >= a);
}

// An integer part of magnitude v (k digits; a lone 0 takes no more) can
// still become an integer within the bounds by appending digits.
bool int_feasible(const JsonGrammar::Node& n, bool neg, int64_t v, int k) {
  const int jmax = v == 0 ? 0 : kJsonMaxIntDigits - k;
  int64_t p = 1;
  for (int j = 0; j <= jmax; ++j, p *= 10) {
    const int64_t lo = v * p, hi = v * p + p - 1;
    if (neg ? hits(n, -hi, -lo) : hits(n, lo, hi)) return true;
  }
  return false;
}

// Strings with a format follow a template, one byte per character:
// Y year digit, M/m month tens/units, D/d day tens/units, H/h hour (00-23),
// N minute/second tens (0-5), n any digit, x lowercase hex; others literal.
// Times end with an optional fraction ('.' and 1-9 digits), then 'Z' or an
// offset +HH:MM / -HH:MM.
constexpr std::string_view kTplDate = "YYYY-Mm-Dd", kTplTime = "Hh:Nn:Nn", kTplDateTime = "YYYY-Mm-DdTHh:Nn:Nn",
                           kTplUuid = "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", kTplOffset = "Hh:Nn";
enum FmtTail : uint32_t { F_TPL, F_AFTER_SEC, F_FRAC, F_OFFSET, F_END };

std::string_view fmt_template(uint8_t kind) {
  switch (kind) {
    case JsonGrammar::kFmtDate: return kTplDate;
    case JsonGrammar::kFmtTime: return kTplTime;
    case JsonGrammar::kFmtDateTime: return kTplDateTime;
    default: return kTplUuid;
  }
}

// format email, a documented subset of RFC 5321 addresses: a local part of
// 1-64 characters from [A-Za-z0-9._%+-] (no leading, trailing or double
// '.'), '@', then two or more domain labels of 1-63 [A-Za-z0-9-] (no leading
// or trailing '-') joined by '.', the last one 2+ letters; 254 characters in
// all. A character is taken only if the address can still be completed
// within 254, so a constrained answer never dead-ends.
// Frame use: a = characters so far; b = 0 local part, 1 domain; mask bits
// 0-7 local length, 8-15 label length, 16 a '.' seen in the domain, 17 the
// label is letters only, 18-19 the last character (0 none, 1 '.', 2 '-',
// 3 other).
enum class EmailStep { Reject, Take, Close };
constexpr uint32_t kEmailMax = 254, kEmailLocalMax = 64, kEmailLabelMax = 63;

struct EmailState {
  uint32_t total, domain, local, label, dot, letters, last;
  static EmailState of(uint32_t a, uint32_t b, uint64_t m) {
    return {a, b, static_cast<uint32_t>(m & 0xff), static_cast<uint32_t>((m >> 8) & 0xff),
            static_cast<uint32_t>((m >> 16) & 1), static_cast<uint32_t>((m >> 17) & 1),
            static_cast<uint32_t>((m >> 18) & 3)};
  }
  uint64_t mask() const {
    return uint64_t{local} | uint64_t{label} << 8 | uint64_t{dot} << 16 | uint64_t{letters} << 17 |
           uint64_t{last} << 18;
  }
  bool complete() const { return domain && dot && letters && label >= 2; }
  // The fewest characters that complete the address from here.
  uint32_t need() const {
    if (!domain) return (local == 0 || last == 1 ? 1u : 0u) + 1 + 4;  // [x] '@' "a.bc"
    if (label == 0) return dot ? 2 : 4;                                 // "bc" or "a.bc"
    uint32_t best = (last == 2 ? 1u : 0u) + 1 + 2;                      // [x] '.' "bc"
    if (dot && letters) best = std::min(best, label >= 2 ? 0u : 2 - label);
    return best;
  }
};

EmailStep email_step(uint32_t& a, uint32_t& b, uint64_t& mask, uint8_t c) {
  EmailState s = EmailState::of(a, b, mask);
  if (c == '"') return s.complete() ? EmailStep::Close : EmailStep::Reject;
  const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'), digit = c >= '0' && c <= '9';
  if (!s.domain) {
    if (c == '@') {
      if (s.local == 0 || s.last == 1) return EmailStep::Reject;
      s.domain = 1, s.label = 0, s.dot = 0, s.letters = 1, s.last = 0;
    } else if (c == '.') {
      if (s.local == 0 || s.last == 1 || s.local + 1 >= kEmailLocalMax) return EmailStep::Reject;
      ++s.local, s.last = 1;
    } else if (alpha || digit || c == '_' || c == '%' || c == '+' || c == '-') {
      if (s.local + 1 > kEmailLocalMax) return EmailStep::Reject;
      ++s.local, s.last = 3;
    } else {
      return EmailStep::Reject;
    }
  } else if (c == '.') {
    if (s.label == 0 || s.last == 2) return EmailStep::Reject;
    s.label = 0, s.dot = 1, s.letters = 1, s.last = 1;
  } else if (c == '-') {
    if (s.label == 0 || s.label + 2 > kEmailLabelMax) return EmailStep::Reject;  // room for what ends the label
    ++s.label, s.letters = 0, s.last = 2;
  } else if (alpha || digit) {
    if (s.label + 1 > kEmailLabelMax) return EmailStep::Reject;
    ++s.label, s.letters = s.letters && alpha, s.last = 3;
  } else {
    return EmailStep::Reject;
  }
  ++s.total;
  if (s.total + s.need() > kEmailMax) return EmailStep::Reject;
  a = s.total, b = s.domain, mask = s.mask();
  return EmailStep::Take;
}

int days_in_month(uint32_t y, uint32_t m) {
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (m == 2 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0)) return 29;
  return kDays[(m - 1) % 12];
}

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
  if (f.kind == kNum) {
    if (f.flags & kNumBounded) {
      if (f.phase == N_FRAC) return true;  // the '.' was taken only where every fraction is in range
      if (f.phase != N_ZERO && f.phase != N_INT) return false;
      const int64_t v = static_cast<int64_t>(f.mask);
      return (f.flags & kNumNeg) ? hits(g_->node(f.node), -v, -v) : hits(g_->node(f.node), v, v);
    }
    return f.phase == N_ZERO || f.phase == N_INT || f.phase == N_FRAC || f.phase == N_EXP;
  }
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
      if (n.format) f.flags = kStrFmt, f.small = n.format;
      else if (n.pattern >= 0) f.flags = kStrPat;
      return push(f);
    case JsonGrammar::kNumber:
      f.kind = kNum;
      f.phase = N_BEGIN;
      f.flags = (n.types & JsonGrammar::kNumber) ? 0 : kNumIntOnly;
      if (n.bounded) f.flags |= kNumBounded;
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
  if (f.flags & kNumBounded) return num_feed_bounded(f, c, redispatch);
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

bool JsonState::fmt_feed(Frame& f, uint8_t c) {
  if (f.small == JsonGrammar::kFmtEmail) {
    const EmailStep st = email_step(f.a, f.b, f.mask, c);
    if (st == EmailStep::Close) pop_done();
    return st != EmailStep::Reject;
  }
  // f.a: position in the template, f.b: FmtTail, f.mask: year (bits 0-15),
  // month (16-23), day tens (24-31), hour tens (32-39), fraction digits (40-47).
  auto field = [&](int shift) { return static_cast<uint32_t>((f.mask >> shift) & 0xffff); };
  auto set = [&](int shift, uint64_t bits, uint32_t v) {
    f.mask = (f.mask & ~(((uint64_t{1} << bits) - 1) << shift)) | (uint64_t{v} << shift);
  };
  const bool timed = f.small == JsonGrammar::kFmtTime || f.small == JsonGrammar::kFmtDateTime;
  switch (f.b) {
    case F_TPL:
    case F_OFFSET: {
      const std::string_view tpl = f.b == F_OFFSET ? kTplOffset : fmt_template(f.small);
      const char t = tpl[f.a];
      const uint32_t d = static_cast<uint32_t>(c - '0');
      bool ok = false;
      switch (t) {
        case 'Y':
          ok = is_digit(c);
          if (ok) set(0, 16, field(0) * 10 + d);
          break;
        case 'M':
          ok = c == '0' || c == '1';
          if (ok) set(16, 8, d * 10);
          break;
        case 'm': {
          const uint32_t m = (field(16) & 0xff) + d;
          ok = is_digit(c) && m >= 1 && m <= 12;
          if (ok) set(16, 8, m);
          break;
        }
        case 'D': {
          const uint32_t dim = static_cast<uint32_t>(days_in_month(field(0), field(16) & 0xff));
          ok = is_digit(c) && d * 10 + (d == 0 ? 1 : 0) <= dim;
          if (ok) set(24, 8, d);
          break;
        }
        case 'd': {
          const uint32_t day = (field(24) & 0xff) * 10 + d;
          ok = is_digit(c) && day >= 1 && day <= static_cast<uint32_t>(days_in_month(field(0), field(16) & 0xff));
          break;
        }
        case 'H':
          ok = c >= '0' && c <= '2';
          if (ok) set(32, 8, d);
          break;
        case 'h': ok = is_digit(c) && ((field(32) & 0xff) < 2 || c <= '3'); break;
        case 'N': ok = c >= '0' && c <= '5'; break;
        case 'n': ok = is_digit(c); break;
        case 'x': ok = is_digit(c) || (c >= 'a' && c <= 'f'); break;
        default: ok = c == static_cast<uint8_t>(t);
      }
      if (!ok) return false;
      if (++f.a == tpl.size()) f.b = (f.b == F_TPL && timed) ? F_AFTER_SEC : F_END;
      return true;
    }
    case F_FRAC:
      if (is_digit(c)) {
        const uint32_t k = (field(40) & 0xff);
        if (k >= 9) return false;
        set(40, 8, k + 1);
        return true;
      }
      if ((field(40) & 0xff) == 0) return false;
      [[fallthrough]];
    case F_AFTER_SEC:
      if (c == '.' && f.b == F_AFTER_SEC) return f.b = F_FRAC, true;
      if (c == 'Z') return f.b = F_END, true;
      if (c == '+' || c == '-') return f.b = F_OFFSET, f.a = 0, true;
      return false;
    case F_END:
      if (c != '"') return false;
      pop_done();
      return true;
    default: return false;
  }
}

// Bounded numbers: the integer part's magnitude is kept in f.mask; a digit
// is taken only if the integer part can still end within the bounds, the
// number ends only there, a '.' only where every fraction is in range, and
// there is no exponent.
bool JsonState::num_feed_bounded(Frame& f, uint8_t c, bool& redispatch) {
  const JsonGrammar::Node& n = g_->node(f.node);
  const bool neg = f.flags & kNumNeg;
  const bool d = is_digit(c);
  switch (f.phase) {
    case N_BEGIN:
      if (c == '-') {
        for (int64_t x = 0; x <= 9; ++x)
          if (int_feasible(n, true, x, 1)) {
            f.phase = N_MINUS;
            f.flags = static_cast<uint8_t>(f.flags | kNumNeg);
            return true;
          }
        return false;
      }
      [[fallthrough]];
    case N_MINUS:
      if (!d || !int_feasible(n, neg, c - '0', 1)) return false;
      f.phase = c == '0' ? N_ZERO : N_INT;
      f.a = 1;
      f.mask = static_cast<uint64_t>(c - '0');
      return true;
    case N_INT:
      if (d) {
        if (f.a >= static_cast<uint32_t>(kJsonMaxIntDigits)) return false;
        const int64_t v = static_cast<int64_t>(f.mask) * 10 + (c - '0');
        if (!int_feasible(n, neg, v, static_cast<int>(f.a) + 1)) return false;
        ++f.a;
        f.mask = static_cast<uint64_t>(v);
        return true;
      }
      [[fallthrough]];
    case N_ZERO:
      if (!(f.flags & kNumIntOnly) && c == '.') {
        const int64_t v = static_cast<int64_t>(f.mask);
        const bool ok = neg ? (-v >= n.frac_neg_min && -v <= n.int_hi) : (v >= n.int_lo && v <= n.frac_pos_max);
        if (!ok) return false;
        return f.phase = N_DOT, true;
      }
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
  if (f.flags & kStrFmt) return fmt_feed(f, c);
  if (f.flags & kStrPat) return pat_feed(f, c);
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

// Strings with a pattern: the DFA steps with decoded code points. Frame use:
// a = characters so far, b = UTF-8 continuation bytes still needed (bits
// 0-1) and the sequence's length (bits 2-4), small = \u hex digits read,
// mask = DFA state (bits 0-31) and the code point's bits read so far (32-63).
// A byte that starts or continues a character is taken only if some code
// point it can still become leads to a state that can match within maxLength.
bool JsonState::pat_feed(Frame& f, uint8_t c) {
  const JsonGrammar::Node& n = g_->node(f.node);
  const JsonPattern& p = g_->pattern(n.pattern);
  const int32_t s = static_cast<int32_t>(f.mask & 0xffffffffu);
  const uint32_t part = static_cast<uint32_t>(f.mask >> 32);
  const uint64_t room = n.max_len == UINT32_MAX ? UINT64_MAX : uint64_t{n.max_len} - f.a;  // characters left
  auto take = [&](uint32_t cp) {
    const int32_t t = p.step(s, cp);
    if (t < 0 || p.dist(t) >= room) return false;
    f.mask = static_cast<uint32_t>(t);
    ++f.a;
    f.b = 0;
    f.phase = S_BODY;
    return true;
  };
  auto pend = [&](uint32_t v) { f.mask = (uint64_t{v} << 32) | static_cast<uint32_t>(s); };
  switch (f.phase) {
    case S_BODY: {
      const uint32_t need = f.b & 3;
      if (need) {
        if ((c & 0xC0) != 0x80) return false;
        const uint32_t v = (part << 6) | (c & 0x3F);
        if (need == 1) return take(v);
        static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
        const uint32_t len = (f.b >> 2) & 7, bits = 6 * (need - 1);
        const uint32_t lo = std::max(v << bits, kMin[len]), hi = (v << bits) | ((1u << bits) - 1);
        if (!p.live(s, lo, hi, room)) return false;
        pend(v);
        f.b = (need - 1) | (len << 2);
        return true;
      }
      if (c == '"') {
        if (!p.accepting(s)) return false;
        pop_done();
        return true;
      }
      if (c == '\\') {
        if (!p.live(s, 0, 0xFFFF, room)) return false;
        f.phase = S_ESC;
        return true;
      }
      if (c < 0x20) return false;
      if (c < 0x80) return take(c);
      uint32_t len = 0, v = 0, lo = 0;
      if (c >= 0xC0 && c <= 0xDF) len = 2, v = c & 0x1F, lo = 0x80;
      else if (c >= 0xE0 && c <= 0xEF) len = 3, v = c & 0x0F, lo = 0x800;
      else if (c >= 0xF0 && c <= 0xF7) len = 4, v = c & 0x07, lo = 0x10000;
      else return false;
      const uint32_t bits = 6 * (len - 1);
      if (!p.live(s, std::max(v << bits, lo), (v << bits) | ((1u << bits) - 1), room)) return false;
      pend(v);
      f.b = (len - 1) | (len << 2);
      return true;
    }
    case S_ESC: {
      uint32_t cp = 0;
      switch (c) {
        case '"': cp = '"'; break;
        case '\\': cp = '\\'; break;
        case '/': cp = '/'; break;
        case 'b': cp = 0x08; break;
        case 'f': cp = 0x0C; break;
        case 'n': cp = 0x0A; break;
        case 'r': cp = 0x0D; break;
        case 't': cp = 0x09; break;
        case 'u':
          f.phase = S_HEX;
          f.small = 0;
          pend(0);
          return true;
        default: return false;
      }
      return take(cp);
    }
    case S_HEX: {
      if (!is_hex(c)) return false;
      const uint32_t h = is_digit(c) ? c - '0' : static_cast<uint32_t>((c | 0x20) - 'a' + 10);
      const uint32_t v = part * 16 + h;
      const uint32_t k = f.small + 1u;
      if (k == 4) return take(v);
      const uint32_t bits = 4 * (4 - k);
      if (!p.live(s, v << bits, (v << bits) | ((1u << bits) - 1), room)) return false;
      pend(v);
      f.small = static_cast<uint8_t>(k);
      return true;
    }
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
  if (t.kind != kStr || t.phase != S_BODY || (t.b & 0xff) || (t.flags & (kStrFmt | kStrPat))) return -1;
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
