// KvStore (src/server/kv_store.h): the KV state of finished turns on disk.
// Round trip bit for bit, append-only continuation, a crash mid-append (bytes
// past the count, a count never written), a damaged record, another model's
// file, branches and the file limit.
#include "server/kv_store.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "test_util.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using server::KvStore;

const std::string kFixture = std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/glm5-tiny-bf16";

const ModelConfig& config() {
  static const ModelConfig c = [] {
    std::ifstream in(kFixture + "/config.json");
    return parse_model_config(Json::parse(in), "config.json");
  }();
  return c;
}

// A session whose first n positions hold values derived from (seed, position).
std::unique_ptr<Session> filled(int64_t n, uint32_t seed) {
  auto s = std::make_unique<Session>(config(), 64, false);
  for (int64_t l = 0; l < config().num_hidden_layers; ++l) {
    LayerCache& lc = s->layer(l);
    for (auto* v : {&lc.latent, &lc.rope_key, &lc.index_key}) {
      if (v->empty()) continue;
      const int64_t per = static_cast<int64_t>(v->size()) / s->capacity();
      for (int64_t p = 0; p < n; ++p) {
        std::mt19937 g(seed * 7919u + static_cast<uint32_t>(p * 131 + l));
        std::normal_distribution<float> d;
        for (int64_t i = 0; i < per; ++i) (*v)[static_cast<size_t>(p * per + i)] = d(g);
      }
    }
  }
  s->n_past = n;
  return s;
}

// Positions [0, n) of a and b hold the same bits.
bool same_prefix(const Session& a, const Session& b, int64_t n) {
  for (int64_t l = 0; l < config().num_hidden_layers; ++l) {
    const LayerCache &x = a.layer(l), &y = b.layer(l);
    const auto eq = [&](const std::vector<float>& u, const std::vector<float>& v) {
      if (u.size() != v.size()) return false;
      if (u.empty()) return true;
      const size_t per = u.size() / static_cast<size_t>(a.capacity());
      return std::memcmp(u.data(), v.data(), per * static_cast<size_t>(n) * sizeof(float)) == 0;
    };
    if (!eq(x.latent, y.latent) || !eq(x.rope_key, y.rope_key) || !eq(x.index_key, y.index_key)) return false;
  }
  return true;
}

std::vector<int32_t> toks(int n, int base = 10) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(base + i);
  return t;
}

std::vector<fs::path> kv_files(const std::string& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".kv") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(KvStore, RoundTripAndAppendBitExact) {
  test_util::TempDir d;
  const auto s = filled(20, 1);
  const auto t = toks(20);
  int64_t id = -1;
  {
    KvStore kv(d.str(), config(), 42, 8, false);
    id = kv.save(-1, *s, std::span(t).first(12));  // first turn
    EXPECT_EQ(kv.conversations(), 1u);
    EXPECT_EQ(kv.save(id, *s, t), id);  // second turn appends positions 12..19
    ASSERT_EQ(kv_files(d.str()).size(), 1u);
    EXPECT_EQ(fs::file_size(kv_files(d.str())[0]), 64 + 20 * kv.record_bytes());
  }
  KvStore kv(d.str(), config(), 42, 8, false);  // a restart
  ASSERT_EQ(kv.conversations(), 1u);
  std::vector<int32_t> prompt = t;
  prompt.push_back(99);
  const KvStore::Match m = kv.find(prompt, prompt.size() - 1);
  EXPECT_EQ(m.common, 20u);
  Session r(config(), 64, false);
  std::vector<int32_t> got;
  EXPECT_EQ(kv.load(m.id, m.common, r, got), 20u);
  EXPECT_EQ(r.n_past, 20);
  EXPECT_EQ(got, t);
  EXPECT_TRUE(same_prefix(*s, r, 20));
  // A prompt that shares only part of it loads that part.
  const auto other = std::vector<int32_t>{10, 11, 12, 13, 77, 78};
  const KvStore::Match p = kv.find(other, other.size() - 1);
  EXPECT_EQ(p.common, 4u);
}

