// The per-token masks of constrained decoding (response_format's
// JsonConstraint, tool_choice's ToolCallConstraint): which tokens of the
// vocabulary may come next, given a recogniser that reads the answer byte by
// byte.
//
// TokenConstraint: what the scheduler needs of a constrained request.
// JsonVocab: every token's bytes and byte tries over them, built once per
//   tokenizer and shared by all requests (and both constraints).
// TrieWalk<State>: the mask walk, written once for every recogniser. The
//   trie is in preorder (each node: its byte, its depth and where its subtree
//   ends), so a mask walks it once, feeding one byte per node to a stack of
//   states (one per depth) and skipping every subtree the recogniser refuses:
//   a mask costs the nodes the recogniser accepts plus one per refused
//   subtree, not the vocabulary's bytes.
// Inside a string (most of the vocabulary is allowed there) "plain" tokens --
// whole characters, none of them '"', '\' or a control byte -- can be decided
// by their code-point count alone; only the rest is walked (a second trie).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

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

  // Speculative decoding (runtime/generation.h) drafts tokens ahead of the
  // model and checks them here before they are verified.
  // The only token that may come next (a key, punctuation, closing markup),
  // or -1 when none or several may. Costs one mask walk; the next mask() at
  // the same state reuses it.
  virtual int32_t forced(std::span<const int32_t> stop_ids) {
    (void)stop_ids;
    return -1;
  }
  // Probing ahead: save() keeps the state (false: this constraint cannot
  // probe, and nothing is drafted under it); advance() and forced() may then
  // run ahead; restore() returns to the saved state.
  virtual bool save() { return false; }
  virtual void restore() {}
};

// The allowed set of one constraint state, kept for the next mask() at the
// same state (forced() computes it; a mask right after reuses it).
struct AllowedCache {
  bool fresh = false;                  // allowed_ holds the current state's set
  const int32_t* stops = nullptr;      // ... computed with these stop ids
  size_t n_stops = 0;
  size_t count = 0;
  bool valid_for(std::span<const int32_t> s) const { return fresh && s.data() == stops && s.size() == n_stops; }
  void set(std::span<const int32_t> s, size_t n) {
    fresh = true;
    stops = s.data();
    n_stops = s.size();
    count = n;
  }
};

// The bookkeeping of save() / restore() around a constraint's allowed set:
// the saved state's set, computed by forced() before probing moved on, is
// kept and put back by restore(), so the mask at the saved state costs no
// second walk.
struct ConstraintProbe {
  bool saving = false, moved = false;
  std::vector<uint8_t> allowed;  // the saved state's set (when kept.fresh)
  AllowedCache kept;
  void save() {
    saving = true;
    moved = false;
    kept.fresh = false;
  }
  // First move away from the saved state: keep its set if it was computed.
  void keep(std::vector<uint8_t>& current, const AllowedCache& c) {
    moved = true;
    if (c.fresh) {
      allowed.swap(current);
      kept = c;
    }
  }
  // Returns whether the state must go back to the saved one.
  bool restore(std::vector<uint8_t>& current, AllowedCache& c) {
    const bool back = saving && moved;
    if (back) {
      c = kept;
      if (kept.fresh) allowed.swap(current);
    }
    saving = moved = false;
    kept.fresh = false;
    return back;
  }
};

// The id of the only allowed entry when `count` is 1, else -1.
int32_t only_allowed(const std::vector<uint8_t>& allowed, size_t count);

class JsonVocab {
 public:
  // A byte trie over some tokens, in preorder; node 0 is the root.
  struct Trie {
    std::vector<uint8_t> byte;
    std::vector<uint16_t> depth;
    std::vector<uint32_t> skip;       // first node after the subtree
    std::vector<uint32_t> tok_start;  // tokens ending at node i: toks[tok_start[i], tok_start[i + 1])
    std::vector<int32_t> toks;
  };

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

  const Trie& all() const { return all_; }    // every usable token
  const Trie& rest() const { return rest_; }  // the usable tokens that are not plain
  // The plain tokens by code-point count, and their counts (ascending).
  std::span<const int32_t> plain() const { return plain_; }
  std::span<const uint32_t> plain_cps() const { return plain_cps_; }

 private:
  void build_tries();
  void build_trie(Trie& t, std::vector<int32_t> ids) const;
  int64_t size_ = 0;
  std::vector<std::string> bytes_;
  std::vector<uint8_t> usable_;
  size_t max_len_ = 0;
  Trie all_;
  Trie rest_;
  std::vector<int32_t> plain_;
  std::vector<uint32_t> plain_cps_;
};

// The mask walk over a JsonVocab trie for a recogniser `State`: copyable
// (a copy per trie depth, so copies must be cheap) with bool feed(uint8_t)
// that refuses a byte by returning false (the state is then unspecified).
// Holds its stack of states, sized once: a mask allocates nothing.
template <class State>
class TrieWalk {
 public:
  // `max_len`: the longest token (JsonVocab::max_len()); `init` fills the stack.
  TrieWalk(const State& init, size_t max_len) : stack_(max_len + 1, init) {}

  // Sets out[id] = 1 for every token of `t` that `from` reads whole without
  // refusing a byte; returns how many (out keeps its other entries).
  size_t walk(const JsonVocab::Trie& t, const State& from, std::vector<uint8_t>& out) {
    size_t count = 0;
    stack_[0] = from;
    const uint32_t n = static_cast<uint32_t>(t.byte.size());
    for (uint32_t i = 1; i < n;) {
      const size_t d = t.depth[i];
      State& s = stack_[d];
      s = stack_[d - 1];
      if (!s.feed(t.byte[i])) {
        i = t.skip[i];  // the whole subtree is refused
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

  // Whether `from` reads `bytes` whole (one token fed outside the trie).
  bool accepts(const State& from, std::string_view bytes) {
    stack_[0] = from;
    return stack_[0].feed(bytes);
  }

 private:
  std::vector<State> stack_;  // one per trie depth
};

// Sets out[id] to `yes` (ids out of range are ignored), keeping `count`, the
// number of allowed entries, right.
inline void allow_token(std::vector<uint8_t>& out, int32_t id, bool yes, size_t& count) {
  if (id < 0 || static_cast<size_t>(id) >= out.size()) return;
  uint8_t& a = out[static_cast<size_t>(id)];
  if (a != static_cast<uint8_t>(yes)) {
    count = yes ? count + 1 : count - 1;
    a = yes;
  }
}

// Sets logits[i] to -inf where allowed[i] is 0 and past allowed's end.
void mask_logits(std::span<float> logits, const std::vector<uint8_t>& allowed);

}  // namespace strata
