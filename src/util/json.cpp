#include "util/json.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "util/error.h"

namespace strata {

Json parse_json(std::string_view text, const std::string& origin, int max_depth) {
  // The callback sees every event before the value is built, so a hostile
  // document is refused before it costs memory or stack. Duplicate keys are
  // refused too: nlohmann would silently keep the last one.
  std::string problem;
  std::vector<std::vector<std::string>> keys;  // keys seen per open object
  auto guard = [&](int depth, Json::parse_event_t ev, Json& parsed) {
    using E = Json::parse_event_t;
    if (ev == E::object_start || ev == E::array_start) {
      if (depth >= max_depth) {
        problem = fmt::format("JSON nesting deeper than {} levels", max_depth);
        throw Error(problem);
      }
      if (ev == E::object_start) keys.emplace_back();
    } else if (ev == E::object_end) {
      if (!keys.empty()) keys.pop_back();
    } else if (ev == E::key && !keys.empty()) {
      const std::string& k = parsed.get_ref<const std::string&>();
      for (const auto& seen : keys.back()) {
        if (seen == k) {
          problem = fmt::format("duplicate key \"{}\"", k);
          throw Error(problem);
        }
      }
      keys.back().push_back(k);
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), guard);
  } catch (const Error&) {
    fail("{}: {}", origin, problem);
  } catch (const Json::exception& e) {
    fail("{}: invalid JSON: {}", origin, e.what());
  }
}

std::string read_small_file(const std::string& path, size_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("{}: not a regular file", path);
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    fail("{}: file is {} bytes, limit is {}", path, st.st_size, max_bytes);
  }
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < out.size()) {
    ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      fail("{}: read failed at offset {}: {}", path, got, n < 0 ? std::strerror(errno) : "unexpected end of file");
    }
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  return out;
}

}  // namespace strata
