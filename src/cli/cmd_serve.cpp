// strata serve: the OpenAI-compatible HTTP server (docs/server.md). This file
// only opens the engine and fills the server's options; src/server/ does the rest.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/text_common.h"
#include "server/http_server.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/io.h"

namespace strata::cli {

namespace {

// The API keys from exactly one place: --api-key (one key, visible to local
// users in /proc and ps), --api-key-file (one key per line; blank lines and
// lines starting with '#' skipped) or STRATA_API_KEY (one key).
std::vector<std::string> api_keys_of(const std::string& flag, const std::string& file) {
  if (!flag.empty() && !file.empty()) fail("serve: give --api-key or --api-key-file, not both");
  if (!flag.empty()) return {flag};
  if (!file.empty()) {
    const std::string text = read_small_file(file, 1 << 20);
    std::vector<std::string> keys;
    size_t line = 0;
    for (size_t at = 0; at < text.size();) {
      size_t end = text.find('\n', at);
      if (end == std::string::npos) end = text.size();
      std::string k = text.substr(at, end - at);
      at = end + 1;
      ++line;
      while (!k.empty() && (k.back() == '\r' || k.back() == ' ' || k.back() == '\t')) k.pop_back();
      while (!k.empty() && (k.front() == ' ' || k.front() == '\t')) k.erase(0, 1);
      if (k.empty() || k[0] == '#') continue;
      for (const char c : k)
        if (static_cast<unsigned char>(c) < 0x21 || c == 0x7f)
          fail("--api-key-file {}: line {}: a key may not hold spaces or control characters", file, line);
      if (std::find(keys.begin(), keys.end(), k) != keys.end())
        fail("--api-key-file {}: line {}: the same key twice", file, line);
      keys.push_back(std::move(k));
    }
    if (keys.empty()) fail("--api-key-file {}: no key in it (one per line)", file);
    return keys;
  }
  if (const char* env = std::getenv("STRATA_API_KEY"); env && *env) return {env};
  return {};
}

bool loopback_host(const std::string& h) {
  return h == "localhost" || h == "::1" || h == "[::1]" || h.rfind("127.", 0) == 0;
}

// SIGINT/SIGTERM, from a thread that waits for them, started before anything
// slow. While the model loads, a signal ends the process at once (nothing is
// being written then); once the server exists, the first signal stops it
// gracefully (even before it listens: run() then returns at once) and a
// second one ends the process.
struct SignalStop {
  std::mutex mu;
  server::Server* srv = nullptr;
  bool stopping = false, done = false;
  std::thread stopper;  // runs Server::stop(), which waits for answers in flight
};

void wait_for_signals(const sigset_t& set, SignalStop& ctl) {
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    std::lock_guard l(ctl.mu);
    if (ctl.done) return;
    if (!ctl.srv || ctl.stopping) {
      std::fprintf(stderr, "\nstrata: %s: exiting%s\n", sig == SIGINT ? "interrupted" : "terminated",
                   ctl.srv ? " without waiting for requests in flight" : " (the model was still loading)");
      std::fflush(stderr);
      std::_Exit(128 + sig);
    }
    ctl.stopping = true;
    ctl.stopper = std::thread([srv = ctl.srv] { srv->stop(); });
  }
}

}  // namespace

