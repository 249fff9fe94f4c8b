// The interactive loop both `strata chat` modes share (a local model, or
// --attach to a running server): read a line, handle Ctrl-C while idle
// (twice quits), :q, :reset, :set KEY VALUE, :more, unknown commands, and
// hand every other line to the mode as a user turn.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace strata::cli {

// Writes `s` to stdout and flushes (an answer streams as it is generated).
void write_stdout(std::string_view s);

// What the loop and a mode share about Ctrl-C: the SIGINT count already
// handled, when the last one came, and whether the mode asked to quit (two
// Ctrl-C during one answer).
struct ChatSignals {
  uint64_t seen = 0;
  uint64_t last_ns = 0;
  bool quit = false;
  bool interrupted() const;  // a new Ctrl-C since `seen`
};

class ChatMode {
 public:
  virtual ~ChatMode() = default;
  // A user turn: answer `line`, streaming to stdout, footer on stderr.
  virtual void turn(const std::string& line) = 0;
  // :reset: forget the conversation.
  virtual void reset() = 0;
  // :set KEY VALUE (both non-empty): the settings line to print, or nullopt
  // when the key or value is not accepted.
  virtual std::optional<std::string> set(const std::string& key, const std::string& value) = 0;
  // A bare :set: the settings line, or nullopt if the mode has no bare :set.
  virtual std::optional<std::string> show_settings() { return std::nullopt; }
  virtual std::string set_usage() const = 0;
  // :more: continue the last answer; false when the mode cannot (a usage
  // note is printed by the loop).
  virtual bool more() { return false; }
  // Printed for an unknown :command.
  virtual std::string commands() const = 0;
  // Whether two Ctrl-C within a second also quit when the first came
  // during an answer (the local mode's rule).
  virtual bool quick_double_quits() const { return false; }
};

// Runs until :q, end of input or Ctrl-C twice while idle.
void run_chat_loop(ChatMode& mode, ChatSignals& sig);

}  // namespace strata::cli
