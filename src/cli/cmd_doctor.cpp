// strata doctor: this machine's facts that decide strata's speed, measured
// in a few seconds (docs/doctor.md): CPU and kernel path, memory (bandwidth,
// RAM, cgroup limit, swap, THP) and the disk under --dir (filesystem, free
// space, O_DIRECT, io_uring, random-read throughput at several queue depths),
// with warnings a user can act on. --json prints one object, schema 1.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/usage.h"
#include "core/error.h"
#include "core/json.h"
#include "core/system_info.h"
#include "experts/disk_probe.h"
#include "kernels/compute_probe.h"
#include "kernels/cpu_features.h"
#include "strata_version.h"

namespace strata::cli {

namespace {

struct DoctorFlags {
  std::string dir = ".";
  bool json = false;
  int probe_mib = 256;  // temp file for the read probe (at most 256)
  int read_kib = 4096;  // one read: about one routed expert of a full-size model
  double seconds = 0.5;  // per queue depth
  int membw_mib = 512;   // 0 skips the memory-bandwidth test
  bool no_disk_reads = false;
};

std::vector<std::string> feature_names(const CpuFeatures& f) {
  std::vector<std::string> v;
  auto add = [&v](bool on, const char* name) {
    if (on) v.push_back(name);
  };
  add(f.avx2, "avx2");
  add(f.fma, "fma");
  add(f.avx512f, "avx512f");
  add(f.avx512bw, "avx512bw");
  add(f.avx512vl, "avx512vl");
  add(f.avx512dq, "avx512dq");
  add(f.avx512vnni, "avx512vnni");
  add(f.avx512bf16, "avx512bf16");
  add(f.avxvnni, "avxvnni");
  add(f.amx_tile, "amx-tile");
  add(f.amx_int8, "amx-int8");
  add(f.asimd, "asimd");
  add(f.asimddp, "asimddp");
  add(f.i8mm, "i8mm");
  return v;
}

double gb(uint64_t b) { return static_cast<double>(b) / 1e9; }

struct Warning {
  std::string id, message, fix;
};

std::vector<Warning> warnings_for(const MemoryInfo& m, const DiskProbe& d) {
  std::vector<Warning> w;
  auto add = [&w](std::string id, std::string message, std::string fix) {
    w.push_back({std::move(id), std::move(message), std::move(fix)});
  };
  if (!d.o_direct)
    add("no_o_direct",
        fmt::format("the {} filesystem under {} refuses O_DIRECT ({}): experts are read through the page cache, "
                    "which holds a second copy of what the expert cache holds and makes read speeds look better "
                    "than the disk is",
                    d.filesystem, d.dir, d.o_direct_error),
        "keep containers on a local ext4, xfs or btrfs disk (not tmpfs, overlay, NFS or FUSE); strata still runs "
        "here with buffered reads");
  if (!d.io_uring)
    add("io_uring_blocked",
        fmt::format("io_uring is not available ({}); this probe measured queue depth with threads instead",
                    d.io_uring_error),
        "strata's expert reads use pread and do not need io_uring; to allow it, remove the block (a container's "
        "seccomp profile, e.g. docker --security-opt seccomp=..., or sysctl kernel.io_uring_disabled=0)");
  if (m.swap_total_bytes > 0)
    add("swap_on",
        fmt::format("swap is on ({:.1f} GB, {:.1f} GB used): if the dense part and the expert cache overcommit "
                    "memory, their pages are swapped out and every token waits on the disk twice",
                    gb(m.swap_total_bytes), gb(m.swap_total_bytes - m.swap_free_bytes)),
        "set --ram so that the dense part plus the budget stays below available memory (strata plan tells the "
        "sizes), or turn swap off (sudo swapoff -a)");
  if (m.thp == "never")
    add("thp",
        "transparent huge pages are 'never': strata's weight buffers and expert cache slots, which it marks "
        "MADV_HUGEPAGE, get 4 KiB pages (more TLB misses while streaming large matrices; with 2 MiB pages "
        "slice-int4 decode measured 1.12-1.26x, docs/kernels.md)",
        "echo madvise | sudo tee /sys/kernel/mm/transparent_hugepage/enabled (reverts at reboot)");
  if (m.cgroup_limit_bytes > 0 && m.total_bytes > 0 && m.cgroup_limit_bytes < m.total_bytes)
    add("cgroup_limit",
        fmt::format("this process's cgroup ({}) limits memory to {:.1f} GB of the machine's {:.1f} GB; strata's "
                    "default expert budget follows MemAvailable, which does not see the limit, so a run without "
                    "--ram can be OOM-killed",
                    m.cgroup_version, gb(m.cgroup_limit_bytes), gb(m.total_bytes)),
        fmt::format("pass --ram below {:.1f} GB minus the dense part (strata plan), or raise the limit "
                    "(docker --memory, systemd MemoryMax)",
                    gb(m.cgroup_limit_bytes)));
  constexpr uint64_t kLow = 50ull * 1000 * 1000 * 1000;
  if (d.total_bytes > 0 && d.free_bytes < kLow)
    add("low_free_space",
        fmt::format("only {:.1f} GB free under {}: a full GLM-5-class container needs several hundred GB", gb(d.free_bytes),
                    d.dir),
        "check the container's size with strata plan --model CONFIG and convert into a --dir with room");
  if (!d.reads.empty() && !d.reads_direct)
    add("reads_cached",
        "the random-read numbers below were measured without O_DIRECT: some reads may have been served from the "
        "page cache (the probe file was flushed and dropped from it first), so they can overstate the disk",
        "measure under a --dir on a filesystem with O_DIRECT for the disk's own speed");
  return w;
}

int run_doctor(const DoctorFlags& f) {
  const KernelPath path = best_kernel_path();
  const int cores = usable_cores();
  const MemoryInfo mem = memory_info();
  const double membw = f.membw_mib > 0 ? memory_read_gb_s(static_cast<size_t>(f.membw_mib) << 20, cores, 3) : 0.0;
  const ComputeProbe cp = probe_compute(cores, 0.4, 64ull << 20);
  DiskProbeOptions po;
  po.dir = f.dir;
  po.file_bytes = static_cast<uint64_t>(f.probe_mib) << 20;
  po.read_bytes = static_cast<uint64_t>(f.read_kib) << 10;
  po.seconds_per_depth = f.seconds;
  po.measure = !f.no_disk_reads;
  const DiskProbe disk = probe_disk(po);
  // The store's checksum of one expert-sized read from memory: per miss,
  // besides the read (strata plan adds it to the disk term).
  const ChecksumProbe ck = probe_checksum(std::max<uint64_t>(4096, po.read_bytes / 4096 * 4096), 0.2);
  const std::vector<Warning> warns = warnings_for(mem, disk);

  if (f.json) {
    Json reads = Json::array();
    for (const DiskReadRate& r : disk.reads)
      reads.push_back({{"queue_depth", r.depth}, {"read_bytes", po.read_bytes / 4096 * 4096}, {"reads", r.reads},
                       {"seconds", r.seconds}, {"gb_s", r.gb_s}});
    Json w = Json::array();
    for (const Warning& x : warns) w.push_back({{"id", x.id}, {"message", x.message}, {"fix", x.fix}});
    const Json out{
        {"schema", 1},
        {"strata_version", std::string(STRATA_VERSION)},
        {"cpu",
         {{"model", cpu_model_name()},
          {"cores", cores},
          {"kernel_path", kernel_path_name(path)},
          {"kernel_description", kernel_description(path)},
          {"features", feature_names(cpu_features())}}},
        {"compute",
         {{"threads", cp.threads},
          {"matmul_call_us", cp.matmul_call_s * 1e6},
          {"matmul_madd_ns", cp.matmul_madd_s * 1e9},
          {"working_set_bytes", cp.working_set_bytes},
          {"region_us", cp.region_s * 1e6},
          {"dot_gmadd_s", cp.dot_gmadd_s},
          {"seconds", cp.seconds}}},
        {"checksum",
         {{"read_bytes", ck.expert_bytes},
          {"working_set_bytes", ck.working_set_bytes},
          {"hashes", ck.hashes},
          {"seconds", ck.seconds},
          {"gb_s", ck.gb_s},
          {"us_per_read", ck.us_per_expert}}},
        {"memory",
         {{"total_bytes", mem.total_bytes},
          {"available_bytes", mem.available_bytes},
          {"cgroup_version", mem.cgroup_version},
          {"cgroup_limit_bytes", mem.cgroup_limit_bytes},
          {"swap_total_bytes", mem.swap_total_bytes},
          {"swap_free_bytes", mem.swap_free_bytes},
          {"thp", mem.thp},
          {"read_gb_s", membw},
          {"read_threads", cores}}},
        {"disk",
         {{"dir", disk.dir},
          {"filesystem", disk.filesystem},
          {"free_bytes", disk.free_bytes},
          {"total_bytes", disk.total_bytes},
          {"o_direct", disk.o_direct},
          {"o_direct_error", disk.o_direct_error},
          {"io_uring", disk.io_uring},
          {"io_uring_error", disk.io_uring_error},
          {"read_method", disk.read_method},
          {"reads_direct", disk.reads_direct},
          {"probe_file_bytes", disk.file_bytes},
          {"probe_write_gb_s", disk.write_seconds > 0 ? gb(disk.file_bytes) / disk.write_seconds : 0.0},
          {"probe_file_removed", disk.file_removed},
          {"random_read", reads},
          {"error", disk.error}}},
        {"warnings", w}};
    std::printf("%s\n", out.dump(1).c_str());
    return disk.file_removed ? 0 : kExitRuntime;
  }

  auto row = [](const char* k, const std::string& v) { std::printf("  %-22s %s\n", k, v.c_str()); };
  std::printf("strata %s doctor\n\ncpu\n", STRATA_VERSION);
  row("model", cpu_model_name());
  row("cores", std::to_string(cores));
  row("kernel path", kernel_description(path));
  row("fixed costs", fmt::format("{:.1f} us + {:.2f} ns per multiply-add per small projection ({} MiB of weights), "
                                 "{:.1f} us per parallel region, attention dots {:.1f} G multiply-adds/s ({} threads)",
                                 cp.matmul_call_s * 1e6, cp.matmul_madd_s * 1e9, cp.working_set_bytes >> 20,
                                 cp.region_s * 1e6, cp.dot_gmadd_s, cp.threads));
  std::printf("memory\n");
  row("read bandwidth", membw > 0 ? fmt::format("{:.1f} GB/s ({} threads, {} MiB buffer)", membw, cores, f.membw_mib)
                                  : std::string("not measured"));
  row("RAM", fmt::format("{:.1f} GB total, {:.1f} GB available", gb(mem.total_bytes), gb(mem.available_bytes)));
  row("cgroup limit", mem.cgroup_limit_bytes ? fmt::format("{:.1f} GB ({})", gb(mem.cgroup_limit_bytes), mem.cgroup_version)
                                             : fmt::format("none ({})", mem.cgroup_version));
  row("swap", mem.swap_total_bytes ? fmt::format("{:.1f} GB ({:.1f} GB used)", gb(mem.swap_total_bytes),
                                                 gb(mem.swap_total_bytes - mem.swap_free_bytes))
                                   : std::string("off"));
  row("transparent hugepages", mem.thp);
  std::printf("disk under %s\n", disk.dir.c_str());
  row("filesystem", disk.filesystem);
  row("free", fmt::format("{:.1f} GB of {:.1f} GB", gb(disk.free_bytes), gb(disk.total_bytes)));
  row("O_DIRECT", disk.o_direct ? std::string("yes") : "no (" + disk.o_direct_error + ")");
  row("io_uring", disk.io_uring ? std::string("yes") : "blocked (" + disk.io_uring_error + ")");
  if (!disk.reads.empty()) {
    row("probe file", fmt::format("{} MiB written at {:.2f} GB/s, removed{}", disk.file_bytes >> 20,
                                  disk.write_seconds > 0 ? gb(disk.file_bytes) / disk.write_seconds : 0.0,
                                  disk.file_removed ? "" : " -- FAILED to remove"));
    for (const DiskReadRate& r : disk.reads)
      row(fmt::format("random read QD{}", r.depth).c_str(),
          fmt::format("{:.2f} GB/s ({} x {} KiB reads, {}{})", r.gb_s, r.reads, po.read_bytes >> 10, disk.read_method,
                      disk.reads_direct ? ", O_DIRECT" : ", buffered: may include page-cache hits"));
  }
  if (!disk.error.empty()) row("probe error", disk.error);
  row("checksum per read", fmt::format("{:.1f} us per {} KiB expert from memory ({:.2f} GB/s, the store's XXH3)",
                                       ck.us_per_expert, ck.expert_bytes >> 10, ck.gb_s));
  if (warns.empty()) {
    std::printf("\nno warnings\n");
  } else {
    std::printf("\n%zu warning%s\n", warns.size(), warns.size() == 1 ? "" : "s");
    for (const Warning& x : warns) std::printf("- [%s] %s\n  what to do: %s\n", x.id.c_str(), x.message.c_str(), x.fix.c_str());
  }
  return disk.file_removed ? 0 : kExitRuntime;
}

}  // namespace

void add_doctor_command(CLI::App& app, Runner& run) {
  auto f = std::make_shared<DoctorFlags>();
  CLI::App* cmd = app.add_subcommand("doctor", "Measure this machine's CPU, memory and disk as strata will use them");
  cmd->add_option("--dir", f->dir, "Directory whose disk to probe (default: the current directory); one temp file is "
                                   "written there and deleted");
  cmd->add_flag("--json", f->json, "One JSON object (schema 1, docs/doctor.md)");
  cmd->add_option("--probe-mib", f->probe_mib, "Size of the temp file read back at random (default 256; at most 256)")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--read-kib", f->read_kib, "Size of one random read in KiB (default 4096, about one expert)")
      ->check(CLI::Range(4, 65536));
  cmd->add_option("--seconds", f->seconds, "Time limit of each queue-depth read probe (default 0.5)")
      ->check(CLI::Range(0.01, 5.0));
  cmd->add_option("--membw-mib", f->membw_mib, "Buffer of the memory read-bandwidth test (default 512; 0 skips)")
      ->check(CLI::Range(0, 1 << 16));
  cmd->add_flag("--no-disk-reads", f->no_disk_reads, "Disk facts only (O_DIRECT is checked with a 4 KiB temp file)");
  cmd->callback([f, &run] { run = [f] { return run_doctor(*f); }; });
}

}  // namespace strata::cli
