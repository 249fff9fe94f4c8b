#include "server/openai_request.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <random>

#include "core/error.h"

namespace strata::server {

void bad(std::string param, std::string message, std::string code) {
  throw ApiError{400, std::move(message), std::move(param), "invalid_request_error", std::move(code)};
}

Json error_json(const ApiError& e) {
  Json err;
  err["message"] = e.message;
  err["type"] = e.type;
  err["param"] = e.param.empty() ? Json(nullptr) : Json(e.param);
  err["code"] = e.code.empty() ? Json(nullptr) : Json(e.code);
  return Json{{"error", err}};
}

const Json* field(const Json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<double> get_number(const Json& j, const char* name, double lo, double hi) {
  const Json* v = field(j, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) bad(name, fmt::format("'{}' must be a number", name), "invalid_type");
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) bad(name, fmt::format("'{}' must be between {} and {}", name, lo, hi));
  return d;
}

std::optional<int64_t> get_int(const Json& j, const char* name, int64_t lo, int64_t hi) {
  const Json* v = field(j, name);
  if (!v) return std::nullopt;
  if (!v->is_number_integer() && !v->is_number_unsigned())
    bad(name, fmt::format("'{}' must be an integer", name), "invalid_type");
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    if (hi == INT64_MAX) return INT64_MAX;
    bad(name, fmt::format("'{}' must be between {} and {}", name, lo, hi));
  }
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) bad(name, fmt::format("'{}' must be between {} and {}", name, lo, hi));
  return x;
}

std::optional<bool> get_bool(const Json& j, const char* name) {
  const Json* v = field(j, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) bad(name, fmt::format("'{}' must be a boolean", name), "invalid_type");
  return v->get<bool>();
}

std::optional<std::string> get_string(const Json& j, const char* name) {
  const Json* v = field(j, name);
  if (!v) return std::nullopt;
  if (!v->is_string()) bad(name, fmt::format("'{}' must be a string", name), "invalid_type");
  return v->get<std::string>();
}

Json parse_request_body(std::string_view body, size_t max_body) {
  if (body.size() > max_body) throw ApiError{413, "the request body is too large", "", "invalid_request_error", "request_too_large"};
  Json j;
  try {
    j = parse_json(body, "request body");
  } catch (const std::exception& e) {
    bad("", fmt::format("the request body is not valid JSON: {}", e.what()), "invalid_json");
  }
  if (!j.is_object()) bad("", "the request body must be a JSON object", "invalid_type");
  return j;
}

const OrderedJson& OrderedBody::get() {
  if (!doc_) doc_ = OrderedJson::parse(text_);
  return *doc_;
}

namespace {

// response_format: {"type": "text"} | {"type": "json_object"} |
// {"type": "json_schema", "json_schema": {"name", "description", "schema", "strict"}}.
// The schema is taken in key order: properties are generated in schema order.
std::shared_ptr<const JsonGrammar> parse_response_format(const Json& rf, OrderedBody& ordered) {
  if (!rf.is_object()) bad("response_format", "'response_format' must be an object", "invalid_type");
  const Json* tv = field(rf, "type");
  if (!tv) bad("response_format.type", "'response_format.type' is required", "missing_required_parameter");
  if (!tv->is_string()) bad("response_format.type", "'response_format.type' must be a string", "invalid_type");
  const std::string t = tv->get<std::string>();
  if (t == "text") return nullptr;
  if (t == "json_object") return JsonGrammar::any_object();
  if (t != "json_schema")
    bad("response_format.type", "'response_format.type' must be 'text', 'json_object' or 'json_schema'",
        "invalid_value");
  const Json* js = field(rf, "json_schema");
  if (!js) bad("response_format.json_schema", "'response_format.json_schema' is required", "missing_required_parameter");
  if (!js->is_object()) bad("response_format.json_schema", "'response_format.json_schema' must be an object", "invalid_type");
  if (const Json* n = field(*js, "name")) {
    if (!n->is_string()) bad("response_format.json_schema.name", "'response_format.json_schema.name' must be a string", "invalid_type");
    const std::string name = n->get<std::string>();
    const bool ok = !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-';
    });
    if (!ok) bad("response_format.json_schema.name", "'response_format.json_schema.name' must be 1 to 64 of a-z, A-Z, 0-9, _ and -");
  }
  if (const Json* d = field(*js, "description"); d && !d->is_string())
    bad("response_format.json_schema.description", "'response_format.json_schema.description' must be a string", "invalid_type");
  if (const Json* st = field(*js, "strict"); st && !st->is_boolean())
    bad("response_format.json_schema.strict", "'response_format.json_schema.strict' must be a boolean", "invalid_type");
  const Json* sc = field(*js, "schema");
  if (!sc) bad("response_format.json_schema.schema", "'response_format.json_schema.schema' is required", "missing_required_parameter");
  if (!sc->is_object())
    bad("response_format.json_schema.schema", "'response_format.json_schema.schema' must be a JSON Schema object", "invalid_type");
  try {
    return JsonGrammar::from_schema(ordered.get().at("response_format").at("json_schema").at("schema"));
  } catch (const Error& e) {
    bad("response_format.json_schema.schema", e.what(), "unsupported_schema");
  } catch (const std::exception& e) {
    bad("response_format.json_schema.schema", e.what(), "invalid_value");
  }
}

