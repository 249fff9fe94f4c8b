// One line per finished HTTP request on stderr (`strata serve`, docs/server.md
// "Request log"): method, path, status, prompt / cached / completion tokens,
// finish reason and milliseconds, as text or as one JSON object per line
// (--log-format). The transport calls RequestLog::write once a response is
// fully sent (streamed ones included); everything else here is formatting.
#pragma once
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

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

// Polls of the monitoring endpoints (/health, /v1/stats, /metrics) that
// succeed are not logged: the dashboard asks every second.
bool request_is_logged(const RequestRecord& r);

// Writes whole lines to a stream from any thread.
class RequestLog {
 public:
  explicit RequestLog(LogFormat f, std::FILE* out = stderr) : f_(f), out_(out) {}
  void write(const RequestRecord& r);
  LogFormat format() const { return f_; }

 private:
  LogFormat f_;
  std::FILE* out_;
  std::mutex mu_;
};

}  // namespace strata::server
