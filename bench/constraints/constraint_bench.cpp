// What constrained decoding and JSON parsing cost (docs/server.md,
// "Benchmarks"): one response_format mask (JsonConstraint) and one tool_choice
// mask (ToolCallConstraint) in typical states, over the bundled model's
// 4096-token vocabulary and a synthetic 150k one; parse_json on one object
// with 200,000 keys (its duplicate-key check must stay linear: the quadratic
// version took two minutes).
//
//   build/strata_constraint_bench
//   build/strata_constraint_bench --benchmark_filter=JsonMask/fake150k
//
// Each mask benchmark first walks its state in with single-byte tokens and
// reports how many tokens the mask allows (the `allowed` counter); a state it
// cannot reach, or a mask that allows nothing, is an error, not a number (and
// the exit status is 1).
#include <benchmark/benchmark.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "constraint_fixtures.h"
#include "text/json_constraint.h"
#include "text/tokenizer.h"
#include "text/tool_constraint.h"
#include "core/json.h"

namespace strata {
namespace {

const std::string kTinyDir = std::string(STRATA_SOURCE_DIR) + "/models/glm5-strata-tiny";

bool g_failed = false;  // some benchmark hit an error: the exit status says so

void fail_bench(benchmark::State& state, const std::string& why) {
  g_failed = true;
  state.SkipWithError(why.c_str());
}

// The vocabularies, built once (the 150k ones take a second or two).
std::shared_ptr<const JsonVocab> vocab(const std::string& name) {
  static std::shared_ptr<const JsonVocab> tiny, json150k, tool150k;
  if (name == "tiny") {
    if (!tiny) tiny = JsonVocab::build(Tokenizer::load(kTinyDir), 4096);
    return tiny;
  }
  if (name == "fake150k") {
    if (!json150k) json150k = JsonVocab::from_bytes(test_util::json_fake_vocab(150000));
    return json150k;
  }
  if (!tool150k) tool150k = JsonVocab::from_bytes(test_util::tool_fake_vocab(150000));
  return tool150k;
}

// The ordinary single-byte token of each byte (-1: none).
std::array<int32_t, 256> byte_tokens(const JsonVocab& v) {
  std::array<int32_t, 256> id;
  id.fill(-1);
  for (int32_t i = 0; i < v.size(); ++i)
    if (v.usable(i) && v.bytes(i).size() == 1) id[static_cast<uint8_t>(v.bytes(i)[0])] = i;
  return id;
}

// Feeds `prefix` byte by byte; false if a byte has no token or is refused.
template <typename Constraint>
bool walk_in(Constraint& c, const std::array<int32_t, 256>& id, const std::string& prefix) {
  for (char ch : prefix) {
    const int32_t t = id[static_cast<uint8_t>(ch)];
    if (t < 0 || !c.advance(t)) return false;
  }
  return true;
}

template <typename Constraint>
void run_masks(benchmark::State& state, Constraint& c, const JsonVocab& v) {
  std::vector<float> logits(static_cast<size_t>(v.size()), 0.f);
  size_t allowed = 0;
  for (auto _ : state) {
    allowed = c.mask(logits, {});
    benchmark::DoNotOptimize(logits.data());
  }
  if (allowed == 0) fail_bench(state, "the mask allows no token");
  state.counters["allowed"] = static_cast<double>(allowed);
  state.counters["vocab"] = static_cast<double>(v.size());
}

const char* kJsonSchema = R"({"type":"object","properties":{"name":{"type":"string"},"n":{"type":"number"},
    "xs":{"type":"array","items":{"type":"string","maxLength":8}}},"required":["name","n","xs"]})";

// A string with a `pattern` (its DFA steps per decoded character; the whole
// trie is walked: the plain-token length fast path does not apply).
const char* kPatternSchema = R"({"type":"object","properties":{"name":{"type":"string",
    "pattern":"^[A-Za-z][a-z ]{0,30}(-[0-9]{2})?$"}},"required":["name"]})";

