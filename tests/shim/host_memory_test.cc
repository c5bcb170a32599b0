// HostMemory::CopyData: how a clone copies its parent's pinned segments
// (PrivatizeForClone): the data, at the same offsets, and nothing else.
#include "shim/host_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace smolvm::shim {
namespace {

constexpr uint64_t kBytes = 4u << 20;

struct Memfd {
  Memfd() : fd(::memfd_create("host-memory-test", MFD_CLOEXEC)) {
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::ftruncate(fd, kBytes), 0);
    map = static_cast<char*>(::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    EXPECT_NE(map, MAP_FAILED);
  }
  ~Memfd() {
    ::munmap(map, kBytes);
    ::close(fd);
  }
  int fd;
  char* map;
};

TEST(HostMemoryCopy, CopiesTheDataAndLeavesHolesHoles) {
  Memfd src, dst;
  std::mt19937 rng(std::random_device{}());
  std::vector<char> a(64 << 10), b(4096);
  for (auto& c : a) c = static_cast<char>(rng() | 1);  // no zero byte: a hole reads as zeros
  for (auto& c : b) c = static_cast<char>(rng() | 1);
  std::memcpy(src.map, a.data(), a.size());
  std::memcpy(src.map + (2u << 20), b.data(), b.size());
  std::memcpy(src.map + kBytes - b.size(), b.data(), b.size());  // the last page

  ASSERT_TRUE(HostMemory::CopyData(src.fd, src.map, kBytes, dst.fd).ok());
  // The untouched middle was not written: still a hole in the copy (checked
  // first: reading a shmem hole through a mapping fills it).
  EXPECT_EQ(::lseek(dst.fd, a.size(), SEEK_DATA), static_cast<off_t>(2u << 20));
  EXPECT_EQ(std::memcmp(dst.map, src.map, kBytes), 0);
  // The copy is the clone's own: writes to either side stay there.
  dst.map[5] = 0;
  EXPECT_NE(src.map[5], 0);
}

TEST(HostMemoryCopy, AnEmptySegmentCopiesNothing) {
  Memfd src, dst;
  ASSERT_TRUE(HostMemory::CopyData(src.fd, src.map, kBytes, dst.fd).ok());
  EXPECT_LT(::lseek(dst.fd, 0, SEEK_DATA), 0);  // ENXIO: no data at all
  EXPECT_EQ(dst.map[kBytes - 1], 0);
}

}  // namespace
}  // namespace smolvm::shim
