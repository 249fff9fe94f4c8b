// Speculative decoding (docs/speculative.md) is lossless:
//  - greedy output with every --spec mode equals --spec off token for token,
//    on every fixture (GLM-5 bf16, FP8, GLM-5.2 with shared indexer layers),
//    on the bundled trained model (text, stop strings, limits inside accepted
//    runs) and through a container with a one-slot expert cache;
//  - the session after rollbacks holds exactly the keys of a session that
//    never drafted (main layers), and the MTP layer's state equals teacher
//    forcing;
//  - sampled: Sampler::sample_draft draws exactly the sampler's distribution
//    whatever the draft (chi-square over 200k draws per case) with the same
//    random numbers as a plain draw, so seeded sampled output with every mode
//    equals --spec off token for token (trained model, fixtures, a container
//    with a one-slot expert cache); and a
//    sequence's sampled continuations (penalties, top-k/p, min-p) have the
//    target's joint distribution over three tokens (chi-square);
//  - a constrained JSON answer with forced tokens validates and equals the
//    one without speculation;
//  - the n-gram lookup and --spec auto's choice (off while it loses).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <memory>
#include <string>
#include <vector>

#include "core/json.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/generation.h"
#include "runtime/speculation.h"
#include "runtime/text_model.h"
#include "test_util.h"
#include "text/json_constraint.h"
#include "text/sampler.h"
#include "text/tokenizer.h"

namespace strata::speculation_test {
namespace {

const std::string kSrc = STRATA_SOURCE_DIR;
const std::string kTiny = kSrc + "/models/glm5-strata-tiny";
const SpecMode kModes[] = {SpecMode::Ngram, SpecMode::Mtp, SpecMode::Auto};

std::string fixture(const std::string& name) { return kSrc + "/tests/fixtures/" + name; }

std::vector<int32_t> reference_ids(const std::string& dir) {
  const std::string rp = dir + "/reference.json";
  return parse_json(test_util::read_file(rp), rp)["ids"].get<std::vector<int32_t>>();
}

std::unique_ptr<Engine> open_engine(std::shared_ptr<const Model> m, SpecMode mode, int k = 4) {
  EngineOptions o;
  o.threads = 1;
  o.verbose = false;
  o.spec.mode = mode;
  o.spec.k = k;
  return std::make_unique<Engine>(std::move(m), o);
}

// `src` converted to a container in `tmp` (strata convert).
std::string convert(const test_util::TempDir& tmp, const std::string& src) {
  const std::string dir = tmp.file("c");
  const std::string cmd = std::string(STRATA_BINARY) + " convert --in " + src + " --out " + dir + " -q >/dev/null 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return dir;
}

// A container's engine whose expert cache has one slot per layer (every
// forward streams experts).
EngineOptions tiny_budget(const std::string& dir, SpecMode mode, int k) {
  EngineOptions o;
  o.model = dir;
  o.threads = 2;
  o.verbose = false;
  o.experts.ram_bytes = 1;
  o.experts.autopin = false;
  o.spec.mode = mode;
  o.spec.k = k;
  return o;
}

struct Answer {
  std::vector<int32_t> tokens;
  std::string text;
  StopReason reason = StopReason::None;
  int64_t drafted = 0, accepted = 0;
  bool last_step_multi = false;  // the answer ended in a step that produced more than one token
};

Answer generate(Engine& e, Sequence& seq, std::span<const int32_t> prompt, const GenerationParams& p,
                int64_t chunk = 512) {
  seq.begin(prompt, p);
  Answer a;
  run_turn(
      e, seq,
      [&](const StepOutput& o) {
        a.tokens.insert(a.tokens.end(), o.tokens.begin(), o.tokens.end());
        a.text += o.text;
        if (!o.tokens.empty()) a.last_step_multi = o.tokens.size() > 1;
      },
      [] { return false; }, chunk);
  a.reason = seq.reason();
  a.drafted = seq.drafted();
  a.accepted = seq.accepted();
  return a;
}

Answer generate(Engine& e, std::span<const int32_t> prompt, const GenerationParams& p, const Tokenizer* tok,
                std::span<const int32_t> stops, int64_t ctx = 256, int64_t chunk = 512) {
  Sequence seq(e.config(), ctx, tok, stops, &e.speculator());
  return generate(e, seq, prompt, p, chunk);
}

GenerationParams greedy(int64_t n) {
  GenerationParams p;
  p.sampling.temperature = 0.0;
  p.max_tokens = n;
  p.ignore_eos = true;
  return p;
}

struct Totals {
  int64_t drafted = 0, accepted = 0;
  void add(const Answer& a) {
    drafted += a.drafted;
    accepted += a.accepted;
  }
};

// A constraint for tests: every 4th token is forced (one token allowed: a
// draft that is always accepted), the others may be anything but the ids
// congruent to the position mod 5 (a mask the verification must apply to
// every row, in order).
class PatternConstraint final : public TokenConstraint {
 public:
  size_t mask(std::span<float> logits, std::span<const int32_t>) override {
    size_t n = 0;
    for (size_t i = 0; i < logits.size(); ++i) {
      if (allowed(static_cast<int32_t>(i)))
        ++n;
      else
        logits[i] = -INFINITY;
    }
    return n;
  }
  bool advance(int32_t t) override {
    if (!allowed(t)) return false;
    ++n_;
    return true;
  }
  bool done() const override { return false; }
  const char* what() const override { return "pattern"; }
  int32_t forced(std::span<const int32_t>) override { return n_ % 4 == 3 ? forced_token() : -1; }
  bool save() override {
    saved_ = n_;
    return true;
  }
  void restore() override { n_ = saved_; }

