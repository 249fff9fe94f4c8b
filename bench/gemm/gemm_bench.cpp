// The int8 dot-product peak of this CPU and the int8 GEMM's fraction of it
// on prefill shapes (docs/kernels.md). JSON lines on stdout:
//
//   build/strata_gemm_bench [--reps N] [--threads T] [--shapes tiny|slice|all] [--name SHAPE] [--m ROWS] [--peak-only]
//   build/strata_gemm_bench --attention [--reps N]
//   build/strata_gemm_bench --gemv [--reps N]
//   build/strata_gemm_bench --gemv-layout [--reps N]
//   (--m ROWS: every shape with that many activation rows instead of its own)
//
// {"bench":"vnni_peak",...}: vpdpbusd (512-bit) on independent accumulator
//   chains, register operands only, per thread count (1 and 2 threads run
//   at once), per CPU-second of each thread (summed) and per wall second;
//   gmacs = 64 u8 x s8 multiply-adds per instruction, gops = 2 x gmacs (a
//   multiply and an add each), the convention of peak tables.
// {"bench":"gemm",...}: matmul() of an int8 (group 32) matrix [n, k] times
//   m activation rows on --threads threads (default 1), the packed prefill
//   kernel ("new") and the per-row-tile multi-row kernel ("old",
//   ComputeOptions::packed = false) alternating in one run; medians over
//   reps of wall and process-CPU seconds, their ratios, GOPS per CPU-second
//   as a fraction of the 1-thread peak per CPU-second, and whether the two
//   outputs are equal bit for bit.
// {"bench":"attention",...} (--attention): the absorbed MLA's work for one
//   query row on the GLM-5.2 slice's shape (64 heads, kv_lora_rank 512)
//   over K keys of a cache (every key, or K picked from 4096 as DSA does),
//   one thread, the best kernel path: the per-head loops the engine ran
//   before ("old": a dot_f32 per head and key, then per head
//   out += p * latent over the keys) against the key-set kernels ("new":
//   gemm_f32_rows, every head against each key at once, and wsum_f32);
//   medians of CPU time, GFMA per CPU-second, and whether the outputs are
//   equal bit for bit.
// {"bench":"attention_long_sums",...} (--attention): the weighted sums
//   (wsum_f32 / wsum_f16) of one query row at long context: 64 heads over
//   2048 keys picked from 16384 (DSA at 16k), for 4 layers' caches in turn
//   (f32 128 MiB, f16 64 MiB: from DRAM, as in the engine), one thread;
//   median CPU time per layer, GFMA per CPU-second, and a checksum of the
//   outputs (the same floats give the same checksum in any build).
// {"bench":"indexer_scores",...} (--attention): the DSA indexer's scores for
//   one query row on the slice's shape (32 heads of 128 dims) over 4096 keys
//   of a cache and over 32768 keys of each of three layers' caches in turn
//   (48 MiB, from DRAM as at 32k context; times per layer), in blocks of 256
//   keys as the engine calls it: a dot_f32 per
//   head and key ("old") against gemm_f32_rows ("new", keys in rows, each
//   block of 16 transposed) and gemm_f32_lanes ("lanes": the keys stored in
//   lanes, as the engine's indexer key cache holds them); one thread, medians
//   of CPU time, GFMA per CPU-second, and whether the three are equal bit for
//   bit.
// {"bench":"gemv",...} (--gemv): decode's matmul (one activation row) of
//   int8 and int4 (group 32) weights from DRAM: 16 expert-shaped matrices
//   [2048, 6144] (int8 226 MB, int4 126 MB with their f32 scales: several
//   times L3) taken in turn, on 1 and 2 threads, alternating with a plain
//   AVX-512 read of a buffer as large on the same threads; medians of the
//   wall-clock GB/s of each (weights + scales for the GEMV) and the GEMV's
//   fraction of the read (issue: int4 decode "at the bus"); also the read
//   as two streams in turn (read_two_streams_gb_s), what the int4 GEMV's
//   two weight rows at once are measured against.
// {"bench":"gemv_layout",...} (--gemv-layout): would a weight layout with
//   less arithmetic per byte bring the int4 GEMV closer to the bus? The
//   engine's int4 GEMV (row-major rows, bf16 group-32 scales) against a
//   prototype on 16 weight rows interleaved dword by dword ("rows16": lane r
//   of every vector is row r, so each block's integer sum lands in a lane
//   with no reduction, half the vector operations per byte), the same
//   matrices repacked, on huge pages, 1 and 2 threads, cache-resident (one
//   matrix) and from DRAM (24 matrices, 151 MB), alternating; outputs
//   compared bit for bit (the prototype keeps dot16's order: 16 float
//   accumulators, lane = row, one per block mod 16, folded as tree16).
//   Not an engine path: docs/kernels.md records why.
// {"bench":"load",...}: /proc/loadavg before and after (the machine may be
//   shared: prefer the ratios).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <ctime>
#include <vector>

#include "core/aligned.h"
#include "core/numeric.h"
#include "core/quant.h"
#include "core/thread_pool.h"
#include "core/weight.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/qgemm.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;
double secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// CPU seconds of this thread / this process: rates per CPU-second stay
// meaningful when other jobs share the cores (the wall clock does not).
double cpu_now(clockid_t id) {
  timespec t{};
  clock_gettime(id, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string s;
  std::getline(f, s);
  return s;
}

#if defined(__x86_64__)
// C independent chains of vpdpbusd, `iters` rounds; returns a sum so nothing is dead.
template <int C>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) int64_t vnni_chains(int64_t iters) {
  __m512i acc[C];
  for (int j = 0; j < C; ++j) acc[j] = _mm512_set1_epi32(j);
  __m512i u = _mm512_set1_epi8(1), s = _mm512_set1_epi8(3);
  asm volatile("" : "+v"(u), "+v"(s));
  for (int64_t it = 0; it < iters; ++it) {
    for (int j = 0; j < C; ++j) acc[j] = _mm512_dpbusd_epi32(acc[j], u, s);
    for (int j = 0; j < C; ++j) asm volatile("" : "+v"(acc[j]));
  }
  __m512i t = acc[0];
  for (int j = 1; j < C; ++j) t = _mm512_add_epi32(t, acc[j]);
  alignas(64) int32_t out[16];
  _mm512_store_si512(out, t);
  int64_t r = 0;
  for (int32_t v : out) r += v;
  return r;
}

