// Inputs shared by the constrained-decoding tests (json_constraint_test.cpp,
// server_tools_test.cpp) and their benchmark (bench/constraints): synthetic
// token vocabularies shaped like BPE ones, and the tools of a weather
// assistant.
#pragma once
#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace strata::test_util {

// Two functions: get_weather (a string with maxLength, a string enum, an
// integer, a nested object) and get_time (one string).
inline const char* const kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {
      "city": {"type": "string", "maxLength": 40},
      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
      "days": {"type": "integer"},
      "detail": {"type": "object", "properties": {"wind": {"type": "boolean"}}, "required": ["wind"]}},
     "required": ["city", "days"]}}},
  {"type": "function", "function": {"name": "get_time", "description": "Local time",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}}
])";

// A synthetic vocabulary of n tokens shaped like a BPE one: the 256 bytes,
// words with and without a leading space, punctuation runs, digits, JSON-ish
// pieces, raw UTF-8 bytes.
inline std::vector<std::string> json_fake_vocab(size_t n) {
  std::vector<std::string> out;
  for (int b = 0; b < 256; ++b) out.push_back(std::string(1, static_cast<char>(b)));
  std::mt19937_64 rng(3);
  const std::string letters = "etaoinshrdlcumwfgypbvkjxqz";
  const std::vector<std::string> punct = {"\"", "\":", "\",", "\":\"", "{\"", "}", "},", "[", "]", ",", ":",
                                          "\",\"", " {", "\n", "  ", "\\n", ".", "-", "_", "'s", "()", "\");"};
  std::set<std::string> seen(out.begin(), out.end());
  while (out.size() < n) {
    std::string t;
    const uint64_t k = rng() % 10;
    if (k < 6) {
      if (rng() % 2) t += ' ';
      if (rng() % 5 == 0) t += static_cast<char>('A' + rng() % 26);
      const size_t len = 1 + rng() % 9;
      for (size_t i = 0; i < len; ++i) t += letters[std::min<size_t>(rng() % 26, rng() % 26)];
    } else if (k < 7) {
      for (size_t i = 0, len = 1 + rng() % 3; i < len; ++i) t += std::to_string(rng() % 10);
    } else if (k < 9) {
      t = punct[rng() % punct.size()];
      if (rng() % 2) t += letters.substr(rng() % 20, 1 + rng() % 5);
    } else {
      const char* u[] = {"\xc3\xa9", "\xe4\xb8\xad", "\xe6\x96\x87", "\xf0\x9f\x98\x80", "\xd0\xb8"};
      for (size_t i = 0, len = 1 + rng() % 3; i < len; ++i) t += u[rng() % 5];
      if (rng() % 3 == 0) t.pop_back();  // partial UTF-8
    }
    if (seen.insert(t).second) out.push_back(t);
  }
  return out;
}

// A synthetic vocabulary of n tokens: the 256 bytes, the tool-call markup
// spelled in pieces ("<", "</", "arg_", "key>", "<arg_value>", ...), words,
// digits, punctuation and UTF-8.
inline std::vector<std::string> tool_fake_vocab(size_t n) {
  std::vector<std::string> out;
  for (int b = 0; b < 256; ++b) out.push_back(std::string(1, static_cast<char>(b)));
  const std::vector<std::string> pieces = {"<",         "</",         "<tool_call>", "</tool_call>", "<arg_key>",
                                           "</arg_key>", "<arg_value>", "</arg_value>", "arg_",        "key>",
                                           "value>",    "tool_",      "call>",       "get_",         "weather",
                                           "time",      "city",       "zone",        "days",         "unit",
                                           "celsius",   "\">",       " <",          "a<",           "{\"",
                                           "\":",      "true",       "}",           "\n",          " "};
  std::set<std::string> seen(out.begin(), out.end());
  for (const auto& p : pieces)
    if (seen.insert(p).second) out.push_back(p);
  std::mt19937_64 rng(5);
  const std::string letters = "etaoinshrdlcumwfgypbvkjxqz";
  const char* u[] = {"\xc3\xa9", "\xe4\xb8\xad", "\xf0\x9f\x98\x80", "\xe3\x80\x80" /* ideographic space */};
  while (out.size() < n) {
    std::string t;
    const uint64_t k = rng() % 10;
    if (k < 6) {
      if (rng() % 2) t += ' ';
      for (size_t i = 0, len = 1 + rng() % 8; i < len; ++i) t += letters[std::min<size_t>(rng() % 26, rng() % 26)];
      if (rng() % 4 == 0) t += rng() % 2 ? "<" : " ";
    } else if (k < 7) {
      for (size_t i = 0, len = 1 + rng() % 3; i < len; ++i) t += std::to_string(rng() % 10);
    } else if (k < 9) {
      t = pieces[rng() % pieces.size()] + letters.substr(rng() % 20, 1 + rng() % 4);
    } else {
      for (size_t i = 0, len = 1 + rng() % 3; i < len; ++i) t += u[rng() % 4];
      if (rng() % 3 == 0) t.pop_back();  // partial UTF-8
    }
    if (seen.insert(t).second) out.push_back(t);
  }
  return out;
}

}  // namespace strata::test_util
