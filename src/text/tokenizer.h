// Text <-> token ids for Hugging Face `tokenizer.json` files with a BPE model
// (the byte-level BPE of GLM, DeepSeek-V3 and Qwen3). The reference is
// transformers.js: for the same tokenizer.json and tokenizer_config.json,
// encode() returns the ids it returns and decode() the string it returns
// (tests/tokenizer/ checks this; docs/tokenizer.md says what is covered).
//
// Pipeline: added/special tokens are split out first (longest match, their
// lstrip/rstrip flags applied), then each remaining section is normalized,
// pre-tokenized (Split regexes, ByteLevel, Digits, ...) and BPE-merged; the
// post-processor adds template tokens when asked to.
//
// A loaded Tokenizer is immutable apart from an internal bounded word cache;
// encode/decode may be called from several threads at once.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "text/unicode.h"

namespace strata {

class Tokenizer {
 public:
  // `path` is a tokenizer.json file or a directory holding one. A
  // tokenizer_config.json beside it is read too when present. Throws
  // strata::Error naming the file and field on malformed or unsupported input.
  static Tokenizer load(const std::string& path);
  // The same from in-memory JSON texts (`config_json` may be empty);
  // `origin` names them in errors.
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view config_json,
                             const std::string& origin);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Ill-formed UTF-8 in `text` is read as U+FFFD per maximal ill-formed
  // subpart (what JavaScript's TextDecoder does) before tokenizing.
  // `add_special` applies the post-processor (e.g. a TemplateProcessing BOS).
  std::vector<int32_t> encode(std::string_view text, bool add_special = false) const;

  // Ids out of range decode to nothing. `skip_special` drops the tokens
  // marked special (and tokenizer_config's additional_special_tokens).
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // Id of a vocabulary or added token, spelled as in tokenizer.json.
  std::optional<int32_t> token_id(std::string_view token) const;
  // The token as spelled in tokenizer.json (byte-level alphabet for BPE
  // pieces, e.g. "Ġthe"); empty for an id out of range.
  std::string_view token_text(int32_t id) const;
  bool is_special(int32_t id) const;
  // An added token (special or not): decoded as its content, never BPE-merged.
  bool is_added(int32_t id) const;
  // True when the decoder is ByteLevel: then token_bytes() are exactly the
  // bytes a token adds to the streamed output.
  bool is_byte_level() const;
  // The bytes `id` decodes to on its own (added tokens: their content; BPE
  // pieces: raw bytes, possibly partial UTF-8); empty for an unknown id.
  std::string_view token_bytes(int32_t id) const;
  // One past the largest id the tokenizer knows (vocabulary and added tokens).
  int64_t vocab_size() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  friend class StreamDecoder;
};

// Incremental detokenization for generation: push() returns the text that is
// complete so far and holds back the bytes of a UTF-8 sequence that a later
// token may finish. The concatenation of all push() results and flush()
// equals Tokenizer::decode() of the same ids (before the clean-up of
// tokenization spaces, which only non-GLM/Qwen/DeepSeek configs enable).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false);
  std::string push(int32_t id);
  // Ends the stream: held bytes that never completed become U+FFFD.
  std::string flush();

 private:
  const Tokenizer::Impl* tok_;
  bool skip_special_;
  bool first_ = true;  // no token seen yet (for decoders that join with spaces)
  unicode::Utf8Stream utf8_;
};

}  // namespace strata
