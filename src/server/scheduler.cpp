#include "server/scheduler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "core/clock.h"

namespace strata::server {

namespace {

Finish finish_of(StopReason r) {
  switch (r) {
    case StopReason::Eos:
    case StopReason::StopString:
    case StopReason::Done: return Finish::Stop;
    case StopReason::Length:
    case StopReason::Context: return Finish::Length;
    case StopReason::Interrupted: return Finish::Cancelled;
    case StopReason::Error: return Finish::Error;
    case StopReason::None: break;
  }
  return Finish::None;
}

}  // namespace

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
    : m_(m), opts_(o), vocab_(m.engine->config().vocab_size) {
  opts_.parallel = std::max(1, opts_.parallel);
  opts_.queue = std::max(0, opts_.queue);
  opts_.keep_sessions = std::max(0, opts_.keep_sessions);
  opts_.prefill_chunk = std::max<int64_t>(1, opts_.prefill_chunk);
  stats_.engine = m_.engine->stats();  // before the scheduler thread owns the engine
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

bool Scheduler::full() const {
  std::lock_guard l(mu_);
  const int64_t free_slots = std::max<int64_t>(0, opts_.parallel - stats_.active);
  return stop_ || static_cast<int64_t>(waiting_.size()) >= opts_.queue + free_slots;
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
    // Nothing may escape this thread (it would end the process): a request
    // that cannot start ends with its error; anything else thrown during a
    // step (a bug, bad_alloc) ends the requests in flight, and the server
    // goes on serving.
    try {
      for (auto& j : expired) {
        Seq s;
        s.job = j;
        end(s, j->cancel.load() ? Finish::Cancelled : Finish::Timeout);
      }
      for (auto& j : admit_now) {
        try {
          admit(j);
        } catch (const std::exception& e) {
          Seq s;
          s.job = j;
          end(s, Finish::Error, e.what());
        }
      }
      step();
      publish_stats();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "strata: serve: a step failed (%s); ending the requests in flight\n", e.what());
      for (Seq& s : active_) {
        if (!s.job) continue;
        const std::shared_ptr<Job> job = s.job;
        try {
          end(s, Finish::Error, e.what());
        } catch (const std::exception&) {
          std::lock_guard l(job->mu);
          job->finish = Finish::Error;
          job->error = e.what();
        }
        job->cv.notify_all();
      }
      active_.clear();
    }
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
  // The idle session of the job's scope sharing the longest prefix (none
  // with --prefix-reuse off); at least the last prompt token is recomputed,
  // for its logits.
  size_t best = idle_.size(), best_common = 0;
  for (size_t i = 0; i < idle_.size() && opts_.prefix_reuse; ++i) {
    if (idle_[i].scope != job->scope) continue;
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
  if (m_.kv && opts_.prefix_reuse && p.size() > 1) saved = m_.kv->find(p, p.size() - 1, job->scope);
  const bool from_disk = saved.id >= 0 && saved.common > best_common;
  if (from_disk && best == idle_.size() && !idle_.empty() &&
      static_cast<int64_t>(active_.size() + idle_.size()) >= opts_.parallel + opts_.keep_sessions) {
    best = 0;
    for (size_t i = 1; i < idle_.size(); ++i)
      if (idle_[i].last_used < idle_[best].last_used) best = i;
  }
  const ModelConfig& cfg = m_.engine->config();
  Speculator* spec = &m_.engine->speculator();
  const bool mtp = spec->uses_mtp();  // sessions keep MTP state (--spec mtp / auto with the layer loaded)
  std::unique_ptr<Session> session;
  std::vector<int32_t> held;
  if (best < idle_.size()) {
    session = std::move(idle_[best].session);
    held = std::move(idle_[best].tokens);
    s.conv = best_common > 0 ? idle_[best].conv : -1;  // a recycled session continues nothing
    idle_.erase(idle_.begin() + static_cast<std::ptrdiff_t>(best));
    session->truncate(static_cast<int64_t>(best_common));
    held.resize(best_common);
  }
  if (from_disk) {
    try {
      if (!session) session = std::make_unique<Session>(cfg, opts_.ctx, mtp, m_.engine->options().forward.kv);
      best_common = m_.kv->load(saved.id, saved.common, *session, held);
      s.conv = saved.id;
      std::lock_guard l(mu_);
      stats_.kv_positions_loaded += best_common;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "strata: kv: resuming failed (%s); prefilling instead\n", e.what());
      if (session) session->truncate(0);
      held.clear();
      s.conv = -1;
      best_common = 0;
    }
  }
  try {
    if (!session) session = std::make_unique<Session>(cfg, opts_.ctx, mtp, m_.engine->options().forward.kv);
    s.seq = std::make_unique<Sequence>(std::move(session), std::move(held), cfg, m_.tok, m_.stop_ids, spec);
  } catch (const std::bad_alloc&) {
    end(s, Finish::Error, "out of memory for a new session");
    return;
  }
  GenerationParams gp;
  gp.sampling = job->sampling;
  gp.max_tokens = job->max_tokens;
  gp.stop = job->stop;
  gp.ignore_eos = job->ignore_eos;
  gp.top_logprobs = job->top_logprobs;
  gp.constraint = job->constraint;
  const int64_t reused = s.seq->begin(p, gp);
  job->cached_tokens = reused;
  {
    std::lock_guard l(mu_);
    stats_.cached_tokens += static_cast<uint64_t>(reused);
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

  // Speculation with the MTP layer: its rounds first (state sync of what the
  // last forward fed, draft chains), one batched forward_mtp per round.
  mtp_seqs_.clear();
  for (Seq& s : active_)
    if (s.seq->mtp_on()) mtp_seqs_.push_back(s.seq.get());
  if (!mtp_seqs_.empty()) {
    try {
      run_mtp_rounds(*m_.engine, mtp_seqs_, mtp_);
    } catch (const std::exception& e) {
      for (Seq& s : active_) end(s, Finish::Error, e.what());
      active_.clear();
      return;
    }
  }

  // Which rows go into this forward: the decode rows of every generating
  // sequence (its pending token and any drafts), then prompt rows of
  // prefilling ones up to the chunk budget. A sequence's rows, and its
  // logits rows, are contiguous.
  rows_.clear();
  row_start_.assign(active_.size(), -1);
  logits_row_.assign(active_.size(), -1);
  int64_t nlogits = 0;
  bool hidden = false;
  auto add = [&](size_t i, int64_t budget) {
    Sequence& q = *active_[i].seq;
    const int64_t first = static_cast<int64_t>(rows_.size());
    const int64_t k = q.add_rows(rows_, budget);
    if (k > 0) {
      row_start_[i] = first;
      hidden = hidden || q.wants_hidden();
      if (q.wants_logits()) {
        logits_row_[i] = nlogits;
        nlogits += q.logits_rows();
      }
    }
    return k;
  };
  int64_t decoding = 0;
  for (const Seq& s : active_) decoding += s.seq->prefilling() ? 0 : 1;
  m_.engine->speculator().set_batch(decoding);
  for (size_t i = 0; i < active_.size(); ++i)
    if (!active_[i].seq->prefilling()) add(i, 1);
  int64_t budget = opts_.prefill_chunk, prefill_rows = 0;
  for (size_t i = 0; i < active_.size() && budget > 0; ++i) {
    if (!active_[i].seq->prefilling()) continue;
    const int64_t k = add(i, budget);
    budget -= k;
    prefill_rows += k;
  }
  if (rows_.empty()) return;

  const size_t D = static_cast<size_t>(m_.engine->config().hidden_size);
  logits_.resize(static_cast<size_t>(nlogits) * static_cast<size_t>(vocab_));
  if (hidden) hidden_.resize(rows_.size() * D);
  try {
    m_.engine->forward(rows_, nlogits ? logits_.data() : nullptr, hidden ? hidden_.data() : nullptr, prefill_rows);
  } catch (const std::exception& e) {
    for (Seq& s : active_) end(s, Finish::Error, e.what());
    active_.clear();
    return;
  }
  // Sequences without a logits row only take in what was fed; then each
  // sequence with logits rows chooses its tokens, in row order.
  auto hidden_of = [&](size_t i) {
    return hidden && row_start_[i] >= 0 ? hidden_.data() + static_cast<size_t>(row_start_[i]) * D : nullptr;
  };
  StepOutput& out = out_;
  for (size_t i = 0; i < active_.size(); ++i)
    if (logits_row_[i] < 0) active_[i].seq->advance(nullptr, out, hidden_of(i));
  for (size_t i = 0; i < active_.size(); ++i) {
    if (logits_row_[i] < 0) continue;
    Seq& s = active_[i];
    if (!s.job) continue;
    const bool go = s.seq->advance(logits_.data() + static_cast<size_t>(logits_row_[i]) * static_cast<size_t>(vocab_),
                                   out, hidden_of(i));
    publish(s, out);
    if (!go) end(s, finish_of(s.seq->reason()), s.seq->error());
  }
  std::erase_if(active_, [](const Seq& s) { return !s.job; });
  std::lock_guard l(mu_);
  ++stats_.steps;
  stats_.rows += rows_.size();
  stats_.prefilled_tokens += static_cast<uint64_t>(prefill_rows);
}

void Scheduler::publish(Seq& s, const StepOutput& out) {
  Job& j = *s.job;
  const Sequence& q = *s.seq;
  if (out.token >= 0 && !j.first_token_ns) {
    std::lock_guard l(j.mu);
    j.first_token_ns = q.first_token_ns();
  }
  generated_total_ += static_cast<uint64_t>(q.generated() - s.counted);
  s.counted = q.generated();
  if (out.text.empty() && out.logprobs.empty()) return;
  {
    std::lock_guard l(j.mu);
    j.text += out.text;
    for (const TokenLogprob& lp : out.logprobs) j.logprobs.push_back(lp);
    j.completion_tokens = q.generated();
  }
  j.cv.notify_all();
}

void Scheduler::end(Seq& s, Finish f, const std::string& error) {
  std::shared_ptr<Job> job = std::move(s.job);
  s.job.reset();
  // The held-back text of an answer ended from outside (the sequence's own
  // endings were published with their last step).
  const std::string tail = s.seq ? s.seq->end(f == Finish::Error ? StopReason::Error : StopReason::Interrupted) : "";
  const int64_t generated = s.seq ? s.seq->generated() : 0;
  const int64_t drafted = s.seq ? s.seq->drafted() : 0, accepted = s.seq ? s.seq->accepted() : 0;
  const uint64_t now = now_ns();
  // The engine's counters too (speculation's drafted/accepted include this
  // answer's last step; publish_stats runs only after the step that ended it).
  const EngineStats engine = m_.engine->stats();
  // Counters first: a client that hears of the end may read /metrics at once.
  {
    std::lock_guard l(mu_);
    stats_.engine = engine;
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
  if (m_.kv && s.seq && (f == Finish::Stop || f == Finish::Length)) {
    try {
      s.conv = m_.kv->save(s.conv, s.seq->session(), s.seq->tokens(), job->scope);
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
    job->completion_tokens = generated;
    job->draft_tokens = drafted;
    job->accepted_draft_tokens = accepted;
    job->end_ns = now;
  }
  job->cv.notify_all();
  if (s.seq && opts_.keep_sessions > 0 && f != Finish::Error) {
    std::vector<int32_t> tokens = s.seq->tokens();
    idle_.push_back({s.seq->release_session(), std::move(tokens), ++tick_, s.conv, job->scope});
    if (static_cast<int64_t>(idle_.size()) > opts_.keep_sessions) {
      size_t old = 0;
      for (size_t i = 1; i < idle_.size(); ++i)
        if (idle_[i].last_used < idle_[old].last_used) old = i;
      idle_.erase(idle_.begin() + static_cast<std::ptrdiff_t>(old));
    }
  }
  s.seq.reset();
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
    if (s.seq) bytes += s.seq->session().bytes();
  for (const Idle& i : idle_) bytes += i.session->bytes();
  const bool heat = now - last_heat_ns_ > 250'000'000ull;
  EngineStats engine = m_.engine->stats();
  if (heat) last_heat_ns_ = now;
  std::lock_guard l(mu_);
  stats_.generated_tokens = generated_total_;
  stats_.gen_tok_s = active_.empty() && waiting_.empty() ? 0.0 : rate;
  stats_.active = static_cast<int64_t>(active_.size());
  stats_.queued = static_cast<int64_t>(waiting_.size());
  stats_.idle_sessions = static_cast<int64_t>(idle_.size());
  stats_.session_bytes = bytes;
  stats_.engine = engine;
  if (heat) stats_.heat = m_.engine->heat().usage();
}

}  // namespace strata::server
