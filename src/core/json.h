// JSON parsing for untrusted input: nesting depth and size are bounded before
// the document is built, and errors name the file the text came from.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace strata {

using Json = nlohmann::json;

constexpr int kMaxJsonDepth = 64;

// Parses `text` (from `origin`, used in messages). Throws strata::Error on
// syntax errors or nesting deeper than `max_depth`.
Json parse_json(std::string_view text, const std::string& origin, int max_depth = kMaxJsonDepth);

}  // namespace strata
