// strata run: one prompt in, the answer streamed to stdout as it is decoded.
// The prompt goes through the model's chat template unless --raw.
#include <unistd.h>

#include <cstdio>

#include "cli/answer_view.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/text_common.h"
#include "cli/usage.h"
#include "core/error.h"
#include "core/io.h"
#include "server/glm_output.h"

namespace strata::cli {

namespace {

constexpr size_t kMaxPromptBytes = 64u << 20;

// The prompt from FILE or, for "-", stdin; one trailing newline (\n or \r\n)
// dropped, as `echo` and editors end a file with one.
std::string read_prompt(const std::string& file) {
  std::string s;
  if (file == "-") {
    char buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, stdin)) > 0) {
      s.append(buf, n);
      if (s.size() > kMaxPromptBytes) fail("stdin: the prompt is larger than {} MiB", kMaxPromptBytes >> 20);
    }
    if (std::ferror(stdin)) fail("stdin: read failed");
  } else {
    s = read_small_file(file, kMaxPromptBytes);
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  if (!s.empty() && s.back() == '\r') s.pop_back();
  return s;
}

}  // namespace

void add_run_command(CLI::App& app, Runner& run) {
  struct Flags {
    EngineFlags engine;
    TextFlags text;
    std::string prompt;                 // --prompt
    std::vector<std::string> words;     // the positional prompt, joined by spaces
    std::string file;                   // -f FILE
    bool raw = false;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("run", "Answer one prompt, streaming the text as it is generated");
  CLI::Option* p = cmd->add_option("-p,--prompt", f->prompt, "The prompt (a user message, or plain text with --raw)")
                       ->group(kGroupInput);
  CLI::Option* w = cmd->add_option("prompt", f->words,
                                   "The prompt as arguments (joined by spaces); or --prompt, -f FILE, or stdin when it "
                                   "is not a terminal");
  CLI::Option* fo =
      cmd->add_option("-f,--file", f->file, "Read the prompt from FILE ('-': stdin)")->group(kGroupInput);
  p->excludes(w)->excludes(fo);
  w->excludes(fo);
  cmd->add_flag("--raw", f->raw, "No chat template: the prompt is the model's input text as is")->group(kGroupInput);
  f->engine.spec = kSpecGenerating;  // the generating commands speculate by default
  f->engine.add(cmd);
  f->text.add(cmd);
  cmd->callback([f, p, w, fo, &run] {
    if (w->count() > 0) {
      f->prompt.clear();
      for (const std::string& x : f->words) f->prompt += (f->prompt.empty() ? "" : " ") + x;
    }
    if (p->count() == 0 && w->count() == 0 && fo->count() == 0) {
      if (::isatty(STDIN_FILENO) == 1)
        throw CLI::RequiredError("a prompt: strata run --model DIR \"PROMPT\" (or --prompt, -f FILE, or stdin)");
      f->file = "-";
    }
    run = [f]() -> int {
      if (!f->file.empty()) {
        f->prompt = read_prompt(f->file);
        if (f->prompt.empty()) fail("{}: the prompt is empty", f->file == "-" ? "stdin" : f->file);
      }
      OpenedEngine opened = open_engine(f->engine, false, /*deferred=*/true);
      if (!opened.engine) return opened.status;  // a rank > 0 of --experts-over mpi
      Engine& e = *opened.engine;
      const ModelConfig& c = e.config();
      const TextModel tm = open_text_model(f->engine.model, c, f->text.chat_template, f->raw);
      f->engine.announce(e);
      const int64_t ctx = context_size(c, f->text.ctx);

      std::vector<ChatMessage> msgs;
      if (!f->text.system.empty()) msgs.push_back({.role = "system", .content = f->text.system});
      msgs.push_back({.role = "user", .content = f->prompt});
      ChatRenderOptions ro;
      ro.enable_thinking = f->text.thinking();
      // Raw text gets the tokenizer's post-processor (a BOS, if it has one);
      // a template writes its own prefix ([gMASK]<sop>).
      const std::vector<int32_t> prompt = tm.tok.encode(tm.tmpl.render(msgs, nullptr, ro), /*add_special=*/tm.raw());
      if (prompt.empty()) fail("the prompt is empty");
      if (static_cast<int64_t>(prompt.size()) > ctx)
        fail("the prompt is {} tokens and the context is {} (--ctx; the model allows up to {})", prompt.size(), ctx,
             c.max_position_embeddings);

      install_sigint_counter(/*once=*/true);
      const uint64_t sig0 = sigint_count();
      const auto interrupted = [sig0] { return sigint_count() != sig0; };

      Sequence seq(c, ctx, &tm.tok, tm.stop_ids, &e.speculator(), e.options().forward.kv);
      seq.begin(prompt, f->text.params(f->text.sampler_options(tm.gen)));
      // On a terminal the reasoning shows dimmed between markers, as in chat
      // (cli/answer_view.h); piped, the model's text goes out as it is.
      const bool tty = ::isatty(STDOUT_FILENO) == 1;
      const bool split = tty && !tm.raw();
      AnswerView view(stdout, tty, /*safe=*/tty);
      server::GlmStreamSplit splitter(tm.tmpl.opens_reasoning(ro), tool_call_open_tag(tm.tmpl.dialect));
      const auto show = [&](const std::string& text, bool final) {
        if (!split) return view.content(text);
        std::string r, t;
        splitter.push(text, r, t, final);
        view.reasoning(r);
        view.content(t);
      };
      const TurnStats st = run_turn(
          e, seq,
          [&](const StepOutput& o) {
            if (!o.text.empty()) show(o.text, false);
          },
          interrupted);
      show("", true);
      view.finish();
      std::fputs("\n", stdout);
      std::fflush(stdout);
      if (st.reason == StopReason::Context)
        std::fprintf(stderr, "strata: stopped: the context of %lld tokens is full (--ctx)\n",
                     static_cast<long long>(ctx));
      if (st.reason == StopReason::Interrupted) std::fprintf(stderr, "strata: interrupted\n");
      finish_engine(e, f->engine);
      return st.reason == StopReason::Interrupted ? kExitInterrupted : 0;
    };
  });
}

}  // namespace strata::cli
