#include "server/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

namespace strata::server {

namespace {
uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}
}  // namespace

CountingExpertStore::CountingExpertStore(ExpertStore& inner, const ModelConfig& c) : inner_(inner) {
  usage_.resize(static_cast<size_t>(c.num_hidden_layers));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    if (c.is_moe(l)) usage_[static_cast<size_t>(l)].assign(static_cast<size_t>(c.n_routed_experts), 0);
}

void CountingExpertStore::acquire(int64_t layer, std::span<const int32_t> experts, std::vector<const MlpWeights*>& out) {
  if (layer >= 0 && layer < static_cast<int64_t>(usage_.size())) {
    auto& u = usage_[static_cast<size_t>(layer)];
    for (int32_t e : experts)
      if (e >= 0 && static_cast<size_t>(e) < u.size()) ++u[static_cast<size_t>(e)];
  }
  inner_.acquire(layer, experts, out);
}

const char* finish_name(Finish f) {
  switch (f) {
    case Finish::None: return "none";
    case Finish::Stop: return "stop";
    case Finish::Length: return "length";
    case Finish::Timeout: return "timeout";
    case Finish::Cancelled: return "cancelled";
    case Finish::Error: return "error";
  }
  return "?";
}

bool Job::take(std::string& text_out, std::vector<TokenLogprob>& lp_out, int ms) {
  std::unique_lock l(mu);
  cv.wait_for(l, std::chrono::milliseconds(ms),
              [&] { return !text.empty() || !logprobs.empty() || finish != Finish::None; });
  text_out += text;
  text.clear();
  for (auto& lp : logprobs) lp_out.push_back(std::move(lp));
  logprobs.clear();
  return finish != Finish::None;
}

