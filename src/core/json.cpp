#include "core/json.h"

#include <unordered_set>
#include <vector>

#include "core/error.h"

namespace strata {

namespace {

// One open container while parsing: for objects, the keys seen so far (a
// hash set, so a header with a million tensors stays linear) and the key
// whose value is being parsed, which locates errors for the message.
struct Frame {
  bool object = false;
  bool has_key = false;
  std::string key;
  std::unordered_set<std::string> seen;
};

// Keys are shown in messages, but a hostile one can be megabytes long.
std::string shown_key(const std::string& k) {
  constexpr size_t kMax = 200;
  return k.size() <= kMax ? k : k.substr(0, kMax) + "...";
}

// `"a" > "b" > "c"`: the object keys leading to the current value.
std::string key_path(const std::vector<Frame>& stack) {
  std::string p;
  for (const Frame& f : stack) {
    if (!f.object || !f.has_key) continue;
    if (!p.empty()) p += " > ";
    p += '"' + shown_key(f.key) + '"';
  }
  return p;
}

}  // namespace

Json parse_json(std::string_view text, const std::string& origin, int max_depth) {
  // The callback sees every event before the value is built, so a hostile
  // document is refused before it costs memory or stack. Duplicate keys are
  // refused too: nlohmann would silently keep the last one. Messages name the
  // chain of keys where the problem is (for a safetensors header, the tensor).
  std::string problem;
  std::vector<Frame> stack;  // open containers
  auto guard = [&](int depth, Json::parse_event_t ev, Json& parsed) {
    using E = Json::parse_event_t;
    if (ev == E::object_start || ev == E::array_start) {
      if (depth >= max_depth) {
        const std::string where = key_path(stack);
        problem = fmt::format("JSON nesting deeper than {} levels{}{}", max_depth, where.empty() ? "" : " at ",
                              where);
        throw Error(problem);
      }
      stack.emplace_back();
      stack.back().object = ev == E::object_start;
    } else if (ev == E::object_end || ev == E::array_end) {
      if (!stack.empty()) stack.pop_back();
    } else if (ev == E::key && !stack.empty() && stack.back().object) {
      const std::string& k = parsed.get_ref<const std::string&>();
      Frame& f = stack.back();
      if (!f.seen.insert(k).second) {
        f.has_key = false;
        const std::string where = key_path(stack);
        problem = fmt::format("duplicate key \"{}\"{}{}", shown_key(k), where.empty() ? "" : " in ", where);
        throw Error(problem);
      }
      f.key = k;
      f.has_key = true;
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), guard);
  } catch (const Error&) {
    fail("{}: {}", origin, problem);
  } catch (const Json::exception& e) {
    fail("{}: invalid JSON: {}", origin, e.what());
  }
}

}  // namespace strata