void json_mask(benchmark::State& state, const std::string& vocab_name, const std::string& prefix,
               const char* schema = kJsonSchema) {
  const auto v = vocab(vocab_name);
  JsonConstraint c(JsonGrammar::from_schema(nlohmann::ordered_json::parse(schema)), v);
  if (!walk_in(c, byte_tokens(*v), prefix)) {
    fail_bench(state, "cannot walk in: " + prefix);
    return;
  }
  if (state.range(0) == 0) {
    run_masks(state, c, *v);
    return;
  }
  // The walk itself: mask() at one state reuses its cached set, allowed() recomputes it.
  std::vector<uint8_t> out;
  size_t allowed = 0;
  for (auto _ : state) {
    allowed = c.allowed(out, {});
    benchmark::DoNotOptimize(out.data());
  }
  if (allowed == 0) fail_bench(state, "the walk allows no token");
  state.counters["allowed"] = static_cast<double>(allowed);
}

void tool_mask(benchmark::State& state, const std::string& vocab_name, const std::string& prefix) {
  const auto v = vocab(vocab_name);
  const std::array<int32_t, kToolMarkups> spelled = {-1, -1, -1, -1, -1, -1};  // markup as plain bytes
  ToolCallConstraint c(ToolCallGrammar::build(OrderedJson::parse(test_util::kTools)), v, spelled);
  if (!walk_in(c, byte_tokens(*v), prefix)) {
    fail_bench(state, "cannot walk in: " + prefix);
    return;
  }
  run_masks(state, c, *v);
}

void parse_many_keys(benchmark::State& state) {
  const int keys = static_cast<int>(state.range(0));
  std::string doc = "{";
  for (int i = 0; i < keys; ++i) doc += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":0";
  doc += "}";
  for (auto _ : state) {
    const Json j = parse_json(doc, "doc.json");
    if (j.size() != static_cast<size_t>(keys)) fail_bench(state, "wrong key count");
  }
  state.counters["keys"] = keys;
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(doc.size()));
}

void register_all() {
  const std::vector<std::pair<std::string, std::string>> json_states = {
      {"start", ""},
      {"in_key", "{\"na"},
      {"in_string", "{\"name\":\"hello wo"},
      {"in_number", "{\"name\":\"x\",\"n\":12"},
      {"in_array", "{\"name\":\"x\",\"n\":1,\"xs\":[\"ab\","},
  };
  for (const char* kind : {"JsonMask", "JsonWalk"}) {
    const int64_t walk = std::string(kind) == "JsonWalk";
    for (const char* vn : {"tiny", "fake150k"}) {
      for (const auto& [what, prefix] : json_states)
        benchmark::RegisterBenchmark((std::string(kind) + "/" + vn + "/" + what).c_str(),
                                     [vn = std::string(vn), prefix = prefix](benchmark::State& s) {
                                       json_mask(s, vn, prefix);
                                     })
            ->Arg(walk)
            ->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark((std::string(kind) + "/" + vn + "/in_pattern_string").c_str(),
                                   [vn = std::string(vn)](benchmark::State& s) {
                                     json_mask(s, vn, "{\"name\":\"hello wo", kPatternSchema);
                                   })
          ->Arg(walk)
          ->Unit(benchmark::kMicrosecond);
    }
  }
  const std::vector<std::pair<std::string, std::string>> tool_states = {
      {"start", ""},
      {"in_name", "<tool_call>get_w"},
      {"in_string_value", "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Par"},
      {"in_json_value", "<tool_call>get_weather<arg_key>city</arg_key><arg_value>P</arg_value><arg_key>days</arg_key>"
                        "<arg_value>3</arg_value><arg_key>detail</arg_key><arg_value>{\"wi"},
  };
  for (const char* vn : {"tiny", "toolfake150k"})
    for (const auto& [what, prefix] : tool_states)
      benchmark::RegisterBenchmark(("ToolMask/" + std::string(vn) + "/" + what).c_str(),
                                   [vn = std::string(vn), prefix = prefix](benchmark::State& s) {
                                     tool_mask(s, vn, prefix);
                                   })
          ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("ParseJson/many_keys", parse_many_keys)
      ->Arg(20000)
      ->Arg(200000)
      ->Unit(benchmark::kMillisecond);
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  strata::register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return strata::g_failed ? 1 : 0;
}