 private:
  int32_t forced_token() const { return static_cast<int32_t>((n_ * 7 + 5) % 250); }
  bool allowed(int32_t t) const { return n_ % 4 == 3 ? t == forced_token() : t % 5 != n_ % 5; }
  int64_t n_ = 0, saved_ = 0;
};

// Greedy with every mode == off, on the three fixtures, unconstrained and
// with the pattern constraint (forced tokens). The prompt is cut into
// chunks of 5 so prefill spans several forwards (the MTP state follows
// each). Every mode must have verified drafts, accepted some and rejected
// some (else the test proves nothing).
TEST(Speculation, GreedyEqualsOffOnEveryFixture) {
  std::map<SpecMode, Totals> totals;
  // glm4moe-tiny-bf16: the GLM-5 MTP drafting path over GQA sessions (truncated on a rejected draft).
  // dsv3-tiny-bf16: MLA without the DSA indexer, YaRN.
  for (const char* name :
       {"glm5-tiny-bf16", "glm5-tiny-fp8", "glm52-tiny-bf16", "glm4moe-tiny-bf16", "dsv3-tiny-bf16"}) {
    const std::string dir = fixture(name);
    auto model = std::shared_ptr<const Model>(load_model(dir, LoadOptions{.load_mtp = true}));
    std::vector<int32_t> prompt = reference_ids(dir);
    prompt.resize(12);
    const std::vector<int32_t> stops = {253, 254, 255};
    for (bool constrained : {false, true}) {
      auto params = [&] {
        GenerationParams p = greedy(60);
        if (constrained) p.constraint = std::make_shared<PatternConstraint>();
        return p;
      };
      auto off = open_engine(model, SpecMode::Off);
      const Answer want = generate(*off, prompt, params(), nullptr, stops, 256, 5);
      ASSERT_EQ(want.tokens.size(), 60u) << name;
      for (SpecMode mode : kModes)
        for (int k : {1, 4}) {
          auto e = open_engine(model, mode, k);
          const Answer got = generate(*e, prompt, params(), nullptr, stops, 256, 5);
          EXPECT_EQ(got.tokens, want.tokens)
              << name << " --spec " << spec_mode_name(mode) << " k " << k << (constrained ? " constrained" : "");
          totals[mode].add(got);
        }
    }
  }
  for (const auto& [mode, t] : totals) {
    std::printf("[ fixtures ] --spec %s: %lld drafted, %lld accepted\n", spec_mode_name(mode),
                static_cast<long long>(t.drafted), static_cast<long long>(t.accepted));
    EXPECT_GT(t.drafted, t.accepted) << spec_mode_name(mode) << ": no draft was rejected";
    EXPECT_GT(t.accepted, 0) << spec_mode_name(mode) << ": no draft was accepted";
  }
}

// The bundled trained model, with text: greedy with every mode == off for
// several prompts, and with stop strings and max_tokens that end the answer
// inside a step's accepted run (it must end exactly where it ends without
// drafts: same text, tokens and reason).
TEST(Speculation, GreedyEqualsOffWithTextStopsAndLimits) {
  auto model = std::shared_ptr<const Model>(load_model(kTiny, LoadOptions{.load_mtp = true}));
  const TextModel tm = open_text_model(kTiny, model->config, "raw", true);
  const ModelConfig& c = model->config;
  auto off = open_engine(model, SpecMode::Off);
  Sequence off_seq(c, 256, &tm.tok, tm.stop_ids, &off->speculator());
  std::map<SpecMode, std::unique_ptr<Engine>> engines;
  std::map<SpecMode, std::unique_ptr<Sequence>> seqs;
  for (SpecMode m : kModes) {
    engines[m] = open_engine(model, m, 4);
    seqs[m] = std::make_unique<Sequence>(c, 256, &tm.tok, tm.stop_ids, &engines[m]->speculator());
  }
  std::map<SpecMode, Totals> totals;
  int inside_length = 0, inside_stop = 0;
  for (const char* text : {"Computer, n.", "Abandon, v. t.", "The meaning of the word",
                           "a pin, or a pin, or a pin, or a"}) {
    const std::vector<int32_t> prompt = tm.tok.encode(text, true);
    GenerationParams p = greedy(80);
    p.ignore_eos = false;
    const Answer want = generate(*off, off_seq, prompt, p);
    for (SpecMode m : kModes) {
      const Answer got = generate(*engines[m], *seqs[m], prompt, p);
      EXPECT_EQ(got.tokens, want.tokens) << text << " --spec " << spec_mode_name(m);
      EXPECT_EQ(got.text, want.text) << text << " --spec " << spec_mode_name(m);
      EXPECT_EQ(got.reason, want.reason) << text << " --spec " << spec_mode_name(m);
      totals[m].add(got);
    }
    // Limits (the sequences keep the prompt: each answer prefills one row).
    for (int64_t n : {1, 2, 3, 4, 5, 6, 7, 9, 12, 16, 21, 27}) {
      GenerationParams q = greedy(n);
      const Answer w = generate(*off, off_seq, prompt, q);
      const Answer g = generate(*engines[SpecMode::Ngram], *seqs[SpecMode::Ngram], prompt, q);
      EXPECT_EQ(g.tokens, w.tokens) << text << " max_tokens " << n;
      EXPECT_EQ(g.text, w.text) << text << " max_tokens " << n;
      EXPECT_EQ(g.reason, w.reason) << text << " max_tokens " << n;
      inside_length += g.last_step_multi && g.reason == StopReason::Length;
    }
    // Stop strings: prefixes of the answer's text of many lengths (each
    // completes at a different token; in a repetitive answer most complete
    // inside accepted runs) and short pieces at some offsets.
    GenerationParams q = greedy(60);
    const Answer full = generate(*off, off_seq, prompt, q);
    std::vector<std::string> stops;
    for (size_t len = 3; len < full.text.size() && len < 120; len += 7) stops.push_back(full.text.substr(0, len));
    for (size_t at = 2; at + 3 < full.text.size() && at < 120; at += 17) stops.push_back(full.text.substr(at, 3));
    for (const std::string& stop : stops) {
      q.stop = {stop};
      const Answer w = generate(*off, off_seq, prompt, q);
      const Answer g = generate(*engines[SpecMode::Ngram], *seqs[SpecMode::Ngram], prompt, q);
      EXPECT_EQ(g.tokens, w.tokens) << text << " stop " << q.stop[0];
      EXPECT_EQ(g.text, w.text) << text << " stop " << q.stop[0];
      EXPECT_EQ(g.reason, w.reason) << text << " stop " << q.stop[0];
      inside_stop += g.last_step_multi && g.reason == StopReason::StopString;
    }
  }
  for (const auto& [mode, t] : totals) {
    std::printf("[ tiny ] --spec %s: %lld drafted, %lld accepted\n", spec_mode_name(mode),
                static_cast<long long>(t.drafted), static_cast<long long>(t.accepted));
    EXPECT_GT(t.accepted, 0) << spec_mode_name(mode);
    EXPECT_GT(t.drafted, t.accepted) << spec_mode_name(mode);
  }
  std::printf("[ tiny ] answers ended inside a multi-token step: %d by length, %d by a stop string\n", inside_length,
              inside_stop);
  EXPECT_GT(inside_length, 0);
  EXPECT_GT(inside_stop, 0);
}

// Through a container whose expert cache has one slot per layer (every step
// misses and reads experts, the MTP layer's too): greedy == off.
TEST(Speculation, GreedyEqualsOffThroughAContainerWithATinyExpertBudget) {
  test_util::TempDir tmp;
  const std::string dir = convert(tmp, fixture("glm5-tiny-bf16"));
  std::vector<int32_t> prompt = reference_ids(fixture("glm5-tiny-bf16"));
  prompt.resize(10);
  const std::vector<int32_t> stops = {253, 254, 255};
  std::vector<int32_t> want;
  for (SpecMode m : {SpecMode::Off, SpecMode::Ngram, SpecMode::Mtp, SpecMode::Auto}) {
    Engine e(tiny_budget(dir, m, 3));
    const Answer a = generate(e, prompt, greedy(40), nullptr, stops);
    if (m == SpecMode::Off) {
      want = a.tokens;
      continue;
    }
    EXPECT_EQ(a.tokens, want) << "--spec " << spec_mode_name(m);
    EXPECT_GT(e.experts().stats().misses, 0u);
    if (m == SpecMode::Mtp) {
      EXPECT_GT(a.drafted, 0);
    }
  }
}

// The trained model through a container with one expert-cache slot per layer
// (every forward streams experts): greedy with auto == off token for token on
// text prompts, and the expert bytes the decode forwards read reached auto's
// cost model (with the store's read time per byte).
TEST(Speculation, AutoEqualsOffOnTheTrainedModelThroughATinyExpertBudget) {
  test_util::TempDir tmp;
  const std::string dir = convert(tmp, kTiny);
  auto open = [&](SpecMode m) { return std::make_unique<Engine>(tiny_budget(dir, m, 4)); };
  auto off = open(SpecMode::Off);
  auto au = open(SpecMode::Auto);
  const TextModel tm = open_text_model(kTiny, off->config(), "raw", true);
  int64_t drafted = 0;
  for (const char* text : {"Computer, n.", "a pin, or a pin, or a pin, or a"}) {
    const std::vector<int32_t> prompt = tm.tok.encode(text, true);
    const Answer want = generate(*off, prompt, greedy(40), &tm.tok, tm.stop_ids);
    const Answer got = generate(*au, prompt, greedy(40), &tm.tok, tm.stop_ids);
    EXPECT_EQ(got.tokens, want.tokens) << text;
    EXPECT_EQ(got.text, want.text) << text;
    drafted += got.drafted;
  }
  const SpecStats st = au->stats().spec;
  std::printf("[ container ] auto: drafted %lld, decode forwards read %.2f MB at %.2f ns/byte\n",
              static_cast<long long>(drafted), static_cast<double>(st.decode_bytes) / 1e6, st.read_ns_per_byte);
  EXPECT_GT(au->experts().stats().misses, 0u);
  EXPECT_GT(st.decode_bytes, 0u);
  EXPECT_GT(st.read_ns_per_byte, 0.0);
  EXPECT_GT(au->speculator().forward_bytes(1), 0.0);
  uint64_t plans = 0;
  for (uint64_t n : st.chosen) plans += n;
  EXPECT_GT(plans, 0u) << "auto reported no chosen k";
}

// After an answer with many rejected drafts, the session holds exactly what
// a session that never drafted holds (every main layer's latent, rope key and
// indexer key, bit for bit, at every held position), and the MTP layer's
// state equals teacher forcing of the same tokens.
TEST(Speculation, KvAfterRollbackEqualsNeverDrafted) {
  auto model = std::shared_ptr<const Model>(load_model(kTiny, LoadOptions{.load_mtp = true}));
  const TextModel tm = open_text_model(kTiny, model->config, "raw", true);
  const ModelConfig& c = model->config;
  const std::vector<int32_t> prompt = tm.tok.encode("Abandon, v. t.", true);
  auto off = open_engine(model, SpecMode::Off);
  Sequence never(c, 256, &tm.tok, tm.stop_ids, &off->speculator());
  const Answer want = generate(*off, never, prompt, greedy(70));
  for (SpecMode m : kModes) {
    auto e = open_engine(model, m, 4);
    Sequence seq(c, 256, &tm.tok, tm.stop_ids, &e->speculator());
    // After every step the session holds exactly the fed tokens: the
    // rejected drafts' positions are forgotten at once, not only overwritten
    // by a later step.
    int64_t steps = 0, longer = 0;
    seq.begin(prompt, greedy(70));
    Answer got;
    run_turn(
        *e, seq,
        [&](const StepOutput& o) {
          got.tokens.insert(got.tokens.end(), o.tokens.begin(), o.tokens.end());
          ++steps;
          if (seq.session().n_past != static_cast<int64_t>(seq.tokens().size())) ++longer;
        },
        [] { return false; });
    got.drafted = seq.drafted();
    got.accepted = seq.accepted();
    EXPECT_EQ(longer, 0) << spec_mode_name(m) << ": steps after which the session held rejected drafts, of "
                         << steps;
    ASSERT_EQ(got.tokens, want.tokens) << spec_mode_name(m);
    EXPECT_GT(got.drafted, got.accepted) << spec_mode_name(m) << ": nothing was rolled back";
    const Session& a = seq.session();
    const Session& b = never.session();
    ASSERT_EQ(a.n_past, b.n_past) << spec_mode_name(m);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      const LayerCache& x = a.layer(l);
      const LayerCache& y = b.layer(l);
      auto same = [&](const AlignedFloats& u, const AlignedFloats& v, int64_t width) {
        const size_t n = static_cast<size_t>(a.n_past * width);
        return std::equal(u.begin(), u.begin() + static_cast<std::ptrdiff_t>(n), v.begin());
      };
      EXPECT_TRUE(same(x.latent, y.latent, c.kv_lora_rank)) << spec_mode_name(m) << " layer " << l;
      EXPECT_TRUE(same(x.rope_key, y.rope_key, c.qk_rope_head_dim)) << spec_mode_name(m) << " layer " << l;
      if (!x.index_key.empty()) {  // stored in lanes: row by row
        std::vector<float> u(static_cast<size_t>(c.index_head_dim)), v(u.size());
        bool eq = true;
        for (int64_t p = 0; p < a.n_past; ++p) {
          x.index_key.get_row(p, u.data());
          y.index_key.get_row(p, v.data());
          eq = eq && u == v;
        }
        EXPECT_TRUE(eq) << spec_mode_name(m) << " layer " << l;
      }
    }
    // The MTP layer: teacher forcing over the held tokens (auto may have
    // stopped keeping it when the MTP chain lost).
    if (!a.has_mtp() || (m == SpecMode::Auto && !seq.mtp_on())) continue;
    ASSERT_TRUE(seq.mtp_on()) << spec_mode_name(m);
    const int64_t n = a.mtp_n_past;
    EXPECT_GE(n, a.n_past - 5) << spec_mode_name(m) << ": the MTP state fell behind";
    EXPECT_EQ(n, seq.mtp_synced());
    Session ref(c, 256, true);
    std::vector<Row> rows;
    const std::vector<int32_t>& toks = seq.tokens();
    for (int64_t p = 0; p < a.n_past; ++p) rows.push_back({&ref, static_cast<int32_t>(p), toks[p], false});
    std::vector<float> hidden(static_cast<size_t>(a.n_past * c.hidden_size));
    e->forward(rows, nullptr, hidden.data());
    rows.clear();
    for (int64_t p = 0; p < n; ++p) rows.push_back({&ref, static_cast<int32_t>(p), toks[p + 1], false});
    e->forward_mtp(rows, hidden.data(), nullptr);
    const LayerCache& x = a.layer(c.num_hidden_layers);
    const LayerCache& y = ref.layer(c.num_hidden_layers);
    const auto k = static_cast<std::ptrdiff_t>(n * c.kv_lora_rank), r = static_cast<std::ptrdiff_t>(n * c.qk_rope_head_dim);
    EXPECT_TRUE(std::equal(x.latent.begin(), x.latent.begin() + k, y.latent.begin())) << spec_mode_name(m);
    EXPECT_TRUE(std::equal(x.rope_key.begin(), x.rope_key.begin() + r, y.rope_key.begin())) << spec_mode_name(m);
  }
}

// ------------------------------------------------------------- sampling

// The chi-square statistic's upper 1e-4 quantile for `df` degrees of freedom
// (Wilson-Hilferty; within a few percent for df >= 2).
double chi2_limit(int df) {
  const double z = 3.719, d = df;  // the standard normal's upper 1e-4 quantile
  return d * std::pow(1.0 - 2.0 / (9.0 * d) + z * std::sqrt(2.0 / (9.0 * d)), 3.0);
}

struct Fit {
  double chi2 = 0, tv = 0;
  int df = 0;
  int64_t impossible = 0;  // draws of outcomes the target never gives
};

// Observed counts against expected probabilities; cells expecting fewer
// than 5 draws are merged into one.
Fit fit(const std::map<std::vector<int32_t>, double>& want, const std::map<std::vector<int32_t>, int64_t>& got,
        int64_t n) {
  Fit f;
  double small_e = 0, small_o = 0;
  int cells = 0;
  for (const auto& [k, p] : want) {
    const auto it = got.find(k);
    const double o = it == got.end() ? 0.0 : static_cast<double>(it->second);
    f.tv += 0.5 * std::abs(o / static_cast<double>(n) - p);
    const double e = p * static_cast<double>(n);
    if (e < 5) {
      small_e += e;
      small_o += o;
      continue;
    }
    f.chi2 += (o - e) * (o - e) / e;
    ++cells;
  }
  if (small_e > 0) {
    f.chi2 += (small_o - small_e) * (small_o - small_e) / std::max(small_e, 1.0);
    ++cells;
  }
  for (const auto& [k, o] : got)
    if (!want.count(k)) {
      f.impossible += o;
      f.tv += 0.5 * static_cast<double>(o) / static_cast<double>(n);
    }
  f.df = std::max(1, cells - 1);
  return f;
}

// The acceptance rule alone: for fixed logits and every sampler setting,
// sample_draft(draft) draws the sampler's own distribution for a likely
// draft, an unlikely one, one the cuts remove and none; greedy returns the
// argmax.
TEST(Speculation, SampleDraftDrawsTheTargetDistribution) {
  const std::vector<float> logits = {2.0f, 1.5f, 1.4f, 0.3f, -0.2f, -1.0f, 0.9f, 1.45f};
  std::vector<SamplerOptions> settings;
  {
    SamplerOptions o;
    o.temperature = 1.0;
    settings.push_back(o);
    o.temperature = 0.7;
    o.top_k = 5;
    settings.push_back(o);
    o.top_k = 0;
    o.top_p = 0.8;
    o.min_p = 0.1;
    settings.push_back(o);
    o.temperature = 1.3;
    o.top_p = 1.0;
    o.min_p = 0.0;
    o.repetition_penalty = 1.4;
    o.presence_penalty = 0.5;
    o.frequency_penalty = 0.3;
    settings.push_back(o);
  }
  constexpr int64_t kDraws = 200000;
  for (size_t si = 0; si < settings.size(); ++si) {
    SamplerOptions o = settings[si];
    o.seed = 1000 + si;
    Sampler s(static_cast<int64_t>(logits.size()), o);
    const std::vector<int32_t> prompt = {0, 7};
    s.reset(prompt);
    s.accept(1);
    s.accept(1);
    std::vector<float> w = logits;
    const auto dist = s.distribution(w);
    std::map<std::vector<int32_t>, double> want;
    for (const auto& [id, p] : dist) want[{id}] = p;
    const int32_t cut = dist.size() < logits.size() ? 5 : -1;  // -1.0 is cut wherever something is
    for (int32_t draft : {dist.front().first, dist.back().first, cut, int32_t{-1}}) {
      std::map<std::vector<int32_t>, int64_t> got;
      int64_t accepted = 0;
      for (int64_t i = 0; i < kDraws; ++i) {
        w = logits;
        const int32_t t = draft >= 0 ? s.sample_draft(w, draft) : s.sample(w);
        ++got[{t}];
        accepted += t == draft;
      }
      const Fit f = fit(want, got, kDraws);
      EXPECT_EQ(f.impossible, 0) << "setting " << si << " draft " << draft;
      EXPECT_LT(f.chi2, chi2_limit(f.df)) << "setting " << si << " draft " << draft << " tv " << f.tv;
      if (draft >= 0) {
        double pd = 0;
        for (const auto& [id, p] : dist) pd = id == draft ? p : pd;
        EXPECT_NEAR(static_cast<double>(accepted) / kDraws, pd, 0.005) << "setting " << si << " draft " << draft;
      }
    }
  }
  // Greedy: the argmax, the draft only when it is the argmax.
  SamplerOptions g;
  g.temperature = 0;
  Sampler s(static_cast<int64_t>(logits.size()), g);
  for (int32_t d = 0; d < 8; ++d) {
    std::vector<float> w = logits;
    EXPECT_EQ(s.sample_draft(w, d), 0) << d;
  }
}

// A sequence's sampled continuations: the joint distribution of three
// tokens (the first sampled after the prompt, the next two verified against
// n-gram drafts) over 2500 seeds equals the target's exact joint
// distribution, computed by enumerating the kept tokens with the engine and
// the sampler's own pipeline (penalties see each token before the next).
TEST(Speculation, SampledSequencesHaveTheTargetDistribution) {
  auto model = std::shared_ptr<const Model>(load_model(kTiny, LoadOptions{.load_mtp = false}));
  const TextModel tm = open_text_model(kTiny, model->config, "raw", true);
  const ModelConfig& c = model->config;
  const std::vector<int32_t> prompt = tm.tok.encode("a pin, or a pin, or a pin, or a pin, or a p", true);
  const int64_t P = static_cast<int64_t>(prompt.size());
  SamplerOptions so;
  so.temperature = 0.6;
  so.top_k = 4;
  so.top_p = 0.97;
  so.min_p = 0.02;
  so.repetition_penalty = 1.0;
  so.presence_penalty = 0.2;
  so.frequency_penalty = 0.1;
  const std::vector<int32_t> no_stops;

  // The exact joint: p(t1) p(t2 | t1) p(t3 | t1 t2).
  auto e0 = open_engine(model, SpecMode::Off);
  Session s(c, 64, false);
  const size_t V = static_cast<size_t>(c.vocab_size);
  std::vector<float> lg(V);
  std::vector<Row> rows;
  for (int64_t p = 0; p < P; ++p) rows.push_back({&s, static_cast<int32_t>(p), prompt[p], p == P - 1});
  e0->forward(rows, lg.data());
  const std::vector<float> l0 = lg;
  auto dist = [&](const std::vector<float>& l, std::span<const int32_t> seen) {
    Sampler sm(c.vocab_size, so);
    sm.reset(prompt);
    for (int32_t t : seen) sm.accept(t);
    std::vector<float> w = l;
    return sm.distribution(w);
  };
  std::map<std::vector<int32_t>, double> want;
  for (const auto& [t1, p1] : dist(l0, {})) {
    s.truncate(P);
    Row r1{&s, static_cast<int32_t>(P), t1, true};
    e0->forward({&r1, 1}, lg.data());
    const std::vector<float> l1 = lg;
    const int32_t seen1[] = {t1};
    for (const auto& [t2, p2] : dist(l1, seen1)) {
      s.truncate(P + 1);
      Row r2{&s, static_cast<int32_t>(P + 1), t2, true};
      e0->forward({&r2, 1}, lg.data());
      const int32_t seen2[] = {t1, t2};
      for (const auto& [t3, p3] : dist(lg, seen2)) want[{t1, t2, t3}] = p1 * p2 * p3;
    }
  }

  auto e = open_engine(model, SpecMode::Ngram, 2);
  Sequence seq(c, 64, &tm.tok, no_stops, &e->speculator());
  std::map<std::vector<int32_t>, int64_t> got;
  constexpr int64_t kRuns = 1200;
  for (int64_t i = 0; i < kRuns; ++i) {
    GenerationParams gp;
    gp.sampling = so;
    gp.sampling.seed = static_cast<uint64_t>(i + 1);
    gp.max_tokens = 4;  // the first three: one sampled, two verified against drafts (k = 2)
    const Answer a = generate(*e, seq, prompt, gp);
    ASSERT_EQ(a.tokens.size(), 4u);
    ++got[std::vector<int32_t>(a.tokens.begin(), a.tokens.begin() + 3)];
  }
  const SpecStats st = e->speculator().stats();
  const Fit f = fit(want, got, kRuns);
  std::printf("[ sampled ] %zu outcomes, %lld drafted, %lld accepted; chi2 %.1f (df %d, limit %.1f), TV %.3f\n",
              want.size(), static_cast<long long>(st.drafted()), static_cast<long long>(st.accepted()), f.chi2, f.df,
              chi2_limit(f.df), f.tv);
  EXPECT_EQ(f.impossible, 0);
  EXPECT_LT(f.chi2, chi2_limit(f.df));
  // Both branches of the rule ran many times.
  EXPECT_GT(st.accepted(), 200u);
  EXPECT_GT(st.drafted() - st.accepted(), 200u);
}

// sample_draft is one plain draw: for any logits, draft and setting, the
// same seed gives the same token from sample_draft(draft) as from sample(),
// and the random stream stays in step (a later plain draw agrees too).
TEST(Speculation, SampleDraftConsumesTheSampleStream) {
  std::mt19937 gen(11);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  SamplerOptions o;
  o.temperature = 0.9;
  o.top_k = 6;
  o.top_p = 0.95;
  o.presence_penalty = 0.3;
  o.seed = 5;
  constexpr int64_t V = 12;
  Sampler a(V, o), b(V, o);
  const std::vector<int32_t> prompt = {1, 2};
  a.reset(prompt);
  b.reset(prompt);
  int same = 0;
  for (int i = 0; i < 2000; ++i) {
    std::vector<float> l(V);
    for (float& x : l) x = nd(gen);
    std::vector<float> wa = l, wb = l;
    const int32_t draft = static_cast<int32_t>(i % (V + 1)) - 1;  // -1: none
    const int32_t ta = a.sample(wa);
    const int32_t tb = draft >= 0 ? b.sample_draft(wb, draft) : b.sample(wb);
    ASSERT_EQ(ta, tb) << "draw " << i << " draft " << draft;
    same += ta == draft;
    a.accept(ta);
    b.accept(tb);
  }
  EXPECT_GT(same, 50);  // drafts were accepted, not only rejected
}

// Seeded sampling with a full sampler chain: temperature, top-k/p, min-p and
// all three penalties.
GenerationParams seeded(int64_t n, uint64_t seed, double temperature = 0.8) {
  GenerationParams p;
  p.sampling.temperature = temperature;
  p.sampling.top_k = 40;
  p.sampling.top_p = 0.95;
  p.sampling.min_p = 0.02;
  p.sampling.repetition_penalty = 1.1;
  p.sampling.presence_penalty = 0.2;
  p.sampling.frequency_penalty = 0.1;
  p.sampling.seed = seed;
  p.max_tokens = n;
  p.ignore_eos = true;
  return p;
}

// Prints each mode's totals and checks every mode verified drafts and that,
// over the modes, drafts were both accepted and rejected (else an equality
// proves nothing about the acceptance rule). Sampled text with penalties
// rarely repeats itself: the n-gram source alone may see few hits.
void expect_accepted_and_rejected(const char* what, const std::map<SpecMode, Totals>& totals) {
  Totals all;
  for (const auto& [mode, t] : totals) {
    std::printf("[ %s ] --spec %s: %lld drafted, %lld accepted\n", what, spec_mode_name(mode),
                static_cast<long long>(t.drafted), static_cast<long long>(t.accepted));
    EXPECT_GT(t.drafted, 0) << what << " --spec " << spec_mode_name(mode) << ": nothing was verified";
    all.drafted += t.drafted;
    all.accepted += t.accepted;
  }
  EXPECT_GT(all.accepted, 0) << what << ": no draft was accepted";
  EXPECT_GT(all.drafted, all.accepted) << what << ": no draft was rejected";
}

// --draft-vocab N: the MTP head's draft logits are the full head's first N,
// bit for bit (the same kernel rows over a prefix view of the lm_head); MTP
// drafts chosen among them leave greedy and seeded sampled output equal to
// --spec off, on the bundled trained model and on a quantized container.
TEST(Speculation, DraftVocabularyIsTheHeadsPrefixAndChangesNoOutput) {
  auto model = std::shared_ptr<const Model>(load_model(kTiny, LoadOptions{.load_mtp = true}));
  const ModelConfig& c = model->config;
  const TextModel tm = open_text_model(kTiny, c, "raw", true);
  const std::vector<int32_t> prompt = tm.tok.encode("The meaning of the word", true);
  {  // The prefix, through Engine::forward_mtp.
    EngineOptions o;
    o.threads = 2;
    o.verbose = false;
    o.spec.mode = SpecMode::Mtp;
    o.spec.draft_vocab = 1000;  // not a multiple of any kernel's row block
    Engine e(model, o);
    ASSERT_EQ(e.mtp_draft_vocab(), 1000);
    const int64_t n = static_cast<int64_t>(prompt.size()), D = c.hidden_size, V = c.vocab_size;
    Session s(c, 64, true);
    std::vector<Row> rows;
    for (int64_t p = 0; p < n; ++p) rows.push_back({&s, static_cast<int32_t>(p), prompt[static_cast<size_t>(p)], false});
    std::vector<float> hidden(static_cast<size_t>(n * D));
    e.forward(rows, nullptr, hidden.data());
    rows.clear();
    for (int64_t p = 0; p + 1 < n; ++p) rows.push_back({&s, static_cast<int32_t>(p), prompt[static_cast<size_t>(p + 1)], true});
    std::vector<float> full(static_cast<size_t>((n - 1) * V)), part(static_cast<size_t>((n - 1) * 1000));
    e.forward_mtp(rows, hidden.data(), full.data());
    e.forward_mtp(rows, hidden.data(), part.data(), nullptr, true);
    for (int64_t r = 0; r + 1 < n; ++r)
      EXPECT_TRUE(std::equal(part.begin() + r * 1000, part.begin() + (r + 1) * 1000, full.begin() + r * V)) << "row " << r;
  }
  std::map<SpecMode, Totals> totals;
  auto off = open_engine(model, SpecMode::Off);
  for (int64_t dv : {int64_t{300}, int64_t{1024}})
    for (SpecMode m : {SpecMode::Mtp, SpecMode::Auto}) {
      EngineOptions o;
      o.threads = 1;
      o.verbose = false;
      o.spec.mode = m;
      o.spec.draft_vocab = dv;
      Engine e(model, o);
      for (const GenerationParams& p : {greedy(64), seeded(48, 7, 0.8)}) {
        const Answer want = generate(*off, prompt, p, &tm.tok, tm.stop_ids);
        const Answer got = generate(e, prompt, p, &tm.tok, tm.stop_ids);
        EXPECT_EQ(got.tokens, want.tokens) << "--draft-vocab " << dv << " --spec " << spec_mode_name(m);
        if (m == SpecMode::Mtp) totals[m].add(got);
      }
      if (m == SpecMode::Mtp) {
        EXPECT_GT(e.stats().spec.source[static_cast<size_t>(DraftSource::Mtp)].drafted, 0u) << dv;
      }
    }
  expect_accepted_and_rejected("draft vocab", totals);
}

// Decode tokens per second pays for the drafts: the MTP layer's forwards of
// a generation (draft chains, sync rows) count as decode time beside the
// verify forwards, and `score --mtp`'s forwards (not drafts) do not. Until
// 2026-12-07 they were left out, and --stats / bench/speculative showed
// `--spec mtp` faster than the wall clock did.
TEST(Speculation, DecodeTimeCountsTheMtpForwards) {
  auto model = std::shared_ptr<const Model>(load_model(kTiny, LoadOptions{.load_mtp = true}));
  const ModelConfig& c = model->config;
  const TextModel tm = open_text_model(kTiny, c, "raw", true);
  const std::vector<int32_t> prompt = tm.tok.encode("The meaning of the word", true);
  auto e = open_engine(model, SpecMode::Mtp);
  const Answer a = generate(*e, prompt, greedy(48), &tm.tok, tm.stop_ids);
  ASSERT_GT(a.drafted, 0);
  const EngineStats st = e->stats();
  ASSERT_GT(st.spec.mtp_ns, 0u);
  ASSERT_GT(st.spec.decode_ns, 0u);
  EXPECT_GE(st.tokens.decode_ns, st.spec.decode_ns + st.spec.mtp_ns);
  const uint64_t before = st.tokens.decode_ns;
  {  // Not a draft: the time stays out of decode.
    const int64_t n = static_cast<int64_t>(prompt.size()), D = c.hidden_size;
    Session s(c, 64, true);
    std::vector<Row> rows;
    for (int64_t p = 0; p < n; ++p) rows.push_back({&s, static_cast<int32_t>(p), prompt[static_cast<size_t>(p)], false});
    std::vector<float> hidden(static_cast<size_t>(n * D));
    e->forward(rows, nullptr, hidden.data(), n);
    rows.clear();
    for (int64_t p = 0; p + 1 < n; ++p) rows.push_back({&s, static_cast<int32_t>(p), prompt[static_cast<size_t>(p + 1)], true});
    std::vector<float> logits(static_cast<size_t>((n - 1) * c.vocab_size));
    e->forward_mtp(rows, hidden.data(), logits.data());
  }
  EXPECT_EQ(e->stats().tokens.decode_ns, before);
}

// Seeded sampled output with every mode equals --spec off token for token
// (the acceptance rule draws exactly what a plain step draws, with the same
// random numbers), on the bundled trained model (text, several seeds and
// settings, k 1 and 4, and a JSON schema whose keys are forced tokens) and on
// fixtures with a constraint that forces every 4th token.
TEST(Speculation, SeededSampledOutputEqualsOff) {
  std::map<SpecMode, Totals> totals;
  {
    auto model = std::shared_ptr<const Model>(load_model(kTiny, LoadOptions{.load_mtp = true}));
    const TextModel tm = open_text_model(kTiny, model->config, "raw", true);
    auto off = open_engine(model, SpecMode::Off);
    std::map<std::pair<SpecMode, int>, std::unique_ptr<Engine>> engines;
    for (SpecMode m : kModes)
      for (int k : {1, 4}) engines[{m, k}] = open_engine(model, m, k);
    for (const char* text : {"Computer, n.", "a pin, or a pin, or a pin, or a"})
      for (uint64_t seed : {1u, 7u})
        for (double t : {0.5, 1.0}) {
          const std::vector<int32_t> prompt = tm.tok.encode(text, true);
          const GenerationParams p = seeded(48, seed, t);
          const Answer want = generate(*off, prompt, p, &tm.tok, tm.stop_ids);
          ASSERT_EQ(want.tokens.size(), 48u);
          for (auto& [mk, e] : engines) {
            const Answer got = generate(*e, prompt, p, &tm.tok, tm.stop_ids);
            EXPECT_EQ(got.tokens, want.tokens) << text << " seed " << seed << " T " << t << " --spec "
                                               << spec_mode_name(mk.first) << " k " << mk.second;
            EXPECT_EQ(got.text, want.text) << text << " seed " << seed << " --spec " << spec_mode_name(mk.first);
            totals[mk.first].add(got);
          }
        }
    // A JSON schema, sampled: forced tokens and sampled values.
    auto vocab = JsonVocab::build(tm.tok, model->config.vocab_size);
    auto grammar = JsonGrammar::from_schema(nlohmann::ordered_json::parse(
        R"({"type":"object","properties":{"word":{"type":"string","maxLength":12},"plural":{"type":"boolean"}},
            "required":["word","plural"],"additionalProperties":false})"));
    const std::vector<int32_t> prompt = tm.tok.encode("Abandon, v. t. To give up.", true);
    for (uint64_t seed : {3u, 4u}) {
      auto params = [&] {
        GenerationParams p = seeded(120, seed);
        p.ignore_eos = false;
        p.constraint = std::make_shared<JsonConstraint>(grammar, vocab);
        return p;
      };
      const Answer want = generate(*off, prompt, params(), &tm.tok, tm.stop_ids);
      EXPECT_EQ(want.reason, StopReason::Done) << want.text;
      for (SpecMode m : kModes) {
        const Answer got = generate(*engines[{m, 4}], prompt, params(), &tm.tok, tm.stop_ids);
        EXPECT_EQ(got.tokens, want.tokens) << "json seed " << seed << " --spec " << spec_mode_name(m);
        EXPECT_EQ(got.text, want.text) << "json seed " << seed << " --spec " << spec_mode_name(m);
      }
    }
  }
  expect_accepted_and_rejected("tiny, sampled", totals);
  totals.clear();
  for (const char* name : {"glm5-tiny-bf16", "glm52-tiny-bf16"}) {
    const std::string dir = fixture(name);
    auto model = std::shared_ptr<const Model>(load_model(dir, LoadOptions{.load_mtp = true}));
    std::vector<int32_t> prompt = reference_ids(dir);
    prompt.resize(12);
    const std::vector<int32_t> stops = {253, 254, 255};
    for (uint64_t seed : {2u, 9u}) {
      auto params = [&] {
        GenerationParams p = seeded(50, seed, 0.3);
        p.constraint = std::make_shared<PatternConstraint>();
        return p;
      };
      auto off = open_engine(model, SpecMode::Off);
      const Answer want = generate(*off, prompt, params(), nullptr, stops, 256, 5);
      ASSERT_EQ(want.tokens.size(), 50u) << name;
      for (SpecMode m : kModes) {
        auto e = open_engine(model, m, 4);
        const Answer got = generate(*e, prompt, params(), nullptr, stops, 256, 5);
        EXPECT_EQ(got.tokens, want.tokens) << name << " seed " << seed << " --spec " << spec_mode_name(m);
        totals[m].add(got);
      }
    }
  }
  expect_accepted_and_rejected("fixtures, sampled", totals);
}

// The same through a container of the trained model with one expert-cache
// slot per layer (every forward streams experts; auto's choices follow the
// measured times and still change nothing).
TEST(Speculation, SeededSampledOutputEqualsOffThroughATinyExpertBudget) {
  test_util::TempDir tmp;
  const std::string dir = convert(tmp, kTiny);
  std::map<SpecMode, Totals> totals;
  std::vector<Answer> want;
  for (SpecMode m : {SpecMode::Off, SpecMode::Ngram, SpecMode::Mtp, SpecMode::Auto}) {
    Engine e(tiny_budget(dir, m, 4));
    const TextModel tm = open_text_model(kTiny, e.config(), "raw", true);
    size_t i = 0;
    for (const char* text : {"Computer, n.", "a pin, or a pin, or a pin, or a"})
      for (uint64_t seed : {1u, 5u}) {
        const Answer a = generate(e, tm.tok.encode(text, true), seeded(40, seed, 0.6), &tm.tok, tm.stop_ids);
        if (m == SpecMode::Off) {
          want.push_back(a);
          continue;
        }
        EXPECT_EQ(a.tokens, want[i].tokens) << text << " seed " << seed << " --spec " << spec_mode_name(m);
        EXPECT_EQ(a.text, want[i].text) << text << " seed " << seed << " --spec " << spec_mode_name(m);
        totals[m].add(a);
        ++i;
      }
    EXPECT_GT(e.experts().stats().misses, 0u);
  }
  expect_accepted_and_rejected("container, sampled", totals);
}

// ------------------------------------------------------------ constraints

// response_format on the bundled model: keys, quotes and punctuation are
// forced tokens (drafted, always accepted); the answer validates and equals
// the one without speculation, in every mode.
TEST(Speculation, ConstrainedJsonWithForcedTokens) {
  auto model = std::shared_ptr<const Model>(load_model(kTiny, LoadOptions{.load_mtp = true}));
  const TextModel tm = open_text_model(kTiny, model->config, "raw", true);
  auto vocab = JsonVocab::build(tm.tok, model->config.vocab_size);
  const std::string schema =
      R"({"type":"object","properties":{"word":{"type":"string","maxLength":12},"part_of_speech":{"enum":["noun","verb","adjective"]},
          "plural":{"type":"boolean"},"senses":{"type":"array","items":{"type":"string","maxLength":8},"maxItems":2}},
          "required":["word","part_of_speech","plural","senses"],"additionalProperties":false})";
  auto grammar = JsonGrammar::from_schema(nlohmann::ordered_json::parse(schema));
  const std::vector<int32_t> prompt = tm.tok.encode("Abandon, v. t. To give up.", true);
  std::string want;
  for (SpecMode m : {SpecMode::Off, SpecMode::Ngram, SpecMode::Mtp, SpecMode::Auto}) {
    auto e = open_engine(model, m, 4);
    GenerationParams p;
    p.sampling.temperature = 0;
    p.max_tokens = 200;
    p.constraint = std::make_shared<JsonConstraint>(grammar, vocab);
    const Answer a = generate(*e, prompt, p, &tm.tok, tm.stop_ids);
    EXPECT_EQ(a.reason, StopReason::Done) << spec_mode_name(m) << ": " << a.text;
    Json j;
    ASSERT_NO_THROW(j = Json::parse(a.text)) << spec_mode_name(m) << ": " << a.text;
    for (const char* k : {"word", "part_of_speech", "plural", "senses"}) EXPECT_TRUE(j.contains(k)) << a.text;
    if (m == SpecMode::Off) {
      want = a.text;
      continue;
    }
    EXPECT_EQ(a.text, want) << spec_mode_name(m);
    const SpecSourceStats forced = e->speculator().stats().source[static_cast<size_t>(DraftSource::Forced)];
    std::printf("[ json ] --spec %s: %lld drafted, %lld accepted, forced %llu/%llu\n", spec_mode_name(m),
                static_cast<long long>(a.drafted), static_cast<long long>(a.accepted),
                static_cast<unsigned long long>(forced.accepted), static_cast<unsigned long long>(forced.drafted));
    EXPECT_GT(forced.drafted, 10u) << spec_mode_name(m);
    EXPECT_EQ(forced.accepted, forced.drafted) << spec_mode_name(m) << ": a forced token was rejected";
  }
}