// `threads` threads running C chains at once: instructions per second of
// wall clock (all threads together) and per CPU-second of each thread,
// summed over the threads (what the cores do while they run this).
template <int C>
void vnni_rate(int threads, double* wall, double* cpu) {
  const int64_t rounds = (int64_t{80} << 20) / C;  // 80 Mi instructions per thread: ~40 ms
  std::vector<std::thread> ts;
  std::vector<int64_t> sink(static_cast<size_t>(threads));
  std::vector<double> tcpu(static_cast<size_t>(threads));
  vnni_chains<C>(rounds / 16);  // warm the unit up
  const auto t0 = Clock::now();
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      const double c0 = cpu_now(CLOCK_THREAD_CPUTIME_ID);
      sink[static_cast<size_t>(t)] = vnni_chains<C>(rounds);
      tcpu[static_cast<size_t>(t)] = cpu_now(CLOCK_THREAD_CPUTIME_ID) - c0;
    });
  for (auto& t : ts) t.join();
  const double s = secs(t0, Clock::now());
  if (sink[0] == 42) std::printf("#\n");
  *wall = static_cast<double>(rounds) * C * threads / s;
  *cpu = 0;
  for (double c : tcpu) *cpu += static_cast<double>(rounds) * C / c;
}

// Best of 3 per chain count; *per_core: the 1-thread peak per CPU-second (GOPS).
void peak(double* per_core) {
  for (int threads : {1, 2}) {
    double best = 0, best_wall = 0;
    int best_c = 0;
    for (int c : {4, 8, 12, 16, 24}) {
      double r = 0, rw = 0;
      for (int rep = 0; rep < 3; ++rep) {
        double w = 0, v = 0;
        if (c == 4) vnni_rate<4>(threads, &w, &v);
        if (c == 8) vnni_rate<8>(threads, &w, &v);
        if (c == 12) vnni_rate<12>(threads, &w, &v);
        if (c == 16) vnni_rate<16>(threads, &w, &v);
        if (c == 24) vnni_rate<24>(threads, &w, &v);
        r = std::max(r, v);
        rw = std::max(rw, w);
      }
      std::printf(
          "{\"bench\":\"vnni_peak_chains\",\"threads\":%d,\"chains\":%d,\"instr_per_cpu_ns\":%.3f,\"gops\":%.1f,"
          "\"gops_wall\":%.1f}\n",
          threads, c, r / 1e9, r * 128 / 1e9, rw * 128 / 1e9);
      if (r > best) best = r, best_c = c;
      best_wall = std::max(best_wall, rw);
    }
    std::printf(
        "{\"bench\":\"vnni_peak\",\"threads\":%d,\"chains\":%d,\"instr_per_cpu_ns\":%.3f,\"gmacs\":%.1f,"
        "\"gops\":%.1f,\"gops_per_core\":%.1f,\"gops_wall\":%.1f}\n",
        threads, best_c, best / 1e9, best * 64 / 1e9, best * 128 / 1e9, best * 128 / 1e9 / threads,
        best_wall * 128 / 1e9);
    if (threads == 1) *per_core = best * 128 / 1e9;
  }
  std::fflush(stdout);
}
#endif

struct Shape {
  const char* model;
  const char* name;
  int64_t n, k, m;
};

// Prefill 512 tokens. Dense matrices see all 512 rows; a routed expert the
// batch-union of the tokens routed to it, on average 512 x top-k / experts.
const Shape kShapes[] = {
    // GLM-5.2 slice (tools/make_model.py --preset glm52-slice): hidden 6144,
    // q_lora 2048, kv_lora 512 + rope 64, 64 heads x 256, dense MLP 12288,
    // experts 2048, 32 experts top-8 (128 rows each).
    {"slice", "q_a", 2048, 6144, 512},
    {"slice", "q_b", 16384, 2048, 512},
    {"slice", "kv_a", 576, 6144, 512},
    {"slice", "o_proj", 6144, 16384, 512},
    {"slice", "dense_gate", 12288, 6144, 512},
    {"slice", "dense_down", 6144, 12288, 512},
    {"slice", "expert_gate", 2048, 6144, 128},
    {"slice", "expert_down", 6144, 2048, 128},
    // models/glm5-strata-tiny: hidden 256, q_lora 128, kv_lora 64 + rope 16,
    // 4 heads x 48 (q), o from 4 x 32, dense MLP 512, experts 128, 16
    // experts top-4 (128 rows each).
    {"tiny", "q_a", 128, 256, 512},
    {"tiny", "q_b", 192, 128, 512},
    {"tiny", "kv_a", 80, 256, 512},
    {"tiny", "o_proj", 256, 128, 512},
    {"tiny", "dense_gate", 512, 256, 512},
    {"tiny", "dense_down", 256, 512, 512},
    {"tiny", "expert_gate", 128, 256, 128},
    {"tiny", "expert_down", 256, 128, 128},
};

Weight make_q(QuantBits bits, int64_t n, int64_t k, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 0.02f);
  Weight w;
  w.format = bits == QuantBits::Int8 ? WeightFormat::INT8 : WeightFormat::INT4;
  w.rows = n;
  w.cols = k;
  w.group = 32;
  const int64_t rb = quant_row_bytes(bits, k), ng = quant_groups(k, 32);
  w.data.resize(static_cast<size_t>(n * rb));
  w.scales.resize(static_cast<size_t>(n * ng));
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t r = 0; r < n; ++r) {
    for (auto& v : row) v = nd(rng);
    quantize_row(bits, 32, row.data(), k, w.data.data() + r * rb, w.scales.data() + r * ng);
  }
  return w;
}

