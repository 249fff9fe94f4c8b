// Errors raised at boundaries (loading files, parsing configs and requests).
// Hot paths never throw; everything they touch was validated at load.
#pragma once
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace strata {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace strata
