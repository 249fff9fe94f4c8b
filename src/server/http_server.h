// The OpenAI-compatible HTTP front end (docs/server.md): the routes, API
// key, body cap, queue limit, responses (JSON and SSE) and the dashboard.
// Generation itself is the Scheduler's; this file only turns HTTP into Jobs
// and Jobs back into HTTP. Its parts: openai_request.h (bodies -> validated
// requests), glm_output.h (the model's text -> reasoning, content and tool
// calls), openai_response.h (ids, usage, logprobs), metrics.h (/v1/stats,
// /metrics).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "server/request_log.h"
#include "server/scheduler.h"
#include "text/chat_template.h"
#include "text/generation_config.h"

namespace strata::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                  // 0: an ephemeral port (see Server::port)
  // Accepted API keys ('Authorization: Bearer KEY'); empty: no authentication.
  // Each key is its own prefix-reuse scope (docs/security.md): a saved prefix
  // is reused only for a request made with the key that saved it.
  std::vector<std::string> api_keys;
  int64_t max_tokens_ceiling = 4096;  // larger max_tokens are clamped, not refused
  size_t max_body = 1 << 20;        // request bodies above this get 413
  double timeout_s = 600;           // per request, queueing included
  // HTTP is read and written by Boost.Beast over Boost.Asio (docs/security.md),
  // bounding these while it reads:
  size_t max_header_bytes = 64 << 10;  // start line and headers together (431 above)
  double read_timeout_s = 30;          // to receive one whole request, headers and body (408 after)
  int max_connections = 256;           // open connections (503 beyond)
  // Host names accepted in the Host header and an Origin, besides IP
  // literals, "localhost" and `host` (against DNS rebinding: a web page
  // whose name points at this server). "*": any name (no check).
  std::vector<std::string> allowed_hosts;
  std::string model_id = "strata";  // what /v1/models lists
  LogFormat log_format = LogFormat::Text;  // one line per request on stderr (request_log.h)
  // The history of /v1/stats/history (stats_history.h): one sample per
  // interval, at most this many points (thinned, spacing doubled, when full).
  double history_interval_s = 1.0;
  size_t history_points = 720;
  bool think = true;  // enable_thinking when a request does not say (false: the template's no-think prompt)
  SchedulerOptions sched;
};

// Whether a request with this Host header and Origin (either may be empty:
// not sent) names a host the server answers to (ServerOptions::allowed_hosts).
bool host_allowed(const ServerOptions& o, std::string_view host_header, std::string_view origin);

class Server {
 public:
  Server(const ServerModel& m, const ChatTemplate& tmpl, const GenerationConfig& gen, const ServerOptions& o);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port; returns the bound port. Throws strata::Error on failure.
  int bind();
  // Serves until stop() (call bind() first).
  void run();
  void stop();
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The dashboard page (web/index.html, embedded at build time).
extern const char* const kDashboardHtml;

}  // namespace strata::server
