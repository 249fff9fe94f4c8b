#include "cli/line_input.h"

#include <histedit.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <clocale>
#include <cstdio>
#include <cstdlib>
#include <cwchar>
#include <filesystem>

namespace strata::cli {

namespace {

constexpr int kHistoryLines = 1000;  // the history file's bound

class PlainInput final : public LineInput {
 public:
  explicit PlainInput(bool terminal) : terminal_(terminal) {}
  bool terminal() const override { return terminal_; }

  Result next(const char* prompt, std::string& line, const std::function<bool()>& interrupted) override {
    if (terminal_) {
      std::fputs(prompt, stdout);
      std::fflush(stdout);
    }
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
      pollfd p{STDIN_FILENO, POLLIN, 0};
      const int r = ::poll(&p, 1, -1);
      if (r < 0) {
        if (errno == EINTR) continue;  // interrupted() decides
        eof_ = true;
        continue;
      }
      char tmp[4096];
      const ssize_t n = ::read(STDIN_FILENO, tmp, sizeof tmp);
      if (n > 0) {
        buf_.append(tmp, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        eof_ = true;
      }
    }
  }

 private:
  bool terminal_;
  std::string buf_;
  bool eof_ = false;
};

// libedit with our own character reader: poll() wakes on Ctrl-C (libedit's
// reader would retry a read a signal interrupted), and the reader then
// returns -1, so el_gets gives the line up and restores the terminal.
class EditedInput final : public LineInput {
 public:
  explicit EditedInput(std::string file) : file_(std::move(file)) {}
  ~EditedInput() override {
    if (el_) el_end(el_);
    if (hist_) history_end(hist_);
  }
  bool terminal() const override { return true; }

  bool open() {
    // libedit decodes the terminal's bytes by the locale's character type.
    if (!std::setlocale(LC_CTYPE, "") || MB_CUR_MAX == 1) std::setlocale(LC_CTYPE, "C.UTF-8");
    el_ = el_init("strata", stdin, stdout, stderr);
    hist_ = history_init();
    if (!el_ || !hist_) return false;
    HistEvent ev;
    history(hist_, &ev, H_SETSIZE, kHistoryLines);
    history(hist_, &ev, H_SETUNIQUE, 1);
    if (!file_.empty()) history(hist_, &ev, H_LOAD, file_.c_str());  // none yet: an empty history
    el_set(el_, EL_EDITOR, "emacs");
    el_set(el_, EL_HIST, history, hist_);
    el_set(el_, EL_CLIENTDATA, this);
    el_set(el_, EL_PROMPT, &EditedInput::prompt_of);
    el_set(el_, EL_GETCFN, &EditedInput::read_char);
    el_source(el_, nullptr);  // ~/.editrc, if any
    return true;
  }

  Result next(const char* prompt, std::string& line, const std::function<bool()>& interrupted) override {
    prompt_ = prompt;
    interrupted_ = &interrupted;
    got_interrupt_ = false;
    int count = 0;
    const char* s = el_gets(el_, &count);
    interrupted_ = nullptr;
    if (got_interrupt_) return Result::Interrupted;
    if (!s || count <= 0) return Result::Eof;
    line.assign(s, static_cast<size_t>(count));
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    return Result::Line;
  }

  // Saved whole after each line (at most kHistoryLines), through a temporary
  // file renamed over the old one, readable by the user only.
  void remember(const std::string& line) override {
    HistEvent ev;
    history(hist_, &ev, H_ENTER, line.c_str());
    if (file_.empty()) return;
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(file_).parent_path(), ec);
    const std::string tmp = file_ + ".tmp";
    if (history(hist_, &ev, H_SAVE, tmp.c_str()) < 0) return;
    ::chmod(tmp.c_str(), 0600);
    std::rename(tmp.c_str(), file_.c_str());
  }

 private:
  static EditedInput& self(EditLine* el) {
    void* p = nullptr;
    el_get(el, EL_CLIENTDATA, &p);
    return *static_cast<EditedInput*>(p);
  }
  static char* prompt_of(EditLine* el) { return const_cast<char*>(self(el).prompt_); }

  // One character (UTF-8 decoded): 1, 0 at end of input, -1 on Ctrl-C.
  static int read_char(EditLine* el, wchar_t* wc) {
    EditedInput& me = self(el);
    std::mbstate_t st{};
    for (;;) {
      if (me.interrupted_ && (*me.interrupted_)()) {
        me.got_interrupt_ = true;
        errno = EINTR;
        return -1;
      }
      pollfd p{STDIN_FILENO, POLLIN, 0};
      if (::poll(&p, 1, -1) < 0) {
        if (errno == EINTR) continue;
        return -1;
      }
      char c = 0;
      const ssize_t n = ::read(STDIN_FILENO, &c, 1);
      if (n == 0) return 0;
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return -1;
      }
      const size_t k = std::mbrtowc(wc, &c, 1, &st);
      if (k == static_cast<size_t>(-2)) continue;  // more bytes of this character
      if (k == static_cast<size_t>(-1)) {
        st = {};
        *wc = L'\uFFFD';
      }
      return 1;
    }
  }

  std::string file_;
  EditLine* el_ = nullptr;
  History* hist_ = nullptr;
  const char* prompt_ = "> ";
  const std::function<bool()>* interrupted_ = nullptr;
  bool got_interrupt_ = false;
};

}  // namespace

std::string history_path() {
  if (const char* x = std::getenv("XDG_STATE_HOME"); x && *x == '/') return std::string(x) + "/strata/chat_history";
  if (const char* h = std::getenv("HOME"); h && *h == '/') return std::string(h) + "/.local/state/strata/chat_history";
  return {};
}

std::unique_ptr<LineInput> open_line_input() {
  if (::isatty(STDIN_FILENO) == 1 && ::isatty(STDOUT_FILENO) == 1) {
    auto in = std::make_unique<EditedInput>(history_path());
    if (in->open()) return in;
  }
  return std::make_unique<PlainInput>(::isatty(STDIN_FILENO) == 1);
}

}  // namespace strata::cli
