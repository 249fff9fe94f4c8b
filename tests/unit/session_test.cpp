// Session state: truncate() really forgets positions. After truncate(k) the
// session accepts position k next (and refuses anything after it, which would
// leave a gap), and re-forwarding from k computes exactly what a fresh
// session fed the same tokens computes -- for the main model and the MTP layer.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "experts/expert_store.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/session.h"
#include "test_util.h"
#include "core/json.h"

namespace strata::session_test {
namespace {

using test_util::error_of;

class SessionTruncate : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/glm5-tiny-bf16";
    model = load_model(dir);
    const std::string rp = dir + "/reference.json";
    ids = parse_json(test_util::read_file(rp), rp)["ids"].get<std::vector<int32_t>>();
    ids.resize(kT);
    // A continuation unlike the original from position kK on.
    alt = ids;
    for (int64_t p = kK; p < kT; ++p) alt[p] = (ids[p] * 7 + 13) % static_cast<int32_t>(model->config.vocab_size);
    ASSERT_NE(alt, ids);
  }

  // Main-model rows [p0, p1) of `toks`; logits and hidden for all of them.
  void fwd(ModelRunner& r, Session& s, const std::vector<int32_t>& toks, int64_t p0, int64_t p1,
           std::vector<float>& logits, std::vector<float>& hidden) {
    std::vector<Row> rows;
    for (int64_t p = p0; p < p1; ++p) rows.push_back({&s, static_cast<int32_t>(p), toks[p], true});
    logits.assign(static_cast<size_t>((p1 - p0) * model->config.vocab_size), 0.0f);
    hidden.assign(static_cast<size_t>((p1 - p0) * model->config.hidden_size), 0.0f);
    r.forward(rows, {}, logits.data(), hidden.data());
  }
  // MTP rows [p0, p1): row p carries token toks[p+1] and the hidden state at p.
  std::vector<float> mtp(ModelRunner& r, Session& s, const std::vector<int32_t>& toks, int64_t p0, int64_t p1,
                         const std::vector<float>& hidden) {
    std::vector<Row> rows;
    for (int64_t p = p0; p < p1; ++p) rows.push_back({&s, static_cast<int32_t>(p), toks[p + 1], true});
    std::vector<float> logits(static_cast<size_t>((p1 - p0) * model->config.vocab_size));
    r.forward_mtp(rows, hidden.data(), {}, logits.data());
    return logits;
  }

  static constexpr int64_t kT = 24, kK = 10;  // sequence length, truncation point (DSA selects past index_topk=16)
  std::unique_ptr<Model> model;
  std::vector<int32_t> ids, alt;
};

