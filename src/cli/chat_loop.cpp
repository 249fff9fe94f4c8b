#include "cli/chat_loop.h"

#include <cctype>
#include <cstdio>
#include <string_view>

#include "cli/line_input.h"
#include "cli/text_common.h"
#include "core/clock.h"

namespace strata::cli {

void write_stdout(std::string_view s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

namespace {

constexpr std::string_view kBlockQuote = "\"\"\"";

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
  const std::unique_ptr<LineInput> input = open_line_input();
  const bool tty_in = input->terminal();
  const auto interrupted = [&] { return sig.interrupted(); };
  std::string line;
  bool armed = false;  // one Ctrl-C seen while idle
  while (!sig.quit) {
    LineInput::Result r = input->next("> ", line, interrupted);
    // On a terminal, a line starting with """ opens a block that ends with a
    // line ending in """ (as in ollama): one turn of several lines.
    if (tty_in && r == LineInput::Result::Line && line.rfind(kBlockQuote, 0) == 0) {
      std::string block = line.substr(3), more;
      bool closed = block.size() >= 3 && block.compare(block.size() - 3, 3, kBlockQuote) == 0;
      while (!closed) {
        r = input->next("... ", more, interrupted);
        if (r != LineInput::Result::Line) break;
        closed = more.size() >= 3 && more.compare(more.size() - 3, 3, kBlockQuote) == 0;
        block += "\n" + more;
      }
      if (closed) block.resize(block.size() - 3);
      if (r == LineInput::Result::Line) {
        input->remember(line.substr(0, 3) + block + std::string(kBlockQuote));
        line = block;
        if (line.empty()) continue;
        armed = false;
        mode.turn(line);
        continue;
      }
    } else if (tty_in && r == LineInput::Result::Line && !line.empty()) {
      input->remember(line);
    }
    if (r == LineInput::Result::Eof) {
      if (tty_in) write_stdout("\n");
      break;
    }
    if (r == LineInput::Result::Interrupted) {
      sig.seen = sigint_count();
      const uint64_t t = now_ns();
      const bool quick = mode.quick_double_quits() && sig.last_ns && t - sig.last_ns < 1000000000ull;
      if (armed || quick) break;
      armed = true;
      sig.last_ns = t;
      write_stdout("\n(Ctrl-C again or :q to quit)\n");
      continue;
    }
    armed = false;
    if (line == ":q" || line == ":quit" || line == ":exit") break;
    if (line.empty()) continue;
    if (line == ":reset") {
      mode.reset();
      write_stdout("(history and context cleared)\n");
      continue;
    }
    if (line.rfind(":set", 0) == 0 && (line.size() == 4 || line[4] == ' ')) {
      std::string key, val;
      split_set(line, key, val);
      if (key.empty() && val.empty()) {
        if (const auto shown = mode.show_settings())
          write_stdout(*shown);
        else
          write_stdout(line == ":set" ? mode.commands() : mode.set_usage());
        continue;
      }
      const std::optional<std::string> shown = val.empty() ? std::nullopt : mode.set(key, val);
      write_stdout(shown ? *shown : mode.set_usage());
      continue;
    }
    if (line == ":more") {
      if (!mode.more()) write_stdout(mode.commands());
      continue;
    }
    if (line[0] == ':' && line.size() > 1 && std::isalpha(static_cast<unsigned char>(line[1])) &&
        line.find(' ') == std::string::npos) {
      write_stdout(mode.commands());
      continue;
    }
    mode.turn(line);
  }
}

}  // namespace strata::cli
