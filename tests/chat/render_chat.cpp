// Test helper, not a strata subcommand: renders conversations with strata's
// native chat template, for tests/chat/jinja_crosscheck.py to compare with
// Jinja2 rendering the model's own template.
//
//   strata_render_chat MODEL_DIR < cases.json > rendered.json
//
// cases.json is an array of {"messages": [...], "tools": [...] or null,
// "add_generation_prompt": bool, "enable_thinking": bool, "clear_thinking":
// bool} (the last three optional, as the template's variables are); messages
// as a Hugging Face chat: role, content (a string), optional
// reasoning_content, tool_calls [{"function": {"name", "arguments": {...}}}].
// The output is an array with, per case, the rendered string or
// {"error": message}. The template is loaded and classified as `strata run`
// does (load_chat_template), so a model whose template strata would refuse
// fails here too. Key order is kept (ordered JSON), as Jinja's tojson keeps it.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "text/chat_template.h"
#include "core/error.h"

namespace {

using strata::OrderedJson;

std::string string_field(const OrderedJson& o, const char* key) {
  const auto it = o.find(key);
  if (it == o.end() || it->is_null()) return {};
  if (!it->is_string()) strata::fail("\"{}\" must be a string", key);
  return it->get<std::string>();
}

strata::ChatMessage to_message(const OrderedJson& m) {
  strata::ChatMessage out;
  out.role = string_field(m, "role");
  out.content = string_field(m, "content");
  if (const auto it = m.find("reasoning_content"); it != m.end() && it->is_string())
    out.reasoning_content = it->get<std::string>();
  out.tool_call_id = string_field(m, "tool_call_id");
  if (const auto it = m.find("tool_calls"); it != m.end() && it->is_array()) {
    for (const OrderedJson& tc : *it) {
      // The template accepts {"function": {...}} or the function object itself.
      const OrderedJson& f = tc.contains("function") ? tc.at("function") : tc;
      out.tool_calls.push_back({.id = string_field(tc, "id"), .name = string_field(f, "name"),
                                .arguments = f.value("arguments", OrderedJson::object())});
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s MODEL_DIR < cases.json\n", argv[0]);
    return 2;
  }
  try {
    const strata::ChatTemplate tmpl = strata::load_chat_template(argv[1]);
    const std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    const OrderedJson cases = OrderedJson::parse(input);
    OrderedJson out = OrderedJson::array();
    for (const OrderedJson& c : cases) {
      try {
        std::vector<strata::ChatMessage> messages;
        for (const OrderedJson& m : c.at("messages")) messages.push_back(to_message(m));
        strata::ChatRenderOptions opts;
        opts.add_generation_prompt = c.value("add_generation_prompt", false);
        opts.enable_thinking = c.value("enable_thinking", true);
        opts.clear_thinking = c.value("clear_thinking", true);
        out.push_back(tmpl.render(messages, c.value("tools", OrderedJson()), opts));
      } catch (const std::exception& e) {
        out.push_back({{"error", e.what()}});
      }
    }
    std::cout << out.dump(-1, ' ', false, OrderedJson::error_handler_t::strict) << "\n";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata_render_chat: %s\n", e.what());
    return 1;
  }
  return 0;
}
