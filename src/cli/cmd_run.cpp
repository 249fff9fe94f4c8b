// strata run: one prompt in, the answer streamed to stdout as it is decoded.
// The prompt goes through the model's chat template unless --raw.
#include <unistd.h>

#include <cstdio>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/text_common.h"
#include "cli/usage.h"
#include "core/error.h"

namespace strata::cli {

void add_run_command(CLI::App& app, Runner& run) {
  struct Flags {
    EngineFlags engine;
    TextFlags text;
    std::string prompt;
    bool raw = false;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("run", "Answer one prompt, streaming the text as it is generated");
  f->engine.add(cmd);
  f->text.add(cmd);
  cmd->add_option("-p,--prompt", f->prompt, "The prompt (a user message, or plain text with --raw)")->required();
  cmd->add_flag("--raw", f->raw, "No chat template: the prompt is the model's input text as is");
  cmd->callback([f, &run] {
    run = [f]() -> int {
      Engine e(f->engine.options(false));
      const ModelConfig& c = e.config();
      const TextModel tm = open_text_model(f->engine.model, c, f->text.chat_template, f->raw);
      const int64_t ctx = context_size(c, f->text.ctx);

      std::vector<ChatMessage> msgs;
      if (!f->text.system.empty()) msgs.push_back({.role = "system", .content = f->text.system});
      msgs.push_back({.role = "user", .content = f->prompt});
      ChatRenderOptions ro;
      ro.enable_thinking = !f->text.no_think;
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

      Sequence seq(c, ctx, &tm.tok, tm.stop_ids, &e.speculator());
      seq.begin(prompt, f->text.params(f->text.sampler_options(tm.gen)));
      const bool tty = ::isatty(STDOUT_FILENO) == 1;
      const TurnStats st = run_turn(
          e, seq,
          [tty](const StepOutput& o) {
            if (o.text.empty()) return;
            const std::string s = tty ? terminal_safe(o.text) : o.text;
            std::fwrite(s.data(), 1, s.size(), stdout);
            std::fflush(stdout);
          },
          interrupted);
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