// Sampling parameters; what the client leaves out comes from the model's
// generation_config.json, then OpenAI's defaults.
SamplerOptions parse_sampling(const Json& j, const GenerationConfig& gen) {
  SamplerOptions s;
  const bool greedy_default = gen.do_sample.has_value() && !*gen.do_sample;
  s.temperature = get_number(j, "temperature", 0.0, 2.0).value_or(greedy_default ? 0.0 : gen.temperature.value_or(1.0));
  s.top_p = get_number(j, "top_p", 0.0, 1.0).value_or(gen.top_p.value_or(1.0));
  if (s.top_p <= 0.0) bad("top_p", "'top_p' must be greater than 0");
  const int64_t top_k = get_int(j, "top_k", -1, INT32_MAX).value_or(gen.top_k.value_or(0));
  s.top_k = top_k < 0 ? 0 : top_k;
  s.min_p = get_number(j, "min_p", 0.0, 1.0).value_or(gen.min_p.value_or(0.0));
  s.presence_penalty = get_number(j, "presence_penalty", -2.0, 2.0).value_or(0.0);
  s.frequency_penalty = get_number(j, "frequency_penalty", -2.0, 2.0).value_or(0.0);
  s.repetition_penalty = get_number(j, "repetition_penalty", 0.01, 100.0).value_or(gen.repetition_penalty.value_or(1.0));
  if (auto seed = get_int(j, "seed", INT64_MIN, INT64_MAX)) {
    s.seed = static_cast<uint64_t>(*seed);
  } else {
    std::random_device rd;
    s.seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  return s;
}

std::vector<std::string> parse_stop(const Json& j) {
  std::vector<std::string> stop;
  const Json* s = field(j, "stop");
  if (!s) return stop;
  if (s->is_string()) {
    stop.push_back(s->get<std::string>());
  } else if (s->is_array()) {
    if (s->size() > 16) bad("stop", "at most 16 stop strings");
    for (const Json& x : *s) {
      if (!x.is_string()) bad("stop", "'stop' must be a string or an array of strings", "invalid_type");
      stop.push_back(x.get<std::string>());
    }
  } else {
    bad("stop", "'stop' must be a string or an array of strings", "invalid_type");
  }
  for (const auto& x : stop)
    if (x.empty() || x.size() > 1024) bad("stop", "stop strings must be 1 to 1024 bytes");
  return stop;
}

}  // namespace

