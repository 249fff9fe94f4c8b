// KvStore (src/server/kv_store.h): the KV state of finished turns on disk.
// Round trip bit for bit, append-only continuation, a crash mid-append (bytes
// past the count, a count never written), a damaged record, another model's
// file, branches and the file limit; crashes at every step of a save (kill -9
// and power loss: first save, append, branch, overwriting hidden records),
// stale temporary files, a header count larger than the file.
#include "server/kv_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "test_util.h"

namespace strata::kv_store_test {
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
    for (auto* v : {&lc.latent, &lc.rope_key}) {
      if (v->empty()) continue;
      const int64_t per = static_cast<int64_t>(v->size()) / s->capacity();
      for (int64_t p = 0; p < n; ++p) {
        std::mt19937 g(seed * 7919u + static_cast<uint32_t>(p * 131 + l));
        std::normal_distribution<float> d;
        for (int64_t i = 0; i < per; ++i) (*v)[static_cast<size_t>(p * per + i)] = d(g);
      }
    }
    if (!lc.index_key.empty()) {  // stored in lanes: a row at a time
      std::vector<float> row(static_cast<size_t>(lc.index_key.width()));
      for (int64_t p = 0; p < n; ++p) {
        std::mt19937 g(seed * 7919u + static_cast<uint32_t>(p * 131 + l) + 17u);
        std::normal_distribution<float> d;
        for (float& x : row) x = d(g);
        lc.index_key.set_row(p, row.data());
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
    const auto eq = [&](const AlignedFloats& u, const AlignedFloats& v) {
      if (u.size() != v.size()) return false;
      if (u.empty()) return true;
      const size_t per = u.size() / static_cast<size_t>(a.capacity());
      return std::memcmp(u.data(), v.data(), per * static_cast<size_t>(n) * sizeof(float)) == 0;
    };
    if (!eq(x.latent, y.latent) || !eq(x.rope_key, y.rope_key)) return false;
    if (x.index_key.size() != y.index_key.size()) return false;
    if (!x.index_key.empty()) {
      std::vector<float> u(static_cast<size_t>(x.index_key.width())), v(u.size());
      for (int64_t p = 0; p < n; ++p) {
        x.index_key.get_row(p, u.data());
        y.index_key.get_row(p, v.data());
        if (std::memcmp(u.data(), v.data(), u.size() * sizeof(float)) != 0) return false;
      }
    }
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

// A conversation is offered only to its own scope (an API key's key_scope;
// 0 without keys), also after a restart; a turn of another scope resumed
// from nothing never appends to it. Files written before scopes existed
// hold 0 at byte 32: the keyless namespace.
TEST(KvStore, ConversationsAreOfferedWithinTheirScopeOnly) {
  test_util::TempDir d;
  const auto s = filled(20, 1);
  const auto t = toks(20);
  const uint64_t a = server::key_scope("alpha"), b = server::key_scope("beta");
  ASSERT_NE(a, b);
  ASSERT_NE(a, 0u);
  {
    KvStore kv(d.str(), config(), 42, 8, false);
    const int64_t id = kv.save(-1, *s, std::span(t).first(12), a);
    EXPECT_EQ(kv.find(t, t.size(), a).common, 12u);
    EXPECT_EQ(kv.find(t, t.size(), b).id, -1);
    EXPECT_EQ(kv.find(t, t.size(), 0).id, -1);
    // B's turn with A's conversation as its origin: a file of its own.
    EXPECT_NE(kv.save(id, *s, t, b), id);
    EXPECT_EQ(kv.conversations(), 2u);
    EXPECT_EQ(kv.find(t, t.size(), a).common, 12u);  // A's is unchanged
    EXPECT_EQ(kv.find(t, t.size(), b).common, 20u);
  }
  {
    KvStore kv(d.str(), config(), 42, 8, false);  // a restart: the scopes come from the files
    ASSERT_EQ(kv.conversations(), 2u);
    EXPECT_EQ(kv.find(t, t.size(), a).common, 12u);
    EXPECT_EQ(kv.find(t, t.size(), b).common, 20u);
    EXPECT_EQ(kv.find(t, t.size(), 0).id, -1);
    EXPECT_EQ(kv.find(t, t.size(), server::key_scope("gamma")).id, -1);
  }
  // A file from before scopes (zeros at byte 32): keyless only.
  for (const fs::path& f : kv_files(d.str())) {
    const Fd fd = try_open_file(f.string(), O_WRONLY);
    ASSERT_TRUE(fd);
    const uint64_t zero = 0;
    pwrite_full(fd, &zero, 8, 32);
  }
  KvStore kv(d.str(), config(), 42, 8, false);
  EXPECT_EQ(kv.find(t, t.size(), 0).common, 20u);
  EXPECT_EQ(kv.find(t, t.size(), a).id, -1);
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

// ---------------------------------------------------------------------------
// Crashes during a save. KvStore::on_save_step reports every step of the
// save protocol (each write, fsync, the rename, the directory's fsync); the
// directory is copied there, as a crash at that point leaves it:
//  - kill -9: every completed write is in the file;
//  - power loss: a file's writes since its last fsync landed only in part,
//    in order (its last synced bytes with the new ones up to an offset) or
//    the other way round (the new ones from an offset on), at every record
//    boundary, mid-record and in the header; a rename before the directory's
//    fsync may be undone.
// Each state is opened as a restarted server would, and must offer exactly
// the conversations before the save or exactly those after it: every one of
// them loads in full, and every load, for any prompt (each conversation's
// tokens and every splice of two of them), is a prefix of one of them,
// tokens and KV bits alike. Stale temporary files are gone after the open.

using Files = std::map<std::string, std::string>;  // file name -> bytes (not the lock)

Files read_dir(const std::string& dir) {
  Files out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name == ".lock" || !e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    out[name] = std::string(std::istreambuf_iterator<char>(in), {});
  }
  return out;
}

void write_dir(const std::string& dir, const Files& files) {
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename() != ".lock") fs::remove(e.path());
  for (const auto& [name, bytes] : files) test_util::write_file((fs::path(dir) / name).string(), bytes);
}

// Byte i is `now`'s where the write landed (i < cut, or i >= cut when
// `tail`), else `old`'s; appends that did not land are not in the file, and
// a hole before landed appends reads as zeros.
std::string landed(const std::string& now, const std::string& old, size_t cut, bool tail) {
  const size_t n =
      tail ? (now.size() > cut ? now.size() : old.size()) : std::max(old.size(), std::min(cut, now.size()));
  std::string out(n, '\0');
  for (size_t i = 0; i < n; ++i) {
    const bool from_now = (tail ? i >= cut : i < cut) && i < now.size();
    if (from_now) out[i] = now[i];
    else if (i < old.size()) out[i] = old[i];
  }
  return out;
}

std::set<Files> crash_states(KvStore& kv, const std::function<void()>& save) {
  std::set<Files> out;
  Files durable = read_dir(kv.dir());  // each file as of its last fsync
  out.insert(durable);                 // a crash before the first step
  std::string renamed;                 // renamed, the directory not yet synced
  kv.on_save_step = [&](std::string_view step, const std::string& path) {
    const Files now = read_dir(kv.dir());
    const std::string name = fs::path(path).filename().string();
    if (step == "sync") {
      durable[name] = now.at(name);
    } else if (step == "rename") {
      durable[name] = durable[name + ".tmp"];
      durable.erase(name + ".tmp");
      renamed = name;
    } else if (step == "sync dir") {
      renamed.clear();
    }
    out.insert(now);
    for (const auto& [f, bytes] : now) {
      const auto d = durable.find(f);
      const std::string old = d == durable.end() ? std::string() : d->second;
      if (old == bytes) continue;
      std::set<size_t> cuts = {0, 8, 16, 24, 32, 64};
      for (size_t r = 64; r <= bytes.size(); r += kv.record_bytes())
        cuts.insert({r, r + 16, r + kv.record_bytes() / 2});
      for (const size_t cut : cuts)
        for (const bool tail : {false, true}) {
          Files v = now;
          v[f] = landed(bytes, old, cut, tail);
          out.insert(v);
        }
    }
    if (!renamed.empty()) {
      Files undone = now;
      undone.erase(renamed);
      undone[renamed + ".tmp"] = durable[renamed];
      out.insert(undone);
    }
  };
  save();
  kv.on_save_step = nullptr;
  return out;
}

struct Turn {
  std::vector<int32_t> tokens;
  const Session* session;
};

// Loads what `kv` offers for `prompt`; empty when the load is a prefix of
// one of `turns`, else what is wrong.
std::string load_within(KvStore& kv, const std::vector<int32_t>& prompt, const std::vector<Turn>& turns, size_t* n) {
  const KvStore::Match m = kv.find(prompt, prompt.size());
  Session r(config(), 64, false);
  std::vector<int32_t> got;
  *n = m.id < 0 ? 0 : kv.load(m.id, m.common, r, got);
  if (got.size() != *n || r.n_past != static_cast<int64_t>(*n)) return "load count mismatch";
  if (!std::equal(got.begin(), got.end(), prompt.begin())) return "loaded tokens are not the prompt's";
  if (*n == 0) return "";
  for (const Turn& t : turns)
    if (*n <= t.tokens.size() && std::equal(got.begin(), got.end(), t.tokens.begin()) &&
        same_prefix(*t.session, r, static_cast<int64_t>(*n)))
      return "";
  return fmt::format("{} positions loaded that are no prefix of a saved turn", *n);
}

// Every turn loads in full and every probe stays within `turns`.
std::string offers_exactly(KvStore& kv, const std::vector<Turn>& turns,
                           const std::vector<std::vector<int32_t>>& probes) {
  if (kv.conversations() != turns.size())
    return fmt::format("{} conversations, {} expected", kv.conversations(), turns.size());
  for (const Turn& t : turns) {
    size_t n = 0;
    const std::string why = load_within(kv, t.tokens, turns, &n);
    if (!why.empty()) return why;
    if (n != t.tokens.size()) return fmt::format("a turn of {} positions loads {}", t.tokens.size(), n);
  }
  for (const auto& p : probes) {
    size_t n = 0;
    const std::string why = load_within(kv, p, turns, &n);
    if (!why.empty()) return why;
  }
  return "";
}

// Runs `save` on `kv` (holding `before`, becoming `after`) and checks every
// crash state of it; `extra` prompts are probed too.
void check_crashes(KvStore& kv, const std::function<void()>& save, const std::vector<Turn>& before,
                   const std::vector<Turn>& after, std::vector<std::vector<int32_t>> extra = {}) {
  const std::set<Files> states = crash_states(kv, save);
  std::vector<std::vector<int32_t>> probes = std::move(extra);
  for (const auto* side : {&before, &after})
    for (const Turn& a : *side)
      for (const auto* other : {&before, &after})
        for (const Turn& b : *other)
          for (size_t k = 0; k <= std::max(a.tokens.size(), b.tokens.size()); ++k) {
            std::vector<int32_t> p(a.tokens.begin(), a.tokens.begin() + static_cast<std::ptrdiff_t>(
                                                                            std::min(k, a.tokens.size())));
            if (k < b.tokens.size())
              p.insert(p.end(), b.tokens.begin() + static_cast<std::ptrdiff_t>(k), b.tokens.end());
            if (!p.empty()) probes.push_back(std::move(p));
          }
  test_util::TempDir d;
  int n = 0, saw_before = 0, saw_after = 0;
  for (const Files& state : states) {
    SCOPED_TRACE(fmt::format("crash state {} of {}", n++, states.size()));
    write_dir(d.str(), state);
    std::string why_before, why_after;
    {
      KvStore r(d.str(), config(), 42, 8, false);
      why_after = offers_exactly(r, after, probes);
    }
    if (why_after.empty()) {
      ++saw_after;
    } else {
      write_dir(d.str(), state);  // the probes may have marked damage
      KvStore r(d.str(), config(), 42, 8, false);
      why_before = offers_exactly(r, before, probes);
      EXPECT_EQ(why_before, "") << "neither the state before the save (" << why_before << ") nor after it ("
                                << why_after << ")";
      saw_before += why_before.empty();
    }
    for (const auto& e : fs::directory_iterator(d.str()))
      EXPECT_FALSE(e.path().string().ends_with(".tmp")) << e.path() << " was not removed at open";
  }
  // Both outcomes occur: the states do reach across the save.
  EXPECT_GT(saw_before, 0);
  EXPECT_GT(saw_after, 0);
  std::printf("[ kv crash ] %zu crash states: %d before the save, %d after\n", states.size(), saw_before, saw_after);
}

// A session holding `a`'s positions [0, k) and `b`'s from k on.
std::unique_ptr<Session> spliced(const Session& a, const Session& b, int64_t k, int64_t n) {
  auto s = std::make_unique<Session>(config(), 64, false);
  for (int64_t l = 0; l < config().num_hidden_layers; ++l) {
    LayerCache& o = s->layer(l);
    const LayerCache &x = a.layer(l), &y = b.layer(l);
    if (!o.index_key.empty()) {  // stored in lanes: a row at a time
      std::vector<float> row(static_cast<size_t>(o.index_key.width()));
      for (int64_t p = 0; p < s->capacity(); ++p) {
        (p < k ? x : y).index_key.get_row(p, row.data());
        o.index_key.set_row(p, row.data());
      }
    }
    for (auto [dst, sa, sb] : {std::tuple{&o.latent, &x.latent, &y.latent},
                               std::tuple{&o.rope_key, &x.rope_key, &y.rope_key}}) {
      if (dst->empty()) continue;
      const size_t per = dst->size() / static_cast<size_t>(s->capacity());
      std::copy_n(sa->begin(), per * static_cast<size_t>(k), dst->begin());
      std::copy(sb->begin() + static_cast<std::ptrdiff_t>(per * static_cast<size_t>(k)), sb->end(),
                dst->begin() + static_cast<std::ptrdiff_t>(per * static_cast<size_t>(k)));
    }
  }
  s->n_past = n;
  return s;
}

TEST(KvStore, CrashDuringFirstSave) {
  test_util::TempDir d;
  const auto s = filled(12, 7);
  const auto t = toks(12);
  KvStore kv(d.str(), config(), 42, 8, false);
  check_crashes(kv, [&] { kv.save(-1, *s, t); }, {}, {{t, s.get()}});
}

TEST(KvStore, CrashDuringAppend) {
  test_util::TempDir d;
  const auto s = filled(30, 8);
  const auto t = toks(30);
  KvStore kv(d.str(), config(), 42, 8, false);
  const std::vector<int32_t> first(t.begin(), t.begin() + 10);
  const int64_t id = kv.save(-1, *s, first);
  check_crashes(kv, [&] { EXPECT_EQ(kv.save(id, *s, t), id); }, {{first, s.get()}}, {{t, s.get()}});
}

TEST(KvStore, CrashDuringBranchSave) {
  test_util::TempDir d;
  const auto s = filled(16, 9);
  const auto t = toks(16);
  KvStore kv(d.str(), config(), 42, 8, false);
  const int64_t a = kv.save(-1, *s, t);
  // The branch shares a's first 8 positions, then goes its own way.
  const auto b = spliced(*s, *filled(16, 10), 8, 16);
  std::vector<int32_t> tb(t.begin(), t.begin() + 8);
  for (int i = 0; i < 8; ++i) tb.push_back(200 + i);  // token ids below the fixture's 256
  check_crashes(kv, [&] { EXPECT_NE(kv.save(a, *b, tb), a); }, {{t, s.get()}}, {{t, s.get()}, {tb, b.get()}});
}

// A continuation below the file's count: the records past the 5 good ones
// (a damaged token field at record 5) are hidden before they are overwritten.
TEST(KvStore, CrashWhileOverwritingHiddenRecords) {
  test_util::TempDir d;
  const auto s = filled(12, 11);
  const auto t = toks(12);
  size_t rb = 0;
  {
    KvStore kv(d.str(), config(), 42, 8, false);
    kv.save(-1, *s, t);
    rb = kv.record_bytes();
  }
  std::vector<int32_t> on_disk = t;
  on_disk[5] = 77;
  {
    std::fstream io(kv_files(d.str()).at(0), std::ios::binary | std::ios::in | std::ios::out);
    io.seekp(static_cast<std::streamoff>(64 + 5 * rb));
    io.write(reinterpret_cast<const char*>(&on_disk[5]), 4);
  }
  KvStore kv(d.str(), config(), 42, 8, false);
  const auto m = kv.find(on_disk, on_disk.size());
  Session r(config(), 64, false);
  std::vector<int32_t> got;
  ASSERT_EQ(kv.load(m.id, m.common, r, got), 5u);
  // The next turn, resumed from those 5 positions.
  const auto s2 = spliced(*s, *filled(20, 12), 5, 20);
  std::vector<int32_t> t2(t.begin(), t.begin() + 5);
  for (int i = 0; i < 15; ++i) t2.push_back(150 + i);
  const std::vector<int32_t> good(t.begin(), t.begin() + 5);
  check_crashes(kv, [&] { EXPECT_EQ(kv.save(m.id, *s2, t2), m.id); }, {{good, s.get()}}, {{t2, s2.get()}},
                {on_disk, t});
}

// An unfinished first save (conv-N.kv.tmp) is removed when a store opens the
// directory, even when it is complete; other files are left alone.
TEST(KvStore, StaleTmpRemovedAtOpen) {
  test_util::TempDir d;
  const auto s = filled(12, 13);
  const auto t = toks(12);
  {
    KvStore kv(d.str(), config(), 42, 8, false);
    kv.save(-1, *s, t);
  }
  const fs::path f = kv_files(d.str()).at(0);
  const fs::path tmp = d.path() / "conv-00000007.kv.tmp";
  fs::rename(f, tmp);  // a whole, valid file, but never renamed into place
  test_util::write_file(d.file("notes.kv.tmp"), "not ours");
  test_util::write_file(d.file("conv-00000009.kv.tmp.keep"), "not ours either");
  KvStore kv(d.str(), config(), 42, 8, false);
  EXPECT_EQ(kv.conversations(), 0u);
  EXPECT_EQ(kv.find(t, t.size()).common, 0u);
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_TRUE(fs::exists(d.file("notes.kv.tmp")));
  EXPECT_TRUE(fs::exists(d.file("conv-00000009.kv.tmp.keep")));
  // The directory still works.
  kv.save(-1, *s, t);
  EXPECT_EQ(kv_files(d.str()).size(), 1u);
}

// A header count larger than the file: only the records present are
// offered (a partial last one is not), and they load bit for bit.
TEST(KvStore, CountLargerThanTheFile) {
  test_util::TempDir d;
  const auto s = filled(20, 14);
  const auto t = toks(20);
  size_t rb = 0;
  {
    KvStore kv(d.str(), config(), 42, 8, false);
    kv.save(-1, *s, std::span(t).first(12));
    rb = kv.record_bytes();
  }
  const fs::path f = kv_files(d.str()).at(0);
  auto set_count = [&](uint64_t count) {
    std::fstream io(f, std::ios::binary | std::ios::in | std::ios::out);
    io.seekp(24);
    io.write(reinterpret_cast<const char*>(&count), 8);
  };
  auto offered = [&](size_t want) {
    KvStore kv(d.str(), config(), 42, 8, false);
    if (want == 0) {
      EXPECT_EQ(kv.conversations(), 0u);
      return;
    }
    ASSERT_EQ(kv.conversations(), 1u);
    const auto m = kv.find(t, t.size());
    EXPECT_EQ(m.common, want);
    Session r(config(), 64, false);
    std::vector<int32_t> got;
    EXPECT_EQ(kv.load(m.id, m.common, r, got), want);
    EXPECT_TRUE(same_prefix(*s, r, static_cast<int64_t>(want)));
  };
  for (const uint64_t count : {13ull, 1000ull, (1ull << 40), ~0ull}) {
    SCOPED_TRACE(count);
    set_count(count);
    offered(12);
  }
  // Records 7 and a half present.
  fs::resize_file(f, 64 + 7 * rb + rb / 2);
  set_count(12);
  offered(7);
  // The header alone, or less than a header.
  fs::resize_file(f, 64);
  offered(0);
  fs::resize_file(f, 40);
  offered(0);
  EXPECT_TRUE(fs::exists(f));  // not trusted, not deleted
  // Records past a clamped count are overwritten by the next turn.
  {
    KvStore kv(d.str(), config(), 42, 8, false);
    fs::remove(f);
    const int64_t id = kv.save(-1, *s, std::span(t).first(12));
    kv.save(id, *s, t);
  }
  set_count(500);
  offered(20);
  {
    KvStore kv(d.str(), config(), 42, 8, false);
    const auto m = kv.find(t, t.size());
    auto s3 = filled(24, 14);
    std::vector<int32_t> t3 = t;
    for (int i = 0; i < 4; ++i) t3.push_back(100 + i);
    EXPECT_EQ(kv.save(m.id, *s3, t3), m.id);
    EXPECT_EQ(kv.find(t3, t3.size()).common, 24u);
  }
  KvStore kv(d.str(), config(), 42, 8, false);
  std::vector<int32_t> t3 = t;
  for (int i = 0; i < 4; ++i) t3.push_back(100 + i);
  const auto m = kv.find(t3, t3.size());
  ASSERT_EQ(m.common, 24u);
  Session r(config(), 64, false);
  std::vector<int32_t> got;
  EXPECT_EQ(kv.load(m.id, m.common, r, got), 24u);
  EXPECT_TRUE(same_prefix(*filled(24, 14), r, 24));
}

// --kv-dir may be shared: links planted under the names the store writes
// (the temporary of a first save, a conversation file) are never followed;
// the files they point to stay as they were.
TEST(KvStore, PlantedLinksAreNeverFollowed) {
  test_util::TempDir d, other;
  const std::string sentinel = other.file("sentinel");
  test_util::write_file(sentinel, "precious");
  const auto s = filled(12, 21);
  const auto t = toks(12);
  {
    KvStore kv(d.str(), config(), 42, 8, false);
    for (int i = 0; i < 32; ++i) {
      char name[40];
      std::snprintf(name, sizeof name, "conv-%08d.kv.tmp", i);
      fs::create_symlink(sentinel, d.path() / name);
    }
    const int64_t id = kv.save(-1, *s, t);
    EXPECT_TRUE(test_util::read_file(sentinel) == "precious") << "the link was followed";
    ASSERT_EQ(kv_files(d.str()).size(), 1u);
    EXPECT_FALSE(fs::is_symlink(kv_files(d.str()).at(0)));
    // The conversation file replaced by a link: the next turn's append fails
    // (a warning in the server) instead of writing through it.
    const fs::path f = kv_files(d.str()).at(0);
    fs::remove(f);
    fs::create_symlink(sentinel, f);
    auto s2 = filled(16, 21);
    auto t2 = toks(16);
    EXPECT_ANY_THROW(kv.save(id, *s2, t2));
    EXPECT_TRUE(test_util::read_file(sentinel) == "precious") << "the link was followed";
  }
  // A new store over the directory does not take the link for a conversation.
  KvStore again(d.str(), config(), 42, 8, false);
  EXPECT_EQ(again.conversations(), 0u);
  EXPECT_TRUE(test_util::read_file(sentinel) == "precious") << "the link was followed";
}

TEST(KvStore, RefusesAPathThatIsNotADirectory) {
  test_util::TempDir d;
  test_util::write_file(d.file("f"), "x");
  const std::string msg = test_util::error_of([&] { KvStore kv(d.file("f"), config(), 1, 8, false); });
  EXPECT_NE(msg.find("--kv-dir"), std::string::npos) << msg;
}

}  // namespace
}  // namespace strata::kv_store_test
