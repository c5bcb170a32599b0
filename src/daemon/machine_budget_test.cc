#include "daemon/machine_budget.h"

#include <cuda.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/fake_backend.h"

namespace smolvm {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

TEST(MachineBudget, ChargesAreSharedThroughThePageAndCapped) {
  auto daemon_side = MachineBudget::Create(64 * kMiB);
  ASSERT_TRUE(daemon_side.ok());
  auto& d = *daemon_side;
  int a = d->TakeSlot(), b = d->TakeSlot();
  ASSERT_EQ(a, 0);
  ASSERT_EQ(b, 1);
  auto worker = MachineBudget::Map(UniqueFd(::dup(d->fd())));
  ASSERT_TRUE(worker.ok());
  EXPECT_EQ((*worker)->limit(), 64 * kMiB);
  EXPECT_TRUE((*worker)->Charge(a, 40 * kMiB));
  EXPECT_FALSE(d->Charge(b, 40 * kMiB)) << "the cap is over both slots";
  EXPECT_TRUE(d->Charge(b, 24 * kMiB));
  EXPECT_EQ(d->used(), 64 * kMiB);
  EXPECT_EQ(d->left(), 0u);
  EXPECT_FALSE(d->Charge(b, ~0ull)) << "no overflow past the cap";
  (*worker)->Refund(a, 8 * kMiB);
  EXPECT_EQ(d->left(), 8 * kMiB);
  // A worker that died holding 32 MiB: the daemon reclaims its slot.
  d->ReclaimSlot(a);
  EXPECT_EQ(d->used(), 24 * kMiB);
  EXPECT_EQ(d->TakeSlot(), a);
}

TEST(MachineBudget, TwoProcessesNeverPassTheCapTogether) {
  auto d = MachineBudget::Create(1000 * kMiB).value();
  int slots[2] = {d->TakeSlot(), d->TakeSlot()};
  pid_t kids[2];
  for (int k = 0; k < 2; ++k) {
    kids[k] = ::fork();
    if (kids[k] == 0) {
      auto mine = MachineBudget::Map(UniqueFd(::dup(d->fd()))).value();
      for (int i = 0; i < 1000; ++i) (void)mine->Charge(slots[k], kMiB);
      ::_exit(0);
    }
  }
  for (pid_t k : kids) ::waitpid(k, nullptr, 0);
  EXPECT_EQ(d->used(), 1000 * kMiB);
}

// Issue 34 item 4: a CUDA array is charged to --gpu-mem like a chunk (its
// rows rounded up to 512 bytes), refused past it, refunded when destroyed.
TEST(BudgetedBackend, ArraysAreChargedLikeChunksAndRefundedWhenDestroyed) {
  BudgetedBackend b(std::make_unique<FakeBackend>());
  ASSERT_TRUE(b.Init(0).ok());
  auto budget = MachineBudget::Create(16 * kMiB).value();
  int slot = budget->TakeSlot();
  b.SetBudget(budget, static_cast<uint32_t>(slot));
  // 1000 float4 elements a row: 16,000 bytes, 16,384 charged; 512 rows = 8 MiB.
  const ArrayDesc big{.format = CU_AD_FORMAT_FLOAT, .channels = 4, .width = 1000, .height = 512};
  EXPECT_EQ(ArrayDeviceBytes(big), 8 * kMiB);
  auto a1 = b.ArrayCreate(big);
  ASSERT_TRUE(a1.ok()) << a1.status().message();
  EXPECT_EQ(budget->used(), 8 * kMiB);
  EXPECT_EQ(b.array_bytes(), 8 * kMiB);
  auto c1 = b.ChunkCreate(6 * kMiB);
  ASSERT_TRUE(c1.ok());
  auto a2 = b.ArrayCreate(big);
  ASSERT_FALSE(a2.ok()) << "past the budget";
  EXPECT_EQ(a2.status().code(), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_NE(a2.status().message().find("CUDA array"), std::string::npos) << a2.status().message();
  EXPECT_EQ(budget->used(), 14 * kMiB) << "a refused array charges nothing";
  // A descriptor the backend refuses is refunded too.
  auto bad = b.ArrayCreate(ArrayDesc{.format = CU_AD_FORMAT_FLOAT, .channels = 3, .width = 4});
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(budget->used(), 14 * kMiB);
  ASSERT_TRUE(b.ArrayDestroy(*a1).ok());
  EXPECT_EQ(budget->used(), 6 * kMiB);
  EXPECT_EQ(b.array_bytes(), 0u);
  EXPECT_FALSE(b.ArrayDestroy(*a1).ok()) << "twice";
  EXPECT_EQ(budget->used(), 6 * kMiB) << "refunded once";
  ASSERT_TRUE(b.ChunkRelease(*c1).ok());
  EXPECT_EQ(budget->used(), 0u);
}

TEST(BudgetedBackend, ChunksAreChargedAndRefundedAndMemGetInfoShowsTheBudget) {
  BudgetedBackend b(std::make_unique<FakeBackend>());
  ASSERT_TRUE(b.Init(0).ok());
  auto chunk0 = b.ChunkCreate(8 * kMiB);
  ASSERT_TRUE(chunk0.ok()) << "pass-through before a budget";
  auto budget = MachineBudget::Create(16 * kMiB).value();
  int slot = budget->TakeSlot();
  b.SetBudget(budget, static_cast<uint32_t>(slot));
  auto c1 = b.ChunkCreate(12 * kMiB);
  ASSERT_TRUE(c1.ok());
  auto c2 = b.ChunkCreate(8 * kMiB);
  ASSERT_FALSE(c2.ok());
  EXPECT_EQ(c2.status().code(), CUDA_ERROR_OUT_OF_MEMORY);
  uint64_t free_bytes = 0, total = 0;
  ASSERT_TRUE(b.MemGetInfo(&free_bytes, &total).ok());
  EXPECT_EQ(total, 16 * kMiB);
  EXPECT_EQ(free_bytes, 4 * kMiB);
  ASSERT_TRUE(b.DeviceMemGetInfo(&free_bytes, &total).ok());
  EXPECT_GT(total, 16 * kMiB);
  EXPECT_EQ(b.GetDeviceInfo(0)->total_mem, 16 * kMiB);
  ASSERT_TRUE(b.ChunkRelease(*c1).ok());
  EXPECT_EQ(budget->used(), 0u);
  ASSERT_TRUE(b.ChunkRelease(*chunk0).ok());  // never charged, nothing refunded
  EXPECT_EQ(budget->used(), 0u);
  EXPECT_EQ(b.Innermost()->Name(), "fake");
}

}  // namespace
}  // namespace smolvm
