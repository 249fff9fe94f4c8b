// How an answer's reasoning and content are printed, the same by `strata run`,
// `strata chat` and `strata chat --attach` (docs/text.md "Thinking"): the
// reasoning between a "Thinking..." line and a "...done thinking." line, then
// a blank line and the content; on a terminal the reasoning part is dimmed
// (SGR 2). An answer without reasoning prints its content only. (`strata run`
// piped prints the model's text as is: cmd_run.cpp.)
#pragma once
#include <cstdio>
#include <string>
#include <string_view>

namespace strata::cli {

class AnswerView {
 public:
  // `tty`: `out` is a terminal: the reasoning is dimmed (unless NO_COLOR is
  // set). `safe`: control characters become U+FFFD (terminal_safe).
  AnswerView(std::FILE* out, bool tty, bool safe);
  void reasoning(std::string_view text);
  void content(std::string_view text);
  // Ends an open reasoning block (an answer cut off while thinking) with its
  // closing marker; the caller ends the line.
  void finish();

 private:
  enum class State { Start, Reasoning, Content };
  void put(std::string_view s, bool text);
  void close_reasoning(bool before_content);
  std::FILE* out_;
  bool dim_, safe_;
  State state_ = State::Start;
  bool reasoning_ends_nl_ = true;  // the reasoning printed so far ends with a newline
};

}  // namespace strata::cli
