// Where `strata chat` reads its lines. A terminal (stdin and stdout both) gets
// libedit (BSD licence): editing, history across sessions in a bounded file
// (history_path()), the user's ~/.editrc. Anything else (a pipe, a file) is
// read as plain lines, without stdio, exactly as before. Either way a Ctrl-C
// while waiting wakes the caller (poll() returns EINTR even under SA_RESTART).
#pragma once
#include <functional>
#include <memory>
#include <string>

namespace strata::cli {

class LineInput {
 public:
  enum class Result { Line, Eof, Interrupted };
  virtual ~LineInput() = default;
  // The next line without its newline; `prompt` is shown on a terminal.
  // `interrupted`: whether a new Ctrl-C came while waiting.
  virtual Result next(const char* prompt, std::string& line, const std::function<bool()>& interrupted) = 0;
  // A line to recall later (saved to the history file at once).
  virtual void remember(const std::string& line) {}
  // A person types the lines (prompts shown, a newline after end of input).
  virtual bool terminal() const = 0;
};

// $XDG_STATE_HOME/strata/chat_history, else ~/.local/state/strata/chat_history;
// "" when neither is known (history then lives in memory only).
std::string history_path();

// libedit when stdin and stdout are terminals and libedit can drive them,
// else plain lines from stdin.
std::unique_ptr<LineInput> open_line_input();

}  // namespace strata::cli
