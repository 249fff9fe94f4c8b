#include "text/generation_config.h"

#include <sys/stat.h>

#include <cmath>

#include "core/io.h"
#include "core/error.h"

namespace strata {

namespace {

std::optional<double> number(const Json& j, const char* key, const std::string& origin, double lo, double hi) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  const Json& v = j[key];
  if (!v.is_number()) fail("{}: \"{}\" must be a number", origin, key);
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) fail("{}: \"{}\" = {} is outside [{}, {}]", origin, key, x, lo, hi);
  return x;
}

std::optional<int64_t> integer(const Json& j, const char* key, const std::string& origin, int64_t lo, int64_t hi) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  const Json& v = j[key];
  if (!v.is_number_integer()) fail("{}: \"{}\" must be an integer", origin, key);
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) fail("{}: \"{}\" = {} is outside [{}, {}]", origin, key, x, lo, hi);
  return x;
}

}  // namespace

GenerationConfig parse_generation_config(const Json& j, const std::string& origin) {
  if (!j.is_object()) fail("{}: expected a JSON object", origin);
  GenerationConfig g;
  if (j.contains("do_sample") && !j["do_sample"].is_null()) {
    if (!j["do_sample"].is_boolean()) fail("{}: \"do_sample\" must be true or false", origin);
    g.do_sample = j["do_sample"].get<bool>();
  }
  g.temperature = number(j, "temperature", origin, 0.0, 1e4);
  g.top_p = number(j, "top_p", origin, 0.0, 1.0);
  g.top_k = integer(j, "top_k", origin, 0, int64_t{1} << 31);
  g.min_p = number(j, "min_p", origin, 0.0, 1.0);
  g.repetition_penalty = number(j, "repetition_penalty", origin, 1e-3, 1e3);
  g.max_new_tokens = integer(j, "max_new_tokens", origin, 0, int64_t{1} << 40);
  if (j.contains("eos_token_id") && !j["eos_token_id"].is_null()) {
    const Json& e = j["eos_token_id"];
    auto one = [&](const Json& v) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0)
        fail("{}: \"eos_token_id\" must be a token id or a list of token ids", origin);
      g.eos_token_ids.push_back(v.get<int64_t>());
    };
    if (e.is_array()) {
      for (const Json& v : e) one(v);
    } else {
      one(e);
    }
  }
  return g;
}

GenerationConfig load_generation_config(const std::string& model_dir) {
  const std::string path = model_dir + "/generation_config.json";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return parse_generation_config(parse_json(read_small_file(path, 1u << 20), path), path);
}

}  // namespace strata