Scheduler::Scheduler(const ServerModel& m, const SchedulerOptions& o)
    : m_(m), opts_(o), vocab_(m.model->config.vocab_size) {
  opts_.parallel = std::max(1, opts_.parallel);
  opts_.queue = std::max(0, opts_.queue);
  opts_.keep_sessions = std::max(0, opts_.keep_sessions);
  opts_.prefill_chunk = std::max<int64_t>(1, opts_.prefill_chunk);
  work_.resize(static_cast<size_t>(vocab_));
  if (m_.kv) stats_.kv_conversations = m_.kv->conversations();
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() { shutdown(); }

void Scheduler::shutdown() {
  {
    std::lock_guard l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool Scheduler::submit(const std::shared_ptr<Job>& job) {
  std::lock_guard l(mu_);
  const int64_t free_slots = std::max<int64_t>(0, opts_.parallel - stats_.active);
  if (stop_ || static_cast<int64_t>(waiting_.size()) >= opts_.queue + free_slots) {
    ++stats_.rejected;
    return false;
  }
  job->submit_ns = now_ns();
  job->prompt_tokens = static_cast<int64_t>(job->prompt.size());
  waiting_.push_back(job);
  ++stats_.requests;
  stats_.queued = static_cast<int64_t>(waiting_.size());
  cv_.notify_all();
  return true;
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard l(mu_);
  return stats_;
}

void Scheduler::loop() {
  std::vector<std::shared_ptr<Job>> admit_now, expired;
  for (;;) {
    admit_now.clear();
    expired.clear();
    {
      std::unique_lock l(mu_);
      cv_.wait(l, [&] { return stop_ || !waiting_.empty() || !active_.empty(); });
      if (stop_) break;
      const uint64_t now = now_ns();
      for (auto it = waiting_.begin(); it != waiting_.end();) {
        Job& j = **it;
        if (j.cancel.load() || (j.deadline_ns && now > j.deadline_ns)) {
          expired.push_back(*it);
          it = waiting_.erase(it);
        } else {
          ++it;
        }
      }
      while (static_cast<int64_t>(active_.size() + admit_now.size()) < opts_.parallel && !waiting_.empty()) {
        admit_now.push_back(waiting_.front());
        waiting_.pop_front();
      }
      stats_.queued = static_cast<int64_t>(waiting_.size());
      stats_.active = static_cast<int64_t>(active_.size() + admit_now.size());
    }
    for (auto& j : expired) {
      Seq s;
      s.job = j;
      end(s, j->cancel.load() ? Finish::Cancelled : Finish::Timeout);
    }
    for (auto& j : admit_now) admit(j);
    step();
    publish_stats();
  }
  // Shutting down: every request ends.
  for (Seq& s : active_) end(s, Finish::Cancelled, "the server is shutting down");
  active_.clear();
  std::deque<std::shared_ptr<Job>> rest;
  {
    std::lock_guard l(mu_);
    rest.swap(waiting_);
  }
  for (auto& j : rest) {
    Seq s;
    s.job = j;
    end(s, Finish::Cancelled, "the server is shutting down");
  }
}

void Scheduler::admit(const std::shared_ptr<Job>& job) {
  Seq s;
  s.job = job;
  const std::vector<int32_t>& p = job->prompt;
  // The idle session sharing the longest prefix; at least the last prompt
  // token is recomputed, for its logits.
  size_t best = idle_.size(), best_common = 0;
  for (size_t i = 0; i < idle_.size(); ++i) {
    const auto& t = idle_[i].tokens;
    size_t c = 0;
    const size_t lim = std::min(t.size(), p.size() - 1);
    while (c < lim && t[c] == p[c]) ++c;
    if (c > best_common) best = i, best_common = c;
  }
  if (best == idle_.size() && !idle_.empty() &&
      static_cast<int64_t>(active_.size() + idle_.size()) >= opts_.parallel + opts_.keep_sessions) {
    // No shared prefix: recycle the least recently used session's memory.
    best = 0;
    for (size_t i = 1; i < idle_.size(); ++i)
      if (idle_[i].last_used < idle_[best].last_used) best = i;
    best_common = 0;
  }
  // A conversation saved on disk (--kv-dir) that shares more: its records
  // are read into a session instead of prefilling them again.
  KvStore::Match saved;
  if (m_.kv && p.size() > 1) saved = m_.kv->find(p, p.size() - 1);
  const bool from_disk = saved.id >= 0 && saved.common > best_common;
  if (from_disk && best == idle_.size() && !idle_.empty() &&
      static_cast<int64_t>(active_.size() + idle_.size()) >= opts_.parallel + opts_.keep_sessions) {
    best = 0;
    for (size_t i = 1; i < idle_.size(); ++i)
      if (idle_[i].last_used < idle_[best].last_used) best = i;
  }
  if (best < idle_.size()) {
    s.session = std::move(idle_[best].session);
    s.tokens = std::move(idle_[best].tokens);
    s.conv = idle_[best].conv;
    idle_.erase(idle_.begin() + static_cast<std::ptrdiff_t>(best));
    s.session->truncate(static_cast<int64_t>(best_common));
    s.tokens.resize(best_common);
  }
  if (from_disk) {
    try {
      if (!s.session) s.session = std::make_unique<Session>(m_.model->config, opts_.ctx, false);
      best_common = m_.kv->load(saved.id, saved.common, *s.session, s.tokens);
      s.conv = saved.id;
      std::lock_guard l(mu_);
      stats_.kv_positions_loaded += best_common;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "strata: kv: resuming failed (%s); prefilling instead\n", e.what());
      if (s.session) s.session->truncate(0);
      s.tokens.clear();
      s.conv = -1;
      best_common = 0;
    }
  }
  if (!s.session) {
    try {
      s.session = std::make_unique<Session>(m_.model->config, opts_.ctx, false);
    } catch (const std::bad_alloc&) {
      end(s, Finish::Error, "out of memory for a new session");
      return;
    }
  }
  job->cached_tokens = static_cast<int64_t>(best_common);
  s.sampler = std::make_unique<Sampler>(vocab_, job->sampling);
  s.sampler->reset(p);
  s.decoder = std::make_unique<StreamDecoder>(*m_.tok, /*skip_special=*/false);
  s.stops = std::make_unique<StopStrings>(job->stop);
  s.prefilling = true;
  {
    std::lock_guard l(mu_);
    stats_.cached_tokens += best_common;
    stats_.prompt_tokens += p.size();
  }
  active_.push_back(std::move(s));
}

void Scheduler::step() {
  const uint64_t now = now_ns();
  for (Seq& s : active_) {
    if (s.job->cancel.load()) end(s, Finish::Cancelled);
    else if (s.job->deadline_ns && now > s.job->deadline_ns) end(s, Finish::Timeout);
  }
  std::erase_if(active_, [](const Seq& s) { return !s.job; });

  rows_.clear();
  std::vector<size_t> owners;  // active_ index of each logits row, in row order
  std::vector<std::pair<size_t, int64_t>> prefilled;  // (active_ index, rows this step)
  for (size_t i = 0; i < active_.size(); ++i) {
    Seq& s = active_[i];
    if (s.prefilling || !s.next) continue;
    rows_.push_back({s.session.get(), static_cast<int32_t>(s.tokens.size()), *s.next, true});
    owners.push_back(i);
  }
  int64_t budget = opts_.prefill_chunk;
  for (size_t i = 0; i < active_.size() && budget > 0; ++i) {
    Seq& s = active_[i];
    if (!s.prefilling) continue;
    const int64_t n = static_cast<int64_t>(s.job->prompt.size());
    const int64_t start = static_cast<int64_t>(s.tokens.size());
    const int64_t k = std::min(budget, n - start);
    for (int64_t p = start; p < start + k; ++p) {
      const bool last = p == n - 1;
      rows_.push_back({s.session.get(), static_cast<int32_t>(p), s.job->prompt[static_cast<size_t>(p)], last});
      if (last) owners.push_back(i);
    }
    prefilled.emplace_back(i, k);
    budget -= k;
  }
  if (rows_.empty()) return;

  logits_.resize(owners.size() * static_cast<size_t>(vocab_));
  try {
    m_.runner->forward(rows_, m_.forward, owners.empty() ? nullptr : logits_.data(), nullptr);
  } catch (const std::exception& e) {
    for (Seq& s : active_) end(s, Finish::Error, e.what());
    active_.clear();
    return;
  }
  uint64_t prefill_rows = 0;
  for (Seq& s : active_) {
    if (!s.prefilling && s.next) {
      s.tokens.push_back(*s.next);
      s.next.reset();
    }
  }
  for (auto [i, k] : prefilled) {
    Seq& s = active_[i];
    const auto& p = s.job->prompt;
    const size_t start = s.tokens.size();
    s.tokens.insert(s.tokens.end(), p.begin() + static_cast<std::ptrdiff_t>(start),
                    p.begin() + static_cast<std::ptrdiff_t>(start + static_cast<size_t>(k)));
    if (s.tokens.size() == p.size()) s.prefilling = false;
    prefill_rows += static_cast<uint64_t>(k);
  }
  for (size_t r = 0; r < owners.size(); ++r) {
    Seq& s = active_[owners[r]];
    if (s.job) on_logits(s, logits_.data() + r * static_cast<size_t>(vocab_));
  }
  std::erase_if(active_, [](const Seq& s) { return !s.job; });
  std::lock_guard l(mu_);
  ++stats_.steps;
  stats_.rows += rows_.size();
  stats_.prefilled_tokens += prefill_rows;
}

bool Scheduler::on_logits(Seq& s, const float* logits) {
  Job& j = *s.job;
  std::copy(logits, logits + vocab_, work_.begin());
  TokenLogprob lp;
  double lse = 0;
  if (j.top_logprobs >= 0) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < vocab_; ++i) mx = std::max(mx, logits[i]);
    double sum = 0;
    for (int64_t i = 0; i < vocab_; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
    lse = mx + std::log(sum);
  }
  const std::span<const int32_t> ban = j.ignore_eos ? std::span<const int32_t>(m_.stop_ids) : std::span<const int32_t>{};
  // response_format / tool_choice: tokens that would leave the language get -inf.
  if (j.constraint && j.constraint->mask(work_, m_.stop_ids) == 0) {
    end(s, Finish::Error, fmt::format("{}: no token can continue the constrained answer", j.constraint->what()));
    return false;
  }
  const int32_t tok = s.sampler->sample(work_, ban);
  const uint64_t now = now_ns();
  if (!j.first_token_ns) {
    std::lock_guard l(j.mu);
    j.first_token_ns = now;
  }
  if (!j.ignore_eos && std::find(m_.stop_ids.begin(), m_.stop_ids.end(), tok) != m_.stop_ids.end()) {
    end(s, Finish::Stop);
    return false;
  }
  s.sampler->accept(tok);
  if (j.constraint && !j.constraint->advance(tok)) {
    end(s, Finish::Error, fmt::format("{}: the sampled token does not continue the constrained answer", j.constraint->what()));
    return false;
  }
  ++s.generated;
  ++generated_total_;
  if (j.top_logprobs >= 0) {
    lp.token = tok;
    lp.logprob = static_cast<float>(logits[tok] - lse);
    if (j.top_logprobs > 0) {
      std::vector<int32_t> idx(static_cast<size_t>(vocab_));
      for (int64_t i = 0; i < vocab_; ++i) idx[static_cast<size_t>(i)] = static_cast<int32_t>(i);
      const size_t k = std::min<size_t>(static_cast<size_t>(j.top_logprobs), idx.size());
      std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(), [&](int32_t a, int32_t b) {
        return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
      });
      for (size_t i = 0; i < k; ++i) lp.top.emplace_back(idx[i], static_cast<float>(logits[idx[i]] - lse));
    }
  }
  const std::string shown = s.stops->push(s.decoder->push(tok));
  {
    std::lock_guard l(j.mu);
    j.text += shown;
    if (j.top_logprobs >= 0) j.logprobs.push_back(std::move(lp));
    j.completion_tokens = s.generated;
  }
  j.cv.notify_all();
  if (s.stops->stopped()) {
    end(s, Finish::Stop);
    return false;
  }
  if (j.constraint && j.constraint->done()) {  // the answer is complete and nothing may follow
    end(s, Finish::Stop);
    return false;
  }
  if (s.generated >= j.max_tokens || static_cast<int64_t>(s.tokens.size()) >= s.session->capacity()) {
    end(s, Finish::Length);
    return false;
  }
  s.next = tok;
  return true;
}

