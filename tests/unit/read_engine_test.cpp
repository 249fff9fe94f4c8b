// The read engines (src/experts/read_engine.*): io_uring registered buffers.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/aligned.h"
#include "core/io.h"
#include "experts/read_engine.h"
#include "test_util.h"

namespace strata::read_engine_test {
namespace {

// Reads through one engine and waits for every completion, by tag.
std::vector<int64_t> read_all(ReadEngine& e, const std::vector<ReadOp>& ops) {
  std::vector<int64_t> res(ops.size(), 0);
  e.submit(ops);
  std::vector<ReadDone> done(ops.size());
  for (size_t left = ops.size(); left > 0;) {
    const size_t n = e.wait(done);
    for (size_t i = 0; i < n; ++i) res[done[i].tag] = done[i].res;
    left -= n;
  }
  return res;
}

// A read naming a registered buffer lands the same bytes as a plain read; one
// whose destination lies outside the buffer it names is refused by the kernel
// (so the engine really reads through the registered buffer, not around it).
TEST(ReadEngine, RegisteredBuffersReadTheSameBytesAndOnlyInsideThemselves) {
  test_util::TempDir dir;
  const std::string path = dir.file("data.bin");
  std::vector<uint8_t> data(64 << 10);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 131 + i / 251);
  {
    Fd w = open_file(path, O_WRONLY | O_CREAT | O_TRUNC);
    ASSERT_EQ(::write(w.get(), data.data(), data.size()), static_cast<ssize_t>(data.size()));
  }
  Fd fd = open_file(path, O_RDONLY);
  std::string why;
  std::unique_ptr<ReadEngine> e = open_uring_engine(4, &why);
  if (!e) GTEST_SKIP() << "io_uring unavailable here: " << why;
  ASSERT_FALSE(e->reserve_buffers(kMaxRegisteredBuffers + 1, &why)) << "more buffers than the kernel allows";
  if (!e->reserve_buffers(2, &why)) GTEST_SKIP() << "this kernel has no sparse registered buffers: " << why;

  const size_t n = 32 << 10;
  uint8_t* a = static_cast<uint8_t*>(alloc_streamed(n, 4096));
  uint8_t* b = static_cast<uint8_t*>(alloc_streamed(n, 4096));
  ASSERT_EQ(e->register_buffer(0, a, n), 0);
  ASSERT_EQ(e->register_buffer(1, b, n), 0);
  std::memset(a, 0, n);
  std::memset(b, 0, n);
  // Two chunks into buffer 0 (the second at an offset inside it), one into buffer 1.
  const std::vector<ReadOp> ops = {{fd.get(), a, 4096, 8192, 0, 0},
                                   {fd.get(), a + 8192, 12288, 8192, 1, 0},
                                   {fd.get(), b, 0, static_cast<uint32_t>(n), 2, 1}};
  const std::vector<int64_t> res = read_all(*e, ops);
  EXPECT_EQ(res, (std::vector<int64_t>{8192, 8192, static_cast<int64_t>(n)}));
  EXPECT_EQ(std::memcmp(a, data.data() + 4096, 16384), 0);
  EXPECT_EQ(std::memcmp(b, data.data(), n), 0);

  // Buffer 1 named for bytes that lie in buffer 0: the kernel refuses.
  const std::vector<int64_t> bad = read_all(*e, {{fd.get(), a, 0, 4096, 0, 1}});
  EXPECT_EQ(bad[0], -EFAULT);
  e.reset();  // unregisters before the buffers are freed
  free_streamed(a);
  free_streamed(b);

  // The pread pool has no registered buffers and says so.
  std::unique_ptr<ReadEngine> p = open_pread_engine(2);
  EXPECT_FALSE(p->reserve_buffers(2, &why));
  EXPECT_EQ(p->register_buffer(0, nullptr, 0), -EOPNOTSUPP);
}

}  // namespace
}  // namespace strata::read_engine_test
