// `strata convert --verify DIR`: re-reads a strata container
// (format/container.h) and checks every file against its manifest.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

struct VerifyResult {
  bool ok = true;
  int files = 0;
  uint64_t bytes = 0;
  std::vector<std::string> ok_files;  // names of the files that passed
  std::vector<std::string> problems;  // one line each, naming the file (and tensor / expert)
};

// Re-reads every file listed in DIR/manifest.json and checks its size and
// XXH3-64; for a damaged file also says which tensors / experts differ.
// A missing or invalid manifest throws strata::Error.
VerifyResult verify_container(const std::string& dir);

}  // namespace strata
