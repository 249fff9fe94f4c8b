#include "server/request_log.h"

#include <chrono>
#include <ctime>

#include <fmt/format.h>

#include "core/json.h"

namespace strata::server {

namespace {

std::string utc_time(int64_t unix_ms) {
  const std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                     tm.tm_hour, tm.tm_min, tm.tm_sec, unix_ms % 1000);
}

// Paths are the client's bytes: keep the line one line of printable ASCII.
std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s.substr(0, 200)) out += c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?';
  return out;
}

}  // namespace

Json request_log_json(const RequestRecord& r, int64_t unix_ms) {
  Json j{{"time", utc_time(unix_ms)}, {"method", printable(r.method)}, {"path", printable(r.path)},
         {"status", r.status}};
  if (r.prompt_tokens >= 0) j["prompt_tokens"] = r.prompt_tokens;
  if (r.cached_tokens >= 0) j["cached_tokens"] = r.cached_tokens;
  if (r.completion_tokens >= 0) j["completion_tokens"] = r.completion_tokens;
  if (!r.finish.empty()) j["finish"] = r.finish;
  j["ms"] = static_cast<double>(static_cast<int64_t>(r.ms * 10 + 0.5)) / 10;
  if (!r.client.empty()) j["client"] = printable(r.client);
  return j;
}

std::string request_log_line(const RequestRecord& r, LogFormat f, int64_t unix_ms) {
  if (f == LogFormat::Json) return request_log_json(r, unix_ms).dump();
  std::string line = fmt::format("{} {} {} {}", utc_time(unix_ms), printable(r.method), printable(r.path), r.status);
  if (r.prompt_tokens >= 0) {
    line += fmt::format(" prompt={}", r.prompt_tokens);
    if (r.cached_tokens > 0) line += fmt::format(" (cached {})", r.cached_tokens);
  }
  if (r.completion_tokens >= 0) line += fmt::format(" completion={}", r.completion_tokens);
  if (!r.finish.empty()) {
    line += ' ';
    line += r.finish;
  }
  line += fmt::format(" {:.1f} ms", r.ms);
  if (!r.client.empty()) {
    line += ' ';
    line += printable(r.client);
  }
  return line;
}

bool request_is_logged(const RequestRecord& r) {
  if (r.status >= 200 && r.status < 300 && r.method == "GET")
    return !(r.path == "/health" || r.path == "/v1/stats" || r.path == "/v1/stats/history" || r.path == "/metrics");
  return true;
}

void RequestLog::write(const RequestRecord& r) {
  write(r, std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
               .count());
}

void RequestLog::write(const RequestRecord& r, int64_t unix_ms) {
  if (!request_is_logged(r)) return;
  const std::string line = f_ == LogFormat::Off ? std::string() : request_log_line(r, f_, unix_ms) + "\n";
  std::lock_guard l(mu_);
  if (keep_ > 0) {
    if (recent_.size() >= keep_) recent_.pop_front();
    recent_.emplace_back(r, unix_ms);
  }
  if (line.empty()) return;
  std::fwrite(line.data(), 1, line.size(), out_);
  std::fflush(out_);
}

Json RequestLog::recent() const {
  std::lock_guard l(mu_);
  Json a = Json::array();
  for (auto it = recent_.rbegin(); it != recent_.rend(); ++it) a.push_back(request_log_json(it->first, it->second));
  return a;
}

}  // namespace strata::server