TEST_F(SessionTruncate, ForgetsPositionsAndReforwardEqualsFresh) {
  ThreadPool pool(2);
  ResidentExpertStore store(model->weights.experts);
  ModelRunner runner(*model, store, pool);
  const int64_t D = model->config.hidden_size;
  std::vector<float> logits, hidden;

  // Session a: the whole original sequence, main model and MTP.
  Session a(model->config, kT, true);
  fwd(runner, a, ids, 0, kT, logits, hidden);
  std::vector<float> h_prefix(hidden.begin(), hidden.begin() + kK * D);
  mtp(runner, a, ids, 0, kT - 1, hidden);
  ASSERT_EQ(a.n_past, kT);
  ASSERT_EQ(a.mtp_n_past, kT - 1);

  a.truncate(kK);
  EXPECT_EQ(a.n_past, kK);
  EXPECT_EQ(a.mtp_n_past, kK);
  a.truncate(kK + 3);  // never grows
  EXPECT_EQ(a.n_past, kK);
  EXPECT_EQ(a.mtp_n_past, kK);

  // Positions after kK would leave a gap: refused, for both.
  std::vector<float> one(static_cast<size_t>(model->config.vocab_size)), one_h(static_cast<size_t>(D));
  for (int64_t p : {kK + 1, kK + 2}) {
    Row r{&a, static_cast<int32_t>(p), alt[p], true};
    const std::string msg = error_of([&] { runner.forward({&r, 1}, {}, one.data(), one_h.data()); });
    EXPECT_NE(msg.find("gap"), std::string::npos) << "position " << p << ": " << msg;
    const std::string mmsg = error_of([&] { runner.forward_mtp({&r, 1}, one_h.data(), {}, one.data()); });
    EXPECT_NE(mmsg.find("gap"), std::string::npos) << "MTP position " << p << ": " << mmsg;
  }
  EXPECT_EQ(a.n_past, kK) << "a refused forward must not advance the session";
  EXPECT_EQ(a.mtp_n_past, kK);

  // Session b: fresh, fed the surviving prefix exactly as a was.
  Session b(model->config, kT, true);
  std::vector<float> b_logits, b_hidden;
  fwd(runner, b, ids, 0, kK, b_logits, b_hidden);
  ASSERT_EQ(b_hidden, h_prefix);
  mtp(runner, b, ids, 0, kK, b_hidden);

  // Both continue with the new tokens: first one position (decode), then the
  // rest as one batch; logits bit-identical.
  std::vector<float> a_logits, a_hidden, a_h2, b_h2;
  fwd(runner, a, alt, kK, kK + 1, a_logits, a_hidden);
  fwd(runner, b, alt, kK, kK + 1, b_logits, b_hidden);
  EXPECT_EQ(a_logits, b_logits) << "position " << kK << " after truncate differs from a fresh session";
  a_h2 = a_hidden;
  b_h2 = b_hidden;
  fwd(runner, a, alt, kK + 1, kT, a_logits, a_hidden);
  fwd(runner, b, alt, kK + 1, kT, b_logits, b_hidden);
  EXPECT_EQ(a_logits, b_logits) << "positions " << kK + 1 << ".." << kT - 1 << " after truncate differ";
  EXPECT_EQ(a.n_past, kT);
  a_h2.insert(a_h2.end(), a_hidden.begin(), a_hidden.end());
  b_h2.insert(b_h2.end(), b_hidden.begin(), b_hidden.end());
  ASSERT_EQ(a_h2, b_h2);
  // ... and they differ from the original continuation (the test changed something).
  Session c(model->config, kT, false);
  std::vector<float> c_logits, c_hidden;
  fwd(runner, c, ids, 0, kT, c_logits, c_hidden);
  EXPECT_FALSE(std::equal(a_logits.begin(), a_logits.end(),
                          c_logits.begin() + (kK + 1) * model->config.vocab_size));

  // MTP follows: rows kK.. of the new sequence, after truncate == fresh.
  const std::vector<float> am = mtp(runner, a, alt, kK, kT - 1, a_h2);
  const std::vector<float> bm = mtp(runner, b, alt, kK, kT - 1, b_h2);
  EXPECT_EQ(am, bm) << "MTP after truncate differs from a fresh session";
  EXPECT_EQ(a.mtp_n_past, kT - 1);
}

TEST_F(SessionTruncate, ToZeroIsAFreshSession) {
  ThreadPool pool(1);
  ResidentExpertStore store(model->weights.experts);
  ModelRunner runner(*model, store, pool);
  std::vector<float> la, ha, lb, hb;
  Session a(model->config, kT, true);
  fwd(runner, a, ids, 0, kT, la, ha);
  mtp(runner, a, ids, 0, kT - 1, ha);
  a.truncate(0);
  EXPECT_EQ(a.n_past, 0);
  EXPECT_EQ(a.mtp_n_past, 0);
  Row r{&a, 1, alt[1], true};
  std::vector<float> one(static_cast<size_t>(model->config.vocab_size));
  std::vector<float> one_h(static_cast<size_t>(model->config.hidden_size));
  EXPECT_NE(error_of([&] { runner.forward({&r, 1}, {}, one.data(), one_h.data()); }).find("gap"), std::string::npos);
  // Re-fed from position 0 one row at a time: equal to a fresh session.
  Session b(model->config, kT, true);
  std::vector<float> a_all, b_all;
  for (int64_t p = 0; p < kT; ++p) {
    fwd(runner, a, alt, p, p + 1, la, ha);
    fwd(runner, b, alt, p, p + 1, lb, hb);
    a_all.insert(a_all.end(), la.begin(), la.end());
    b_all.insert(b_all.end(), lb.begin(), lb.end());
  }
  EXPECT_EQ(a_all, b_all);
}

}  // namespace
}  // namespace strata::session_test
