#include "core/system_info.h"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "core/error.h"

namespace strata {

namespace {

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  if (!f) return "";
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// "Key:   12345 kB" lines of /proc/meminfo, in bytes; 0 when absent.
uint64_t meminfo_field(const std::string& text, const char* key) {
  const std::string k = std::string("\n") + key + ":";
  const size_t at = ("\n" + text).find(k);
  if (at == std::string::npos) return 0;
  return std::strtoull(text.c_str() + at + k.size() - 1, nullptr, 10) * 1024;
}

// A limit file's value: a number of bytes, or 0 for "max" / missing / absurd.
uint64_t limit_value(const std::string& path) {
  const std::string t = read_text(path);
  if (t.empty() || t.rfind("max", 0) == 0) return 0;
  return std::strtoull(t.c_str(), nullptr, 10);
}

}  // namespace

MemoryInfo memory_info() {
  MemoryInfo m;
  const std::string mi = read_text("/proc/meminfo");
  m.total_bytes = meminfo_field(mi, "MemTotal");
  m.available_bytes = meminfo_field(mi, "MemAvailable");
  m.swap_total_bytes = meminfo_field(mi, "SwapTotal");
  m.swap_free_bytes = meminfo_field(mi, "SwapFree");

  // The process's cgroup: "0::/path" (v2) or "N:memory:/path" (v1).
  m.cgroup_version = "none";
  std::istringstream cg(read_text("/proc/self/cgroup"));
  std::string line, v2path, v1path;
  bool v1 = false, v2 = false;
  while (std::getline(cg, line)) {
    if (line.rfind("0::", 0) == 0) {
      v2 = true;
      v2path = line.substr(3);
    }
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b != std::string::npos) {
      std::string ctrls = ",";  // built in place: GCC 12 warns (-Wrestrict) on "," + substr + ","
      ctrls.append(line, a + 1, b - a - 1);
      ctrls.push_back(',');
      if (ctrls.find(",memory,") != std::string::npos) {
        v1 = true;
        v1path = line.substr(b + 1);
      }
    }
  }
  uint64_t limit = 0;
  auto tighten = [&limit](uint64_t v) {
    if (v > 0 && (limit == 0 || v < limit)) limit = v;
  };
  if (v1) {
    m.cgroup_version = "v1";
    // The controller may be mounted at the process's own cgroup or (in a
    // container) at the root of its namespace.
    tighten(limit_value("/sys/fs/cgroup/memory" + v1path + "/memory.limit_in_bytes"));
    tighten(limit_value("/sys/fs/cgroup/memory/memory.limit_in_bytes"));
  } else if (v2) {
    m.cgroup_version = "v2";
    // Every level up to the root: the tightest ancestor limit applies.
    std::string p = v2path;
    while (true) {
      tighten(limit_value("/sys/fs/cgroup" + (p == "/" ? std::string() : p) + "/memory.max"));
      if (p.empty() || p == "/") break;
      const size_t s = p.rfind('/');
      p = s == 0 || s == std::string::npos ? "/" : p.substr(0, s);
    }
  }
  m.cgroup_limit_bytes = m.total_bytes && limit >= m.total_bytes ? 0 : limit;

  const std::string thp = read_text("/sys/kernel/mm/transparent_hugepage/enabled");
  const size_t lb = thp.find('['), rb = thp.find(']');
  m.thp = lb != std::string::npos && rb > lb ? thp.substr(lb + 1, rb - lb - 1) : "unknown";
  return m;
}

std::string cpu_model_name() {
  std::istringstream in(read_text("/proc/cpuinfo"));
  std::string line, part;
  while (std::getline(in, line)) {
    const size_t c = line.find(':');
    if (c == std::string::npos) continue;
    std::string key = line.substr(0, c);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    std::string val = line.substr(c + 1);
    while (!val.empty() && val.front() == ' ') val.erase(0, 1);
    if (key == "model name" || key == "Model") return val;
    if (key == "CPU part" && part.empty()) part = "CPU part " + val;
  }
  return part.empty() ? "unknown" : part;
}