// --attention (see the top): scores and weighted sums of one query row.
void attention_bench(int reps) {
  const KernelTable& kt = kernel_table(best_kernel_path());
  const int64_t H = 64, kvl = 512, N = 4096;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
  AlignedFloats lat(static_cast<size_t>(N * kvl)), q(static_cast<size_t>(H * kvl));
  for (auto& v : lat) v = ud(rng);
  for (auto& v : q) v = ud(rng);
  for (int64_t K : {512, 2048}) {
    for (bool picked : {false, true}) {
      std::vector<int32_t> idx(static_cast<size_t>(N));
      for (int64_t i = 0; i < N; ++i) idx[static_cast<size_t>(i)] = static_cast<int32_t>(i);
      std::shuffle(idx.begin(), idx.end(), rng);
      idx.resize(static_cast<size_t>(K));
      std::sort(idx.begin(), idx.end());
      const FRows v{lat.data(), picked ? idx.data() : nullptr, kvl};
      std::vector<float> so(static_cast<size_t>(H * K)), sn(so.size());
      AlignedFloats yo(static_cast<size_t>(H * kvl)), yn(yo.size());
      std::vector<float> p(so.size());
      for (auto& x : p) x = ud(rng) / static_cast<float>(K);
      const auto old_scores = [&] {
        for (int64_t h = 0; h < H; ++h)
          for (int64_t j = 0; j < K; ++j) so[static_cast<size_t>(h * K + j)] = kt.dot_f32(q.data() + h * kvl, v.row(j), kvl);
      };
      const auto old_sums = [&] {
        for (int64_t h = 0; h < H; ++h) {
          float* out = yo.data() + h * kvl;
          std::fill(out, out + kvl, 0.0f);
          for (int64_t j = 0; j < K; ++j) {
            const float* vr = v.row(j);
            const float pj = p[static_cast<size_t>(h * K + j)];
            for (int64_t i = 0; i < kvl; ++i) out[i] = std::fma(pj, vr[i], out[i]);
          }
        }
      };
      const auto new_scores = [&] { kt.gemm_f32_rows(v, K, kvl, q.data(), H, sn.data(), K); };
      const auto new_sums = [&] { kt.wsum_f32(p.data(), K, H, v, K, 0, kvl, yn.data(), kvl, false); };
      std::vector<double> t[4];
      const std::function<void()> fns[4] = {old_scores, new_scores, old_sums, new_sums};
      for (int rep = 0; rep < reps + 1; ++rep)
        for (int f = 0; f < 4; ++f) {
          const double c0 = cpu_now(CLOCK_THREAD_CPUTIME_ID);
          fns[f]();
          if (rep > 0) t[f].push_back(cpu_now(CLOCK_THREAD_CPUTIME_ID) - c0);
        }
      auto median = [](std::vector<double> x) {
        std::sort(x.begin(), x.end());
        return x[x.size() / 2];
      };
      const double fma = static_cast<double>(H) * static_cast<double>(K) * static_cast<double>(kvl) / 1e9;
      const bool same = so == sn && std::memcmp(yo.data(), yn.data(), yo.size() * sizeof(float)) == 0;
      std::printf(
          "{\"bench\":\"attention\",\"path\":\"%s\",\"heads\":%lld,\"kv_lora_rank\":%lld,\"keys\":%lld,\"picked\":%s,"
          "\"scores_old_ms\":%.3f,\"scores_new_ms\":%.3f,\"sums_old_ms\":%.3f,\"sums_new_ms\":%.3f,"
          "\"scores_gfma_cpu\":[%.1f,%.1f],\"sums_gfma_cpu\":[%.1f,%.1f],\"identical\":%s}\n",
          kernel_path_name(kt.path), static_cast<long long>(H), static_cast<long long>(kvl),
          static_cast<long long>(K), picked ? "true" : "false", median(t[0]) * 1e3, median(t[1]) * 1e3,
          median(t[2]) * 1e3, median(t[3]) * 1e3, fma / median(t[0]), fma / median(t[1]), fma / median(t[2]),
          fma / median(t[3]), same ? "true" : "false");
      std::fflush(stdout);
    }
  }
}

// --attention, the weighted sums at long context (see the top).
void long_sums_bench(int reps) {
  const KernelTable& kt = kernel_table(best_kernel_path());
  const int64_t H = 64, kvl = 512, N = 16384, K = 2048, layers = 4;
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
  for (bool halves : {false, true}) {
    std::vector<AlignedFloats> f(static_cast<size_t>(halves ? 0 : layers));
    std::vector<std::vector<uint16_t>> h(static_cast<size_t>(halves ? layers : 0));
    std::vector<std::vector<int32_t>> idx(static_cast<size_t>(layers));
    std::vector<std::vector<float>> p(static_cast<size_t>(layers));
    for (int64_t l = 0; l < layers; ++l) {
      if (halves) {
        auto& hl = h[static_cast<size_t>(l)];
        hl.resize(static_cast<size_t>(N * kvl));
        for (auto& e : hl) e = f32_to_f16_sat(ud(rng));
      } else {
        auto& fl = f[static_cast<size_t>(l)];
        fl.resize(static_cast<size_t>(N * kvl));
        for (auto& e : fl) e = ud(rng);
      }
      auto& il = idx[static_cast<size_t>(l)];
      il.resize(static_cast<size_t>(N));
      for (int64_t i = 0; i < N; ++i) il[static_cast<size_t>(i)] = static_cast<int32_t>(i);
      std::shuffle(il.begin(), il.end(), rng);
      il.resize(static_cast<size_t>(K));
      std::sort(il.begin(), il.end());
      auto& pl = p[static_cast<size_t>(l)];
      pl.resize(static_cast<size_t>(H * K));
      for (auto& x : pl) x = ud(rng) / static_cast<float>(K);
    }
    AlignedFloats y(static_cast<size_t>(layers * H * kvl));
    std::vector<double> t;
    for (int rep = 0; rep < reps + 1; ++rep) {
      const double c0 = cpu_now(CLOCK_THREAD_CPUTIME_ID);
      for (int64_t l = 0; l < layers; ++l) {
        const size_t li = static_cast<size_t>(l);
        float* yl = y.data() + l * H * kvl;
        if (halves)
          kt.wsum_f16(p[li].data(), K, H, HRows{h[li].data(), idx[li].data(), kvl}, K, 0, kvl, yl, kvl, false);
        else
          kt.wsum_f32(p[li].data(), K, H, FRows{f[li].data(), idx[li].data(), kvl}, K, 0, kvl, yl, kvl, false);
      }
      if (rep > 0) t.push_back((cpu_now(CLOCK_THREAD_CPUTIME_ID) - c0) / static_cast<double>(layers));
    }
    std::sort(t.begin(), t.end());
    double sum = 0.0;
    for (float v : y) sum += static_cast<double>(v);
    const double fma = static_cast<double>(H) * static_cast<double>(K) * static_cast<double>(kvl) / 1e9;
    std::printf(
        "{\"bench\":\"attention_long_sums\",\"path\":\"%s\",\"kv\":\"%s\",\"heads\":%lld,\"kv_lora_rank\":%lld,"
        "\"keys\":%lld,\"of\":%lld,\"layers\":%lld,\"sums_ms\":%.3f,\"sums_gfma_cpu\":%.1f,\"checksum\":%.9g}\n",
        kernel_path_name(kt.path), halves ? "f16" : "f32", static_cast<long long>(H), static_cast<long long>(kvl),
        static_cast<long long>(K), static_cast<long long>(N), static_cast<long long>(layers), t[t.size() / 2] * 1e3,
        fma / t[t.size() / 2], sum);
    std::fflush(stdout);
  }
}