TEST(KvStore, CrashMidAppendKeepsWhatWasSaved) {
  test_util::TempDir d;
  const auto s = filled(30, 2);
  const auto t = toks(30);
  size_t rb = 0;
  {
    KvStore kv(d.str(), config(), 42, 8, false);
    kv.save(-1, *s, std::span(t).first(10));
    rb = kv.record_bytes();
  }
  const fs::path f = kv_files(d.str()).at(0);
  // A crash after writing 1.5 more records but before the count: bytes past
  // the count are ignored.
  {
    std::ofstream out(f, std::ios::binary | std::ios::app);
    const std::string junk(rb + rb / 2, '\x5a');
    out.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  {
    KvStore kv(d.str(), config(), 42, 8, false);
    std::vector<int32_t> prompt = t;
    const auto m = kv.find(prompt, prompt.size() - 1);
    EXPECT_EQ(m.common, 10u);
    Session r(config(), 64, false);
    std::vector<int32_t> got;
    EXPECT_EQ(kv.load(m.id, m.common, r, got), 10u);
    EXPECT_TRUE(same_prefix(*s, r, 10));
    // The next save overwrites the junk and then moves the count.
    EXPECT_EQ(kv.save(m.id, *s, t), m.id);
  }
  KvStore kv(d.str(), config(), 42, 8, false);
  const auto m = kv.find(t, t.size());
  EXPECT_EQ(m.common, 30u);
  Session r(config(), 64, false);
  std::vector<int32_t> got;
  EXPECT_EQ(kv.load(m.id, 30, r, got), 30u);
  EXPECT_TRUE(same_prefix(*s, r, 30));
  EXPECT_FALSE(fs::exists(f.string() + ".tmp"));
}

TEST(KvStore, DamagedRecordEndsThePrefix) {
  test_util::TempDir d;
  const auto s = filled(12, 3);
  const auto t = toks(12);
  size_t rb = 0;
  {
    KvStore kv(d.str(), config(), 42, 8, false);
    kv.save(-1, *s, t);
    rb = kv.record_bytes();
  }
  const fs::path f = kv_files(d.str()).at(0);
  {
    std::fstream io(f, std::ios::binary | std::ios::in | std::ios::out);
    io.seekp(static_cast<std::streamoff>(64 + 7 * rb + 40));  // inside record 7's floats
    io.put('\x13');
  }
  KvStore kv(d.str(), config(), 42, 8, false);
  const auto m = kv.find(t, t.size());
  ASSERT_EQ(m.common, 12u);  // tokens are intact; the data is checked on load
  Session r(config(), 64, false);
  std::vector<int32_t> got;
  EXPECT_EQ(kv.load(m.id, m.common, r, got), 7u);
  EXPECT_EQ(r.n_past, 7);
  EXPECT_TRUE(same_prefix(*s, r, 7));
  EXPECT_EQ(kv.find(t, t.size()).common, 7u);  // never offered beyond the damage again
}

TEST(KvStore, OtherModelBranchesAndLimit) {
  test_util::TempDir d;
  const auto s = filled(16, 4);
  const auto t = toks(16);
  {
    KvStore kv(d.str(), config(), 42, 2, false);
    const int64_t a = kv.save(-1, *s, t);
    // A branch: the session holds a different continuation of a's first 8.
    auto b = filled(16, 4);
    std::vector<int32_t> tb(t.begin(), t.begin() + 8);
    for (int i = 0; i < 8; ++i) tb.push_back(500 + i);
    const int64_t bid = kv.save(a, *b, tb);
    EXPECT_NE(bid, a);
    EXPECT_EQ(kv.conversations(), 2u);
    EXPECT_EQ(kv.find(t, t.size()).common, 16u);  // a is intact
    // A third conversation: the least recently used one goes.
    kv.save(-1, *s, toks(5, 900));
    EXPECT_EQ(kv.conversations(), 2u);
    EXPECT_EQ(kv_files(d.str()).size(), 2u);
    EXPECT_EQ(kv.find(t, t.size()).common, 8u);  // only b's shared 8 are left
  }
  // Saved with another model (fingerprint): not offered, not deleted.
  KvStore other(d.str(), config(), 43, 8, false);
  EXPECT_EQ(other.conversations(), 0u);
  EXPECT_EQ(kv_files(d.str()).size(), 2u);
}

TEST(KvStore, OneServerPerDirectoryTokenCoveredByTheChecksumVanishedFile) {
  test_util::TempDir d;
  const auto s = filled(12, 5);
  const auto t = toks(12);
  size_t rb = 0;
  {
    KvStore kv(d.str(), config(), 42, 8, false);
    const std::string msg = test_util::error_of([&] { KvStore again(d.str(), config(), 42, 8, false); });
    EXPECT_NE(msg.find("in use by another strata serve"), std::string::npos) << msg;
    kv.save(-1, *s, t);
    rb = kv.record_bytes();
  }
  // A flipped token field: the checksum covers the token, so the records
  // from there on are not trusted.
  const fs::path f = kv_files(d.str()).at(0);
  {
    std::fstream io(f, std::ios::binary | std::ios::in | std::ios::out);
    io.seekp(static_cast<std::streamoff>(64 + 5 * rb));
    const int32_t other = 77;
    io.write(reinterpret_cast<const char*>(&other), 4);
  }
  KvStore kv(d.str(), config(), 42, 8, false);
  std::vector<int32_t> prompt = t;
  prompt[5] = 77;
  const auto m = kv.find(prompt, prompt.size());
  ASSERT_EQ(m.common, 12u);
  Session r(config(), 64, false);
  std::vector<int32_t> got;
  EXPECT_EQ(kv.load(m.id, m.common, r, got), 5u);
  // The conversation continues from the 5 good records: the 7 past them are
  // hidden (count 5) before anything is overwritten, then the new ones land.
  const auto s2 = filled(20, 6);
  std::vector<int32_t> t2(t.begin(), t.begin() + 5);
  for (int i = 0; i < 15; ++i) t2.push_back(300 + i);
  EXPECT_EQ(kv.save(m.id, *s2, t2), m.id);
  EXPECT_EQ(kv.find(t2, t2.size()).common, 20u);
  // Its file removed by hand: the next save writes a new one.
  fs::remove(f);
  std::vector<int32_t> t3 = t2;
  t3.push_back(999);
  auto s3 = filled(21, 6);
  kv.save(m.id, *s3, t3);
  EXPECT_EQ(kv_files(d.str()).size(), 1u);
  EXPECT_EQ(kv.find(t3, t3.size()).common, 21u);
}

TEST(KvStore, RefusesAPathThatIsNotADirectory) {
  test_util::TempDir d;
  test_util::write_file(d.file("f"), "x");
  const std::string msg = test_util::error_of([&] { KvStore kv(d.file("f"), config(), 1, 8, false); });
  EXPECT_NE(msg.find("--kv-dir"), std::string::npos) << msg;
}

}  // namespace
}  // namespace strata