void Scheduler::end(Seq& s, Finish f, const std::string& error) {
  std::shared_ptr<Job> job = std::move(s.job);
  s.job.reset();
  std::string tail;
  if (s.stops && s.decoder && !s.stops->stopped() && f != Finish::Error) {
    tail = s.stops->push(s.decoder->flush());
    if (!s.stops->stopped()) tail += s.stops->flush();
  }
  const uint64_t now = now_ns();
  // Counters first: a client that hears of the end may read /metrics at once.
  {
    std::lock_guard l(mu_);
    ++stats_.requests_done;
    if (f == Finish::Timeout) ++stats_.timeouts;
    if (f == Finish::Cancelled) ++stats_.cancelled;
    if (f == Finish::Error) ++stats_.errors;
    stats_.generated_tokens = generated_total_;  // before the client hears of the end
    if (job->first_token_ns) {
      const uint64_t ttft = job->first_token_ns - job->submit_ns;
      stats_.ttft_ns_sum += ttft;
      ++stats_.ttft_count;
      stats_.last_ttft_s = static_cast<double>(ttft) / 1e9;
    }
  }
  // A finished turn is saved before the client hears of its end, so an
  // answer the client has seen is one a restarted server resumes from.
  if (m_.kv && s.session && (f == Finish::Stop || f == Finish::Length)) {
    try {
      s.conv = m_.kv->save(s.conv, *s.session, s.tokens);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "strata: kv: saving the conversation failed: %s\n", e.what());
    }
    std::lock_guard l(mu_);
    stats_.kv_conversations = m_.kv->conversations();
    stats_.kv_bytes_written = m_.kv->bytes_written();
  }
  {
    std::lock_guard l(job->mu);
    job->text += tail;
    job->finish = f;
    job->error = error;
    job->completion_tokens = s.generated;
    job->end_ns = now;
  }
  job->cv.notify_all();
  if (s.session && opts_.keep_sessions > 0 && f != Finish::Error) {
    idle_.push_back({std::move(s.session), std::move(s.tokens), ++tick_, s.conv});
    if (static_cast<int64_t>(idle_.size()) > opts_.keep_sessions) {
      size_t old = 0;
      for (size_t i = 1; i < idle_.size(); ++i)
        if (idle_[i].last_used < idle_[old].last_used) old = i;
      idle_.erase(idle_.begin() + static_cast<std::ptrdiff_t>(old));
    }
  }
  s.session.reset();
}