// --attention, the indexer's part (see the top).
void indexer_bench(int reps) {
  const KernelTable& kt = kernel_table(best_kernel_path());
  const int64_t H = 32, D = 128, kBlock = 256;
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
  for (int64_t K : {4096, 32768}) {
    // At 32768 keys the slice's three indexer layers' caches in turn (48 MiB:
    // from DRAM, as in the engine at 32k context); at 4096 one.
    const int64_t layers = K > 4096 ? 3 : 1;
    std::vector<AlignedFloats> keys(static_cast<size_t>(layers)), lanes(keys.size());
    AlignedFloats q(static_cast<size_t>(H * D));
    for (auto& k : keys) {
      k.resize(static_cast<size_t>(K * D));
      for (auto& v : k) v = ud(rng);
    }
    for (auto& v : q) v = ud(rng);
    // The same keys stored in lanes, as the engine's indexer key cache holds
    // them (LaneRows), scored by gemm_f32_lanes.
    for (size_t l = 0; l < keys.size(); ++l) {
      lanes[l].resize(keys[l].size());
      for (int64_t j = 0; j < K; ++j)
        for (int64_t c = 0; c < D; ++c)
          lanes[l][static_cast<size_t>(lanes_offset(j, c, D))] = keys[l][static_cast<size_t>(j * D + c)];
    }
    std::vector<float> so(static_cast<size_t>(layers * H * K)), sn(so.size()), sl(so.size());
    const auto old_scores = [&] {
      for (int64_t l = 0; l < layers; ++l)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t j = 0; j < K; ++j)
            so[static_cast<size_t>((l * H + h) * K + j)] =
                kt.dot_f32(q.data() + h * D, keys[static_cast<size_t>(l)].data() + j * D, D);
    };
    const auto new_scores = [&] {
      for (int64_t l = 0; l < layers; ++l)
        for (int64_t b = 0; b < K; b += kBlock)
          kt.gemm_f32_rows(FRows{keys[static_cast<size_t>(l)].data() + b * D, nullptr, D}, std::min(kBlock, K - b),
                           D, q.data(), H, sn.data() + l * H * K + b, K);
    };
    const auto lane_scores = [&] {
      for (int64_t l = 0; l < layers; ++l)
        for (int64_t b = 0; b < K; b += kBlock)
          kt.gemm_f32_lanes(lanes[static_cast<size_t>(l)].data() + b * D, std::min(kBlock, K - b), D, q.data(), H,
                            sl.data() + l * H * K + b, K);
    };
    std::vector<double> t[3];
    const std::function<void()> fns[3] = {old_scores, new_scores, lane_scores};
    for (int rep = 0; rep < reps + 1; ++rep)
      for (int f = 0; f < 3; ++f) {
        const double c0 = cpu_now(CLOCK_THREAD_CPUTIME_ID);
        fns[f]();
        if (rep > 0) t[f].push_back((cpu_now(CLOCK_THREAD_CPUTIME_ID) - c0) / static_cast<double>(layers));
      }
    auto median = [](std::vector<double> x) {
      std::sort(x.begin(), x.end());
      return x[x.size() / 2];
    };
    const double fma = static_cast<double>(H) * static_cast<double>(K) * static_cast<double>(D) / 1e9;
    std::printf(
        "{\"bench\":\"indexer_scores\",\"path\":\"%s\",\"heads\":%lld,\"head_dim\":%lld,\"keys\":%lld,"
        "\"layers\":%lld,\"scores_old_ms\":%.3f,\"scores_new_ms\":%.3f,\"scores_lanes_ms\":%.3f,"
        "\"scores_gfma_cpu\":[%.1f,%.1f,%.1f],\"identical\":%s}\n",
        kernel_path_name(kt.path), static_cast<long long>(H), static_cast<long long>(D), static_cast<long long>(K),
        static_cast<long long>(layers), median(t[0]) * 1e3, median(t[1]) * 1e3, median(t[2]) * 1e3,
        fma / median(t[0]), fma / median(t[1]), fma / median(t[2]), so == sn && so == sl ? "true" : "false");
    std::fflush(stdout);
  }
}