CommonRequest parse_common(const Json& j, const GenerationConfig& gen, bool chat, OrderedBody& ordered) {
  CommonRequest c;
  if (auto m = get_string(j, "model")) (void)m;
  if (auto n = get_int(j, "n", INT64_MIN, INT64_MAX); n && *n != 1)
    bad("n", "only n = 1 is supported");
  if (auto bo = get_int(j, "best_of", INT64_MIN, INT64_MAX); bo && *bo != 1) bad("best_of", "only best_of = 1 is supported");
  for (const char* k : {"max_tokens", "max_completion_tokens"})
    if (auto v = get_int(j, k, 1, INT64_MAX)) c.max_tokens = *v;
  c.sampling = parse_sampling(j, gen);
  c.stop = parse_stop(j);
  c.stream = get_bool(j, "stream").value_or(false);
  if (const Json* so = field(j, "stream_options")) {
    if (!so->is_object()) bad("stream_options", "'stream_options' must be an object", "invalid_type");
    if (!c.stream) bad("stream_options", "'stream_options' is only allowed with stream: true");
    c.include_usage = get_bool(*so, "include_usage").value_or(false);
  }
  c.ignore_eos = get_bool(j, "ignore_eos").value_or(false);
  if (chat) {
    const bool lp = get_bool(j, "logprobs").value_or(false);
    const auto top = get_int(j, "top_logprobs", 0, 20);
    if (top && !lp) bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    if (lp) c.top_logprobs = static_cast<int>(top.value_or(0));
  } else {
    if (auto lp = get_int(j, "logprobs", 0, 5)) c.top_logprobs = static_cast<int>(*lp);
  }
  if (const Json* rf = field(j, "response_format")) c.json = parse_response_format(*rf, ordered);
  return c;
}

namespace {

std::string text_of_content(const Json& content, const std::string& param) {
  if (content.is_null()) return {};
  if (content.is_string()) return content.get<std::string>();
  if (content.is_array()) {
    std::string out;
    for (const Json& part : content) {
      if (!part.is_object()) bad(param, "content parts must be objects", "invalid_type");
      const std::string type = get_string(part, "type").value_or("");
      if (type != "text") bad(param, fmt::format("content part type '{}' is not supported (text only)", type));
      auto t = get_string(part, "text");
      if (!t) bad(param, "a text content part needs 'text'");
      out += *t;
    }
    return out;
  }
  bad(param, "'content' must be a string, an array of text parts or null", "invalid_type");
}

// messages[i].tool_calls. Arguments given as an object are taken from the
// ordered body: the template renders them in the client's order.
std::vector<ToolCall> parse_tool_calls(const Json& tcs, size_t msg, const std::string& p, OrderedBody& ordered) {
  if (!tcs.is_array()) bad(p + ".tool_calls", "'tool_calls' must be an array", "invalid_type");
  std::vector<ToolCall> out;
  for (size_t k = 0; k < tcs.size(); ++k) {
    const Json& tc = tcs[k];
    if (!tc.is_object()) bad(p + ".tool_calls", "each tool call must be an object", "invalid_type");
    const Json* fn = field(tc, "function");
    if (!fn || !fn->is_object()) bad(p + ".tool_calls", "each tool call needs a 'function' object");
    ToolCall call;
    call.id = get_string(tc, "id").value_or("");
    auto name = get_string(*fn, "name");
    if (!name || name->empty()) bad(p + ".tool_calls", "each tool call needs a function name");
    call.name = *name;
    if (const Json* a = field(*fn, "arguments")) {
      if (a->is_string()) {
        // JSON inside a string escapes the body's depth bound: check it
        // (depth, duplicate keys) before the ordered parse builds it, or a
        // 50,000-deep object would exhaust the stack when copied or rendered.
        const std::string& text = a->get_ref<const std::string&>();
        try {
          (void)parse_json(text, "function.arguments");
        } catch (const Error& e) {
          bad(p + ".tool_calls", fmt::format("function.arguments must be a JSON object (as a string): {}", e.what()));
        }
        call.arguments = OrderedJson::parse(text);
      } else {
        call.arguments = ordered.get().at("messages").at(msg).at("tool_calls").at(k).at("function").at("arguments");
      }
      if (!call.arguments.is_object()) bad(p + ".tool_calls", "function.arguments must be a JSON object");
    }
    out.push_back(std::move(call));
  }
  return out;
}

std::vector<ChatMessage> parse_messages(const Json& j, OrderedBody& ordered) {
  const Json* ms = field(j, "messages");
  if (!ms) bad("messages", "'messages' is required", "missing_required_parameter");
  if (!ms->is_array()) bad("messages", "'messages' must be an array", "invalid_type");
  if (ms->empty()) bad("messages", "'messages' must not be empty");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < ms->size(); ++i) {
    const Json& m = (*ms)[i];
    const std::string p = fmt::format("messages[{}]", i);
    if (!m.is_object()) bad(p, "each message must be an object", "invalid_type");
    auto role = get_string(m, "role");
    if (!role) bad(p + ".role", "each message needs a 'role'", "missing_required_parameter");
    ChatMessage cm;
    cm.role = *role == "developer" ? "system" : *role;
    if (cm.role != "system" && cm.role != "user" && cm.role != "assistant" && cm.role != "tool")
      bad(p + ".role", fmt::format("unknown role '{}'", *role));
    auto it = m.find("content");
    if (it == m.end() && cm.role != "assistant") bad(p + ".content", "'content' is required", "missing_required_parameter");
    if (it != m.end()) cm.content = text_of_content(*it, p + ".content");
    if (auto r = get_string(m, "reasoning_content")) cm.reasoning_content = *r;
    if (cm.role == "tool") cm.tool_call_id = get_string(m, "tool_call_id").value_or("");
    if (const Json* tcs = field(m, "tool_calls")) {
      if (cm.role != "assistant") bad(p + ".tool_calls", "only assistant messages have tool_calls");
      cm.tool_calls = parse_tool_calls(*tcs, i, p, ordered);
    }
    out.push_back(std::move(cm));
  }
  return out;
}

