// The state of a conversion in progress (`strata convert`, format/convert.h):
// DIR/convert-state.json records the options, the source identity and every
// finished output file (size, XXH3-64, and per-tensor / per-expert checksums),
// rewritten atomically after each file. A resumed conversion keeps a file only
// if it still matches its record, so the result is byte-identical to an
// uninterrupted run. Also: what --force removes from an output directory.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/json.h"
#include "format/convert_plan.h"

namespace strata::conversion {

constexpr const char* kStateFile = "convert-state.json";
constexpr const char* kStateFormat = "strata-convert-state";
constexpr int kConverterVersion = 1;  // bump when the bytes written for the same input change

struct DoneFile {
  uint64_t bytes = 0, xxh = 0;
  std::map<std::string, uint64_t> tensors;  // dense.bin
  std::vector<uint64_t> experts;            // experts-LLL.bin
};

struct State {
  std::map<std::string, DoneFile> done;
};

// "" when the recorded options and source match the wanted ones; otherwise
// what differs, e.g. `--experts was "int4", now "int8"`.
std::string identity_mismatch(const Json& have_opts, const Json& have_src, const Json& want_opts,
                              const Json& want_src);

Json state_to_json(const Plan& plan, const State& st);
// Reads convert-state.json; a file that does not parse as a state of this
// plan's options and source is an error naming `path` (the user decides with
// --force).
State state_from_json(const Json& j, const std::string& path, const Plan& plan);

// --force: removes manifest.json first (the directory never looks complete
// with mixed contents), then every file a conversion writes; other files stay.
void remove_previous(const std::string& out);

}  // namespace strata::conversion
