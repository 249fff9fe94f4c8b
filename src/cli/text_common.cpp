#include "cli/text_common.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <random>

#include "util/error.h"

namespace strata::cli {

namespace {
std::atomic<uint64_t> g_sigint{0};
static_assert(std::atomic<uint64_t>::is_always_lock_free);
void on_sigint(int) { g_sigint.fetch_add(1, std::memory_order_relaxed); }
}  // namespace

void install_sigint_counter(bool once) {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART | (once ? SA_RESETHAND : 0);
  sigaction(SIGINT, &sa, nullptr);
}

uint64_t sigint_count() { return g_sigint.load(std::memory_order_relaxed); }

void TextFlags::add(CLI::App* cmd) {
  cmd->add_option("-n", n, "Tokens to generate per answer (default: until end of turn or the context is full)")
      ->check(CLI::Range(int64_t{-1}, int64_t{1} << 30));
  cmd->add_option("--ctx", ctx, "Context size in tokens (default: min(4096, max_position_embeddings))")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  cmd->add_option("--temperature", temperature,
                  "Sampling temperature, 0 = greedy (default: generation_config.json, else 1)")
      ->check(CLI::Range(0.0, 1e4));
  cmd->add_option("--top-k", top_k,
                  "Keep the k most probable tokens, 0 = off (default: generation_config.json, else 0)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 31));
  cmd->add_option("--top-p", top_p, "Nucleus sampling mass, 1 = off (default: generation_config.json, else 1)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--min-p", min_p, "Drop tokens below min-p x the top probability, 0 = off")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--repeat-penalty", repeat_penalty,
                  "Repetition penalty over prompt and generated tokens (CTRL/vLLM), 1 = off")
      ->check(CLI::Range(1e-3, 1e3));
  cmd->add_option("--presence-penalty", presence_penalty, "Subtracted once from tokens already generated (OpenAI/vLLM)")
      ->check(CLI::Range(-100.0, 100.0));
  cmd->add_option("--frequency-penalty", frequency_penalty,
                  "Subtracted per occurrence of a generated token (OpenAI/vLLM)")
      ->check(CLI::Range(-100.0, 100.0));
  cmd->add_option("--seed", seed, "Sampling seed (default: random)")->check(CLI::Range(int64_t{0}, INT64_MAX));
  cmd->add_option("--stop", stop, "Stop string (repeatable); the text stops before it");
  cmd->add_flag("--no-think", no_think, "Disable thinking: the generation prompt closes the reasoning block");
  cmd->add_flag("--ignore-eos", ignore_eos, "Never end at end-of-turn tokens (they are banned from sampling)");
  cmd->add_option("--chat-template", chat_template,
                  "auto: detect the model's template (refuses unknown ones); glm: force the GLM-4.7/GLM-5 dialect; "
                  "raw: no template")
      ->check(CLI::IsMember({"auto", "glm", "raw"}));
  cmd->add_option("--system", system, "System message");
}

SamplerOptions TextFlags::sampler_options(const GenerationConfig& g) const {
  SamplerOptions o;
  const bool greedy_default = g.do_sample.has_value() && !*g.do_sample;
  o.temperature = temperature >= 0 ? temperature : greedy_default ? 0.0 : g.temperature.value_or(1.0);
  o.top_p = top_p >= 0 ? top_p : g.top_p.value_or(1.0);
  o.top_k = top_k >= 0 ? top_k : g.top_k.value_or(0);
  o.min_p = min_p >= 0 ? min_p : g.min_p.value_or(0.0);
  o.repetition_penalty = repeat_penalty > 0 ? repeat_penalty : g.repetition_penalty.value_or(1.0);
  o.presence_penalty = presence_penalty;
  o.frequency_penalty = frequency_penalty;
  if (seed >= 0) {
    o.seed = static_cast<uint64_t>(seed);
  } else {
    std::random_device rd;
    o.seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  return o;
}

bool TextModel::is_stop(int32_t t) const { return std::find(stop_ids.begin(), stop_ids.end(), t) != stop_ids.end(); }

TextModel open_text_model(const Engine& e, const EngineFlags& ef, const TextFlags& f, bool raw) {
  const std::string& dir = ef.model;
  const ModelConfig& c = e.model->config;
  TextModel tm{Tokenizer::load(dir), load_generation_config(dir), ChatTemplate{}, {}};
  if (tm.tok.vocab_size() > c.vocab_size)
    fail("{}: the tokenizer knows {} token ids but the model's vocabulary has {}", dir, tm.tok.vocab_size(),
         c.vocab_size);
  if (raw || f.chat_template == "raw") {
    tm.tmpl.dialect = ChatDialect::Raw;
    tm.tmpl.source = raw ? "--raw" : "--chat-template raw";
  } else {
    tm.tmpl = load_chat_template(dir, f.chat_template);
  }
  if (tm.tmpl.dialect == ChatDialect::Glm) {
    for (const char* s :
         {"[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>", "<think>", "</think>"}) {
      if (!tm.tok.token_id(s))
        fail(
            "{}: the GLM chat template needs the special token {} and this tokenizer has no such token; use "
            "--chat-template raw (run: --raw) for plain text",
            dir, s);
    }
  }
  auto add_stop = [&](int64_t id) {
    if (id >= 0 && id < c.vocab_size && !tm.is_stop(static_cast<int32_t>(id)))
      tm.stop_ids.push_back(static_cast<int32_t>(id));
  };
  for (int64_t id : c.eos_token_ids) add_stop(id);
  for (int64_t id : tm.gen.eos_token_ids) add_stop(id);
  if (tm.tmpl.dialect == ChatDialect::Glm)
    for (const char* s : {"<|endoftext|>", "<|user|>", "<|observation|>"})
      if (auto id = tm.tok.token_id(s)) add_stop(*id);
  return tm;
}

int64_t context_size(const ModelConfig& c, int64_t flag) {
  if (flag > c.max_position_embeddings)
    fail("--ctx {}: the model's max_position_embeddings is {}", flag, c.max_position_embeddings);
  return flag > 0 ? flag : std::min<int64_t>(4096, c.max_position_embeddings);
}

std::string terminal_safe(std::string_view s) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7F) {
      out += kReplacement;
    } else if (c == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(s[i + 1]) <= 0x9F) {
      out += kReplacement;  // C1 controls (U+0080..U+009F), e.g. the 8-bit CSI
      ++i;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::Eos:
      return "end of turn";
    case StopReason::StopString:
      return "stop string";
    case StopReason::Length:
      return "length";
    case StopReason::Context:
      return "context full";
    case StopReason::Interrupted:
      return "interrupted";
  }
  return "?";
}

