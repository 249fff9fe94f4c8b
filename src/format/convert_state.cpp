#include "format/convert_state.h"

#include <filesystem>
#include <regex>
#include <set>

#include "core/error.h"
#include "core/io.h"

namespace strata::conversion {

namespace fs = std::filesystem;

namespace {

bool is_ours(const std::string& n) {
  static const std::regex re(
      R"((dense\.bin|experts-\d{3,}\.bin|manifest\.json|convert-state\.json|config\.json|generation_config\.json|tokenizer\.json|tokenizer_config\.json|chat_template\.jinja)(\.tmp)?)");
  return std::regex_match(n, re);
}

}  // namespace

std::string identity_mismatch(const Json& have_opts, const Json& have_src, const Json& want_opts,
                              const Json& want_src) {
  std::vector<std::string> diffs;
  std::set<std::string> keys;
  if (have_opts.is_object())
    for (auto it = have_opts.begin(); it != have_opts.end(); ++it) keys.insert(it.key());
  for (auto it = want_opts.begin(); it != want_opts.end(); ++it) keys.insert(it.key());
  for (const std::string& k : keys) {
    const Json a = have_opts.is_object() ? have_opts.value(k, Json()) : Json();
    const Json b = want_opts.value(k, Json());
    if (a != b) diffs.push_back(fmt::format("--{} was {}, now {}", k, a.dump(), b.dump()));
  }
  auto field = [](const Json& j, const char* k) { return j.is_object() ? j.value(k, Json()) : Json(); };
  if (field(have_src, "config_xxh3") != field(want_src, "config_xxh3"))
    diffs.push_back("the source config.json differs");
  if (field(have_src, "files") != field(want_src, "files"))
    diffs.push_back("the source checkpoint files differ (names or sizes)");
  std::string out;
  for (const auto& d : diffs) out += (out.empty() ? "" : "; ") + d;
  return out;
}

Json state_to_json(const Plan& plan, const State& st) {
  Json j;
  j["format"] = kStateFormat;
  j["version"] = 1;
  j["converter"] = kConverterVersion;
  j["options"] = plan.options;
  j["source"] = plan.source;
  j["done"] = Json::object();
  for (const auto& [name, d] : st.done) {
    Json f{{"bytes", d.bytes}, {"xxh3", xxh_hex(d.xxh)}};
    if (!d.tensors.empty()) {
      f["tensors"] = Json::object();
      for (const auto& [t, h] : d.tensors) f["tensors"][t] = xxh_hex(h);
    }
    if (!d.experts.empty()) {
      f["experts"] = Json::array();
      for (uint64_t h : d.experts) f["experts"].push_back(xxh_hex(h));
    }
    j["done"][name] = std::move(f);
  }
  return j;
}

State state_from_json(const Json& j, const std::string& path, const Plan& plan) {
  auto bad = [&](const std::string& what) -> Error {
    return Error(fmt::format("{}: {}; pass --force to start the conversion over", path, what));
  };
  if (!j.is_object() || j.value("format", Json()) != kStateFormat) throw bad("not a strata conversion state");
  if (j.value("converter", Json()) != kConverterVersion)
    throw bad("written by another version of strata convert, whose output may differ");
  const std::string mm = identity_mismatch(j.value("options", Json()), j.value("source", Json()), plan.options,
                                           plan.source);
  if (!mm.empty())
    throw Error(fmt::format("{}: this unfinished conversion was started with other options or another source: {}. "
                            "Resume with the same options and source, or pass --force to start over",
                            path, mm));
  State st;
  const Json done = j.value("done", Json::object());
  if (!done.is_object()) throw bad("field \"done\" is not an object");
  try {
    for (auto it = done.begin(); it != done.end(); ++it) {
      const Json& f = it.value();
      DoneFile d;
      d.bytes = f.at("bytes").get<uint64_t>();
      d.xxh = parse_xxh_hex(f.at("xxh3").get<std::string>(), path);
      if (f.contains("tensors"))
        for (auto t = f["tensors"].begin(); t != f["tensors"].end(); ++t)
          d.tensors[t.key()] = parse_xxh_hex(t.value().get<std::string>(), path);
      if (f.contains("experts"))
        for (const Json& h : f["experts"]) d.experts.push_back(parse_xxh_hex(h.get<std::string>(), path));
      st.done[it.key()] = std::move(d);
    }
  } catch (const Json::exception& e) {
    throw bad(std::string("malformed entry: ") + e.what());
  }
  return st;
}

void remove_previous(const std::string& out) {
  std::error_code ec;
  fs::remove(fs::path(out) / "manifest.json", ec);
  if (ec) fail("{}/manifest.json: cannot remove: {}", out, ec.message());
  fsync_dir(out);
  for (const auto& de : fs::directory_iterator(out, ec)) {
    const std::string n = de.path().filename().string();
    if (!is_ours(n)) continue;
    std::error_code ec2;
    fs::remove(de.path(), ec2);
    if (ec2) fail("{}: cannot remove: {}", de.path().string(), ec2.message());
  }
  if (ec) fail("{}: cannot list: {}", out, ec.message());
}

}  // namespace strata::conversion
