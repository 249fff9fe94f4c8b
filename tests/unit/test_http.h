// Which HTTP transport the in-process test servers use: the ServerOptions
// default, or STRATA_TEST_HTTP=beast|httplib for the whole run (how the
// server tests are run against each transport; docs/server.md).
#pragma once
#include <cstdlib>
#include <string>

#include "server/http_server.h"

namespace strata::test_util {

inline void apply_test_transport(server::ServerOptions& o) {
  const char* e = std::getenv("STRATA_TEST_HTTP");
  if (!e || !*e) return;
  const std::string v = e;
  if (v == "beast") o.transport = server::HttpTransport::Beast;
  else if (v == "httplib") o.transport = server::HttpTransport::Httplib;
  else std::abort();  // a typo must not silently test the default
}

}  // namespace strata::test_util