// ------------------------------------------------------- draft and controller

TEST(Speculation, NgramLookup) {
  std::vector<int32_t> out(4);
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 1, 2, 3, 9, 9};
  // The last 3 tokens "2 3 9"? No: the suffix is the context's end.
  const std::vector<int32_t> b = {1, 2, 3};
  // "1 2 3" occurred twice; the most recent earlier one (at 5) is followed by 9 9 1 2.
  ASSERT_EQ(ngram_lookup(a, b, 2, 3, out), 4u);
  EXPECT_EQ(out, (std::vector<int32_t>{9, 9, 1, 2}));
  // Only "3" is shared at n = 1: nmin 2 finds nothing for a fresh suffix.
  const std::vector<int32_t> c = {7, 3};
  EXPECT_EQ(ngram_lookup(a, c, 2, 3, out), 0u);
  EXPECT_EQ(ngram_lookup(a, c, 1, 3, out), 4u);
  EXPECT_EQ(out[0], 9);  // after the most recent "3" (position 7)
  // The continuation may run into the suffix (a repeated token).
  const std::vector<int32_t> d = {5, 5, 5};
  std::vector<int32_t> two(2);
  EXPECT_EQ(ngram_lookup({}, d, 2, 2, two), 1u);
  EXPECT_EQ(two[0], 5);
  EXPECT_EQ(ngram_lookup({}, std::vector<int32_t>{5}, 1, 4, two), 0u);  // nothing before it
}

