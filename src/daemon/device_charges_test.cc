// Issue 15: `--gpu-mem` covers a session's modules and context limits, not
// only its chunks. A guest that tries to pass its machine's budget through a
// module with a huge zero-initialised global, a raised stack size or malloc
// heap is refused with CUDA_ERROR_OUT_OF_MEMORY naming the budget, and
// nothing is loaded or reserved; what fits is charged and refunded.
#include "daemon/device_charges.h"

#include <cuda.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "backend/context_limits.h"
#include "backend/device_footprint.h"
#include "backend/fake_backend.h"
#include "backend/testdata/test_cubin.h"
#include "daemon/machine_budget.h"

namespace smolvm {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

// A fatbin container carrying `cubin` (and a PTX entry of 100 bytes).
std::string Fatbin(const std::string& cubin) {
  std::string f(16, '\0');
  uint32_t magic = 0xBA55ED50;
  uint16_t header = 16;
  std::memcpy(&f[0], &magic, 4);
  std::memcpy(&f[6], &header, 2);
  auto entry = [&f](uint16_t kind, const std::string& body) {
    std::string h(64, '\0');
    uint32_t hb = 64;
    uint64_t size = body.size();
    std::memcpy(&h[0], &kind, 2);
    std::memcpy(&h[4], &hb, 4);
    std::memcpy(&h[8], &size, 8);
    f += h + body;
  };
  entry(1, std::string(100, 'p'));
  entry(2, cubin);
  uint64_t payload = f.size() - 16;
  std::memcpy(&f[8], &payload, 8);
  return f;
}

TEST(DeviceFootprint, AModuleCostsItsAllocatedSectionsZeroInitialisedGlobalsIncluded) {
  EXPECT_EQ(ModuleImageDeviceBytes(TestCubin(256 * kMiB)), 4096 + 256 * kMiB);
  EXPECT_EQ(ModuleImageDeviceBytes(Fatbin(TestCubin(256 * kMiB))), 4096 + 256 * kMiB);
  EXPECT_EQ(ModuleImageDeviceBytes("not an image, 29 bytes long."), 28u);
  // Sizes saturate: an image that declares more than 2^64 bytes is charged
  // everything, never a wrapped small figure.
  std::string huge = TestCubin(~0ull - 10);
  EXPECT_EQ(ModuleImageDeviceBytes(huge), ~0ull);
  // A section table that does not fit in the image: the image's size.
  std::string cut = TestCubin(kMiB).substr(0, 4200);
  EXPECT_EQ(ModuleImageDeviceBytes(cut), cut.size());
}

TEST(DeviceFootprint, TheStackIsReservedForEveryResidentThread) {
  DeviceInfo h200;
  h200.attrs.assign(CU_DEVICE_ATTRIBUTE_MAX, 0);
  h200.attrs[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT] = 132;
  h200.attrs[CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR] = 2048;
  EXPECT_EQ(ContextLimitDeviceBytes(CU_LIMIT_STACK_SIZE, 1024, h200), 264ull * kMiB);  // the default, ~half a context
  EXPECT_EQ(ContextLimitDeviceBytes(CU_LIMIT_MALLOC_HEAP_SIZE, 8 * kMiB, h200), 8 * kMiB);
  EXPECT_EQ(ContextLimitDeviceBytes(CU_LIMIT_STACK_SIZE, ~0ull / 2, h200), ~0ull);
  EXPECT_EQ(ContextLimitDeviceBytes(CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH, 64, h200), 0u);
}

// The fake reports what modules and limits take, as a GPU's memory info would.
TEST(DeviceFootprint, TheFakeBackendCountsModulesAndLimitsAsUsedMemory) {
  FakeBackend fake;
  ASSERT_TRUE(fake.Init(0).ok());
  uint64_t free0 = 0, total = 0, free1 = 0;
  ASSERT_TRUE(fake.MemGetInfo(&free0, &total).ok());
  auto m = fake.ModuleLoad(TestCubin(64 * kMiB));
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(fake.MemGetInfo(&free1, &total).ok());
  EXPECT_EQ(free0 - free1, 64 * kMiB + 4096);
  ASSERT_TRUE(fake.CtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 40 * kMiB).ok());
  ASSERT_TRUE(fake.MemGetInfo(&free1, &total).ok());
  EXPECT_EQ(free0 - free1, 64 * kMiB + 4096 + 32 * kMiB);
  EXPECT_EQ(fake.CtxGetLimit(CU_LIMIT_MALLOC_HEAP_SIZE).value(), 40 * kMiB);
  ASSERT_TRUE(fake.ModuleUnload(*m).ok());
  ASSERT_TRUE(fake.CtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 8 * kMiB).ok());
  ASSERT_TRUE(fake.MemGetInfo(&free1, &total).ok());
  EXPECT_EQ(free1, free0);
  EXPECT_EQ(fake.ModuleLoad(TestCubin(32ull << 30)).status().code(), CUDA_ERROR_OUT_OF_MEMORY);  // past its 16 GiB
}

class DeviceChargesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(b.Init(0).ok());
    budget = MachineBudget::Create(64 * kMiB).value();
    b.SetBudget(budget, static_cast<uint32_t>(budget->TakeSlot()));
  }
  BudgetedBackend b{std::make_unique<FakeBackend>()};
  std::shared_ptr<MachineBudget> budget;
};

TEST_F(DeviceChargesTest, AModuleWithAGlobalPastTheBudgetIsRefusedAndNothingIsLoaded) {
  uint64_t free0 = 0, free1 = 0, total = 0;
  ASSERT_TRUE(b.DeviceMemGetInfo(&free0, &total).ok());
  auto big = b.ModuleLoad(Fatbin(TestCubin(128 * kMiB)));
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_NE(big.status().message().find("--gpu-mem 64 MiB"), std::string::npos) << big.status().message();
  EXPECT_NE(big.status().message().find("the module needs 129 MiB"), std::string::npos) << big.status().message();
  EXPECT_EQ(budget->used(), 0u);
  ASSERT_TRUE(b.DeviceMemGetInfo(&free1, &total).ok());
  EXPECT_EQ(free1, free0);  // the device never saw it
  auto small = b.ModuleLoad(TestCubin(16 * kMiB));
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(budget->used(), 16 * kMiB + 4096);
  EXPECT_FALSE(b.ModuleLoad(TestCubin(48 * kMiB)).ok());  // two that each fit do not fit together
  ASSERT_TRUE(b.ModuleUnload(*small).ok());
  EXPECT_EQ(budget->used(), 0u);
  EXPECT_TRUE(b.ModuleLoad(TestCubin(48 * kMiB)).ok());
}

TEST_F(DeviceChargesTest, RaisingTheStackOrTheHeapPastTheBudgetIsRefused) {
  // The worker's context starts at stack 0 and CUDA's 8 MiB heap (context_limits.h).
  // The fake holds 4 x 2048 threads: a 16 KiB stack is 128 MiB, past 64 MiB.
  Status st = b.CtxSetLimit(CU_LIMIT_STACK_SIZE, 16 << 10);
  EXPECT_EQ(st.code(), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_NE(st.message().find("the stack size"), std::string::npos) << st.message();
  EXPECT_EQ(b.CtxGetLimit(CU_LIMIT_STACK_SIZE).value(), 0u);  // not set
  EXPECT_EQ(budget->used(), 0u);
  ASSERT_TRUE(b.CtxSetLimit(CU_LIMIT_STACK_SIZE, 4 << 10).ok());
  EXPECT_EQ(budget->used(), 32 * kMiB);
  st = b.CtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 48 * kMiB);  // 32 + (48 - 8) > 64
  EXPECT_EQ(st.code(), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_NE(st.message().find("the malloc heap"), std::string::npos) << st.message();
  ASSERT_TRUE(b.CtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 24 * kMiB).ok());
  EXPECT_EQ(budget->used(), 32 * kMiB + 16 * kMiB);
  // Lowering gives it back; so does going back to the worker's values.
  ASSERT_TRUE(b.CtxSetLimit(CU_LIMIT_STACK_SIZE, 2 << 10).ok());
  EXPECT_EQ(budget->used(), 16 * kMiB + 16 * kMiB);
  ASSERT_TRUE(b.CtxSetLimit(CU_LIMIT_STACK_SIZE, 0).ok());
  ASSERT_TRUE(b.CtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 8 * kMiB).ok());
  EXPECT_EQ(budget->used(), 0u);
  // CUDA's default stack is no longer in the context: a guest that asks for
  // it back pays for it.
  ASSERT_TRUE(b.CtxSetLimit(CU_LIMIT_STACK_SIZE, 1 << 10).ok());
  EXPECT_EQ(budget->used(), 8 * kMiB);
  // Limits that are not memory pass through uncharged.
  EXPECT_TRUE(b.CtxSetLimit(CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH, 4).ok());
  EXPECT_EQ(budget->used(), 8 * kMiB);
}