Generator::Generator(Engine& e, const TextModel& tm, int64_t ctx, const ForwardOptions& fo)
    : e_(e),
      tm_(tm),
      fo_(fo),
      session_(e.model->config, ctx, false),
      logits_(static_cast<size_t>(e.model->config.vocab_size)),
      work_(static_cast<size_t>(e.model->config.vocab_size)) {}

void Generator::clear() {
  session_.truncate(0);
  cached_.clear();
  pending_.reset();
  logits_valid_ = false;
}

bool Generator::prefill(std::span<const int32_t> tokens, const std::function<bool()>& interrupted, TurnStats& st) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < 1) fail("the prompt is empty");
  if (n > capacity()) fail("the prompt is {} tokens and the context (--ctx) is {}", n, capacity());
  size_t common = 0;
  while (common < cached_.size() && common < tokens.size() && cached_[common] == tokens[common]) ++common;
  if (common == tokens.size() && cached_.size() == tokens.size() && logits_valid_ && !pending_) {
    st.reused = n;  // the session already ends here
    return true;
  }
  if (common == tokens.size()) --common;  // recompute the last position's logits
  session_.truncate(static_cast<int64_t>(common));
  cached_.resize(common);
  pending_.reset();
  logits_valid_ = false;
  st.reused = static_cast<int64_t>(common);

  // Chunks bound the scratch a long prompt needs and let Ctrl-C in between.
  constexpr int64_t kChunk = 512;
  std::vector<Row> rows;
  for (int64_t p = static_cast<int64_t>(common); p < n; p += kChunk) {
    if (interrupted()) return false;
    const int64_t end = std::min(n, p + kChunk);
    rows.clear();
    for (int64_t i = p; i < end; ++i)
      rows.push_back({&session_, static_cast<int32_t>(i), tokens[static_cast<size_t>(i)], i == n - 1});
    const uint64_t t0 = now_ns();
    e_.runner->forward(rows, fo_, logits_.data(), nullptr);
    e_.prompt_ns += now_ns() - t0;
    e_.prompt_tokens += static_cast<uint64_t>(end - p);
    st.prefilled += end - p;
    cached_.insert(cached_.end(), tokens.begin() + p, tokens.begin() + end);
  }
  logits_valid_ = true;
  return true;
}

