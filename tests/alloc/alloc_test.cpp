// After warm-up, a decode step allocates nothing (STYLE.md: hot paths never
// allocate per token). This test binary (strata_alloc_test, apart from
// strata_tests so its replacement of the global operator new changes nothing
// for the other tests or the sanitizers' checks) counts every operator new
// while a test asks it to; the tests run decode steps through the library's
// generation step (engine forward + sampling + stop checks +
// detokenization) with the counter on: a resident model on 1 and 2 threads,
// the bundled text model with stop strings, and a container whose experts
// miss and are read ahead every step; and with speculative decoding (n-gram
// and MTP drafts, several rows per step, rollback, the MTP layer's state).
#include <gtest/gtest.h>

#include <execinfo.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "runtime/generation.h"
#include "runtime/speculation.h"
#include "runtime/text_model.h"
#include "../unit/test_util.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<uint64_t> g_allocations{0};
// Where the first counted allocation came from (printed when a test fails).
void* g_first_trace[48];
int g_first_depth = 0;
// backtrace() loads its unwinder (which allocates) on first use: once here.
const int g_warm_backtrace = [] {
  void* f[2];
  return backtrace(f, 2);
}();

void note(size_t) {
  if (!g_counting.load(std::memory_order_relaxed)) return;
  if (g_allocations.fetch_add(1, std::memory_order_relaxed) == 0) g_first_depth = backtrace(g_first_trace, 48);
}
void print_first_allocation() {
  if (g_first_depth <= 0) return;
  std::fprintf(stderr, "the first counted allocation came from:\n");
  backtrace_symbols_fd(g_first_trace, g_first_depth, 2);
}