// --spec auto drafts while it pays and stops when it loses: with a cheap
// extra row and drafts that match, it verifies the whole n-gram proposal;
// when each extra row costs a full forward, or drafts never match, nothing
// but probes spaced exponentially further apart.
TEST(Speculation, AutoDraftsOnlyWhileItPays) {
  SpecOptions o;
  o.mode = SpecMode::Auto;
  o.k = 4;
  auto feed_costs = [](Speculator& s, double per_row) {
    for (int i = 0; i < 20; ++i)
      for (int64_t r = 1; r <= 5; ++r)
        s.record_forward(r, static_cast<uint64_t>(1e6 * (1.0 + per_row * static_cast<double>(r - 1))));
  };
  auto feed_acceptance = [](Speculator& s, bool hit) {
    for (int i = 0; i < 200; ++i) s.record_shadow(DraftSource::Ngram, hit);
  };
  {
    Speculator s(o, false, 0.1);
    feed_costs(s, 0.05);
    feed_acceptance(s, true);
    const SpecPlan p = s.plan(0, 4, 4, false);
    EXPECT_EQ(p.source, DraftSource::Ngram);
    EXPECT_EQ(p.count, 4);
  }
  {
    Speculator s(o, false, 0.1);
    feed_costs(s, 1.0);  // an extra row costs a whole forward
    feed_acceptance(s, true);
    int drafted = 0;
    for (int i = 0; i < 63; ++i) drafted += s.plan(0, 4, 4, false).count;  // (the 64th explores)
    EXPECT_LT(drafted, 63) << "drafting 95%-accepted tokens at double cost should not always pay";
  }
  {
    Speculator s(o, false, 0.1);
    feed_costs(s, 0.05);
    feed_acceptance(s, false);  // drafts never match
    for (int i = 0; i < 63; ++i) EXPECT_EQ(s.plan(0, 4, 4, false).count, 0) << i;
    EXPECT_EQ(s.plan(0, 4, 4, false).count, 1) << "the 64th plan explores";
    // Probes that do not turn drafting on come exponentially less often:
    // after 128 plans, then 256, ... (at most every 1024th).
    for (int gap : {128, 256, 512, 1024, 1024}) {
      for (int i = 1; i < gap; ++i) ASSERT_EQ(s.plan(0, 4, 4, false).count, 0) << gap << " " << i;
      EXPECT_EQ(s.plan(0, 4, 4, false).count, 1) << "a probe after " << gap << " plans";
    }
    // Forced tokens are always verified.
    EXPECT_EQ(s.plan(2, 0, 4, false).count, 0);
  }
  {
    // Fixed modes draft everything their source offers.
    SpecOptions f = o;
    f.mode = SpecMode::Ngram;
    Speculator s(f, true, 0.1);
    EXPECT_EQ(s.plan(1, 2, 4, true).count, 2);
    f.mode = SpecMode::Mtp;
    Speculator m(f, true, 0.1);
    EXPECT_EQ(m.plan(1, 2, 4, true).source, DraftSource::Mtp);
    EXPECT_EQ(m.plan(1, 2, 4, true).count, 3);
  }
}


