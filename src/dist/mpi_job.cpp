// The MPI transport of experts over MPI (docs/distributed.md). Rank 0 sends
// each rank, per MoE layer, one message with the layer, its experts and
// their row counts and one with the rows (nonblocking, every rank at once),
// and receives the outputs into place; the other ranks loop: receive a
// layer's work, compute it through their own store, send the outputs back,
// until rank 0 sends a stop. Waiting polls (MPI_Test / MPI_Iprobe), so rank
// 0 notices a rank that stops answering within MpiOptions::timeout_s.
#include <mpi.h>
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

#include "core/clock.h"
#include "core/error.h"
#include "dist/mpi_job.h"
#include "dist/placement.h"

namespace strata {

namespace {

constexpr int kTagMeta = 1701, kTagData = 1702, kTagOut = 1703;
constexpr int32_t kStop = 0, kWork = 1;

std::string mpi_error(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int n = 0;
  MPI_Error_string(code, buf, &n);
  return std::string(buf, static_cast<size_t>(n));
}

// Polling without taking a shared core from the ranks that compute: spin a
// little, then yield, then sleep 100 us between polls.
struct Backoff {
  int polls = 0;
  void pause() {
    ++polls;
    if (polls < 1000) return;
    if (polls < 20000) {
      sched_yield();
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
};

uint64_t available_memory() {
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  uint64_t kb = 0;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

std::string gb(uint64_t b) {
  return b >= 1000000000ull ? fmt::format("{:.2f} GB", static_cast<double>(b) / 1e9)
                            : fmt::format("{:.1f} MB", static_cast<double>(b) / 1e6);
}

// What every rank tells the others at start-up.
struct Hello {
  uint64_t fingerprint = 0;
  uint64_t budget = 0;
  int64_t pid = 0;
  char host[64] = {};
  char dir[192] = {};
};

// Ends the whole job from rank 0: the message, then MPI_Abort (mpirun ends
// every rank, the stopped or hung one included, and exits non-zero).
[[noreturn]] void abort_job(const std::string& msg) {
  std::fprintf(stderr, "strata: error: experts over MPI: %s\n", msg.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

class Job final : public MpiJob, public ExpertPeers {
 public:
  explicit Job(const MpiOptions& o) : o_(o) {
    int provided = 0;
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) fail("--experts-over mpi: MPI_Init failed: {}", mpi_error(rc));
    if (provided < MPI_THREAD_SERIALIZED) {
      MPI_Finalize();
      fail("--experts-over mpi: the MPI library does not allow calls from one thread at a time "
           "(MPI_THREAD_SERIALIZED); the server calls it from its scheduler thread");
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }

  ~Job() override {
    if (rank_ == 0 && serving_) {
      const int32_t stop = kStop;
      for (int p = 1; p < size_; ++p) MPI_Send(&stop, 1, MPI_INT32_T, p, kTagMeta, MPI_COMM_WORLD);
    }
    MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_ok(bool ok, const std::string& what, const std::string& error) override {
    int mine = ok ? 1 : 0;
    std::vector<int> all(static_cast<size_t>(size_));
    check(MPI_Allgather(&mine, 1, MPI_INT, all.data(), 1, MPI_INT, MPI_COMM_WORLD), "start-up");
    std::string failed;
    int n = 0;
    for (int r = 0; r < size_; ++r)
      if (!all[static_cast<size_t>(r)]) {
        failed += (n++ ? ", " : "") + std::to_string(r);
      }
    if (n == 0) {
      if (what == "open the engine") serving_ = true;
      return;
    }
    if (!ok) fail("{}", error);
    fail("experts over MPI: rank{} {} could not {} (see {} error above)", n > 1 ? "s" : "", failed, what,
         n > 1 ? "their" : "its");
  }

  std::vector<std::vector<uint8_t>> agree(const Model& m, uint64_t ram_bytes) override {
    Hello me;
    me.fingerprint = model_fingerprint(m);
    me.budget = ram_bytes ? ram_bytes : available_memory();
    me.pid = static_cast<int64_t>(getpid());
    gethostname(me.host, sizeof(me.host) - 1);
    std::strncpy(me.dir, m.dir.c_str(), sizeof(me.dir) - 1);
    std::vector<Hello> all(static_cast<size_t>(size_));
    check(MPI_Allgather(&me, sizeof(Hello), MPI_BYTE, all.data(), sizeof(Hello), MPI_BYTE, MPI_COMM_WORLD),
          "start-up");
    std::string diff;
    for (int r = 1; r < size_; ++r)
      if (all[static_cast<size_t>(r)].fingerprint != all[0].fingerprint) diff += (diff.empty() ? "" : ", ") + std::to_string(r);
    if (!diff.empty()) {
      std::string list;
      for (int r = 0; r < size_; ++r) {
        const Hello& h = all[static_cast<size_t>(r)];
        list += fmt::format("{}rank {} ({} on {}): {:016x}", r ? "; " : "", r, h.dir, h.host, h.fingerprint);
      }
      fail("experts over MPI: rank{} {} opened a different model than rank 0 (fingerprints: {}); every rank must "
           "open the same container or a copy of it",
           diff.find(',') != std::string::npos ? "s" : "", diff, list);
    }
    const ExpertPool pool = expert_pool(m);
    std::vector<uint64_t> budgets;
    for (const Hello& h : all) budgets.push_back(h.budget);
    if (size_ == 1) {
      if (o_.verbose) std::fprintf(stderr, "strata: experts over MPI: one rank, every expert served here (as without MPI)\n");
      return {};
    }
    // Rank 0's placement (its usage.json, its --mpi-replicate), sent to every rank.
    Placement pl = place_experts(pool, budgets, o_.replicate);
    std::vector<int32_t> flat;
    for (const auto& l : pl.owner) flat.insert(flat.end(), l.begin(), l.end());
    check(MPI_Bcast(flat.data(), static_cast<int>(flat.size()), MPI_INT32_T, 0, MPI_COMM_WORLD), "start-up");
    size_t i = 0;
    for (auto& l : pl.owner)
      for (int32_t& o : l) o = flat[i++];
    owner_ = pl.owner;
    if (rank_ == 0 && o_.verbose) {
      std::fprintf(stderr, "strata: experts over MPI: %d ranks; experts placed %s\n", size_,
                   pl.by_usage ? "by routing usage (usage.json) against each rank's budget"
                               : "round-robin against each rank's budget (no usage.json)");
      if (pl.replicated_experts > 0)
        std::fprintf(stderr,
                     "strata: experts over MPI: --mpi-replicate %lld: the %lld hottest experts (%s, %.1f%% of the "
                     "traffic%s) are rank 0's outside the partition, computed there without an exchange\n",
                     static_cast<long long>(o_.replicate), static_cast<long long>(pl.replicated_experts),
                     gb(pl.replicated_bytes).c_str(), 100.0 * pl.replicated_traffic,
                     pl.by_usage ? "" : "; no usage.json: the first in layer, expert order, not measured hot ones");
      for (int r = 0; r < size_; ++r) {
        const Hello& h = all[static_cast<size_t>(r)];
        std::fprintf(stderr, "strata:   rank %d (%s, pid %lld): %lld experts, %s, %.1f%% of the traffic, budget %s\n", r,
                     h.host, static_cast<long long>(h.pid), static_cast<long long>(pl.experts[static_cast<size_t>(r)]),
                     gb(pl.bytes[static_cast<size_t>(r)]).c_str(), 100.0 * pl.traffic[static_cast<size_t>(r)],
                     gb(h.budget).c_str());
      }
    }
    return owned_by(pl, rank_);
  }

  ExpertPeers* peers() override { return this; }

  // ExpertPeers (rank 0).
  int owner(int64_t layer, int32_t e) const override {
    return owner_[static_cast<size_t>(layer)][static_cast<size_t>(e)];
  }

  void start(const PeerWork& w) override {
    layer_ = w.layer;
    reqs_.clear();
    req_rank_.clear();
    if (meta_.size() < static_cast<size_t>(size_)) meta_.resize(static_cast<size_t>(size_));
    const int64_t D = w.hidden;
    int64_t row = 0;
    for (int p = 1; p < size_; ++p) {
      const int64_t i0 = w.expert_off[static_cast<size_t>(p)], i1 = w.expert_off[static_cast<size_t>(p) + 1];
      if (i1 == i0) continue;
      int64_t rows = 0;
      std::vector<int32_t>& meta = meta_[static_cast<size_t>(p)];
      meta.clear();
      meta.push_back(kWork);
      meta.push_back(static_cast<int32_t>(w.layer));
      meta.push_back(static_cast<int32_t>(i1 - i0));
      for (int64_t i = i0; i < i1; ++i) meta.push_back(w.experts[static_cast<size_t>(i)]);
      for (int64_t i = i0; i < i1; ++i) {
        meta.push_back(w.rows[static_cast<size_t>(i)]);
        rows += w.rows[static_cast<size_t>(i)];
      }
      if (rows * D > INT_MAX) abort_job(fmt::format("layer {}: {} rows for rank {} exceed one MPI message", w.layer, rows, p));
      const int count = static_cast<int>(rows * D);
      MPI_Request r[3];
      post(MPI_Isend(meta.data(), static_cast<int>(meta.size()), MPI_INT32_T, p, kTagMeta, MPI_COMM_WORLD, &r[0]), p);
      post(MPI_Isend(w.x + row * D, count, MPI_FLOAT, p, kTagData, MPI_COMM_WORLD, &r[1]), p);
      post(MPI_Irecv(w.y + row * D, count, MPI_FLOAT, p, kTagOut, MPI_COMM_WORLD, &r[2]), p);
      for (MPI_Request& q : r) {
        reqs_.push_back(q);
        req_rank_.push_back(p);
      }
      row += rows;
    }
    t0_ = now_ns();
  }

  void wait() override {
    const uint64_t limit = static_cast<uint64_t>(o_.timeout_s * 1e9);
    Backoff b;
    for (;;) {
      bool all = true;
      for (size_t i = 0; i < reqs_.size(); ++i) {
        if (reqs_[i] == MPI_REQUEST_NULL) continue;
        int flag = 0;
        const int rc = MPI_Test(&reqs_[i], &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
          abort_job(fmt::format("the exchange with rank {} failed at layer {}: {}", req_rank_[i], layer_, mpi_error(rc)));
        if (!flag) all = false;
      }
      if (all) return;
      if (now_ns() - t0_ > limit) {
        int late = -1;
        for (size_t i = 0; i < reqs_.size() && late < 0; ++i)
          if (reqs_[i] != MPI_REQUEST_NULL) late = req_rank_[i];
        abort_job(fmt::format("rank {} did not answer layer {} within {:g} s (--mpi-timeout): it died, stopped or "
                              "is too slow",
                              late, layer_, o_.timeout_s));
      }
      b.pause();
    }
  }

  PeerServeStats serve(ModelRunner& runner) override {
    PeerServeStats st;
    const int64_t D = runner.model().config.hidden_size;
    std::vector<int32_t> meta;
    std::vector<float> x, y;
    for (;;) {
      const uint64_t t_idle = now_ns();
      MPI_Status s;
      int flag = 0;
      Backoff b;
      for (;;) {
        check(MPI_Iprobe(0, kTagMeta, MPI_COMM_WORLD, &flag, &s), "waiting for rank 0");
        if (flag) break;
        b.pause();
      }
      st.idle_ns += now_ns() - t_idle;
      int count = 0;
      MPI_Get_count(&s, MPI_INT32_T, &count);
      meta.resize(static_cast<size_t>(std::max(count, 1)));
      check(MPI_Recv(meta.data(), count, MPI_INT32_T, 0, kTagMeta, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "receiving work");
      if (count < 1 || meta[0] == kStop) break;
      const int64_t layer = meta[1], n = meta[2];
      if (count != 3 + 2 * n || layer < 0 || layer >= static_cast<int64_t>(runner.model().weights.layers.size()))
        fail("experts over MPI: rank {}: malformed work message from rank 0", rank_);
      const std::span<const int32_t> experts(meta.data() + 3, static_cast<size_t>(n));
      const std::span<const int32_t> rows(meta.data() + 3 + n, static_cast<size_t>(n));
      int64_t total = 0;
      for (int32_t r : rows) total += r;
      x.resize(static_cast<size_t>(total * D));
      y.resize(static_cast<size_t>(total * D));
      check(MPI_Recv(x.data(), static_cast<int>(total * D), MPI_FLOAT, 0, kTagData, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
            "receiving rows");
      const uint64_t t = now_ns();
      runner.compute_experts(layer, experts, rows, x.data(), y.data());
      st.compute_ns += now_ns() - t;
      check(MPI_Send(y.data(), static_cast<int>(total * D), MPI_FLOAT, 0, kTagOut, MPI_COMM_WORLD), "sending outputs");
      ++st.layers;
      st.experts += static_cast<uint64_t>(n);
      st.rows += static_cast<uint64_t>(total);
      st.bytes += static_cast<uint64_t>(count) * 4 + static_cast<uint64_t>(2 * total * D) * 4;
    }
    return st;
  }

 private:
  void check(int rc, const char* what) {
    if (rc != MPI_SUCCESS) fail("experts over MPI: rank {}: {} failed: {}", rank_, what, mpi_error(rc));
  }
  void post(int rc, int peer) {
    if (rc != MPI_SUCCESS)
      abort_job(fmt::format("sending layer {} to rank {} failed: {}", layer_, peer, mpi_error(rc)));
  }

  MpiOptions o_;
  int rank_ = 0, size_ = 1;
  bool serving_ = false;
  std::vector<std::vector<int32_t>> owner_;
  // The exchange in flight (rank 0): its requests and the rank of each.
  int64_t layer_ = -1;
  uint64_t t0_ = 0;
  std::vector<MPI_Request> reqs_;
  std::vector<int> req_rank_;
  std::vector<std::vector<int32_t>> meta_;  // per rank: the message being sent
};

}  // namespace

std::unique_ptr<MpiJob> join_mpi(const MpiOptions& o) { return std::make_unique<Job>(o); }

bool mpi_built() { return true; }

}  // namespace strata
