// core/io: descriptors close once and move, transfers report the file, offset
// and size, the end of file is told apart from an error, and atomic writes
// never leave a half-written file under the final name.
#include "core/io.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <xxhash.h>

#include <filesystem>
#include <string>
#include <utility>

#include "test_util.h"

namespace strata::io_test {
namespace {

using test_util::error_of;
using test_util::read_file;
using test_util::TempDir;
using test_util::write_file;
using ::testing::AllOf;
using ::testing::HasSubstr;

bool is_open(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

TEST(IoFd, ClosesOnceAndMoves) {
  TempDir dir;
  write_file(dir.file("a"), "hello");
  int raw = -1;
  {
    Fd a = open_file(dir.file("a"), O_RDONLY);
    raw = a.get();
    EXPECT_TRUE(is_open(raw));
    EXPECT_EQ(a.path(), dir.file("a"));
    Fd b = std::move(a);
    EXPECT_FALSE(a.valid());
    EXPECT_EQ(b.get(), raw);
    EXPECT_TRUE(::fcntl(raw, F_GETFD) & FD_CLOEXEC);
    Fd c;
    c = std::move(b);
    EXPECT_TRUE(is_open(raw));
  }
  EXPECT_FALSE(is_open(raw));
}

TEST(IoFd, OpenErrorsNameThePath) {
  TempDir dir;
  EXPECT_THAT(error_of([&] { open_file(dir.file("missing"), O_RDONLY); }),
              AllOf(HasSubstr(dir.file("missing")), HasSubstr("cannot open")));
  EXPECT_THAT(error_of([&] { open_file(dir.file("no/such/dir"), O_WRONLY | O_CREAT); }),
              AllOf(HasSubstr(dir.file("no/such/dir")), HasSubstr("cannot create")));
  errno = 0;
  const Fd f = try_open_file(dir.file("missing"), O_RDONLY);
  EXPECT_FALSE(f);
  EXPECT_EQ(errno, ENOENT);
}

TEST(IoTransfer, ShortReadAtEndOfFileIsToldApart) {
  TempDir dir;
  write_file(dir.file("a"), "0123456789");
  const Fd fd = open_file(dir.file("a"), O_RDONLY);
  char buf[16] = {};
  EXPECT_EQ(pread_full(fd, buf, 4, 3), 4u);
  EXPECT_EQ(std::string(buf, 4), "3456");
  EXPECT_EQ(pread_full(fd, buf, 16, 6), 4u);  // the end of file, not an error
  const IoResult r = try_pread_full(fd.get(), buf, 16, 8);
  EXPECT_EQ(r.bytes, 2u);
  EXPECT_EQ(r.error, 0);
  EXPECT_THAT(error_of([&] { pread_exact(fd, buf, 16, 2, " (tensor \"t\")"); }),
              AllOf(HasSubstr(dir.file("a") + " (tensor \"t\")"), HasSubstr("read of 16 bytes at offset 2"),
                    HasSubstr("ended early after 8 bytes")));
  // A read error names the file, size and offset.
  const Fd wr = open_file(dir.file("a"), O_WRONLY);
  EXPECT_THAT(error_of([&] { pread_full(wr, buf, 5, 1); }),
              AllOf(HasSubstr(dir.file("a")), HasSubstr("read of 5 bytes at offset 1 failed")));
}

TEST(IoTransfer, WritesAndTheirErrors) {
  TempDir dir;
  const Fd fd = open_file(dir.file("w"), O_RDWR | O_CREAT | O_TRUNC);
  write_full(fd, "abcdef", 6, 0);
  pwrite_full(fd, "XY", 2, 2);
  fsync_file(fd);
  fsync_file(fd, /*data_only=*/true);
  EXPECT_EQ(read_file(dir.file("w")), "abXYef");
  const Fd ro = open_file(dir.file("w"), O_RDONLY);
  EXPECT_THAT(error_of([&] { pwrite_full(ro, "zz", 2, 4); }),
              AllOf(HasSubstr(dir.file("w")), HasSubstr("write failed at byte 4 (writing 2 bytes at offset 4)")));
  fsync_dir(dir.str());
  EXPECT_THAT(error_of([&] { fsync_dir(dir.file("nope")); }), HasSubstr("cannot open directory"));
}

TEST(IoAtomic, CommitRenamesAndHashes) {
  TempDir dir;
  const std::string path = dir.file("out.bin");
  std::string want;
  for (size_t buffer : {size_t{0}, size_t{7}, AtomicFileWriter::kDefaultBuffer}) {
    std::filesystem::remove(path);
    AtomicFileWriter w(path, {}, buffer);
    w.write("hello ", 6);
    w.zeros(10);
    w.pad_to(8);
    w.write("world", 5);
    EXPECT_EQ(w.pos(), 21u);
    EXPECT_FALSE(std::filesystem::exists(path));
    EXPECT_TRUE(std::filesystem::exists(path + ".tmp"));
    const uint64_t h = w.commit();
    const std::string body = read_file(path);
    if (want.empty()) want = body;
    EXPECT_EQ(body, want);
    EXPECT_EQ(body, std::string("hello ") + std::string(10, '\0') + "world");
    EXPECT_EQ(h, XXH3_64bits(body.data(), body.size()));
    const FileDigest d = hash_file(path);
    EXPECT_EQ(d.bytes, body.size());
    EXPECT_EQ(d.xxh3, h);
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  }
}

TEST(IoAtomic, AbandonedWriterLeavesNothing) {
  TempDir dir;
  const std::string path = dir.file("f");
  write_file(path, "old");
  {
    AtomicFileWriter w(path);
    w.write("new contents", 12);
  }
  EXPECT_EQ(read_file(path), "old");
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  write_file_atomic(path, "small");
  EXPECT_EQ(read_file(path), "small");
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_THAT(error_of([&] { write_file_atomic(dir.file("no/dir/f"), "x"); }),
              AllOf(HasSubstr(dir.file("no/dir/f.tmp")), HasSubstr("cannot create")));
}

// A link planted as the temporary name (a directory others can write) is
// never written through: the file it points to is unchanged, and the output
// lands under its own name.
TEST(IoAtomic, PlantedTempLinkIsNotFollowed) {
  TempDir dir;
  const std::string sentinel = dir.file("sentinel");
  write_file(sentinel, "precious");
  const std::string path = dir.file("out");
  std::filesystem::create_symlink(sentinel, path + ".tmp");
  write_file_atomic(path, "fresh");
  EXPECT_EQ(read_file(sentinel), "precious");
  EXPECT_EQ(read_file(path), "fresh");
  EXPECT_FALSE(std::filesystem::is_symlink(path));
  // A stale regular file is replaced, not appended to or truncated in place.
  write_file(path + ".tmp", "stale stale stale");
  write_file_atomic(path, "new");
  EXPECT_EQ(read_file(path), "new");
  // create_new_file itself.
  std::filesystem::create_symlink(sentinel, dir.file("link"));
  {
    Fd fd = create_new_file(dir.file("link"), 0600);
    ASSERT_TRUE(fd.valid());
    pwrite_full(fd, "x", 1, 0);
  }
  EXPECT_EQ(read_file(sentinel), "precious");
  EXPECT_EQ(read_file(dir.file("link")), "x");
}

}  // namespace
}  // namespace strata::io_test
