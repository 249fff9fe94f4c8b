// Shared by the libFuzzer harnesses (tests/fuzz, docs/security.md "Fuzzing").
//
// A harness feeds one input to one library entry point. strata::Error (and
// the server's ApiError) is the library saying "bad input": expected, and
// swallowed by the harness. Anything else escaping -- another exception
// type, a sanitizer report, a crash, a hang, a leak -- is a finding.
#pragma once
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

namespace strata::fuzz {

inline std::string source_dir() { return STRATA_SOURCE_DIR; }

// The repository's small tokenizer and chat template (models/glm5-strata-tiny).
inline std::string tiny_model_dir() { return source_dir() + "/models/glm5-strata-tiny"; }

// A directory of this process's own, removed at exit; harnesses that need a
// file path write their input there.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    // /dev/shm when there is one: the file targets write their input every run.
    const char* base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    std::string t = std::string(base) + "/strata_fuzz_XXXXXX";
    if (!::mkdtemp(t.data())) {
      std::perror("mkdtemp");
      std::abort();
    }
    static std::string keep;
    keep = t;
    std::atexit([] { std::error_code ec; std::filesystem::remove_all(keep, ec); });
    return t;
  }();
  return dir;
}

// Writes `data` to `path` (truncating); aborts if the disk refuses, which is
// the harness's failure, not the library's.
inline void write_file(const std::string& path, std::string_view data) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) {
    std::perror(path.c_str());
    std::abort();
  }
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t w = ::write(fd, data.data() + off, data.size() - off);
    if (w <= 0) {
      std::perror(path.c_str());
      std::abort();
    }
    off += static_cast<size_t>(w);
  }
  ::close(fd);
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A harness-level invariant (not a library error): abort, so libFuzzer
// records the input.
#define STRATA_FUZZ_CHECK(cond)                                                        \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      std::fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                    \
    }                                                                                  \
  } while (0)

}  // namespace strata::fuzz