// Auto's MTP state is dropped on the engine's count of plans that did not
// choose the chain, across answers: answers of 3 plans each (a server's
// short requests) drop it on the 8th such plan, the same as one long answer,
// and back off for 1, 2, 4, ... answers. Several answers dropping on one
// count (concurrent sequences) grow the back-off once.
TEST(Speculation, AutoDropsMtpStateOverShortAnswers) {
  SpecOptions o;
  o.mode = SpecMode::Auto;
  Speculator s(o, true, 0.1);
  const int drop = Speculator::kMtpIdleDrop;
  auto answer = [&](int plans) {  // plans without the chain until dropped; -1: no MTP state
    if (!s.start_mtp()) return -1;
    for (int i = 1; i <= plans; ++i)
      if (s.mtp_plan(false)) {
        s.mtp_dropped();
        return i;
      }
    return 0;
  };
  EXPECT_EQ(answer(3), 0);
  EXPECT_EQ(answer(3), 0);
  EXPECT_EQ(answer(3), drop - 6) << "the third short answer reaches the engine's count";
  EXPECT_EQ(answer(3), -1) << "back-off: one answer without MTP state";
  EXPECT_EQ(answer(3), 0) << "then an answer looks again, with a fresh count";
  EXPECT_EQ(answer(3), 0);
  EXPECT_EQ(answer(3), drop - 6);
  EXPECT_EQ(answer(3), -1);
  EXPECT_EQ(answer(3), -1) << "back-off doubled: two answers";
  EXPECT_EQ(s.stats().mtp_drops, 2u);
  // A plan that chooses the chain resets the count.
  EXPECT_EQ(answer(drop - 1), 0);
  EXPECT_FALSE(s.mtp_plan(true));
  EXPECT_EQ(answer(drop - 1), 0);
  // Concurrent answers dropping on the same count: the back-off grows once (4, not 16).
  EXPECT_FALSE(s.mtp_plan(true));
  for (int i = 0; i < drop - 1; ++i) ASSERT_FALSE(s.mtp_plan(false));
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(s.mtp_plan(false));
    s.mtp_dropped();
  }
  int skipped = 0;
  while (!s.start_mtp()) ++skipped;
  EXPECT_EQ(skipped, 4);
  // Fixed --spec mtp never backs off.
  SpecOptions m = o;
  m.mode = SpecMode::Mtp;
  Speculator f(m, true, 0.1);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(f.start_mtp());
}