void add_serve_command(CLI::App& app, Runner& run) {
  struct Flags {
    EngineFlags engine;
    server::ServerOptions server;
    std::string chat_template = "auto";
    int64_t ctx = 0;
    bool raw = false;
    std::string kv_dir;
    int kv_max_files = 64;
    std::string api_key, api_key_file;
    std::string prefix_reuse = "on";
    std::string think = "on";
    std::string http = "beast";
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve the model over an OpenAI-compatible HTTP API");
  f->engine.spec = kSpecGenerating;  // the generating commands speculate by default
  f->engine.add(cmd);
  server::ServerOptions& so = f->server;
  cmd->add_option("--host", so.host, "Address to listen on (127.0.0.1: this machine only)")
      ->capture_default_str()
      ->group(kGroupServer);
  cmd->add_option("--port", so.port, "Port (0: any free port, printed at start)")->check(CLI::Range(0, 65535))
      ->capture_default_str()
      ->group(kGroupServer);
  cmd->add_option("--api-key", f->api_key,
                  "Require 'Authorization: Bearer KEY' (default: no key; visible to local users: prefer "
                  "--api-key-file or STRATA_API_KEY)")
      ->group(kGroupServer);
  cmd->add_option("--api-key-file", f->api_key_file,
                  "Read the API keys from this file, one per line ('#' lines skipped); each key's saved "
                  "prefixes are reused only for its own requests")
      ->group(kGroupServer);
  cmd->add_option("--allow-host", so.allowed_hosts,
                  "A DNS name clients use to reach the server, accepted in Host and Origin besides addresses, "
                  "localhost and --host (repeatable; '*': any; docs/security.md)")
      ->group(kGroupServer);
  cmd->add_option("--max-tokens-ceiling", so.max_tokens_ceiling, "Largest max_tokens honoured; larger ones are clamped")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
      ->capture_default_str()
      ->group(kGroupServer);
  cmd->add_option("--max-body", so.max_body, "Largest request body in bytes (413 above)")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 30))
      ->capture_default_str()
      ->group(kGroupServer);
  cmd->add_option("--queue", so.sched.queue, "Requests that may wait beyond --parallel (429 above)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str()
      ->group(kGroupServer);
  cmd->add_option("--parallel", so.sched.parallel, "Requests generated together (continuous batching)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str()
      ->group(kGroupServer);
  cmd->add_option("--keep-sessions", so.sched.keep_sessions, "Idle sessions kept for prefix reuse (LRU)")
      ->check(CLI::Range(0, 256))
      ->capture_default_str()
      ->group(kGroupServer);
  cmd->add_option("--prefix-reuse", f->prefix_reuse,
                  "Resume a prompt from a kept session or --kv-dir conversation of the same API key: on, or off "
                  "(every prompt prefilled whole, cached_tokens always 0; docs/security.md)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str()
      ->group(kGroupServer);
  cmd->add_option("--prefill-chunk", so.sched.prefill_chunk, "Prefill rows per step (interleaved with decodes)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16))
      ->capture_default_str()
      ->group(kGroupServer);
  cmd->add_option("--timeout", so.timeout_s, "Per-request timeout in seconds, queueing included (0: none)")
      ->check(CLI::Range(0.0, 1e7))
      ->capture_default_str()
      ->group(kGroupServer);
  cmd->add_option("--ctx", f->ctx, "Context per request in tokens (default: min(4096, max_position_embeddings))")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
      ->group(kGroupGeneration);
  cmd->add_option("--kv-dir", f->kv_dir,
                  "Save each finished turn's KV state here and resume conversations from it after a restart")
      ->group(kGroupServer);
  cmd->add_option("--kv-max-files", f->kv_max_files, "Conversations kept in --kv-dir (least recently used removed)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str()
      ->group(kGroupServer);
  cmd->add_option("--model-id", so.model_id, "Model name reported by /v1/models (default: the model directory's name)")
      ->group(kGroupServer);
  cmd->add_option("--chat-template", f->chat_template,
                  "auto, glm (GLM-4.7/GLM-5), glm45 (GLM-4.5/4.6), qwen3, deepseek3 (DeepSeek-V3), deepseek-r1, deepseek31 "
                  "(DeepSeek-V3.1) or raw (no template)")
      ->check(CLI::IsMember({"auto", "glm", "glm45", "qwen3", "deepseek3", "deepseek-r1", "deepseek31", "raw"}))
      ->capture_default_str()
      ->group(kGroupTemplate);
  cmd->add_option("--think", f->think,
                  "Thinking when a request does not say (enable_thinking): on, or off (the template's no-think "
                  "prompt: short answers land in content, not all in reasoning_content)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str()
      ->group(kGroupTemplate);
  // One transport is left; the option stays so scripts that name it keep
  // working, and so the removed one is refused with the reason.
  cmd->add_option("--http", f->http,
                  "HTTP transport: beast (Boost.Beast: bounds headers, bodies and time while reading; idle "
                  "connections hold no thread; the only one)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            if (v == "beast") return {};
            if (v == "httplib")
              return "the cpp-httplib server transport was removed: it buffered chunked bodies whole, grew a "
                     "header line without bound, gave each connection a thread (slowloris) and had no "
                     "connection limit (docs/security.md); use beast, the default";
            return "unknown transport '" + v + "' (beast is the only one)";
          },
          "", "http"))
      ->type_name("TEXT:{beast}")
      ->capture_default_str()
      ->group(kGroupServer);
  cmd->add_option("--max-header-bytes", so.max_header_bytes,
                  "Largest request line + headers in bytes (431 above)")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 24))
      ->capture_default_str()
      ->group(kGroupServer);
  cmd->add_option("--read-timeout", so.read_timeout_s,
                  "Seconds to receive one whole request, headers and body (408 after)")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str()
      ->group(kGroupServer);
  cmd->add_option("--max-connections", so.max_connections, "Open connections at once (503 beyond)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str()
      ->group(kGroupServer);
  cmd->add_option("--log-format", so.log_format,
                  "One line per request on stderr: text, json (one object per line) or off")
      ->transform(CLI::CheckedTransformer(std::map<std::string, server::LogFormat>{{"text", server::LogFormat::Text},
                                                                                  {"json", server::LogFormat::Json},
                                                                                  {"off", server::LogFormat::Off}})
                     .description(""))
      ->type_name("TEXT:{text,json,off}")
      ->default_str("text")
      ->group(kGroupOutput);
  cmd->callback([f, &run] {
    run = [f]() -> int {
      server::ServerOptions o = f->server;
      o.api_keys = api_keys_of(f->api_key, f->api_key_file);
      o.sched.prefix_reuse = f->prefix_reuse == "on";
      if (!o.sched.prefix_reuse && !f->kv_dir.empty())
        fail("serve: --kv-dir saves conversations to resume them, --prefix-reuse off never resumes any: "
             "give one or the other");
      o.think = f->think == "on";
      // Blocked first, so every thread started below inherits the mask; the
      // waiter starts before the model loads.
      sigset_t set;
      sigemptyset(&set);
      sigaddset(&set, SIGINT);
      sigaddset(&set, SIGTERM);
      pthread_sigmask(SIG_BLOCK, &set, nullptr);
      SignalStop ctl;
      std::thread waiter([&set, &ctl] { wait_for_signals(set, ctl); });
      struct JoinWaiter {
        SignalStop& ctl;
        std::thread& waiter;
        ~JoinWaiter() {
          {
            std::lock_guard l(ctl.mu);
            ctl.done = true;
          }
          pthread_kill(waiter.native_handle(), SIGTERM);  // wakes it; it sees `done` and returns
          waiter.join();
        }
      } join_waiter{ctl, waiter};
      OpenedEngine opened = open_engine(f->engine, false, /*deferred=*/true);
      if (!opened.engine) return opened.status;  // a rank > 0 of --experts-over mpi
      Engine& e = *opened.engine;
      const TextModel tm = open_text_model(f->engine.model, e.config(), f->chat_template, false);
      o.sched.ctx = context_size(e.config(), f->ctx);
      if (o.model_id == "strata" || o.model_id.empty())
        o.model_id = std::filesystem::path(f->engine.model).lexically_normal().filename().string();
      if (o.model_id.empty()) o.model_id = "strata";

      server::ServerModel sm;
      sm.engine = &e;
      sm.tok = &tm.tok;
      sm.stop_ids = tm.stop_ids;

      std::unique_ptr<server::KvStore> kv;
      if (!f->kv_dir.empty()) {
        kv = std::make_unique<server::KvStore>(
            f->kv_dir, e.config(), server::kv_fingerprint(e.model(), e.options().forward, e.compute().acts()),
            f->kv_max_files, true, e.options().forward.kv);
        sm.kv = kv.get();
        std::fprintf(stderr, "strata: kv: %zu saved conversation(s) in %s (%zu bytes per position)\n",
                     kv->conversations(), f->kv_dir.c_str(), kv->record_bytes());
      }
      server::Server srv(sm, tm.tmpl, tm.gen, o);
      // Listed for the signal thread until it goes (also when bind throws).
      struct Listed {
        SignalStop& ctl;
        Listed(SignalStop& c, server::Server& s) : ctl(c) {
          std::lock_guard l(ctl.mu);
          ctl.srv = &s;
        }
        ~Listed() {
          {
            std::lock_guard l(ctl.mu);
            ctl.done = true;
            ctl.srv = nullptr;
          }
          if (ctl.stopper.joinable()) ctl.stopper.join();
        }
      } listed{ctl, srv};
      const int port = srv.bind();
      f->engine.announce(e);  // once the model, its template and the port are all there
      const uint64_t start_ns = now_ns();
      if (o.api_keys.empty() && !loopback_host(o.host))
        std::fprintf(stderr,
                     "strata: warning: serving on %s without an API key: anyone who can reach this address can use "
                     "the model (set --api-key-file or STRATA_API_KEY)\n",
                     o.host.c_str());
      std::fprintf(stderr, "strata: serving %s on http://%s:%d (ctx %lld, parallel %d, queue %d%s)\n",
                   o.model_id.c_str(), o.host.c_str(), port, static_cast<long long>(o.sched.ctx), o.sched.parallel,
                   o.sched.queue,
                   o.api_keys.empty()       ? ""
                   : o.api_keys.size() == 1 ? ", API key required"
                                            : fmt::format(", {} API keys", o.api_keys.size()).c_str());
      std::fflush(stderr);
      srv.run();
      std::fprintf(stderr, "strata: serve: stopped on http://%s:%d after %.0f s\n", o.host.c_str(), port,
                   static_cast<double>(now_ns() - start_ns) / 1e9);
      finish_engine(e, f->engine);
      return 0;
    };
  });
}

}  // namespace strata::cli