#if defined(__x86_64__)
// One pass over [b, e) of buf with AVX-512 loads; returns a sum so nothing is dead.
__attribute__((target("avx512f"))) int64_t read_pass(const uint8_t* buf, int64_t b, int64_t e) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = b;
  for (; i + 256 <= e; i += 256) {
    a0 = _mm512_add_epi64(a0, _mm512_loadu_si512(buf + i));
    a1 = _mm512_add_epi64(a1, _mm512_loadu_si512(buf + i + 64));
    a2 = _mm512_add_epi64(a2, _mm512_loadu_si512(buf + i + 128));
    a3 = _mm512_add_epi64(a3, _mm512_loadu_si512(buf + i + 192));
  }
  alignas(64) int64_t lanes[8];
  _mm512_store_si512(lanes, _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
  int64_t r = 0;
  for (int64_t v : lanes) r += v;
  for (; i < e; ++i) r += buf[i];
  return r;
}

// The same bytes as read_pass, as two sequential streams read in turn:
// [b, m) and [m, e), 256 bytes of each a step (the int4 GEMV walks two
// weight rows that way: docs/kernels.md, "Two weight streams").
__attribute__((target("avx512f"))) int64_t read_pass2(const uint8_t* buf, int64_t b, int64_t e) {
  const int64_t half = (e - b) / 2 / 256 * 256, m = b + half;
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i < half; i += 256) {
    a0 = _mm512_add_epi64(a0, _mm512_add_epi64(_mm512_loadu_si512(buf + b + i), _mm512_loadu_si512(buf + b + i + 64)));
    a1 = _mm512_add_epi64(a1, _mm512_add_epi64(_mm512_loadu_si512(buf + b + i + 128), _mm512_loadu_si512(buf + b + i + 192)));
    a2 = _mm512_add_epi64(a2, _mm512_add_epi64(_mm512_loadu_si512(buf + m + i), _mm512_loadu_si512(buf + m + i + 64)));
    a3 = _mm512_add_epi64(a3, _mm512_add_epi64(_mm512_loadu_si512(buf + m + i + 128), _mm512_loadu_si512(buf + m + i + 192)));
  }
  alignas(64) int64_t lanes[8];
  _mm512_store_si512(lanes, _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
  int64_t r = 0;
  for (int64_t v : lanes) r += v;
  return r + read_pass(buf, m + half, e);
}

// The same bytes as four sequential streams read in turn (a quarter each,
// 128 bytes of each a step): whether a GEMV walking four weight rows at once
// could read faster than one walking two.
__attribute__((target("avx512f"))) int64_t read_pass4(const uint8_t* buf, int64_t b, int64_t e) {
  const int64_t q = (e - b) / 4 / 128 * 128;
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  const uint8_t* s0 = buf + b;
  for (int64_t i = 0; i < q; i += 128) {
    a0 = _mm512_add_epi64(a0, _mm512_add_epi64(_mm512_loadu_si512(s0 + i), _mm512_loadu_si512(s0 + i + 64)));
    a1 = _mm512_add_epi64(a1, _mm512_add_epi64(_mm512_loadu_si512(s0 + q + i), _mm512_loadu_si512(s0 + q + i + 64)));
    a2 = _mm512_add_epi64(a2, _mm512_add_epi64(_mm512_loadu_si512(s0 + 2 * q + i), _mm512_loadu_si512(s0 + 2 * q + i + 64)));
    a3 = _mm512_add_epi64(a3, _mm512_add_epi64(_mm512_loadu_si512(s0 + 3 * q + i), _mm512_loadu_si512(s0 + 3 * q + i + 64)));
  }
  alignas(64) int64_t lanes[8];
  _mm512_store_si512(lanes, _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
  int64_t r = 0;
  for (int64_t v : lanes) r += v;
  return r + read_pass(buf, b + 4 * q, e);
}
#endif

// --gemv (see the top).
void gemv_bench(int reps) {
#if defined(__x86_64__)
  constexpr int kMats = 16;
  constexpr int64_t kN = 2048, kK = 6144;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(kK));
  for (auto& v : x) v = nd(rng);
  for (QuantBits bits : {QuantBits::Int8, QuantBits::Int4}) {
    std::vector<Weight> ws;
    int64_t bytes = 0;
    for (int i = 0; i < kMats; ++i) {
      ws.push_back(make_q(bits, kN, kK, rng));
      bytes += static_cast<int64_t>(ws.back().data.size() + ws.back().scales.size() * sizeof(float));
    }
    std::vector<uint8_t> buf(static_cast<size_t>(bytes), 1);
    for (int threads : {1, 2}) {
      std::unique_ptr<ThreadPool> pool = threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr;
      const Compute c(pool.get(), ComputeOptions{});
      std::vector<float> y(static_cast<size_t>(kN));
      MatmulScratch sc;
      int64_t sink = 0;
      const auto gemv_all = [&] {
        for (const Weight& w : ws) matmul(c, w, x.data(), 1, y.data(), sc);
      };
      const auto read_with = [&](int64_t (*pass)(const uint8_t*, int64_t, int64_t)) {
        if (!pool) {
          sink += pass(buf.data(), 0, bytes);
          return;
        }
        std::vector<int64_t> part(static_cast<size_t>(threads));
        pool->parallel_parts(bytes / 4096, [&](int p, int64_t b, int64_t e) {
          part[static_cast<size_t>(p)] = pass(buf.data(), b * 4096, std::min(bytes, e * 4096));
        });
        for (int64_t v : part) sink += v;
      };
      const auto read_all = [&] { read_with(read_pass); };
      const auto read_all2 = [&] { read_with(read_pass2); };
      const auto read_all4 = [&] { read_with(read_pass4); };
      gemv_all();  // warm-up (scratch, pages)
      read_all();
      std::vector<double> tg, tr, tr2, tr4;
      for (int rep = 0; rep < reps; ++rep) {
        auto a = Clock::now();
        gemv_all();
        tg.push_back(secs(a, Clock::now()));
        a = Clock::now();
        read_all();
        tr.push_back(secs(a, Clock::now()));
        a = Clock::now();
        read_all2();
        tr2.push_back(secs(a, Clock::now()));
        a = Clock::now();
        read_all4();
        tr4.push_back(secs(a, Clock::now()));
      }
      auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
      };
      const double gg = static_cast<double>(bytes) / median(tg) / 1e9, gr = static_cast<double>(bytes) / median(tr) / 1e9,
                   gr2 = static_cast<double>(bytes) / median(tr2) / 1e9, gr4 = static_cast<double>(bytes) / median(tr4) / 1e9;
      if (sink == 42) std::printf("#\n");
      std::printf(
          "{\"bench\":\"gemv\",\"path\":\"%s\",\"bits\":%d,\"threads\":%d,\"matrices\":%d,\"n\":%lld,\"k\":%lld,"
          "\"bytes\":%lld,\"gemv_gb_s\":%.2f,\"read_gb_s\":%.2f,\"fraction_of_read\":%.3f,\"read_two_streams_gb_s\":%.2f,"
          "\"fraction_of_two_stream_read\":%.3f,\"read_four_streams_gb_s\":%.2f}\n",
          kernel_path_name(c.kernels().path), static_cast<int>(bits), threads, kMats, static_cast<long long>(kN),
          static_cast<long long>(kK), static_cast<long long>(bytes), gg, gr, gg / gr, gr2, gg / gr2, gr4);
      std::fflush(stdout);
    }
  }
