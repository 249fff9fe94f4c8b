#include "cli/answer_view.h"

#include <cstdlib>

#include "cli/text_common.h"

namespace strata::cli {

namespace {
constexpr std::string_view kDim = "\x1b[2m", kReset = "\x1b[0m";
constexpr std::string_view kOpen = "Thinking...\n", kClose = "...done thinking.";
}  // namespace

AnswerView::AnswerView(std::FILE* out, bool tty, bool safe) : out_(out), safe_(safe) {
  const char* no_color = std::getenv("NO_COLOR");  // https://no-color.org
  dim_ = tty && !(no_color && *no_color);
}

void AnswerView::put(std::string_view s, bool text) {
  const std::string safe = text && safe_ ? terminal_safe(s) : std::string(s);
  std::fwrite(safe.data(), 1, safe.size(), out_);
  std::fflush(out_);
}

void AnswerView::reasoning(std::string_view text) {
  if (text.empty()) return;
  if (state_ != State::Reasoning) {
    if (state_ == State::Content) put("\n\n", false);
    if (dim_) put(kDim, false);
    put(kOpen, false);
    state_ = State::Reasoning;
  }
  put(text, true);
  reasoning_ends_nl_ = text.back() == '\n';
}

void AnswerView::close_reasoning(bool before_content) {
  if (state_ != State::Reasoning) return;
  put(reasoning_ends_nl_ ? "" : "\n", false);
  put(kClose, false);
  if (dim_) put(kReset, false);
  if (before_content) put("\n\n", false);  // else the caller ends the line
  state_ = State::Content;
}

void AnswerView::content(std::string_view text) {
  if (text.empty()) return;
  close_reasoning(true);
  state_ = State::Content;
  put(text, true);
}

void AnswerView::finish() { close_reasoning(false); }

}  // namespace strata::cli
