// JSON parsing for untrusted input: nesting depth and size are bounded before
// the document is built, and errors name the file the text came from.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

// Transitional: src/text/ still reaches read_small_file (core/io.h) through
// this header; once those files include core/io.h themselves, drop this.
#include "core/io.h"

namespace strata {

using Json = nlohmann::json;

constexpr int kMaxJsonDepth = 64;

// Parses `text` (from `origin`, used in messages). Throws strata::Error on
// syntax errors or nesting deeper than `max_depth`.
Json parse_json(std::string_view text, const std::string& origin, int max_depth = kMaxJsonDepth);

}  // namespace strata