#else
  (void)reps;
  std::printf("{\"bench\":\"gemv\",\"error\":\"x86-64 only\"}\n");
#endif
}

#if defined(__x86_64__)
// --gemv-layout (see the top): int4 group-32 weights with bf16 scales
// repacked 16 rows at a time. Rows group G (rows 16G .. 16G + 15), block b
// (columns 32b .. 32b + 31): 4 vectors of 64 bytes; in vector k, byte 4r + t
// holds row 16G + r's column 32b + 8k + t in its low nibble and column
// 32b + 8k + 4 + t in its high one (the row's own 4-bit codes; rows past the
// matrix and columns past its width are code 0). Scales: per group G and
// scale group g, the 16 rows' bf16 scales.
struct Rows16 {
  int64_t rows = 0, cols = 0, nblocks = 0, ngroups = 0, g16 = 0;
  StreamedBytes q;
  std::vector<uint16_t> s;
};

Rows16 repack_rows16(const Weight& w) {
  Rows16 o;
  o.rows = w.rows;
  o.cols = w.cols;
  o.nblocks = (w.cols + 31) / 32;
  o.ngroups = quant_groups(w.cols, w.group);
  o.g16 = (w.rows + 15) / 16;
  o.q.assign(static_cast<size_t>(o.g16 * o.nblocks * 256), 0);
  o.s.assign(static_cast<size_t>(o.g16 * o.ngroups * 16), 0);
  const int64_t rb = quant_row_bytes(QuantBits::Int4, w.cols);
  const auto code = [&](int64_t r, int64_t c) -> int {
    if (r >= w.rows || c >= w.cols) return 0;
    const uint8_t byte = w.q()[r * rb + c / 2];
    return (c & 1) ? byte >> 4 : byte & 15;
  };
  for (int64_t G = 0; G < o.g16; ++G)
    for (int64_t b = 0; b < o.nblocks; ++b)
      for (int k = 0; k < 4; ++k)
        for (int r = 0; r < 16; ++r)
          for (int t = 0; t < 4; ++t) {
            const int64_t row = 16 * G + r, c = 32 * b + 8 * k + t;
            o.q[static_cast<size_t>(((G * o.nblocks + b) * 4 + k) * 64 + 4 * r + t)] =
                static_cast<uint8_t>(code(row, c) | (code(row, c + 4) << 4));
          }
  for (int64_t G = 0; G < o.g16; ++G)
    for (int64_t g = 0; g < o.ngroups; ++g)
      for (int r = 0; r < 16; ++r) {
        const int64_t row = 16 * G + r;
        o.s[static_cast<size_t>((G * o.ngroups + g) * 16 + r)] = row < w.rows ? w.s16()[row * o.ngroups + g] : 0;
      }
  return o;
}

// GCC 12 reports the intrinsics' _mm512_undefined_* operands as maybe-uninitialized.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// y[16G + r] for row groups [G0, G1) against one activation row quantized
// in the plain layout (q, per-block scales xs and 8 * sums s8): per block,
// 8 vpdpbusd with the activations' dwords broadcast, minus s8, then
// fma(float(isum), s_w * s_x, F[b % 16]) (qgemm.h's epilogue, lane = row).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"))) void gemv_rows16(
    const Rows16& w, int64_t G0, int64_t G1, const uint8_t* xq, const float* xs, const int32_t* s8, float* y) {
  const __m512i m4 = _mm512_set1_epi8(0x0f), x8 = _mm512_set1_epi8(0x08);
  for (int64_t G = G0; G < G1; ++G) {
    const uint8_t* p = w.q.data() + G * w.nblocks * 256;
    const uint16_t* sp = w.s.data() + G * w.ngroups * 16;
    __m512 F[16];
    for (auto& f : F) f = _mm512_setzero_ps();
    int64_t b = 0;
    const auto block = [&](int j) __attribute__((always_inline)) {
      const uint8_t* pb = p + b * 256;
      for (int k = 0; k < 4; ++k) _mm_prefetch(reinterpret_cast<const char*>(pb + 2048 + 64 * k), _MM_HINT_T0);
      __m512i acc = _mm512_setzero_si512();
      for (int k = 0; k < 4; ++k) {
        int32_t lo4, hi4;
        std::memcpy(&lo4, xq + 32 * b + 8 * k, 4);
        std::memcpy(&hi4, xq + 32 * b + 8 * k + 4, 4);
        const __m512i v = _mm512_loadu_si512(pb + 64 * k);
        acc = _mm512_dpbusd_epi32(acc, _mm512_ternarylogic_epi32(v, m4, x8, 0x6a), _mm512_set1_epi32(lo4));
        acc = _mm512_dpbusd_epi32(acc, _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 4), m4, x8, 0x6a),
                                  _mm512_set1_epi32(hi4));
      }
      acc = _mm512_sub_epi32(acc, _mm512_set1_epi32(s8[b]));
      const __m512 sw = _mm512_castsi512_ps(_mm512_slli_epi32(
          _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sp + b * 16))), 16));  // group 32: scale group b
      F[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(sw, _mm512_set1_ps(xs[b])), F[j]);
    };
    while (b + 16 <= w.nblocks) {
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) block(j), ++b;
    }
    for (int j = 0; b < w.nblocks; ++j, ++b) {
#pragma GCC unroll 16
      for (int jj = 0; jj < 16; ++jj)
        if (jj == j) block(jj);
    }
    __m512 a8[8], a4[4];
    for (int i = 0; i < 8; ++i) a8[i] = _mm512_add_ps(F[i], F[i + 8]);
    for (int i = 0; i < 4; ++i) a4[i] = _mm512_add_ps(a8[i], a8[i + 4]);
    const __m512 r = _mm512_add_ps(_mm512_add_ps(a4[0], a4[2]), _mm512_add_ps(a4[1], a4[3]));
    const int64_t n = std::min<int64_t>(16, w.rows - 16 * G);
    _mm512_mask_storeu_ps(y + 16 * G, static_cast<__mmask16>((1u << n) - 1u), r);
  }
}