// `tools`, in the client's key order (the template prints each as JSON).
OrderedJson parse_tools(const Json& j, OrderedBody& ordered) {
  const Json* t = field(j, "tools");
  if (!t) return nullptr;
  if (!t->is_array()) bad("tools", "'tools' must be an array", "invalid_type");
  for (const Json& x : *t) {
    if (!x.is_object() || get_string(x, "type").value_or("") != "function" || !field(x, "function") ||
        !x["function"].is_object() || !get_string(x["function"], "name"))
      bad("tools", "each tool must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
  }
  if (t->empty()) return nullptr;
  return ordered.get().at("tools");
}

// tool_choice. Returns whether one tool call is forced ("required" or a
// named function, then `name`); "none" drops the tools.
bool parse_tool_choice(const Json& j, OrderedJson& tools, std::string& name) {
  const Json* tc = field(j, "tool_choice");
  if (!tc) return false;
  if (tc->is_string()) {
    const std::string s = tc->get<std::string>();
    if (s == "none") tools = nullptr;
    else if (s == "required") return true;
    else if (s != "auto") bad("tool_choice", "'tool_choice' must be none, auto, required or an object");
    return false;
  }
  if (!tc->is_object()) bad("tool_choice", "'tool_choice' must be a string or an object", "invalid_type");
  if (get_string(*tc, "type").value_or("") != "function")
    bad("tool_choice.type", "'tool_choice.type' must be 'function'", "invalid_value");
  const Json* fn = field(*tc, "function");
  if (!fn || !fn->is_object())
    bad("tool_choice.function", "'tool_choice.function' must be an object with a 'name'", "invalid_type");
  const auto n = get_string(*fn, "name");
  if (!n || n->empty())
    bad("tool_choice.function.name", "'tool_choice.function.name' is required", "missing_required_parameter");
  name = *n;
  return true;
}

// The grammar of a forced tool call over `tools` in `dialect`'s syntax;
// `only`: the named function, empty: any of them.
void forced_call_grammar(ChatRequest& r, const std::string& only, ChatDialect dialect) {
  if (r.tools.is_null()) bad("tool_choice", "a required or named 'tool_choice' needs 'tools'");
  if (r.common.json)
    bad("response_format", "'response_format' cannot be combined with a required or named 'tool_choice'");
  if (dialect == ChatDialect::Raw) bad("tool_choice", "a required or named 'tool_choice' needs a chat template");
  try {
    // GLM-4.5/4.6 write each <arg_key>/<arg_value> on its own line; the GLM
    // parser reads the constraint's compact form the same.
    if (dialect == ChatDialect::Glm || dialect == ChatDialect::Glm45)
      r.tool_grammar = ToolCallGrammar::build(r.tools, only);
    else
      r.json_call_grammar = JsonCallGrammar::build(r.tools, only);
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.rfind("tool_choice", 0) == 0) bad("tool_choice.function.name", what, "invalid_value");
    bad("tools", what, "unsupported_schema");
  } catch (const std::exception& e) {
    bad("tools", e.what(), "invalid_value");
  }
}

