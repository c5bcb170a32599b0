// Issue 15/18: a session's cuBLAS, cuBLASLt and cuDNN handles cost device
// memory beyond the guest's own (library_charges.h). The fake libraries hold
// it in the FakeBackend's memory, as NVIDIA's do on a GPU, and the charged
// wrappers charge the same figures to the machine's budget: a handle past
// the budget is refused with the library's allocation error naming
// `--gpu-mem`, and nothing is created or held.
#include "worker/library_charges.h"

#include <cublas_api.h>
#include <cuda.h>
#include <gtest/gtest.h>

#include "backend/blas_fake.h"
#include "backend/dnn_fake.h"
#include "backend/fake_backend.h"

namespace smolvm {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr LibraryFootprint kF = kFakeLibraryFootprint;  // 2 + 8 MiB cuBLAS, 1 Lt, 4 cuDNN

struct Session {
  explicit Session(uint64_t budget_mib) {
    auto fake_backend = std::make_unique<FakeBackend>();
    fake = fake_backend.get();
    budgeted = std::make_unique<BudgetedBackend>(std::move(fake_backend));
    EXPECT_TRUE(budgeted->Init(0).ok());
    if (budget_mib) {
      budget = MachineBudget::Create(budget_mib * kMiB).value();
      budgeted->SetBudget(budget, static_cast<uint32_t>(budget->TakeSlot()));
    }
    auto on_change = [this] { ++changes; };
    blas = std::make_unique<ChargedBlasBackend>(std::make_unique<FakeBlasBackend>(fake), budgeted.get(), kF,
                                                on_change);
    dnn = std::make_unique<ChargedDnnBackend>(std::make_unique<FakeDnnBackend>(fake), budgeted.get(), kF,
                                              on_change);
  }
  uint64_t FakeUsed() {
    uint64_t free_bytes = 0, total = 0;
    EXPECT_TRUE(fake->MemGetInfo(&free_bytes, &total).ok());
    return total - free_bytes;
  }
  // A level-1 call with nothing to do: runs on the handle's workspace.
  Status Touch(uint64_t h) {
    BlasLevel1Args l;
    l.fn = BlasLevel1Fn::kSdot;
    float r = 0;
    return blas->Level1(h, l, &r);
  }