// Feeds a speculator decode forwards of 1..5 rows (defined below).
void feed_forwards(Speculator& s, double per_row, double bytes_per_row, double ns_per_byte);

// SpecPlan::mtp_hopeless: the MTP state is dropped at once where even a
// chain whose every draft is accepted cannot pay for its MTP rows. Streamed
// experts at a slow disk (every verified row reads as many bytes again, the
// MTP forward costs 60% of a decode forward): hopeless, and the plan probes
// nothing with MTP. Resident (extra rows 10% each, MTP forward 20%): not
// hopeless, and the chain is chosen. Nothing measured yet: not hopeless (the
// priors alone never drop the state).
TEST(Speculation, AutoDropsMtpStateAtOnceWhereNoChainCanPay) {
  SpecOptions o;
  o.mode = SpecMode::Auto;
  {
    Speculator s(o, true, 0.1);
    const SpecPlan p = s.plan(0, 0, 4, true);
    EXPECT_FALSE(p.mtp_hopeless) << "no forward measured yet";
  }
  {
    Speculator s(o, true, 0.1);
    feed_forwards(s, 0.1, 4e6, 10.0);  // one row: 1 ms compute + 40 ms of reads
    for (int i = 0; i < 10; ++i) s.record_mtp(1, static_cast<uint64_t>(0.6 * 41e6), 1);
    for (int i = 0; i < 20; ++i) {
      const SpecPlan p = s.plan(0, 0, 4, true);
      ASSERT_TRUE(p.mtp_hopeless) << "plan " << i;
      ASSERT_FALSE(p.source == DraftSource::Mtp && p.count > 0) << "plan " << i << ": no MTP probe";
    }
  }
  {
    Speculator s(o, true, 0.1);
    feed_forwards(s, 0.1, 0.0, 0.0);
    for (int i = 0; i < 10; ++i) s.record_mtp(1, static_cast<uint64_t>(0.2e6), 1);
    const SpecPlan p = s.plan(0, 0, 4, true);
    EXPECT_FALSE(p.mtp_hopeless);
    EXPECT_EQ(p.source, DraftSource::Mtp);
    EXPECT_GT(p.count, 0);
  }
}

