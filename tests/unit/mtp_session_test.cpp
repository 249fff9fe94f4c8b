// A session that keeps the MTP layer's state (--spec mtp, --spec auto) reuses
// exactly the positions a session without it reuses, and answers exactly
// what a fresh session answers:
//  - a prompt that leaves the held tokens part-way (chat, prefix reuse): the
//    MTP state of the last shared position is computed again from the
//    session's hidden states, never by prefilling a main-model position
//    again; the MTP state then equals teacher forcing;
//  - a session handed back and adopted again (the server's idle pool);
//  - a conversation read back from --kv-dir (only the main layers' keys are
//    saved): every loaded position is reused, short or long.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/session.h"
#include "runtime/engine.h"
#include "runtime/generation.h"
#include "runtime/text_model.h"
#include "server/kv_store.h"
#include "test_util.h"

namespace strata::mtp_session_test {
namespace {

const std::string kTiny = std::string(STRATA_SOURCE_DIR) + "/models/glm5-strata-tiny";
const SpecMode kModes[] = {SpecMode::Off, SpecMode::Mtp, SpecMode::Auto};

struct Fixture {
  std::shared_ptr<const Model> model = std::shared_ptr<const Model>(load_model(kTiny, LoadOptions{.load_mtp = true}));
  TextModel tm = open_text_model(kTiny, model->config, "raw", true);
  const ModelConfig& c() const { return model->config; }
  std::unique_ptr<Engine> engine(SpecMode mode) const {
    EngineOptions o;
    o.threads = 1;
    o.verbose = false;
    o.spec.mode = mode;
    o.spec.k = 4;
    return std::make_unique<Engine>(model, o);
  }
  std::unique_ptr<Sequence> sequence(Engine& e) const {
    return std::make_unique<Sequence>(c(), 256, &tm.tok, tm.stop_ids, &e.speculator());
  }
  std::vector<int32_t> then(std::vector<int32_t> held, const char* text) const {
    const std::vector<int32_t> more = tm.tok.encode(text, false);
    held.insert(held.end(), more.begin(), more.end());
    return held;
  }
};

GenerationParams greedy(int64_t n) {
  GenerationParams p;
  p.sampling.temperature = 0.0;
  p.max_tokens = n;
  p.ignore_eos = true;
  return p;
}

GenerationParams seeded(int64_t n) {
  GenerationParams p = greedy(n);
  p.sampling.temperature = 0.9;
  p.sampling.top_p = 0.95;
  p.sampling.seed = 7;
  return p;
}

std::vector<int32_t> answer(Engine& e, Sequence& seq, const std::vector<int32_t>& prompt, const GenerationParams& p) {
  seq.begin(prompt, p);
  std::vector<int32_t> got;
  run_turn(
      e, seq, [&](const StepOutput& o) { got.insert(got.end(), o.tokens.begin(), o.tokens.end()); },
      [] { return false; });
  return got;
}

// The MTP layer's state of `seq` equals teacher forcing of its held tokens
// (main forward for the hidden states, then the MTP layer), bit for bit.
void expect_mtp_state_teacher_forced(Engine& e, Sequence& seq, const std::string& what) {
  const ModelConfig& c = e.config();
  const Session& a = seq.session();
  const int64_t n = a.mtp_n_past;
  EXPECT_GE(n, a.n_past - 5) << what << ": the MTP state fell behind";
  Session ref(c, a.capacity(), true);
  const std::vector<int32_t>& toks = seq.tokens();
  std::vector<Row> rows;
  for (int64_t p = 0; p < a.n_past; ++p) rows.push_back({&ref, static_cast<int32_t>(p), toks[p], false});
  std::vector<float> hidden(static_cast<size_t>(a.n_past * c.hidden_size));
  e.forward(rows, nullptr, hidden.data());
  rows.clear();
  for (int64_t p = 0; p < n; ++p) rows.push_back({&ref, static_cast<int32_t>(p), toks[p + 1], false});
  e.forward_mtp(rows, hidden.data(), nullptr);
  const LayerCache& x = a.layer(c.num_hidden_layers);
  const LayerCache& y = ref.layer(c.num_hidden_layers);
  const auto k = static_cast<std::ptrdiff_t>(n * c.kv_lora_rank), r = static_cast<std::ptrdiff_t>(n * c.qk_rope_head_dim);
  EXPECT_TRUE(std::equal(x.latent.begin(), x.latent.begin() + k, y.latent.begin())) << what;
  EXPECT_TRUE(std::equal(x.rope_key.begin(), x.rope_key.begin() + r, y.rope_key.begin())) << what;
  EXPECT_EQ(a.hidden_n, a.n_past) << what;
  EXPECT_TRUE(std::equal(hidden.begin(), hidden.end(), a.hidden.begin())) << what << ": the session's hidden states";
}

TEST(MtpSession, ReusesWhatASessionWithoutMtpReuses) {
  const Fixture f;
  auto off = f.engine(SpecMode::Off);
  const std::vector<int32_t> a = f.tm.tok.encode("Abandon, v. t.", true);
  for (SpecMode m : kModes) {
    const std::string name = spec_mode_name(m);
    auto e = f.engine(m);
    auto seq = f.sequence(*e);
    answer(*e, *seq, a, greedy(24));
    // A prompt that leaves the held tokens 5 positions before their end.
    const std::vector<int32_t>& held = seq->tokens();
    const size_t k = held.size() - 5;
    const std::vector<int32_t> b = f.then(std::vector<int32_t>(held.begin(), held.begin() + static_cast<std::ptrdiff_t>(k)),
                                          " Zeal, n. Ardor.");
    auto fresh = f.sequence(*off);
    const std::vector<int32_t> want_b = answer(*off, *fresh, b, greedy(24));
    EXPECT_EQ(answer(*e, *seq, b, greedy(24)), want_b) << name;
    EXPECT_EQ(seq->reused(), static_cast<int64_t>(k)) << name << ": positions reused";
    if (m == SpecMode::Mtp) {
      EXPECT_GT(seq->drafted(), 0) << name << ": the MTP state was dropped";
      expect_mtp_state_teacher_forced(*e, *seq, name + " after a prompt that left the held tokens");
    }
    // Handed back and adopted (the server's idle sessions), then a prompt
    // that continues everything held.
    const std::vector<int32_t> held2 = seq->tokens();
    Sequence adopted(seq->release_session(), held2, f.c(), &f.tm.tok, f.tm.stop_ids, &e->speculator());
    const std::vector<int32_t> c = f.then(held2, " Yearn, v. i.");
    fresh = f.sequence(*off);
    const std::vector<int32_t> want_c = answer(*off, *fresh, c, greedy(16));
    EXPECT_EQ(answer(*e, adopted, c, greedy(16)), want_c) << name;
    EXPECT_EQ(adopted.reused(), static_cast<int64_t>(held2.size())) << name << ": positions reused after adoption";
    if (m == SpecMode::Mtp) {
      EXPECT_GT(adopted.drafted(), 0) << name << ": the MTP state was dropped";
      expect_mtp_state_teacher_forced(*e, adopted, name + " after adoption");
    }
  }
}

// The MTP state's sync rows (Row::keys_only) write the MTP layer's keys
// and nothing else: the same latents, rope keys and indexer keys as a
// forward running every row whole, f32 and f16 caches, and the rows that
// run whole (logits, hidden state) get the same floats beside them. Checked
// by breaking it: keys-only rows skipping the indexer keys, or written from
// the wrong row's input, fail here.
TEST(MtpSession, KeysOnlyRowsWriteTheSameKeysAndTheWholeRowsTheSameOutputs) {
  const Fixture f;
  auto e = f.engine(SpecMode::Mtp);
  const ModelConfig& c = f.c();
  const int64_t D = c.hidden_size, V = c.vocab_size, N = c.num_hidden_layers;
  const std::vector<int32_t> toks =
      f.tm.tok.encode("Abandon, v. t. To give up wholly; to forsake. Zeal, n. Ardor in a cause.", true);
  const auto n = static_cast<int64_t>(toks.size()) - 1;
  ASSERT_GT(n, 20);
  for (KvType kv : {KvType::F32, KvType::F16}) {
    Session main(c, 256, true, kv);
    std::vector<Row> rows;
    for (int64_t p = 0; p < n; ++p) rows.push_back({&main, static_cast<int32_t>(p), toks[p], false});
    std::vector<float> hidden(static_cast<size_t>(n * D));
    e->forward(rows, nullptr, hidden.data());
    // Whole rows: 5, 17 (logits) and the last (logits); the rest keys only.
    const auto whole = [&](int64_t p) { return p == 5 || p == 17 || p == n - 1; };
    const auto logits_at = [&](int64_t p) { return p == 17 || p == n - 1; };
    Session ref(c, 256, true, kv), got(c, 256, true, kv);
    std::vector<float> lr(static_cast<size_t>(2 * V)), lg(lr.size()), hr(hidden.size()), hg(hidden.size(), -1.0f);
    for (int pass = 0; pass < 2; ++pass) {
      Session& s = pass == 0 ? ref : got;
      rows.clear();
      for (int64_t p = 0; p < n; ++p)
        rows.push_back({&s, static_cast<int32_t>(p), toks[p + 1], logits_at(p), pass == 1 && !whole(p)});
      e->forward_mtp(rows, hidden.data(), pass == 0 ? lr.data() : lg.data(), pass == 0 ? hr.data() : hg.data());
    }
    const std::string what = kv == KvType::F16 ? "f16 keys" : "f32 keys";
    const LayerCache& x = got.layer(N);
    const LayerCache& y = ref.layer(N);
    EXPECT_EQ(x.latent, y.latent) << what;
    EXPECT_EQ(x.rope_key, y.rope_key) << what;
    EXPECT_EQ(x.latent16, y.latent16) << what;
    EXPECT_EQ(x.rope_key16, y.rope_key16) << what;
    ASSERT_FALSE(y.index_key.empty()) << "the bundled model's MTP layer has an indexer";
    EXPECT_TRUE(x.index_key == y.index_key) << what;
    EXPECT_EQ(got.mtp_n_past, n) << what;
    EXPECT_EQ(lg, lr) << what << ": logits of the whole rows";
    for (int64_t p = 0; p < n; ++p) {
      if (!whole(p)) continue;
      EXPECT_TRUE(std::equal(hg.begin() + p * D, hg.begin() + (p + 1) * D, hr.begin() + p * D))
          << what << ": hidden state of row " << p;
    }
  }
}


// The server's session budget counts what a session holds: the MTP layer's
// state and the hidden states too.
TEST(MtpSession, BytesForIsWhatASessionHolds) {
  const Fixture f;
  for (bool mtp : {false, true})
    for (int64_t cap : {96, 37, 1})  // 37, 1: the indexer keys' last block of 16 only partly used
      EXPECT_EQ(Session(f.c(), cap, mtp).bytes(), Session::bytes_for(f.c(), cap, mtp)) << mtp << " " << cap;
  EXPECT_GT(Session::bytes_for(f.c(), 96, true), Session::bytes_for(f.c(), 96, false));
  std::printf("[ bytes ] per position: %zu without MTP state, %zu with (MTP layer + hidden state)\n",
              Session::bytes_for(f.c(), 1, false), Session::bytes_for(f.c(), 1, true));
}

TEST(MtpSession, ResumedFromKvDirReusesEveryPosition) {
  const Fixture f;
  auto off = f.engine(SpecMode::Off);
  const test_util::TempDir tmp;
  for (SpecMode m : kModes)
    for (int64_t n : {8, 40}) {  // held positions: fewer and more than the MTP catch-up
      const std::string name = std::string(spec_mode_name(m)) + " n=" + std::to_string(n);
      auto e = f.engine(m);
      auto seq = f.sequence(*e);
      answer(*e, *seq, f.tm.tok.encode("Ink, n.", true), greedy(n));
      const std::vector<int32_t> held = seq->tokens();
      server::KvStore kv(tmp.file(name), f.c(), 1, 4, false);
      const int64_t id = kv.save(-1, seq->session(), held);
      const std::vector<int32_t> b = f.then(held, " Quill, n.");
      for (const GenerationParams& p : {greedy(20), seeded(20)}) {
        auto s = std::make_unique<Session>(f.c(), 256, e->speculator().uses_mtp());
        std::vector<int32_t> loaded;
        ASSERT_EQ(kv.load(id, held.size(), *s, loaded), held.size()) << name;
        Sequence resumed(std::move(s), loaded, f.c(), &f.tm.tok, f.tm.stop_ids, &e->speculator());
        auto fresh = f.sequence(*off);
        const std::vector<int32_t> want = answer(*off, *fresh, b, p);
        EXPECT_EQ(answer(*e, resumed, b, p), want) << name << " temperature " << p.sampling.temperature;
        EXPECT_EQ(resumed.reused(), static_cast<int64_t>(held.size())) << name << ": positions resumed";
      }
    }
}

// The indexer key cache (LaneRows): rows stored in lanes read back as
// written, at every position of partly used blocks, each row in the layout
// gemm_f32_lanes reads (lanes_offset), and room for whole blocks of 16.
TEST(LaneRows, RowsReadBackAsWrittenInTheKernelsLayout) {
  for (int64_t width : {1, 16, 33, 128})
    for (int64_t rows : {1, 15, 16, 17, 40}) {
      LaneRows k;
      k.assign(rows, width);
      EXPECT_EQ(k.size(), static_cast<size_t>((rows + 15) / 16 * 16 * width));
      EXPECT_EQ(k.rows(), rows);
      EXPECT_EQ(k.width(), width);
      std::vector<float> row(static_cast<size_t>(width)), back(row.size());
      for (int64_t j = 0; j < rows; ++j) {
        for (int64_t c = 0; c < width; ++c) row[static_cast<size_t>(c)] = static_cast<float>(j * 1000 + c);
        k.set_row(j, row.data());
      }
      for (int64_t j = 0; j < rows; ++j) {
        k.get_row(j, back.data());
        for (int64_t c = 0; c < width; ++c) {
          ASSERT_EQ(back[static_cast<size_t>(c)], static_cast<float>(j * 1000 + c)) << width << " " << rows << " " << j;
          ASSERT_EQ(k.data()[lanes_offset(j, c, width)], static_cast<float>(j * 1000 + c));
        }
      }
    }
}

}  // namespace
}  // namespace strata::mtp_session_test