ChatRenderOptions parse_render_options(const Json& j, bool default_thinking) {
  ChatRenderOptions ro;
  ro.enable_thinking = default_thinking;
  if (auto e = get_bool(j, "enable_thinking")) ro.enable_thinking = *e;
  if (const Json* kw = field(j, "chat_template_kwargs")) {
    if (!kw->is_object()) bad("chat_template_kwargs", "'chat_template_kwargs' must be an object", "invalid_type");
    if (auto e = get_bool(*kw, "enable_thinking")) ro.enable_thinking = *e;
    if (auto e = get_bool(*kw, "thinking")) ro.enable_thinking = *e;  // DeepSeek-V3.1's name for the switch
    if (auto e = get_bool(*kw, "clear_thinking")) ro.clear_thinking = *e;
  }
  return ro;
}

}  // namespace

ChatRequest parse_chat_request(const Json& j, std::string_view body, const GenerationConfig& gen, ChatDialect dialect,
                               bool default_thinking) {
  OrderedBody ordered(body);
  ChatRequest r;
  r.common = parse_common(j, gen, /*chat=*/true, ordered);
  r.messages = parse_messages(j, ordered);
  r.tools = parse_tools(j, ordered);
  std::string forced_name;
  const bool forced = parse_tool_choice(j, r.tools, forced_name);
  if (forced) forced_call_grammar(r, forced_name, dialect);
  r.render = parse_render_options(j, default_thinking);
  // A JSON answer or a forced tool call is the whole answer: no reasoning block before it.
  if (r.common.json || forced) r.render.enable_thinking = false;
  return r;
}

CompletionRequest parse_completion_request(const Json& j, std::string_view body, const GenerationConfig& gen,
                                           const Tokenizer& tok, int64_t vocab) {
  OrderedBody ordered(body);
  CompletionRequest r;
  r.common = parse_common(j, gen, /*chat=*/false, ordered);
  if (get_bool(j, "echo").value_or(false)) bad("echo", "'echo' is not supported yet");
  if (auto s = get_string(j, "suffix"); s && !s->empty()) bad("suffix", "'suffix' is not supported");
  const Json* p = field(j, "prompt");
  if (!p) bad("prompt", "'prompt' is required", "missing_required_parameter");
  auto take_ids = [&](const Json& arr) {
    for (const Json& x : arr) {
      if (!x.is_number_integer() && !x.is_number_unsigned()) bad("prompt", "token ids must be integers", "invalid_type");
      const bool in_range = x.is_number_unsigned() ? x.get<uint64_t>() < static_cast<uint64_t>(vocab)
                                                   : x.get<int64_t>() >= 0 && x.get<int64_t>() < vocab;
      if (!in_range) bad("prompt", fmt::format("token id {} is outside the vocabulary of {}", x.dump(), vocab));
      r.prompt.push_back(static_cast<int32_t>(x.get<int64_t>()));
    }
  };
  if (p->is_string()) {
    r.prompt = tok.encode(p->get<std::string>(), /*add_special=*/true);
  } else if (p->is_array()) {
    if (p->empty()) bad("prompt", "'prompt' must not be empty");
    const Json& first = (*p)[0];
    if (first.is_string() || first.is_array()) {
      if (p->size() != 1) bad("prompt", "only one prompt per request is supported");
      if (first.is_string()) r.prompt = tok.encode(first.get<std::string>(), true);
      else take_ids(first);
    } else {
      take_ids(*p);
    }
  } else {
    bad("prompt", "'prompt' must be a string, an array of token ids or an array with one of those", "invalid_type");
  }
  return r;
}

}  // namespace strata::server
