// Experts over MPI without MPI: the placement (dist/placement.h), stores that
// serve only their share, and the forward's peer seam (model/expert_peers.h)
// driven in one process -- the "other ranks" are runners over their own
// stores -- must give logits == one runner over every expert. The MPI
// transport itself is tested by tests/mpi/mpi_test.sh.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <memory>

#include "dist/placement.h"
#include "experts/disk_expert_store.h"
#include "model/expert_peers.h"
#include "model/forward.h"
#include "model/model.h"
#include "test_util.h"

namespace strata::distributed_test {
namespace {

using test_util::TempDir;

std::string fixture(const std::string& name) { return std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/" + name; }

void convert(const std::string& in, const std::string& out) {
  const std::string cmd = std::string(STRATA_BINARY) + " convert --in " + in + " --out " + out + " >/dev/null 2>" + out + ".log";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd << "\n" << test_util::read_file(out + ".log");
}

ExpertPool pool_of(std::vector<int64_t> count, uint64_t bytes = 100) {
  ExpertPool p;
  p.count = std::move(count);
  p.bytes.assign(p.count.size(), bytes);
  return p;
}

TEST(ExpertPlacement, RoundRobinWithoutUsageAndEqualBudgets) {
  const Placement pl = place_experts(pool_of({0, 4, 4}), {10, 10, 10});
  ASSERT_EQ(pl.owner.size(), 3u);
  EXPECT_TRUE(pl.owner[0].empty());
  EXPECT_EQ(pl.owner[1], (std::vector<int32_t>{0, 1, 2, 0}));
  EXPECT_EQ(pl.owner[2], (std::vector<int32_t>{1, 2, 0, 1}));
  EXPECT_EQ(pl.experts, (std::vector<int64_t>{3, 3, 2}));
  EXPECT_EQ(pl.bytes, (std::vector<uint64_t>{300, 300, 200}));
  EXPECT_FALSE(pl.by_usage);
}

TEST(ExpertPlacement, SharesFollowBudgets) {
  // Rank 0 has half the total budget: half the experts (no usage).
  const Placement pl = place_experts(pool_of({64, 64}), {200, 100, 100});
  EXPECT_EQ(pl.experts, (std::vector<int64_t>{64, 32, 32}));
  EXPECT_NEAR(pl.traffic[0], 0.5, 1e-9);
}

TEST(ExpertPlacement, HotExpertsSpreadByUsage) {
  // Two hot experts of 1000 routings and fourteen cold ones: the hot ones go
  // to different ranks, and each rank's traffic share is near its budget's.
  ExpertPool p = pool_of({16});
  p.usage = {std::vector<uint64_t>(16, 10)};
  p.usage[0][3] = 1000;
  p.usage[0][9] = 1000;
  const Placement pl = place_experts(p, {1, 1});
  EXPECT_TRUE(pl.by_usage);
  EXPECT_NE(pl.owner[0][3], pl.owner[0][9]);
  EXPECT_NEAR(pl.traffic[0], 0.5, 0.02);
  EXPECT_NEAR(pl.traffic[1], 0.5, 0.02);
  // Every expert has exactly one owner.
  const auto o0 = owned_by(pl, 0), o1 = owned_by(pl, 1);
  for (size_t e = 0; e < 16; ++e) EXPECT_EQ(o0[0][e] + o1[0][e], 1) << e;
}

TEST(ExpertPlacement, ReplicatesHottestOnRankZero) {
  // Three hot experts (500, 400, 300 routings) and thirteen cold ones (10).
  ExpertPool p = pool_of({16});
  p.usage = {std::vector<uint64_t>(16, 10)};
  p.usage[0][5] = 500;
  p.usage[0][11] = 400;
  p.usage[0][2] = 300;
  const Placement none = place_experts(p, {1000, 1000});
  const Placement none0 = place_experts(p, {1000, 1000}, 0);
  EXPECT_EQ(none.owner, none0.owner) << "--mpi-replicate 0 places as before";
  EXPECT_EQ(none.replicated_experts, 0);
  const Placement pl = place_experts(p, {1000, 1000}, 2);
  EXPECT_EQ(pl.replicated_experts, 2);
  EXPECT_EQ(pl.replicated_bytes, 200u);
  // The two hottest are rank 0's and marked; the third is not.
  EXPECT_EQ(pl.owner[0][5], 0);
  EXPECT_EQ(pl.owner[0][11], 0);
  EXPECT_EQ(pl.replicated[0][5], 1);
  EXPECT_EQ(pl.replicated[0][11], 1);
  EXPECT_EQ(pl.replicated[0][2], 0);
  int n = 0;
  for (uint8_t r : pl.replicated[0]) n += r;
  EXPECT_EQ(n, 2);
  const double hot = (501.0 + 401.0) / (501 + 401 + 301 + 13 * 11);
  EXPECT_NEAR(pl.replicated_traffic, hot, 1e-9);
  // They come on top of rank 0's share: more traffic stays on rank 0 than
  // without (what replication is for), yet rank 1 serves only its share.
  EXPECT_GT(pl.traffic[0], none.traffic[0] + 0.2);
  const auto o0 = owned_by(pl, 0), o1 = owned_by(pl, 1);
  EXPECT_EQ(o0[0][5], 1);
  EXPECT_EQ(o1[0][5], 0) << "rank 1 never computes a replicated expert: it does not hold it";
  for (size_t e = 0; e < 16; ++e) EXPECT_EQ(o0[0][e] + o1[0][e], 1) << e;
  EXPECT_EQ(pl.experts[0] + pl.experts[1], 16);
  // The rest is shared by the budgets as without replication (here 1 : 3), so
  // rank 0 never serves less traffic than without replicating.
  ExpertPool q = pool_of({64});
  q.usage = {std::vector<uint64_t>(64)};
  for (size_t e = 0; e < 64; ++e) q.usage[0][e] = 20 + (e * 7) % 13;
  for (size_t e = 0; e < 64; e += 9) q.usage[0][e] = 1000;
  const Placement q0 = place_experts(q, {100, 300});
  EXPECT_NEAR(q0.traffic[0], 0.25, 0.02);
  for (int64_t n_rep : {1, 2, 4, 8, 16, 32}) {
    const Placement b = place_experts(q, {100, 300}, n_rep);
    EXPECT_GT(b.traffic[0], q0.traffic[0]) << n_rep;
    EXPECT_NEAR((b.traffic[0] - b.replicated_traffic) / (1.0 - b.replicated_traffic), 0.25, 0.04) << n_rep;
  }
  // More than the pool: everything is rank 0's.
  const Placement all = place_experts(p, {1, 1}, 100);
  EXPECT_EQ(all.replicated_experts, 16);
  EXPECT_EQ(all.experts, (std::vector<int64_t>{16, 0}));
  EXPECT_NEAR(all.traffic[0], 1.0, 1e-12);
}

// The other "ranks" in this process: each a runner over its own store that
// holds only its experts; start() computes their work at once.
class LocalPeers final : public ExpertPeers {
 public:
  LocalPeers(const Model& m, const Placement& pl, uint64_t ram) : m_(m), pl_(pl) {
    for (int r = 1; r < pl.ranks; ++r) {
      ExpertCacheOptions o;
      o.ram_bytes = ram;
      o.autopin = false;
      o.owned = owned_by(pl, r);
      stores_.push_back(std::make_unique<DiskExpertStore>(m.expert_files(), o));
      pools_.push_back(std::make_unique<ThreadPool>(r));  // another thread count on every rank
      runners_.push_back(std::make_unique<ModelRunner>(m, *stores_.back(), *pools_.back()));
    }
  }
  int size() const override { return pl_.ranks; }
  int owner(int64_t layer, int32_t e) const override {
    return pl_.owner[static_cast<size_t>(layer)][static_cast<size_t>(e)];
  }
  void start(const PeerWork& w) override {
    int64_t row = 0;
    for (int p = 1; p < pl_.ranks; ++p) {
      const int64_t i0 = w.expert_off[static_cast<size_t>(p)], i1 = w.expert_off[static_cast<size_t>(p) + 1];
      int64_t rows = 0;
      for (int64_t i = i0; i < i1; ++i) {
        rows += w.rows[static_cast<size_t>(i)];
        EXPECT_EQ(owner(w.layer, w.experts[static_cast<size_t>(i)]), p);
        EXPECT_FALSE(pl_.replicated[static_cast<size_t>(w.layer)][static_cast<size_t>(w.experts[static_cast<size_t>(i)])])
            << "a replicated expert was sent to rank " << p;
      }
      runners_[static_cast<size_t>(p - 1)]->compute_experts(w.layer, w.experts.subspan(static_cast<size_t>(i0), static_cast<size_t>(i1 - i0)),
                                                           w.rows.subspan(static_cast<size_t>(i0), static_cast<size_t>(i1 - i0)),
                                                           w.x + row * w.hidden, w.y + row * w.hidden);
      row += rows;
    }
    ++exchanges;
  }
  void wait() override {}
  int exchanges = 0;
  const DiskExpertStore& store(int r) const { return *stores_[static_cast<size_t>(r - 1)]; }

 private:
  const Model& m_;
  const Placement& pl_;
  std::vector<std::unique_ptr<DiskExpertStore>> stores_;
  std::vector<std::unique_ptr<ThreadPool>> pools_;
  std::vector<std::unique_ptr<ModelRunner>> runners_;
};

struct Out {
  std::vector<float> logits, mtp;
};

Out run(const Model& m, ExpertStore& store, ExpertPeers* peers, const std::vector<int32_t>& ids, int64_t chunk,
        uint64_t* peer_bytes = nullptr) {
  ThreadPool pool(2);
  ModelRunner r(m, store, pool, {}, peers);
  const int64_t T = static_cast<int64_t>(ids.size()), V = m.config.vocab_size, D = m.config.hidden_size;
  Session s(m.config, T, true);
  Out out;
  out.logits.resize(static_cast<size_t>(T * V));
  out.mtp.resize(static_cast<size_t>((T - 1) * V));
  std::vector<float> hidden(static_cast<size_t>(T * D));
  for (int64_t p0 = 0; p0 < T; p0 += chunk) {
    std::vector<Row> rows;
    for (int64_t p = p0; p < std::min(T, p0 + chunk); ++p) rows.push_back({&s, static_cast<int32_t>(p), ids[p], true});
    r.forward(rows, {}, out.logits.data() + p0 * V, hidden.data() + p0 * D);
  }
  for (int64_t p0 = 0; p0 < T - 1; p0 += chunk) {
    std::vector<Row> rows;
    for (int64_t p = p0; p < std::min(T - 1, p0 + chunk); ++p) rows.push_back({&s, static_cast<int32_t>(p), ids[p + 1], true});
    r.forward_mtp(rows, hidden.data() + p0 * D, {}, out.mtp.data() + p0 * V);
  }
  if (peers) {
    EXPECT_GT(r.stats().peer_bytes, 0u);
  }
  if (peer_bytes) *peer_bytes = r.stats().peer_bytes;
  return out;
}

class PeerSeam : public ::testing::TestWithParam<std::string> {};

TEST_P(PeerSeam, ExpertsOnOtherRanksGiveIdenticalLogits) {
  TempDir tmp;
  const std::string dir = tmp.file("c");
  convert(fixture(GetParam()), dir);
  auto m = load_model(dir);
  ASSERT_TRUE(m->experts_on_disk);
  std::vector<int32_t> ids;
  for (int i = 0; i < 20; ++i) ids.push_back((i * 37) % 200 + 3);

  ExpertCacheOptions all;
  all.ram_bytes = 1ull << 40;
  all.pin_all = true;
  DiskExpertStore every(m->expert_files(), all);
  const Out a = run(*m, every, nullptr, ids, 1000);

  const ExpertPool pool = expert_pool(*m);
  int64_t n_experts = 0;
  for (int64_t c : pool.count) n_experts += c;
  std::map<int, uint64_t> bytes_plain;  // per rank count: chunk 1000's exchange without replication
  // Without and with --mpi-replicate (a quarter of the pool on rank 0).
  for (const int64_t replicate : {int64_t{0}, n_experts / 4})
  for (int ranks : {2, 3}) {
    SCOPED_TRACE(testing::Message() << ranks << " ranks, replicate " << replicate);
    std::vector<uint64_t> budgets(static_cast<size_t>(ranks), 1);
    budgets[0] = 2;  // rank 0 serves more than the others
    const Placement pl = place_experts(pool, budgets, replicate);
    EXPECT_EQ(pl.replicated_experts, replicate);
    ExpertCacheOptions mine;
    mine.ram_bytes = 1;  // one cache slot per layer
    mine.autopin = false;
    mine.owned = owned_by(pl, 0);
    DiskExpertStore own(m->expert_files(), mine);
    EXPECT_LT(own.total_expert_bytes(), every.total_expert_bytes());
    LocalPeers peers(*m, pl, 1);
    for (int64_t chunk : {int64_t{1000}, int64_t{1}, int64_t{7}}) {
      uint64_t bytes = 0;
      const Out b = run(*m, own, &peers, ids, chunk, &bytes);
      EXPECT_EQ(a.logits, b.logits) << ranks << " ranks, chunk " << chunk;
      EXPECT_EQ(a.mtp, b.mtp) << ranks << " ranks, chunk " << chunk;
      if (chunk != 1000) continue;
      if (replicate == 0) bytes_plain[ranks] = bytes;
      else EXPECT_LT(bytes, bytes_plain[ranks]) << "replicated experts still crossed to other ranks";
    }
    EXPECT_GT(peers.exchanges, 0);
    for (int r = 1; r < ranks; ++r) EXPECT_GT(peers.store(r).stats().requests, 0u) << "rank " << r << " did no work";
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PeerSeam, ::testing::Values("glm5-tiny-bf16", "glm52-tiny-bf16"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

TEST(PeerSeam, StoreServesOnlyItsShare) {
  TempDir tmp;
  const std::string dir = tmp.file("c");
  convert(fixture("glm5-tiny-bf16"), dir);
  auto m = load_model(dir);
  ExpertCacheOptions all;
  all.ram_bytes = 1ull << 40;
  all.pin_all = true;
  DiskExpertStore every(m->expert_files(), all);
  const Placement pl = place_experts(expert_pool(*m), {1, 1, 1});
  uint64_t sum = 0;
  for (int r = 0; r < 3; ++r) {
    ExpertCacheOptions o = all;
    o.owned = owned_by(pl, r);
    DiskExpertStore s(m->expert_files(), o);
    EXPECT_EQ(s.total_expert_bytes(), pl.bytes[static_cast<size_t>(r)]);
    EXPECT_EQ(s.pinned_bytes(), s.total_expert_bytes()) << "pin all pins only the rank's own experts";
    EXPECT_NE(s.describe().find("this rank serves"), std::string::npos) << s.describe();
    sum += s.total_expert_bytes();
  }
  EXPECT_EQ(sum, every.total_expert_bytes());
  // Same model, same fingerprint; a different config, another.
  auto m2 = load_model(dir);
  EXPECT_EQ(model_fingerprint(*m), model_fingerprint(*m2));
  auto ck = load_model(fixture("glm5-tiny-bf16"));
  EXPECT_NE(model_fingerprint(*m), model_fingerprint(*ck));
  // From the directory, without loading: the loaded model's value (what
  // trace record writes and atlas --model --trace compares).
  EXPECT_EQ(model_fingerprint(dir), model_fingerprint(*m));
  EXPECT_EQ(model_fingerprint(fixture("glm5-tiny-bf16")), model_fingerprint(*ck));
  EXPECT_NE(model_fingerprint(dir), model_fingerprint(fixture("glm5-tiny-bf16")));
}

}  // namespace
}  // namespace strata::distributed_test
