#include "text/tokenizer_json.h"

#include <fmt/format.h>

#include "core/error.h"

namespace strata::tok {

namespace {

// nlohmann SAX handler. Builds the tree like nlohmann's own DOM parser,
// except under model.vocab (an object of token -> id) and model.merges (an
// array of "a b" strings or ["a", "b"] pairs), which go to flat vectors.
class Handler {
 public:
  explicit Handler(TokenizerJson& out) : out_(out) {}
  std::string error;

  bool null() { return value(Json()); }
  bool boolean(bool v) { return value(Json(v)); }
  bool number_integer(int64_t v) { return mode_ == Mode::Vocab ? vocab_id(v) : value(Json(v)); }
  bool number_unsigned(uint64_t v) {
    if (mode_ == Mode::Vocab) return vocab_id(v > uint64_t{INT64_MAX} ? -1 : static_cast<int64_t>(v));
    return value(Json(v));
  }
  bool number_float(double v, const std::string&) { return value(Json(v)); }
  bool binary(Json::binary_t&) { return fail_at("binary values are not JSON"); }
  bool string(std::string& s) {
    if (mode_ == Mode::Merges) {
      out_.merges.push_back({std::move(s), "", true});
      return true;
    }
    if (mode_ == Mode::MergePair) {
      pair_.push_back(std::move(s));
      return true;
    }
    return value(Json(std::move(s)));
  }

  bool start_object(size_t) {
    if (!enter()) return false;
    if (mode_ != Mode::Dom) return fail_at("expected " + expected());
    if (model_member("vocab")) {
      mode_ = Mode::Vocab;
      vocab_depth_ = depth_;
      out_.has_vocab = true;
      return true;
    }
    Json* p = place(Json::object());
    if (!p) return false;
    stack_.push_back(p);
    return true;
  }
  bool key(std::string& k) {
    if (mode_ == Mode::Vocab) {
      vocab_key_ = std::move(k);
      return true;
    }
    Json& obj = *stack_.back();
    if (obj.contains(k)) return fail_at(fmt::format("duplicate key \"{}\"", k.substr(0, 200)));
    keys_.back() = k;
    slot_ = &obj[k];
    return true;
  }
  bool end_object() {
    --depth_;
    keys_.pop_back();
    if (mode_ == Mode::Vocab && depth_ < vocab_depth_) {
      mode_ = Mode::Dom;
      return true;
    }
    stack_.pop_back();
    return true;
  }
  bool start_array(size_t) {
    if (!enter()) return false;
    if (mode_ == Mode::Merges) {
      mode_ = Mode::MergePair;
      pair_.clear();
      return true;
    }
    if (mode_ != Mode::Dom) return fail_at("expected " + expected());
    if (model_member("merges")) {
      mode_ = Mode::Merges;
      out_.has_merges = true;
      return true;
    }
    Json* p = place(Json::array());
    if (!p) return false;
    stack_.push_back(p);
    return true;
  }
  bool end_array() {
    --depth_;
    keys_.pop_back();
    if (mode_ == Mode::MergePair) {
      if (pair_.size() != 2) {
        return fail_at(fmt::format("model.merges[{}]: expected \"a b\" or [\"a\", \"b\"]", out_.merges.size()));
      }
      out_.merges.push_back({std::move(pair_[0]), std::move(pair_[1]), false});
      mode_ = Mode::Merges;
      return true;
    }
    if (mode_ == Mode::Merges) {
      mode_ = Mode::Dom;
      return true;
    }
    stack_.pop_back();
    return true;
  }
  bool parse_error(size_t pos, const std::string&, const nlohmann::detail::exception& e) {
    if (error.empty()) error = fmt::format("invalid JSON at byte {}: {}", pos, e.what());
    return false;
  }

 private:
  enum class Mode { Dom, Vocab, Merges, MergePair };

  std::string expected() const {
    return mode_ == Mode::Vocab ? "an integer id in model.vocab" : "\"a b\" or [\"a\", \"b\"] in model.merges";
  }
  bool fail_at(const std::string& what) {
    if (error.empty()) error = what;
    return false;
  }
  bool enter() {
    if (++depth_ > kMaxJsonDepth) return fail_at(fmt::format("JSON nesting deeper than {} levels", kMaxJsonDepth));
    keys_.emplace_back();
    return true;
  }
  // The container being opened is the member `name` of the top-level "model".
  bool model_member(const char* name) const {
    return depth_ == 3 && keys_.size() == 3 && keys_[0] == "model" && keys_[1] == name;
  }
  Json* place(Json&& v) {
    if (stack_.empty()) {
      out_.doc = std::move(v);
      return &out_.doc;
    }
    if (stack_.back()->is_array()) {
      stack_.back()->push_back(std::move(v));
      return &stack_.back()->back();
    }
    *slot_ = std::move(v);
    return slot_;
  }
  bool value(Json&& v) {
    if (mode_ != Mode::Dom) return fail_at("expected " + expected());
    return place(std::move(v)) != nullptr;
  }
  bool vocab_id(int64_t v) {
    out_.vocab.emplace_back(std::move(vocab_key_), v);
    return true;
  }

  TokenizerJson& out_;
  Mode mode_ = Mode::Dom;
  int depth_ = 0, vocab_depth_ = 0;
  // keys_[d]: the key most recently read in the object at depth d+1 (the
  // root is depth 1), so keys_[0] == "model" while inside the model.
  std::vector<std::string> keys_;
  std::vector<Json*> stack_;
  Json* slot_ = nullptr;
  std::string vocab_key_;
  std::vector<std::string> pair_;
};

}  // namespace

TokenizerJson parse_tokenizer_json(std::string_view text, const std::string& origin) {
  TokenizerJson out;
  Handler h(out);
  bool ok = false;
  try {
    ok = Json::sax_parse(text.begin(), text.end(), &h);
  } catch (const Json::exception& e) {
    if (h.error.empty()) h.error = fmt::format("invalid JSON: {}", e.what());
  }
  if (!ok) fail("{}: {}", origin, h.error.empty() ? "invalid JSON" : h.error);
  return out;
}

}  // namespace strata::tok
