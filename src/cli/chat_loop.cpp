#include "cli/chat_loop.h"

#include <poll.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <string_view>

#include "cli/text_common.h"
#include "core/clock.h"

namespace strata::cli {

namespace {

// Lines from a file descriptor, without stdio: a Ctrl-C while waiting must
// wake us (poll() returns EINTR even under SA_RESTART).
class LineReader {
 public:
  enum class Result { Line, Eof, Interrupted };
  explicit LineReader(int fd) : fd_(fd) {}
  Result next(std::string& line, const std::function<bool()>& interrupted) {
    for (;;) {
      const size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        return Result::Line;
      }
      if (eof_) {
        if (buf_.empty()) return Result::Eof;
        line = std::move(buf_);
        buf_.clear();
        return Result::Line;
      }
      if (interrupted()) return Result::Interrupted;
      pollfd p{fd_, POLLIN, 0};
      const int r = ::poll(&p, 1, -1);
      if (r < 0) {
        if (errno == EINTR) continue;  // interrupted() decides
        eof_ = true;
        continue;
      }
      char tmp[4096];
      const ssize_t n = ::read(fd_, tmp, sizeof tmp);
      if (n > 0) {
        buf_.append(tmp, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        eof_ = true;
      }
    }
  }

 private:
  int fd_;
  std::string buf_;
  bool eof_ = false;
};

void out(std::string_view s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

// ":set KEY VALUE" -> key, value (either may be empty).
void split_set(const std::string& line, std::string& key, std::string& val) {
  const size_t k0 = line.find_first_not_of(' ', 4);
  if (k0 == std::string::npos) return;
  const size_t k1 = line.find(' ', k0);
  key = line.substr(k0, k1 == std::string::npos ? std::string::npos : k1 - k0);
  if (k1 == std::string::npos) return;
  const size_t v0 = line.find_first_not_of(' ', k1);
  if (v0 != std::string::npos) val = line.substr(v0);
}

}  // namespace

bool ChatSignals::interrupted() const { return sigint_count() != seen; }

void run_chat_loop(ChatMode& mode, ChatSignals& sig) {
  const bool tty_in = ::isatty(STDIN_FILENO) == 1;
  LineReader reader(STDIN_FILENO);
  std::string line;
  bool armed = false;  // one Ctrl-C seen while idle
  while (!sig.quit) {
    if (tty_in) out("> ");
    const LineReader::Result r = reader.next(line, [&] { return sig.interrupted(); });
    if (r == LineReader::Result::Eof) {
      if (tty_in) out("\n");
      break;
    }
    if (r == LineReader::Result::Interrupted) {
      sig.seen = sigint_count();
      const uint64_t t = now_ns();
      const bool quick = mode.quick_double_quits() && sig.last_ns && t - sig.last_ns < 1000000000ull;
      if (armed || quick) break;
      armed = true;
      sig.last_ns = t;
      out("\n(Ctrl-C again or :q to quit)\n");
      continue;
    }
    armed = false;
    if (line == ":q" || line == ":quit" || line == ":exit") break;
    if (line.empty()) continue;
    if (line == ":reset") {
      mode.reset();
      out("(history and context cleared)\n");
      continue;
    }
    if (line.rfind(":set", 0) == 0 && (line.size() == 4 || line[4] == ' ')) {
      std::string key, val;
      split_set(line, key, val);
      if (key.empty() && val.empty()) {
        if (const auto shown = mode.show_settings())
          out(*shown);
        else
          out(line == ":set" ? mode.commands() : mode.set_usage());
        continue;
      }
      const std::optional<std::string> shown = val.empty() ? std::nullopt : mode.set(key, val);
      out(shown ? *shown : mode.set_usage());
      continue;
    }
    if (line == ":more") {
      if (!mode.more()) out(mode.commands());
      continue;
    }
    if (line[0] == ':' && line.size() > 1 && std::isalpha(static_cast<unsigned char>(line[1])) &&
        line.find(' ') == std::string::npos) {
      out(mode.commands());
      continue;
    }
    mode.turn(line);
  }
}

}  // namespace strata::cli