void* counted(size_t n) {
  note(n);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* counted_aligned(size_t n, std::align_val_t a) {
  note(n);
  const size_t al = static_cast<size_t>(a);
  if (void* p = std::aligned_alloc(al, (n + al - 1) / al * al)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(size_t n) { return counted(n); }
void* operator new[](size_t n) { return counted(n); }
void* operator new(size_t n, std::align_val_t a) { return counted_aligned(n, a); }
void* operator new[](size_t n, std::align_val_t a) { return counted_aligned(n, a); }
// The nothrow forms too (std::stable_sort's temporary buffer uses them):
// left to the runtime, their memory would come back through the delete above.
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  try { return counted(n); } catch (...) { return nullptr; }
}
void* operator new[](size_t n, const std::nothrow_t&) noexcept {
  try { return counted(n); } catch (...) { return nullptr; }
}
void* operator new(size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  try { return counted_aligned(n, a); } catch (...) { return nullptr; }
}
void* operator new[](size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  try { return counted_aligned(n, a); } catch (...) { return nullptr; }
}
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { std::free(p); }

namespace strata {
namespace {

const std::string kSrc = STRATA_SOURCE_DIR;

// Counts the allocations of `steps` decode steps of `seq` on `e`, after
// `warmup` steps; every step feeds one token and samples the next.
uint64_t allocations_per_decode(Engine& e, Sequence& seq, int warmup, int steps) {
  std::vector<Row> rows;
  rows.reserve(1024);
  std::vector<float> logits(static_cast<size_t>(e.config().vocab_size));
  StepOutput out;
  out.text.reserve(256);
  auto step = [&] {
    rows.clear();
    const bool prompt = seq.prefilling();
    const int64_t k = seq.add_rows(rows, 512);
    if (k > 0) e.forward(rows, seq.wants_logits() ? logits.data() : nullptr, nullptr, prompt ? k : 0);
    return seq.advance(logits.data(), out);
  };
  while (seq.prefilling()) EXPECT_TRUE(step());
  for (int i = 0; i < warmup; ++i) EXPECT_TRUE(step()) << "ended during warm-up: " << stop_reason_name(seq.reason());
  g_allocations = 0;
  g_first_depth = 0;
  g_counting = true;
  int done = 0;
  for (; done < steps; ++done)
    if (!step()) break;
  g_counting = false;
  EXPECT_EQ(done, steps) << "the answer ended early: " << stop_reason_name(seq.reason());
  return g_allocations.load();
}

GenerationParams long_answer(double temperature) {
  GenerationParams p;
  p.sampling.temperature = temperature;
  p.sampling.top_p = 0.9;
  p.sampling.repetition_penalty = 1.1;
  p.sampling.seed = 3;
  p.ignore_eos = true;  // the answer must not end before the counted steps
  p.max_tokens = 1000;
  return p;
}

// Both key cache types (--kv-type f16: the halves read in place by the
// kernels for halves, which convert, where they do, into a fixed-size stack
// buffer), MLA and GQA.
TEST(Allocation, DecodeStepAllocatesNothingResident) {
  for (const char* fixture : {"glm5-tiny-bf16", "qwen3moe-tiny-bf16"})
  for (const KvType kv : {KvType::F32, KvType::F16})
    for (int threads : {1, 2}) {
      const std::string dir = kSrc + "/tests/fixtures/" + fixture;
      EngineOptions o;
      o.model = dir;
      o.threads = threads;
      o.verbose = false;
      o.forward.kv = kv;
      Engine e(o);
      const std::vector<int32_t> stop = {253, 254, 255};
      Sequence seq(e.config(), 256, nullptr, stop, nullptr, kv);
      seq.begin(std::vector<int32_t>{1, 5, 9, 2, 7, 3, 8, 4, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}, long_answer(0.8));
      const uint64_t n = allocations_per_decode(e, seq, 40, 40);
      std::printf("  resident %s, %s keys, %d thread(s): %llu allocations in 40 decode steps\n", fixture,
                  kv_type_name(kv), threads, static_cast<unsigned long long>(n));
      EXPECT_EQ(n, 0u) << kv_type_name(kv) << ", " << threads << " thread(s)";
      if (n) print_first_allocation();
    }
}

// What a speculative step's size depends on (how many drafts, which experts
// its rows share) varies with timing under --spec auto; the forward's
// scratch must not. After one forward of 8 rows, forwards of 1..8 rows
// allocate nothing, including rows that all pick the same experts (the same
// token repeated: the most rows one expert can get). Before attention's
// scores and the indexer's buffers were sized for the most keys a row can
// attend (not this step's count, nor by the path a step takes), this
// counted 16 allocations.
TEST(Allocation, ForwardAfterALargerOneAllocatesNothing) {
  const std::string dir = kSrc + "/tests/fixtures/glm5-tiny-bf16";
  EngineOptions o;
  o.model = dir;
  o.threads = 2;
  o.verbose = false;
  Engine e(o);
  Session s(e.config(), 512, false);
  std::vector<Row> rows;
  rows.reserve(64);
  std::vector<float> logits(8 * static_cast<size_t>(e.config().vocab_size));
  int32_t pos = 0;
  auto forward = [&](int n, int32_t token, int32_t stride) {
    rows.clear();
    for (int i = 0; i < n; ++i) rows.push_back({&s, pos + i, (token + i * stride) % 200 + 1, true});
    e.forward(rows, logits.data());
    pos += n;
    s.n_past = pos;
  };
  forward(8, 1, 7);  // the largest forward: distinct tokens
  g_allocations = 0;
  g_first_depth = 0;
  g_counting = true;
  for (int round = 0; round < 6; ++round)
    for (int n = 1; n <= 8; ++n) forward(n, 3 + 11 * round + n, round % 2 ? 0 : 5);  // stride 0: one token repeated
  g_counting = false;
  const uint64_t n = g_allocations.load();
  std::printf("  %llu allocations in 48 forwards of 1..8 rows after one of 8\n", static_cast<unsigned long long>(n));
  EXPECT_EQ(n, 0u);
  if (n) print_first_allocation();
}

TEST(Allocation, DecodeStepWithTextAllocatesNothing) {
  // The bundled trained model: detokenization and stop strings on the way.
  const std::string dir = kSrc + "/models/glm5-strata-tiny";
  EngineOptions o;
  o.model = dir;
  o.threads = 2;
  o.verbose = false;
  Engine e(o);
  const TextModel tm = open_text_model(dir, e.config(), "raw", true);
  Sequence seq(e.config(), 512, &tm.tok, tm.stop_ids);
  GenerationParams p = long_answer(0.9);
  p.stop = {"a stop string that never appears", "zzzzqqq"};
  seq.begin(tm.tok.encode("The meaning of the word", true), p);
  const uint64_t n = allocations_per_decode(e, seq, 60, 60);
  std::printf("  text model: %llu allocations in 60 decode steps\n", static_cast<unsigned long long>(n));
  EXPECT_EQ(n, 0u);
  if (n) print_first_allocation();
}

TEST(Allocation, DecodeStepAllocatesNothingFromAContainer) {
  // Experts streamed through a small RAM cache with read-ahead: misses and
  // prefetches every step.
  test_util::TempDir tmp;
  const std::string dir = tmp.file("c");
  const std::string cmd = std::string(STRATA_BINARY) + " convert --in " + kSrc + "/tests/fixtures/glm5-tiny-bf16 --out " +
                          dir + " -q >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  EngineOptions o;
  o.model = dir;
  o.threads = 2;
  o.verbose = false;
  o.experts.ram_bytes = 1;  // one cache slot per layer
  o.experts.autopin = false;
  Engine e(o);
  const std::vector<int32_t> stop = {253, 254, 255};
  Sequence seq(e.config(), 256, nullptr, stop);
  seq.begin(std::vector<int32_t>{3, 1, 4, 1, 5, 9, 2, 6}, long_answer(0.8));
  const uint64_t n = allocations_per_decode(e, seq, 40, 40);
  const ExpertStoreStats st = e.experts().stats();
  std::printf("  container, 1 slot per layer: %llu allocations in 40 decode steps (%llu misses, %llu read ahead)\n",
              static_cast<unsigned long long>(n), static_cast<unsigned long long>(st.misses),
              static_cast<unsigned long long>(st.prefetched));
  EXPECT_GT(st.misses, 0u);
  EXPECT_EQ(n, 0u);
  if (n) print_first_allocation();
}

TEST(Allocation, DecodeStepWithSpeculationAllocatesNothing) {
  // The bundled trained model (it has an MTP layer) with each drafting mode:
  // a step runs the MTP layer's rounds, feeds the pending token and the
  // drafts, verifies them with the sampler's acceptance rule and rolls the
  // rejected positions back -- the steps of run_turn, with the buffers sized
  // for the most rows a step can hold.
  const std::string dir = kSrc + "/models/glm5-strata-tiny";
  for (SpecMode mode : {SpecMode::Ngram, SpecMode::Mtp, SpecMode::Auto}) {
    EngineOptions o;
    o.model = dir;
    o.threads = 2;
    o.verbose = false;
    o.spec.mode = mode;
    o.spec.k = 4;
    Engine e(o);
    const TextModel tm = open_text_model(dir, e.config(), "raw", true);
    Sequence seq(e.config(), 512, &tm.tok, tm.stop_ids, &e.speculator());
    GenerationParams p = long_answer(0.2);  // low: the text repeats, so n-gram drafts
    p.stop = {"a stop string that never appears"};
    seq.begin(tm.tok.encode("The meaning of the word is the meaning of the word", true), p);
    const size_t V = static_cast<size_t>(e.config().vocab_size), D = static_cast<size_t>(e.config().hidden_size);
    const size_t most = kSpecMaxDraft + 1;
    std::vector<Row> rows;
    rows.reserve(1024);
    std::vector<float> logits(most * V), hidden(1024 * D);
    MtpScratch mtp;
    mtp.rows.reserve(64);
    mtp.hidden.reserve(64 * D);
    mtp.owners.reserve(8);
    mtp.logits.resize(most * V);
    mtp.hidden_out.resize(64 * D);
    Sequence* const one[] = {&seq};
    StepOutput out;
    out.text.reserve(256);
    e.speculator().set_batch(1);
    auto step = [&] {
      if (seq.mtp_on()) run_mtp_rounds(e, one, mtp);
      rows.clear();
      const bool prompt = seq.prefilling();
      const int64_t k = seq.add_rows(rows, 512);
      if (k > 0)
        e.forward(rows, seq.wants_logits() ? logits.data() : nullptr, seq.wants_hidden() ? hidden.data() : nullptr,
                  prompt ? k : 0);
      return seq.advance(logits.data(), out, seq.wants_hidden() ? hidden.data() : nullptr);
    };
    while (seq.prefilling()) ASSERT_TRUE(step());
    for (int i = 0; i < 70; ++i) ASSERT_TRUE(step()) << "ended during warm-up";
    const int64_t drafted0 = seq.drafted();
    g_allocations = 0;
    g_first_depth = 0;
    g_counting = true;
    int done = 0;
    for (; done < 30; ++done)
      if (!step()) break;
    g_counting = false;
    const uint64_t n = g_allocations.load();
    EXPECT_EQ(done, 30) << "the answer ended early: " << stop_reason_name(seq.reason());
    std::printf("  --spec %s: %llu allocations in 30 decode steps (%lld drafted, %lld accepted in all)\n",
                spec_mode_name(mode), static_cast<unsigned long long>(n), static_cast<long long>(seq.drafted()),
                static_cast<long long>(seq.accepted()));
    // (auto drafts only while its measured costs say it pays: timing, so not asserted)
    if (mode != SpecMode::Auto) {
      EXPECT_GT(seq.drafted(), drafted0) << spec_mode_name(mode) << ": the counted steps verified no draft";
    }
    EXPECT_EQ(n, 0u) << spec_mode_name(mode);
    if (n) print_first_allocation();
  }
}

}  // namespace
}  // namespace strata