#pragma GCC diagnostic pop

void gemv_layout_bench(int reps) {
  if (!kernel_path_supported(KernelPath::Avx512Vnni)) {
    std::printf("{\"bench\":\"gemv_layout\",\"error\":\"no AVX-512 VNNI on this CPU\"}\n");
    return;
  }
  constexpr int64_t kN = 2048, kK = 6144;
  constexpr int kMats = 24;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<Weight> ws;
  std::vector<StreamedBytes> wq;  // the row-major codes on huge pages too
  std::vector<Rows16> rs;
  std::vector<float> row(static_cast<size_t>(kK)), sc(static_cast<size_t>(kK / 32));
  for (int m = 0; m < kMats; ++m) {
    Weight w;
    w.format = WeightFormat::INT4;
    w.rows = kN;
    w.cols = kK;
    w.group = 32;
    w.scales_bf16 = true;
    w.data.resize(static_cast<size_t>(kN * kK / 2));
    w.scales16.resize(static_cast<size_t>(kN * kK / 32));
    for (int64_t r = 0; r < kN; ++r) {
      for (auto& v : row) v = nd(rng);
      quantize_row(QuantBits::Int4, 32, row.data(), kK, w.data.data() + r * kK / 2, sc.data(), true);
      for (int64_t g = 0; g < kK / 32; ++g) w.scales16[static_cast<size_t>(r * kK / 32 + g)] = f32_to_bf16(sc[static_cast<size_t>(g)]);
    }
    rs.push_back(repack_rows16(w));
    wq.emplace_back(w.data.begin(), w.data.end());
    w.view_data = wq.back().data();
    w.view_scales16 = w.scales16.data();
    w.view_bytes = w.data.size() + w.scales16.size() * sizeof(uint16_t);
    ws.push_back(std::move(w));
  }
  const double bytes1 = static_cast<double>(ws[0].view_bytes);
  std::vector<float> x(static_cast<size_t>(kK));
  for (auto& v : x) v = nd(rng);
  for (int threads : {1, 2}) {
    std::unique_ptr<ThreadPool> pool = threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr;
    const Compute c(pool.get(), ComputeOptions{.path = KernelPath::Avx512Vnni});
    const KernelTable& kt = c.kernels();
    MatmulScratch scr;
    std::vector<uint8_t> q(static_cast<size_t>(qacts_qstride(kK)));
    std::vector<float> xs(static_cast<size_t>(qacts_bstride(kK))), y0(kN), y1(kN);
    std::vector<int32_t> s8(static_cast<size_t>(qacts_bstride(kK)));
    for (bool hot : {true, false}) {
      const int nm = hot ? 1 : kMats, inner = hot ? 100 : 4;
      const auto engine = [&] {
        for (int m = 0; m < nm; ++m) matmul(c, ws[static_cast<size_t>(m)], x.data(), 1, y0.data(), scr);
      };
      const auto proto = [&] {
        for (int m = 0; m < nm; ++m) {
          const Rows16& w = rs[static_cast<size_t>(m)];
          (kt.quantize ? kt.quantize : quantize_acts)(x.data(), 1, kK, ActLayout::Plain, q.data(), xs.data(), s8.data());
          const auto body = [&](int64_t g0, int64_t g1) { gemv_rows16(w, g0, g1, q.data(), xs.data(), s8.data(), y1.data()); };
          if (pool)
            pool->parallel_for(w.g16, body);
          else
            body(0, w.g16);
        }
      };
      engine();
      proto();
      const bool same = std::memcmp(y0.data(), y1.data(), sizeof(float) * kN) == 0;
      std::vector<double> te, tp, ratio;
      for (int rep = 0; rep < reps; ++rep) {
        auto a = Clock::now();
        for (int i = 0; i < inner; ++i) engine();
        te.push_back(secs(a, Clock::now()));
        a = Clock::now();
        for (int i = 0; i < inner; ++i) proto();
        tp.push_back(secs(a, Clock::now()));
        ratio.push_back(te.back() / tp.back());
      }
      auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
      };
      const double gb = bytes1 * nm * inner / 1e9;
      std::printf(
          "{\"bench\":\"gemv_layout\",\"bits\":4,\"group\":32,\"scales\":\"bf16\",\"threads\":%d,\"where\":\"%s\","
          "\"matrices\":%d,\"n\":%lld,\"k\":%lld,\"engine_gb_s\":%.2f,\"rows16_gb_s\":%.2f,\"rows16_over_engine\":%.3f,"
          "\"pair_ratios\":[",
          threads, hot ? "cache" : "dram", nm, static_cast<long long>(kN), static_cast<long long>(kK), gb / median(te),
          gb / median(tp), median(ratio));
      for (size_t i = 0; i < ratio.size(); ++i) std::printf("%s%.2f", i ? "," : "", ratio[i]);
      std::printf("],\"identical\":%s}\n", same ? "true" : "false");
      std::fflush(stdout);
    }
  }
}
#endif