// auto prices the MTP chain before its first MTP forward: once a decode
// forward is measured, a chain row is priced at the prior (1 / the main
// layers, a lower bound) until an MTP forward is measured, and where even
// that cannot pay the answer drops its MTP state without one (streamed
// experts at a slow disk: the first MTP forward, the prompt's sync, read
// most of the MTP layer's experts and cost the GLM-5.2 slice 5-10% of a
// 128-token answer). Sequences wait for that measured decode forward before
// syncing the prompt: an answer's first decode step runs no MTP forward, and
// a later answer of the same engine drafts with MTP from its first step.
TEST(Speculation, AutoPricesTheMtpChainBeforeItsFirstForward) {
  SpecOptions o;
  o.mode = SpecMode::Auto;
  {  // Streamed: one-row forwards of 1 ms compute + 40 ms of reads; no MTP forward measured.
    Speculator s(o, true, 0.25);
    for (int i = 0; i < 5; ++i) s.record_forward(1, 41000000, 4000000, 40000000);
    const SpecPlan p = s.plan(0, 0, 4, true);
    EXPECT_TRUE(p.mtp_hopeless);
    EXPECT_FALSE(p.source == DraftSource::Mtp && p.count > 0);
  }
  {  // Resident: the same without reads: the chain is chosen (and then measured).
    Speculator s(o, true, 0.25);
    for (int i = 0; i < 5; ++i) s.record_forward(1, 1000000);
    const SpecPlan p = s.plan(0, 0, 4, true);
    EXPECT_FALSE(p.mtp_hopeless);
    EXPECT_EQ(p.source, DraftSource::Mtp);
  }
  auto model = std::shared_ptr<const Model>(load_model(kTiny, LoadOptions{.load_mtp = true}));
  const TextModel tm = open_text_model(kTiny, model->config, "raw", true);
  const std::vector<int32_t> prompt = tm.tok.encode("The", true);
  ASSERT_LE(prompt.size(), 2u);
  auto e = open_engine(model, SpecMode::Auto);
  generate(*e, prompt, greedy(2), &tm.tok, tm.stop_ids);  // one decode step
  EXPECT_EQ(e->stats().spec.mtp_forwards, 0u) << "the first decode step syncs nothing";
  const Answer a = generate(*e, tm.tok.encode("The meaning of the word", true), greedy(24), &tm.tok, tm.stop_ids);
  const EngineStats st = e->stats();
  EXPECT_GT(st.spec.mtp_forwards, 0u);
  EXPECT_GT(st.spec.source[static_cast<size_t>(DraftSource::Mtp)].drafted, 0u) << a.drafted;
}

// A chain row is priced from MTP forwards of whole rows only: a forward of
// sync rows that only wrote the MTP layer's keys (Row::keys_only) costs a
// fraction of one and says nothing about a chain row. 40 rows at 5 ms in
// all: counted as 40 whole rows they price a chain row at 5x a decode
// forward and the chain is hopeless; counted as keys only the prior prices
// it and the chain is chosen. Either way the forward is in the counters.
TEST(Speculation, AutoPricesTheChainByWholeMtpRowsOnly) {
  SpecOptions o;
  o.mode = SpecMode::Auto;
  o.k = 4;
  for (int64_t whole : {int64_t{0}, int64_t{40}}) {
    Speculator s(o, true, 0.1);
    feed_forwards(s, 0.1, 0.0, 0.0);
    const std::array<uint8_t, 4> mtp4{2, 2, 2, 2};  // DraftSource::Mtp
    for (int i = 0; i < 200; ++i) s.record_step(mtp4, 4, 4, i % 10 ? 4 : 3, i % 10 ? 5 : 4);  // ~97% accepted
    s.record_mtp(40, static_cast<uint64_t>(40 * 5e6), whole);
    const SpecPlan p = s.plan(0, 0, 4, true);
    EXPECT_EQ(p.mtp_hopeless, whole > 0) << whole;
    EXPECT_EQ(p.count > 0 && p.source == DraftSource::Mtp, whole == 0) << whole;
    EXPECT_EQ(s.stats().mtp_forwards, 1u);
    EXPECT_EQ(s.stats().mtp_rows, 40u);
  }
}

// An MTP plan pays for the row that keeps the MTP state in sync: a
// one-draft chain whose draft is accepted 65% of the time, a 2-row forward
// at 1.4x a one-row forward and an MTP row at 0.3x, gives 1.65 tokens for
// 1.7 forwards (not chosen; the state is then dropped after kMtpIdleDrop
// plans), where without the sync row it looked like 1.65 for 1.4 and was
// chosen every step. With 95% acceptance and a cheap MTP row (0.05x) the
// chain still pays and is chosen.
TEST(Speculation, AutoMtpPlansPayForTheSyncRow) {
  SpecOptions o;
  o.mode = SpecMode::Auto;
  const auto feed_acceptance = [](Speculator& s, double rate) {
    const std::array<uint8_t, 1> src{static_cast<uint8_t>(DraftSource::Mtp)};
    for (int i = 0; i < 200; ++i) {
      const int acc = (i % 20) < static_cast<int>(rate * 20.0 + 0.5) ? 1 : 0;
      s.record_step(src, 1, 1, acc, 1 + acc);
    }
  };
  {
    Speculator s(o, true, 0.1);
    feed_forwards(s, 0.4, 0.0, 0.0);
    for (int i = 0; i < 10; ++i) s.record_mtp(1, 300000, 1);
    feed_acceptance(s, 0.65);
    const SpecPlan p = s.plan(0, 0, 1, true);
    EXPECT_FALSE(p.mtp_hopeless);
    EXPECT_FALSE(p.source == DraftSource::Mtp && p.count > 0) << "1.65 tokens for 1.7 forwards";
    EXPECT_LT(s.value(0, DraftSource::Mtp, 1), 1.0);
  }
  {
    Speculator s(o, true, 0.1);
    feed_forwards(s, 0.4, 0.0, 0.0);
    for (int i = 0; i < 10; ++i) s.record_mtp(1, 50000, 1);
    feed_acceptance(s, 0.95);
    const SpecPlan p = s.plan(0, 0, 1, true);
    EXPECT_EQ(p.source, DraftSource::Mtp);
    EXPECT_EQ(p.count, 1);
  }
}

// The cost tables resist one slow forward. (a) A 3-row forward measured
// once at 6x its true cost (a page fault, a neighbour's burst) is worth at
// most what 1 and 2 rows predict, so with 95% acceptance the plan still
// verifies 4 drafts and measures wider forwards again; before, that one
// sample priced 3+ rows out for good (never chosen, never re-measured). (b)
// Measured often, a count takes the median of its last samples: one slow
// sample among them moves nothing. (c) The prompt's MTP sync (one MTP
// forward over 30 rows) does not price a one-row chain: before, it was
// scaled down to half its time, 3x a decode forward, and the MTP state was
// dropped at the first plan.
void feed_position_acceptance(Speculator& s, const std::array<double, 4>& acc, int steps);

TEST(Speculation, AutoCostsResistOneSlowForward) {
  SpecOptions o;
  o.mode = SpecMode::Auto;
  o.k = 4;
  {  // (a)
    Speculator s(o, false, 0.1);
    for (int i = 0; i < 20; ++i)
      for (int64_t r = 1; r <= 2; ++r) s.record_forward(r, static_cast<uint64_t>(1e6 * (1.0 + 0.05 * (r - 1))));
    s.record_forward(3, static_cast<uint64_t>(6e6));
    EXPECT_LE(s.forward_ns(3), 1.1e6 + 1.0);
    EXPECT_LE(s.forward_ns(5), 1.2e6 + 1.0);
    feed_position_acceptance(s, {0.95, 0.95, 0.95, 0.95}, 400);
    EXPECT_EQ(s.plan(0, 4, 4, false).count, 4);
    // Three samples make a count trusted: then its own (median) time counts.
    s.record_forward(3, static_cast<uint64_t>(6e6));
    s.record_forward(3, static_cast<uint64_t>(6e6));
    EXPECT_NEAR(s.forward_ns(3), 6e6, 1.0);
  }
  {  // (b)
    Speculator s(o, false, 0.1);
    feed_forwards(s, 0.05, 0, 0);
    s.record_forward(3, static_cast<uint64_t>(40e6));
    EXPECT_NEAR(s.forward_ns(3), 1.1e6, 1.0);
    for (int i = 0; i < 3; ++i) s.record_forward(3, static_cast<uint64_t>(2e6));
    EXPECT_NEAR(s.forward_ns(3), 2e6, 1.0) << "a lasting change is taken within three samples";
  }
  {  // (c)
    Speculator s(o, true, 0.1);
    feed_forwards(s, 0.1, 0.0, 0.0);
    s.record_mtp(30, static_cast<uint64_t>(30 * 0.2e6), 30);
    std::array<uint8_t, 4> mtp;
    mtp.fill(static_cast<uint8_t>(DraftSource::Mtp));
    for (int t = 0; t < 50; ++t) s.record_step(mtp, 4, 4, 4, 5);
    const SpecPlan p = s.plan(0, 0, 4, true);
    EXPECT_FALSE(p.mtp_hopeless);
    EXPECT_EQ(p.source, DraftSource::Mtp);
    EXPECT_EQ(p.count, 4);
    for (int i = 0; i < 10; ++i) s.record_mtp(1, static_cast<uint64_t>(0.2e6), 1);  // measured: it counts
    EXPECT_EQ(s.plan(0, 0, 4, true).count, 4);
    for (int i = 0; i < 10; ++i) s.record_mtp(1, static_cast<uint64_t>(5e6), 1);  // a chain row 5x a forward
    EXPECT_TRUE(s.plan(0, 0, 4, true).mtp_hopeless);
  }
}

