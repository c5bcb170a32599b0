// HostRegistrations alone: overlaps refused byte-exactly (partial pages
// included), unregistering only a base, lookups inside a range.
#include "shim/host_registrations.h"
#include "shim/host_flags.h"

#include <gtest/gtest.h>

namespace smolvm::shim {
namespace {

TEST(HostRegistrationsTest, OverlapsAreRefusedAndNeighboursShareAPage) {
  HostRegistrations r;
  ASSERT_TRUE(r.Add(0x10064, 100, 0).ok());
  // The same page on both sides, not the same bytes: both fine.
  EXPECT_TRUE(r.Add(0x10000, 0x64, 1).ok());
  EXPECT_TRUE(r.Add(0x100c8, 8, 0).ok());
  EXPECT_EQ(r.Add(0x100c7, 1, 0).code(), static_cast<int32_t>(Code::kAlreadyExists));
  EXPECT_EQ(r.Add(0x10000, 0x1000, 0).code(), static_cast<int32_t>(Code::kAlreadyExists));
  EXPECT_EQ(r.Add(0x10063, 2, 0).code(), static_cast<int32_t>(Code::kAlreadyExists));
  EXPECT_EQ(r.Add(0, 8, 0).code(), static_cast<int32_t>(Code::kInvalidArgument));
  EXPECT_EQ(r.Add(0x20000, 0, 0).code(), static_cast<int32_t>(Code::kInvalidArgument));
  EXPECT_EQ(r.Add(~0ull - 4, 16, 0).code(), static_cast<int32_t>(Code::kInvalidArgument));
  EXPECT_EQ(r.size(), 3u);
}

TEST(HostRegistrationsTest, FindAndRemoveByBase) {
  HostRegistrations r;
  ASSERT_TRUE(r.Add(0x5003, 10, 8).ok());
  uint64_t base = 0;
  const HostRegistration* f = r.Find(0x5009, &base);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(base, 0x5003u);
  EXPECT_EQ(f->flags, 8u);
  EXPECT_EQ(r.Find(0x500d, &base), nullptr);
  EXPECT_EQ(r.Find(0x5002, &base), nullptr);
  EXPECT_EQ(r.Remove(0x5004).code(), static_cast<int32_t>(Code::kNotFound));
  EXPECT_TRUE(r.Remove(0x5003).ok());
  EXPECT_EQ(r.Find(0x5003, &base), nullptr);
  EXPECT_EQ(r.Remove(0x5003).code(), static_cast<int32_t>(Code::kNotFound));
}

}  // namespace
}  // namespace smolvm::shim

namespace smolvm::shim {
namespace {

// Unified addressing: registered and pinned memory report Mapped besides
// what was asked (host_flags.h: as the H100 of 2026-12-07 answered).
TEST(HostFlagsTest, RegisteredMemoryReportsMappedBesidesItsFlags) {
  EXPECT_EQ(RegisteredHostFlags(cudaHostRegisterPortable), unsigned{cudaHostRegisterPortable | cudaHostRegisterMapped});
  EXPECT_EQ(RegisteredHostFlags(cudaHostRegisterDefault), unsigned{cudaHostRegisterMapped});
  EXPECT_EQ(RegisteredHostFlags(cudaHostRegisterReadOnly),
            unsigned{cudaHostRegisterReadOnly | cudaHostRegisterMapped});
}

TEST(HostFlagsTest, PinnedMemoryReportsMappedBesidesItsFlags) {
  EXPECT_EQ(PinnedHostFlags(cudaHostAllocDefault), unsigned{cudaHostAllocMapped});
  EXPECT_EQ(PinnedHostFlags(cudaHostAllocPortable | cudaHostAllocWriteCombined),
            unsigned{cudaHostAllocPortable | cudaHostAllocWriteCombined | cudaHostAllocMapped});
}

}  // namespace
}  // namespace smolvm::shim
