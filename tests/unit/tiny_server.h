// An in-process `strata serve` over the bundled model (models/glm5-strata-tiny)
// with its GLM template, on 127.0.0.1 and an ephemeral port, for the server
// tests that need a real tokenizer and template (response_format, tools).
#pragma once
#include <httplib.h>

#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "model/model.h"
#include "runtime/engine.h"
#include "server/http_server.h"
#include "text/chat_template.h"
#include "text/generation_config.h"
#include "text/tokenizer.h"

namespace strata::test_util {

inline const std::string kTinyDir = std::string(STRATA_SOURCE_DIR) + "/models/glm5-strata-tiny";

struct Tiny {
  std::shared_ptr<const Model> model = load_model(kTinyDir, LoadOptions{.load_mtp = false});
  Tokenizer tok = Tokenizer::load(kTinyDir);
  GenerationConfig gen = load_generation_config(kTinyDir);
};
inline Tiny& tiny() {
  static Tiny t;
  return t;
}

class TinyServer {
 public:
  // `dialect`: the chat template the server renders with (the model was
  // trained on GLM's; the others are for what the server does around them).
  explicit TinyServer(int64_t ctx = 512, ChatDialect dialect = ChatDialect::Glm) {
    Tiny& t = tiny();
    server::ServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.sched.ctx = ctx;
    o.sched.parallel = 4;
    o.model_id = "tiny";
    EngineOptions eo;
    eo.threads = 1;
    eo.verbose = false;
    engine_ = std::make_unique<Engine>(t.model, eo);
    server::ServerModel sm;
    sm.engine = engine_.get();
    sm.tok = &t.tok;
    for (int64_t id : t.gen.eos_token_ids) sm.stop_ids.push_back(static_cast<int32_t>(id));
    for (const char* s : {"<|endoftext|>", "<|user|>", "<|observation|>"})
      if (auto id = t.tok.token_id(s)) sm.stop_ids.push_back(*id);
    ChatTemplate tmpl;
    tmpl.dialect = dialect;
    tmpl.source = "test";
    srv_ = std::make_unique<server::Server>(sm, tmpl, t.gen, o);
    port_ = srv_->bind();
    thread_ = std::thread([this] { srv_->run(); });
  }
  ~TinyServer() {
    srv_->stop();
    thread_.join();
  }
  TinyServer(const TinyServer&) = delete;
  TinyServer& operator=(const TinyServer&) = delete;
  std::pair<int, std::string> post(const std::string& path, const std::string& body) const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(120, 0);
    auto r = c.Post(path.c_str(), body, "application/json");
    if (!r) return {0, "no response"};
    return {r->status, r->body};
  }

 private:
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<server::Server> srv_;
  int port_ = 0;
  std::thread thread_;
};

}  // namespace strata::test_util