int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

double memory_read_gb_s(size_t bytes, int threads, int tries) {
  using V = unsigned long long __attribute__((vector_size(64)));  // wraps, never overflows
  threads = std::max(1, threads);
  const size_t nvec = bytes / sizeof(V);
  V* buf = static_cast<V*>(std::aligned_alloc(4096, std::max<size_t>(4096, nvec * sizeof(V))));
  if (!buf) fail("cannot allocate {} MiB for the memory-bandwidth test", bytes >> 20);
  std::memset(buf, 1, nvec * sizeof(V));  // fault every page in first
  std::atomic<unsigned long long> sink{0};
  double best = 0.0;
  // Each thread reads its share as 1, 2 or 4 sequential streams at once (the
  // share cut in as many parts, read side by side): one stream keeps fewer
  // lines in flight than a core can, and the engine's GEMVs read two weight
  // rows and their scales at once, so the machine's read bandwidth is the
  // best of the three (on the development VMs 2 and 4 streams read 1.2-1.5x
  // what 1 does: docs/benchmarks.md, "The bandwidth probe").
  constexpr int kMaxStreams = 4;
  for (int t = 0; t < tries; ++t)
    for (int streams = 1; streams <= kMaxStreams; streams *= 2) {
      const size_t per = nvec / static_cast<size_t>(threads) / (4 * kMaxStreams) * (4 * kMaxStreams);
      const size_t len = per / static_cast<size_t>(streams);
      std::vector<std::thread> th;
      std::atomic<int> ready{0};
      std::atomic<bool> go{false};
      for (int k = 0; k < threads; ++k)
        th.emplace_back([&, k] {
          const V* p = buf + per * static_cast<size_t>(k);
          V a[kMaxStreams][4] = {};
          ready.fetch_add(1);
          while (!go.load(std::memory_order_acquire)) {
          }
          for (size_t i = 0; i < len; i += 4)
            for (int s = 0; s < streams; ++s) {
              const V* q = p + static_cast<size_t>(s) * len + i;
              a[s][0] += q[0];
              a[s][1] += q[1];
              a[s][2] += q[2];
              a[s][3] += q[3];
            }
          V x{};
          for (auto& row : a)
            for (const V& v : row) x += v;
          unsigned long long r = 0;
          for (int j = 0; j < 8; ++j) r += x[j];
          sink.fetch_add(r);
        });
      while (ready.load() < threads) std::this_thread::yield();
      const uint64_t t0 = now_ns();
      go.store(true, std::memory_order_release);
      for (auto& x : th) x.join();
      const uint64_t dt = now_ns() - t0;
      const size_t read = per * static_cast<size_t>(threads) * sizeof(V);
      if (dt) best = std::max(best, static_cast<double>(read) / static_cast<double>(dt));
    }
  std::free(buf);
  if (sink.load() == 42) std::fputc(' ', stderr);  // keep the reads
  return best;
}

CpuTimes cpu_times() {
  CpuTimes t;
  rusage ru{};
  if (getrusage(RUSAGE_SELF, &ru) == 0)
    t.process_s = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                  static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  std::ifstream f("/proc/stat");
  std::string cpu;
  // user nice system idle iowait irq softirq steal (guest time is inside user)
  unsigned long long v[8] = {};
  if (f >> cpu && cpu == "cpu") {
    int n = 0;
    while (n < 8 && f >> v[n]) ++n;
    const long hz = sysconf(_SC_CLK_TCK);
    if (n == 8 && hz > 0) {
      t.machine_busy_s = static_cast<double>(v[0] + v[1] + v[2] + v[5] + v[6]) / static_cast<double>(hz);
      t.machine_steal_s = static_cast<double>(v[7]) / static_cast<double>(hz);
      t.machine_known = true;
    }
  }
  return t;
}

}  // namespace strata