// Feeds a speculator steps of 4 n-gram drafts whose i-th draft is accepted,
// given the ones before it were, with probability acc[i] (a fixed stream).
void feed_position_acceptance(Speculator& s, const std::array<double, 4>& acc, int steps) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::array<uint8_t, 4> ng;
  ng.fill(static_cast<uint8_t>(DraftSource::Ngram));
  for (int t = 0; t < steps; ++t) {
    int a = 0;
    while (a < 4 && u(rng) < acc[static_cast<size_t>(a)]) ++a;
    s.record_step(ng, 4, std::min(a + 1, 4), a, a + 1);
  }
}

// Decode forwards of 1..5 rows: compute 1 ms plus `per_row` of it per extra
// row, and `bytes_per_row` expert bytes per row read at `ns_per_byte` (the
// measured time includes the reads, as the engine measures it).
void feed_forwards(Speculator& s, double per_row, double bytes_per_row, double ns_per_byte) {
  for (int i = 0; i < 20; ++i)
    for (int64_t r = 1; r <= 5; ++r) {
      const double bytes = bytes_per_row * static_cast<double>(r);
      const double compute = 1e6 * (1.0 + per_row * static_cast<double>(r - 1));
      s.record_forward(r, static_cast<uint64_t>(compute + bytes * ns_per_byte), static_cast<uint64_t>(bytes),
                       static_cast<uint64_t>(bytes * ns_per_byte));
    }
}

// The controller's arithmetic on synthetic measurements. (a) High
// acceptance and a cheap verify: it drafts. (b) The same compute, acceptance
// ~60%, but every verified row reads as many expert bytes again at a slow
// disk (10 ns/byte): off; the same without the bytes: on; and off when the
// disk slowed down after the wide forwards were last measured. (d) A wider
// forward is measured before its prior is trusted. (c) Per-position
// acceptance that falls off after two drafts: the k chosen is the one with
// the best expected tokens per unit of time, checked against brute force
// over every k from the controller's estimates, and it is the optimum of the
// true rates too (a source-wide acceptance would choose 4).
TEST(Speculation, AutoChoosesKByExpectedRateWithExpertBytes) {
  SpecOptions o;
  o.mode = SpecMode::Auto;
  o.k = 4;
  {  // (a)
    Speculator s(o, false, 0.1);
    feed_forwards(s, 0.05, 0, 0);
    feed_position_acceptance(s, {0.95, 0.95, 0.95, 0.95}, 400);
    EXPECT_GT(s.plan(0, 4, 4, false).count, 0);
  }
  for (bool streaming : {false, true}) {  // (b)
    Speculator s(o, false, 0.1);
    feed_forwards(s, 0.05, streaming ? 1e6 : 0.0, 10.0);  // 1 MB per row at 100 MB/s: 10 ms a row
    feed_position_acceptance(s, {0.6, 0.6, 0.6, 0.6}, 400);
    EXPECT_NEAR(s.forward_bytes(3), streaming ? 3e6 : 0.0, 1.0);
    EXPECT_GT(s.forward_ns(2) / s.forward_ns(1), streaming ? 1.8 : 1.0);
    const int k = s.plan(0, 4, 4, false).count;
    if (streaming)
      EXPECT_EQ(k, 0) << "each verified row reads a forward's experts again: verifying loses";
    else
      EXPECT_GT(k, 0) << "resident, a 5% row for 60% acceptance pays";
  }
  {  // (b'): bytes measured at 1 and 2 rows only; 3..5 rows extrapolated from them, not assumed free
    Speculator s(o, false, 0.1);
    for (int i = 0; i < 20; ++i)
      for (int64_t r = 1; r <= 2; ++r) {
        const double bytes = 1e6 * static_cast<double>(r);
        s.record_forward(r, static_cast<uint64_t>(1e6 + bytes * 10.0), static_cast<uint64_t>(bytes),
                         static_cast<uint64_t>(bytes * 10.0));
      }
    EXPECT_NEAR(s.forward_bytes(5), 5e6, 1.0);
    EXPECT_NEAR(s.forward_ns(5), 1e6 + 5e7, 1e3);
  }
  {
    // (b''): the wide forwards were measured while reads were fast (1 ns/byte); since then the disk
    // slowed to 10 ns/byte and only one-row forwards ran. Their stale times alone would make a
    // 5-row verify look no dearer than a one-row forward now; the bytes repriced at the measured
    // rate keep it ~4.6x dearer, and 60% acceptance does not pay for that.
    Speculator s(o, false, 0.1);
    feed_forwards(s, 0.05, 1e6, 1.0);
    for (int i = 0; i < 300; ++i) s.record_forward(1, static_cast<uint64_t>(1e6 + 1e7), 1000000, 10000000);
    feed_position_acceptance(s, {0.6, 0.6, 0.6, 0.6}, 400);
    EXPECT_NEAR(s.forward_ns(5) / s.forward_ns(1), (1.2e6 + 5e7) / 11e6, 0.1);
    EXPECT_EQ(s.plan(0, 4, 4, false).count, 0);
  }
  {
    // (d) Streaming, only one-row forwards measured: the wider forward's bytes are not assumed
    // (the prior would say a row's experts again) -- the first plans verify one draft to measure
    // it; once measured (rows share most experts here), the rate decides: 4 drafts.
    Speculator s(o, false, 0.1);
    for (int i = 0; i < 20; ++i) s.record_forward(1, static_cast<uint64_t>(11e6), 1000000, 10000000);
    feed_position_acceptance(s, {0.9, 0.9, 0.9, 0.9}, 400);
    EXPECT_EQ(s.plan(0, 4, 4, false).count, 1);
    s.record_forward(2, static_cast<uint64_t>(12e6), 1100000, 11000000);
    EXPECT_NEAR(s.forward_bytes(5), 1.4e6, 1.0);
    EXPECT_EQ(s.plan(0, 4, 4, false).count, 4);
  }
  {  // (c)
    const std::array<double, 4> truth = {0.95, 0.9, 0.1, 0.2};
    Speculator s(o, false, 0.1);
    feed_forwards(s, 0.1, 0, 0);
    feed_position_acceptance(s, truth, 3000);
    for (int i = 0; i < 4; ++i)
      EXPECT_NEAR(s.acceptance(DraftSource::Ngram, i), truth[static_cast<size_t>(i)], 0.15) << "position " << i;
    // Brute force over k from the controller's estimates.
    int best = 0;
    double best_rate = 0;
    for (int k = 0; k <= 4; ++k) {
      double e = 1, p = 1;
      for (int i = 0; i < k; ++i) e += (p *= s.acceptance(DraftSource::Ngram, i));
      const double rate = e / (s.forward_ns(1 + k) / s.forward_ns(1));
      EXPECT_NEAR(s.value(0, DraftSource::Ngram, k), rate, 1e-9) << k;
      if (rate > best_rate) best_rate = rate, best = k;
    }
    // And from the true rates: 1 ms + 10% a row.
    int true_best = 0;
    double true_rate = 0;
    for (int k = 0; k <= 4; ++k) {
      double e = 1, p = 1;
      for (int i = 0; i < k; ++i) e += (p *= truth[static_cast<size_t>(i)]);
      const double rate = e / (1.0 + 0.1 * k);
      if (rate > true_rate) true_rate = rate, true_best = k;
    }
    EXPECT_EQ(true_best, 2);
    EXPECT_EQ(best, true_best);
    EXPECT_EQ(s.plan(0, 4, 4, false).count, best);
    // --spec-k is the most: with k 1 it chooses 1.
    SpecOptions one = o;
    one.k = 1;
    Speculator s1(one, false, 0.1);
    feed_forwards(s1, 0.1, 0, 0);
    feed_position_acceptance(s1, truth, 3000);
    EXPECT_EQ(s1.plan(0, 4, s1.options().k, false).count, 1);
    // The chosen k is reported.
    const SpecStats st = s.stats();
    EXPECT_EQ(st.chosen[static_cast<size_t>(best)], 1u);
  }
}



}  // namespace
}  // namespace strata::speculation_test