  FakeBackend* fake = nullptr;
  std::unique_ptr<BudgetedBackend> budgeted;
  std::shared_ptr<MachineBudget> budget;
  std::unique_ptr<ChargedBlasBackend> blas;
  std::unique_ptr<ChargedDnnBackend> dnn;
  int changes = 0;
};

TEST(LibraryCharges, HandlesAreChargedAsWorkspacesAndHeldInTheFakesMemory) {
  Session s(256);
  const uint64_t used0 = s.FakeUsed();
  auto h1 = s.blas->Create(), h2 = s.blas->Create();
  auto d = s.dnn->Create();
  auto lt = s.blas->LtCreate();
  ASSERT_TRUE(h1.ok() && h2.ok() && d.ok() && lt.ok());
  // 2 x (2 + 8) + 4 + 1 = 25 MiB, on the budget and on the fake device.
  EXPECT_EQ(s.budgeted->workspace_bytes(), 25 * kMiB);
  EXPECT_EQ(s.budget->used(), 25 * kMiB);
  EXPECT_EQ(s.FakeUsed() - used0, 25 * kMiB);
  EXPECT_EQ(s.changes, 4);
  // The guest's own workspace replaces the default pool: 8 MiB back.
  ASSERT_TRUE(s.blas->SetWorkspace(*h1, 0x1000, 4 * kMiB).ok());
  EXPECT_EQ(s.budget->used(), 17 * kMiB);
  EXPECT_EQ(s.FakeUsed() - used0, 17 * kMiB);
  ASSERT_TRUE(s.Touch(*h1).ok());  // runs on the guest's workspace
  EXPECT_EQ(s.budget->used(), 17 * kMiB);
  // cublasSetStream resets to the pool: the next call takes it again.
  ASSERT_TRUE(s.blas->SetStream(*h1, kDefaultStream).ok());
  EXPECT_EQ(s.budget->used(), 17 * kMiB);
  ASSERT_TRUE(s.Touch(*h1).ok());
  EXPECT_EQ(s.budget->used(), 25 * kMiB);
  EXPECT_EQ(s.FakeUsed() - used0, 25 * kMiB);
  // Destroying gives everything back.
  ASSERT_TRUE(s.blas->Destroy(*h1).ok());
  ASSERT_TRUE(s.blas->LtDestroy(*lt).ok());
  ASSERT_TRUE(s.dnn->Destroy(*d).ok());
  EXPECT_EQ(s.budget->used(), 10 * kMiB);
  EXPECT_EQ(s.FakeUsed() - used0, 10 * kMiB);
  s.blas.reset();  // a handle left live is refunded with the backend
  s.dnn.reset();
  EXPECT_EQ(s.budget->used(), 0u);
  EXPECT_EQ(s.budgeted->workspace_bytes(), 0u);
}

TEST(LibraryCharges, AHandlePastTheBudgetIsRefusedWithTheCapsError) {
  Session s(15);  // one cuBLAS handle (10) and a cuDNN handle (4) fit; a second cuBLAS handle does not
  auto h1 = s.blas->Create();
  ASSERT_TRUE(h1.ok());
  ASSERT_TRUE(s.dnn->Create().ok());
  const uint64_t used = s.FakeUsed();
  auto h2 = s.blas->Create();
  ASSERT_FALSE(h2.ok());
  EXPECT_EQ(h2.status().code(), proto::kBlasStatusBase + CUBLAS_STATUS_ALLOC_FAILED);
  EXPECT_NE(h2.status().message().find("--gpu-mem 15 MiB"), std::string::npos) << h2.status().message();
  EXPECT_NE(h2.status().message().find("cuBLAS handle"), std::string::npos) << h2.status().message();
  auto d2 = s.dnn->Create();
  ASSERT_FALSE(d2.ok());
  EXPECT_EQ(d2.status().code(), proto::kDnnStatusBase + 4004);  // CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED
  // Nothing was created or held; the Lt handle (1 MiB) still fits.
  EXPECT_EQ(s.FakeUsed(), used);
  EXPECT_EQ(s.budget->used(), 14 * kMiB);
  EXPECT_TRUE(s.blas->LtCreate().ok());
  // After a SetStream the pool is charged at the next call; past the budget
  // that call is refused as cuBLAS refuses one whose pool cannot be had.
  ASSERT_TRUE(s.blas->SetWorkspace(*h1, 0x1000, kMiB).ok());
  ASSERT_TRUE(s.blas->LtCreate().ok());
  ASSERT_TRUE(s.blas->LtCreate().ok());
  ASSERT_TRUE(s.blas->LtCreate().ok());
  ASSERT_TRUE(s.blas->LtCreate().ok());  // 2 + 4 + 5 = 11 MiB: 4 left, the pool needs 8
  ASSERT_TRUE(s.blas->SetStream(*h1, kDefaultStream).ok());
  Status st = s.Touch(*h1);
  EXPECT_EQ(st.code(), proto::kBlasStatusBase + CUBLAS_STATUS_ALLOC_FAILED) << st.ToString();
  EXPECT_NE(st.message().find("default workspace"), std::string::npos) << st.message();
  ASSERT_TRUE(s.blas->SetWorkspace(*h1, 0x1000, kMiB).ok());
  EXPECT_TRUE(s.Touch(*h1).ok());
}

TEST(LibraryCharges, WithoutABudgetTheBytesAreCountedNotRefused) {
  Session s(0);
  ASSERT_TRUE(s.blas->Create().ok());
  ASSERT_TRUE(s.dnn->Create().ok());
  EXPECT_EQ(s.budgeted->workspace_bytes(), 14 * kMiB);
}

// NVIDIA's figures: cuBLAS's default pool is 32 MiB from Hopper on, 8 MiB
// and 128 KiB before.
TEST(LibraryCharges, TheDefaultPoolFollowsTheComputeCapability) {
  DeviceInfo d;
  d.attrs.assign(CU_DEVICE_ATTRIBUTE_MAX, 0);
  d.attrs[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR] = 9;
  EXPECT_EQ(LibraryDeviceFootprint("cuda", d).blas_default_workspace, 32 * kMiB);
  d.attrs[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR] = 8;
  EXPECT_EQ(LibraryDeviceFootprint("cuda", d).blas_default_workspace, 8 * kMiB + 128 * 1024);
  EXPECT_EQ(LibraryDeviceFootprint("fake", d).blas_default_workspace, kF.blas_default_workspace);
}

// Issue 18: the worker's context starts with a stack of 0 (context_limits.h).
// What cuBLAS's own kernels grow it to at their launch is charged after the
// first call of each shape; growth past the budget fails the call that saw it.
TEST(LibraryCharges, TheStackGrownByTheLibrarysKernelsIsCharged) {
  Session s(64);
  auto h = s.blas->Create();
  ASSERT_TRUE(h.ok());
  const uint64_t used0 = s.budget->used();
  ASSERT_TRUE(s.Touch(*h).ok());
  EXPECT_EQ(s.budget->used(), used0);  // no growth, nothing charged
  // As a library kernel's launch would: the context's stack grows to 1 KiB.
  ASSERT_TRUE(s.fake->CtxSetLimit(CU_LIMIT_STACK_SIZE, 1024).ok());
  const int looks = s.fake->CallCount("CtxGetLimit");
  ASSERT_TRUE(s.Touch(*h).ok());  // a shape that ran before is not looked at again
  EXPECT_EQ(s.fake->CallCount("CtxGetLimit"), looks);
  EXPECT_EQ(s.budget->used(), used0);
  BlasLevel1Args l;
  l.fn = BlasLevel1Fn::kSdot;
  l.incx = 2;
  float r = 0;
  const int changes = s.changes;
  ASSERT_TRUE(s.blas->Level1(*h, l, &r).ok());
  EXPECT_EQ(s.budgeted->limit_bytes(), 8 * kMiB);  // 1 KiB x 4 SMs x 2048 threads
  EXPECT_EQ(s.budget->used(), used0 + 8 * kMiB);
  EXPECT_EQ(s.changes, changes + 1);
  ASSERT_TRUE(s.fake->CtxSetLimit(CU_LIMIT_STACK_SIZE, 16 << 10).ok());  // 128 MiB: past 64
  l.incx = 3;
  Status st = s.blas->Level1(*h, l, &r);
  EXPECT_EQ(st.code(), proto::kBlasStatusBase + CUBLAS_STATUS_ALLOC_FAILED) << st.ToString();
  EXPECT_NE(st.message().find("grew the stack"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("--gpu-mem 64"), std::string::npos) << st.message();
  EXPECT_EQ(s.budget->used(), used0 + 8 * kMiB);
}

}  // namespace
}  // namespace smolvm