// Issue 18: the worker's context gives back what CUDA's default limits
// reserve (the fake counts them as used memory, as a GPU's context holds them).
TEST(WorkerContextLimits, AreSetAtInitAndGiveTheirMemoryBack) {
  FakeBackend plain;
  ASSERT_TRUE(plain.Init(0).ok());
  auto fake = std::make_unique<FakeBackend>();
  FakeBackend* inner = fake.get();
  BudgetedBackend b{std::move(fake)};
  ASSERT_TRUE(b.Init(0).ok());
  EXPECT_EQ(b.CtxGetLimit(CU_LIMIT_STACK_SIZE).value(), 0u);
  // Device printf and malloc work as natively: CUDA's FIFO and heap stay.
  EXPECT_EQ(b.CtxGetLimit(CU_LIMIT_PRINTF_FIFO_SIZE).value(), 1u << 20);
  EXPECT_EQ(b.CtxGetLimit(CU_LIMIT_MALLOC_HEAP_SIZE).value(), 8u << 20);
  uint64_t free_plain = 0, free_worker = 0, total = 0;
  ASSERT_TRUE(plain.MemGetInfo(&free_plain, &total).ok());
  ASSERT_TRUE(inner->MemGetInfo(&free_worker, &total).ok());
  const DeviceInfo info = plain.GetDeviceInfo(0).value();
  // 4 x 2048 threads x 1 KiB of stack.
  EXPECT_EQ(DefaultContextLimitBytes(info) - WorkerContextLimitBytes(info), 8 * kMiB);
  EXPECT_EQ(free_worker - free_plain, DefaultContextLimitBytes(info) - WorkerContextLimitBytes(info));
  // On the H200: 264 MiB of stack (518 MiB measured for a bare context, 254 with stack 0).
  DeviceInfo h200;
  h200.attrs.assign(CU_DEVICE_ATTRIBUTE_MAX, 0);
  h200.attrs[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT] = 132;
  h200.attrs[CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR] = 2048;
  EXPECT_EQ(DefaultContextLimitBytes(h200) - WorkerContextLimitBytes(h200), 264 * kMiB);
}

// A kernel that needs local memory grows the context's stack at its launch
// (the fake does as the driver does; on a full device the launch fails).
// The worker raises the limit before the launch instead, charged to the
// budget: refused with the budget named, and the kernel never runs.
TEST(WorkerContextLimits, ALaunchNeedingLocalMemoryIsChargedBeforeItRuns) {
  for (uint64_t limit : {64 * kMiB, 8 * kMiB}) {
    auto fake = std::make_unique<FakeBackend>();
    FakeBackend* inner = fake.get();
    BudgetedBackend b{std::move(fake)};
    ASSERT_TRUE(b.Init(0).ok());
    auto budget = MachineBudget::Create(limit).value();
    b.SetBudget(budget, static_cast<uint32_t>(budget->TakeSlot()));
    auto m = b.ModuleLoad(TestCubin(0));
    ASSERT_TRUE(m.ok());
    const uint64_t module_bytes = budget->used();
    auto f = b.ModuleGetFunction(*m, "smolvm_test_local_2k");
    ASSERT_TRUE(f.ok());
    Status st = b.LaunchKernel(*f, LaunchConfig{{1, 1, 1}, {32, 1, 1}, 0, 0, {}}, 0, {});
    if (limit == 64 * kMiB) {
      ASSERT_TRUE(st.ok()) << st.ToString();
      EXPECT_EQ(b.CtxGetLimit(CU_LIMIT_STACK_SIZE).value(), 2048u);
      EXPECT_EQ(budget->used() - module_bytes, 16 * kMiB);  // 2 KiB x 8192 threads
      EXPECT_EQ(b.limit_bytes(), 16 * kMiB);
      EXPECT_TRUE(b.LaunchKernel(*f, LaunchConfig{{1, 1, 1}, {32, 1, 1}, 0, 0, {}}, 0, {}).ok());
      EXPECT_EQ(inner->CallCount("CtxSetLimit"), 3 + 1);  // the worker's three, one raise
    } else {
      EXPECT_EQ(st.code(), CUDA_ERROR_OUT_OF_MEMORY);
      EXPECT_NE(st.message().find("the stack size"), std::string::npos) << st.message();
      EXPECT_EQ(inner->CallCount("LaunchKernel"), 0);
      EXPECT_EQ(budget->used(), module_bytes);
    }
  }
  // The fake alone grows at the launch, and fails it when the device is full.
  FakeBackend small(FakeBackendOptions{24 * kMiB});
  ASSERT_TRUE(small.Init(0).ok());  // the default limits hold 17 MiB
  ASSERT_TRUE(small.CtxSetLimit(CU_LIMIT_STACK_SIZE, 0).ok());  // 9 MiB
  ASSERT_TRUE(small.ChunkCreate(14 * kMiB).ok());                 // 23 MiB
  auto m = small.ModuleLoad("x");
  ASSERT_TRUE(m.ok());
  auto f = small.ModuleGetFunction(*m, "smolvm_test_local_2k");
  ASSERT_TRUE(f.ok());
  Status st = small.LaunchKernel(*f, LaunchConfig{{1, 1, 1}, {32, 1, 1}, 0, 0, {}}, 0, {});
  EXPECT_EQ(st.code(), CUDA_ERROR_OUT_OF_MEMORY) << st.ToString();
  EXPECT_NE(st.message().find("cannot grow local memory"), std::string::npos) << st.message();
  EXPECT_EQ(small.CtxGetLimit(CU_LIMIT_STACK_SIZE).value(), 0u);
  FakeBackend tiny(FakeBackendOptions{12 * kMiB});
  EXPECT_EQ(tiny.Init(0).code(), CUDA_ERROR_OUT_OF_MEMORY);  // no room for a context's default limits
}

}  // namespace
}  // namespace smolvm
