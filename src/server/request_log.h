// One line per finished HTTP request on stderr (`strata serve`, docs/server.md
// "Request log"): method, path, status, prompt / cached / completion tokens,
// finish reason and milliseconds, as text or as one JSON object per line
// (--log-format). The transport calls RequestLog::write once a response is
// fully sent (streamed ones included); everything else here is formatting.
#pragma once
#include <cstdint>
#include <cstdio>
#include <deque>
#include <mutex>
#include <string>

#include "core/json.h"

namespace strata::server {

enum class LogFormat { Text, Json, Off };

// What one request did. Token counts are -1 for requests that generated
// nothing (a GET, a refused request).
struct RequestRecord {
  std::string method, path;
  int status = 0;
  int64_t prompt_tokens = -1, cached_tokens = -1, completion_tokens = -1;
  std::string finish;  // "stop", "length", ... ("" when none)
  double ms = 0;
  std::string client;  // remote address
};

// The line (no newline) for `r` in `f`:
//   text: 2026-12-01T15:04:05.123Z POST /v1/chat/completions 200 prompt=12 (cached 8) completion=40 stop 512.3 ms 127.0.0.1
//   json: {"time":"...","method":"POST","path":"...","status":200,"prompt_tokens":12,"cached_tokens":8,
//          "completion_tokens":40,"finish":"stop","ms":512.3,"client":"127.0.0.1"}
// `unix_ms` is the wall-clock time of the line.
std::string request_log_line(const RequestRecord& r, LogFormat f, int64_t unix_ms);
// The json form as an object.
Json request_log_json(const RequestRecord& r, int64_t unix_ms);

// Polls of the monitoring endpoints (/health, /v1/stats, /metrics) that
// succeed are not logged: the dashboard asks every second.
bool request_is_logged(const RequestRecord& r);

// Writes whole lines to a stream from any thread, and keeps the last
// `keep` logged requests (whatever the format, `off` included) for the
// dashboard's table (/v1/stats "recent_requests").
class RequestLog {
 public:
  explicit RequestLog(LogFormat f, std::FILE* out = stderr, size_t keep = 50) : f_(f), out_(out), keep_(keep) {}
  void write(const RequestRecord& r);
  // Like write(), at the wall-clock time `unix_ms`.
  void write(const RequestRecord& r, int64_t unix_ms);
  LogFormat format() const { return f_; }
  // The kept requests, newest first, as request_log_json() objects.
  Json recent() const;

 private:
  LogFormat f_;
  std::FILE* out_;
  size_t keep_;
  mutable std::mutex mu_;
  std::deque<std::pair<RequestRecord, int64_t>> recent_;  // newest at the back
};

}  // namespace strata::server