bool Generator::feed(int32_t token) {
  if (static_cast<int64_t>(cached_.size()) >= capacity()) return false;
  const Row r{&session_, static_cast<int32_t>(cached_.size()), token, true};
  const uint64_t t0 = now_ns();
  e_.runner->forward({&r, 1}, fo_, logits_.data(), nullptr);
  e_.decode_ns += now_ns() - t0;
  ++e_.decode_tokens;
  cached_.push_back(token);
  logits_valid_ = true;
  return true;
}

std::string Generator::decode(Sampler& sampler, int64_t n, StopStrings& stops, bool ignore_eos, bool ban_stops_first,
                              const std::function<void(std::string_view)>& emit,
                              const std::function<bool()>& interrupted, TurnStats& st) {
  std::string shown;
  auto show = [&](const std::string& s) {
    if (s.empty()) return;
    shown += s;
    emit(s);
  };
  StreamDecoder dec(tm_.tok, /*skip_special=*/false);
  if (pending_) {
    const int32_t p = *pending_;
    pending_.reset();
    if (!feed(p)) {
      pending_ = p;
      st.reason = StopReason::Context;
      st.end_ns = now_ns();
      return shown;
    }
  }
  const std::span<const int32_t> stop_ids(tm_.stop_ids);
  bool first = true;
  st.reason = StopReason::Length;
  while (logits_valid_) {
    if (n >= 0 && st.generated >= n) {
      st.reason = StopReason::Length;
      break;
    }
    if (interrupted()) {
      st.reason = StopReason::Interrupted;
      break;
    }
    std::copy(logits_.begin(), logits_.end(), work_.begin());
    const bool ban = ignore_eos || (first && ban_stops_first);
    const int32_t tok = sampler.sample(work_, ban ? stop_ids : std::span<const int32_t>{});
    first = false;
    if (!st.first_token_ns) st.first_token_ns = now_ns();
    if (tm_.is_stop(tok)) {
      st.reason = StopReason::Eos;  // not fed: the logits stay valid for :more
      break;
    }
    sampler.accept(tok);
    ++st.generated;
    show(stops.push(dec.push(tok)));
    StopReason r = StopReason::Length;
    bool stop = true;
    if (stops.stopped()) {
      r = StopReason::StopString;
    } else if (interrupted()) {
      r = StopReason::Interrupted;
    } else if (n >= 0 && st.generated >= n) {
      r = StopReason::Length;
    } else if (!feed(tok)) {
      r = StopReason::Context;
    } else {
      stop = false;
    }
    if (stop) {
      pending_ = tok;  // shown but not fed: :more feeds it first
      logits_valid_ = false;
      st.reason = r;
      break;
    }
  }
  if (!stops.stopped()) {
    show(stops.push(dec.flush()));
    show(stops.flush());
  }
  st.end_ns = now_ns();
  return shown;
}

}  // namespace strata::cli