void Scheduler::publish_stats() {
  const uint64_t now = now_ns();
  rate_window_.emplace_back(now, generated_total_);
  while (rate_window_.size() > 2 && now - rate_window_.front().first > 5'000'000'000ull) rate_window_.pop_front();
  double rate = 0;
  if (rate_window_.size() >= 2) {
    const auto& [t0, g0] = rate_window_.front();
    if (now > t0) rate = static_cast<double>(generated_total_ - g0) * 1e9 / static_cast<double>(now - t0);
  }
  uint64_t bytes = 0;
  for (const Seq& s : active_)
    if (s.session) bytes += s.session->bytes();
  for (const Idle& i : idle_) bytes += i.session->bytes();
  const bool heat = m_.heat && now - last_heat_ns_ > 250'000'000ull;
  if (heat) last_heat_ns_ = now;
  std::lock_guard l(mu_);
  stats_.generated_tokens = generated_total_;
  stats_.gen_tok_s = active_.empty() && waiting_.empty() ? 0.0 : rate;
  stats_.active = static_cast<int64_t>(active_.size());
  stats_.queued = static_cast<int64_t>(waiting_.size());
  stats_.idle_sessions = static_cast<int64_t>(idle_.size());
  stats_.session_bytes = bytes;
  if (m_.disk) stats_.experts = m_.disk->stats();
  if (heat) stats_.heat = m_.heat->usage();
}

}  // namespace strata::server