int run(int argc, char** argv) {
  int reps = 5, threads = 1;
  int64_t rows = 0;  // --m: every shape's activation rows instead of its own (0: the shape's)
  std::string which = "all", name;  // name: one shape only (e.g. expert_gate)
  bool peak_only = false, attention = false, gemv = false, gemv_layout = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--threads" && i + 1 < argc) {
      threads = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--shapes" && i + 1 < argc) {
      which = argv[++i];
    } else if (a == "--m" && i + 1 < argc) {
      rows = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--name" && i + 1 < argc) {
      name = argv[++i];
    } else if (a == "--peak-only") {
      peak_only = true;
    } else if (a == "--attention") {
      attention = true;
    } else if (a == "--gemv") {
      gemv = true;
    } else if (a == "--gemv-layout") {
      gemv_layout = true;
    } else {
      std::fprintf(stderr,
                   "usage: strata_gemm_bench [--reps N] [--threads T] [--shapes tiny|slice|all] [--name SHAPE] [--m ROWS] "
                   "[--peak-only] | --attention [--reps N] | --gemv [--reps N] | --gemv-layout [--reps N]\n");
      return 2;
    }
  }
  std::printf("{\"bench\":\"load\",\"when\":\"start\",\"loadavg\":\"%s\"}\n", loadavg().c_str());
  if (attention || gemv || gemv_layout) {
    if (attention) attention_bench(reps), long_sums_bench(reps), indexer_bench(reps);
    if (gemv) gemv_bench(reps);
#if defined(__x86_64__)
    if (gemv_layout) gemv_layout_bench(reps);
#else
    if (gemv_layout) std::printf("{\"bench\":\"gemv_layout\",\"error\":\"x86-64 only\"}\n");
#endif
    std::printf("{\"bench\":\"load\",\"when\":\"end\",\"loadavg\":\"%s\"}\n", loadavg().c_str());
    return 0;
  }
  double peak1 = 0;
#if defined(__x86_64__)
  if (kernel_path_supported(KernelPath::Avx512Vnni)) peak(&peak1);
#endif
  if (peak1 == 0) std::printf("{\"bench\":\"vnni_peak\",\"error\":\"no AVX-512 VNNI on this CPU\"}\n");
  if (!peak_only) {
    std::unique_ptr<ThreadPool> pool = threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr;
    ComputeOptions oo, no;
    oo.packed = false;
    no.packed = true;
    const Compute cold(pool.get(), oo), cnew(pool.get(), no);
    std::mt19937 rng(3);
    for (Shape s : kShapes) {
      if (rows > 0) s.m = rows;
      if ((which != "all" && which != s.model) || (!name.empty() && name != s.name)) continue;
      const Weight w = make_q(QuantBits::Int8, s.n, s.k, rng);
      std::vector<float> x(static_cast<size_t>(s.m * s.k));
      std::normal_distribution<float> nd(0.0f, 1.0f);
      for (auto& v : x) v = nd(rng);
      std::vector<float> yo(static_cast<size_t>(s.m * s.n)), yn(yo.size());
      MatmulScratch so, sn;
      matmul(cold, w, x.data(), s.m, yo.data(), so);  // warm-up, and the equality check
      matmul(cnew, w, x.data(), s.m, yn.data(), sn);
      const bool same = std::memcmp(yo.data(), yn.data(), yo.size() * sizeof(float)) == 0;
      // Calls per timed sample: about 40 ms of work each.
      const double c0 = cpu_now(CLOCK_PROCESS_CPUTIME_ID);
      matmul(cold, w, x.data(), s.m, yo.data(), so);
      const double one = std::max(1e-6, (cpu_now(CLOCK_PROCESS_CPUTIME_ID) - c0) / threads);
      const int inner = std::max(1, static_cast<int>(0.04 / one));
      std::vector<double> to, tn, co, cn;  // wall and CPU seconds per call
      for (int rep = 0; rep < reps; ++rep)
        for (int v = 0; v < 2; ++v) {
          const Compute& c = v == 0 ? cold : cnew;
          std::vector<float>& y = v == 0 ? yo : yn;
          MatmulScratch& sc = v == 0 ? so : sn;
          const auto a = Clock::now();
          const double ca = cpu_now(CLOCK_PROCESS_CPUTIME_ID);
          for (int i = 0; i < inner; ++i) matmul(c, w, x.data(), s.m, y.data(), sc);
          (v == 0 ? co : cn).push_back((cpu_now(CLOCK_PROCESS_CPUTIME_ID) - ca) / inner);
          (v == 0 ? to : tn).push_back(secs(a, Clock::now()) / inner);
        }
      auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
      };
      const double mo = median(to), mn = median(tn), cpo = median(co), cpn = median(cn);
      const double ops = 2.0 * static_cast<double>(s.n) * static_cast<double>(s.k) * static_cast<double>(s.m);
      // Fraction of peak: GOPS per CPU-second over the 1-thread peak per
      // CPU-second (with 2 threads the pool's waiting spin counts as CPU time,
      // so this understates a little).
      std::printf(
          "{\"bench\":\"gemm\",\"model\":\"%s\",\"name\":\"%s\",\"n\":%lld,\"k\":%lld,\"m\":%lld,\"threads\":%d,"
          "\"old_ms\":%.3f,\"new_ms\":%.3f,\"old_gops_cpu\":%.1f,\"new_gops_cpu\":%.1f,\"old_frac_peak\":%.3f,"
          "\"new_frac_peak\":%.3f,\"speedup_wall\":%.3f,\"speedup_cpu\":%.3f,\"identical\":%s}\n",
          s.model, s.name, static_cast<long long>(s.n), static_cast<long long>(s.k), static_cast<long long>(s.m),
          threads, mo * 1e3, mn * 1e3, ops / cpo / 1e9, ops / cpn / 1e9, peak1 > 0 ? ops / cpo / 1e9 / peak1 : 0.0,
          peak1 > 0 ? ops / cpn / 1e9 / peak1 : 0.0, mo / mn, cpo / cpn, same ? "true" : "false");
      std::fflush(stdout);
    }
  }
  std::printf("{\"bench\":\"load\",\"when\":\"end\",\"loadavg\":\"%s\"}\n", loadavg().c_str());
  return 0;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) { return strata::run(argc, argv); }
