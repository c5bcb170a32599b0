// CudaBackend's own logic against a mock libcuda (testdata/mock_libcuda.cc):
// what it passes to the driver and what it makes of the answers. No GPU.
#include "backend/cuda_backend.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "backend/context_limits.h"
#include "backend/testdata/mock_libcuda.h"

namespace smolvm {
namespace {

constexpr uint64_t kBase = 0x580000000000ull;
constexpr uint64_t kMiB = 1ull << 20;

// The mock is built next to this test's executable.
std::string MockPath() {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() /
          "libsmolvm_mock_libcuda.so")
      .string();
}

class CudaBackendMockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LibcudaSearch s;
    s.override_path = MockPath();
    backend_ = std::make_unique<CudaBackend>(s);
    ASSERT_TRUE(backend_->Init(0).ok());
    void* dl = ::dlopen(MockPath().c_str(), RTLD_NOW | RTLD_NOLOAD);
    ASSERT_NE(dl, nullptr) << "the backend did not load " << MockPath();
    auto get = reinterpret_cast<MockLibcudaState* (*)()>(::dlsym(dl, "smolvm_mock_state"));
    ASSERT_NE(get, nullptr);
    mock_ = get();
    *mock_ = MockLibcudaState{};
  }
  std::unique_ptr<CudaBackend> backend_;
  MockLibcudaState* mock_ = nullptr;
};

TEST_F(CudaBackendMockTest, ResolvesAtTheHeaderVersionWithLegacyStreams) {
  // Init already ran: a fresh backend resolves again and records how.
  LibcudaSearch s;
  s.override_path = MockPath();
  CudaBackend other(s);
  ASSERT_TRUE(other.Init(0).ok());
  EXPECT_EQ(mock_->proc_version, CUDA_VERSION);
  EXPECT_EQ(mock_->proc_flags, static_cast<uint64_t>(CU_GET_PROC_ADDRESS_LEGACY_STREAM));
  EXPECT_EQ(mock_->prop_handle_types, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  EXPECT_EQ(other.Granularity(), 2 * kMiB);
  EXPECT_EQ(other.LibcudaPath(), MockPath());
}

TEST_F(CudaBackendMockTest, ArenaGrantedElsewhereIsFreedAndRefused) {
  mock_->reserve_shift = 2 * kMiB;
  Status s = backend_->ReserveArena(kBase, 1024 * kMiB);
  EXPECT_EQ(s.code(), static_cast<int32_t>(Code::kUnavailable));
  EXPECT_NE(s.message().find("0x580000000000"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("0x580000200000"), std::string::npos) << s.message();
  EXPECT_EQ(mock_->freed_address, kBase + 2 * kMiB);
  // Nothing was kept: the exact address can still be reserved.
  mock_->reserve_shift = 0;
  EXPECT_TRUE(backend_->ReserveArena(kBase, 1024 * kMiB).ok());
  EXPECT_EQ(backend_->ReserveArena(kBase, 1024 * kMiB).code(), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(CudaBackendMockTest, MappingsSetAccessAndUnmapSynchronizesFirst) {
  ASSERT_TRUE(backend_->ReserveArena(kBase, 1024 * kMiB).ok());
  auto chunk = backend_->ChunkCreate(2 * kMiB);
  ASSERT_TRUE(chunk.ok());
  ASSERT_TRUE(backend_->ChunkMap(kBase, *chunk, 2 * kMiB, false).ok());
  EXPECT_EQ(mock_->last_access_flags, CU_MEM_ACCESS_FLAGS_PROT_READ);
  ASSERT_TRUE(backend_->ChunkSetAccess(kBase, 2 * kMiB, true).ok());
  EXPECT_EQ(mock_->last_access_flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  ASSERT_TRUE(backend_->ChunkUnmap(kBase, 2 * kMiB).ok());
  EXPECT_TRUE(mock_->unmap_after_sync);
  EXPECT_TRUE(backend_->ChunkRelease(*chunk).ok());
}

TEST_F(CudaBackendMockTest, ARunOfChunksGetsOneAccessCall) {
  ASSERT_TRUE(backend_->ReserveArena(kBase, 1024 * kMiB).ok());
  std::vector<ChunkPiece> run;
  for (int i = 0; i < 3; ++i) {
    auto chunk = backend_->ChunkCreate(4 * kMiB);
    ASSERT_TRUE(chunk.ok());
    run.push_back({*chunk, 4 * kMiB});
  }
  int maps = mock_->maps, access = mock_->access_calls;
  ASSERT_TRUE(backend_->ChunkMapRun(kBase, run, false).ok());
  EXPECT_EQ(mock_->maps - maps, 3);
  EXPECT_EQ(mock_->access_calls - access, 1);
  EXPECT_EQ(mock_->last_access_addr, kBase);
  EXPECT_EQ(mock_->last_access_bytes, 12 * kMiB);
  EXPECT_EQ(mock_->last_access_flags, CU_MEM_ACCESS_FLAGS_PROT_READ);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(backend_->ChunkUnmap(kBase + i * 4 * kMiB, 4 * kMiB).ok());
    EXPECT_TRUE(backend_->ChunkRelease(run[i].chunk).ok());
  }
}

TEST_F(CudaBackendMockTest, StreamHandlesPassThroughIncludingPerThread) {
  char byte = 1;
  ASSERT_TRUE(backend_->MemcpyHtoD(kBase + 5, &byte, 1, kPerThreadStream).ok());
  EXPECT_EQ(mock_->last_stream, reinterpret_cast<uint64_t>(CU_STREAM_PER_THREAD));
  ASSERT_TRUE(backend_->MemcpyHtoD(kBase, &byte, 1, kDefaultStream).ok());
  EXPECT_EQ(mock_->last_stream, 0u);
  EXPECT_EQ(mock_->last_dst, kBase);
}

TEST_F(CudaBackendMockTest, DriverErrorsCarryTheCodeAndTheCallName) {
  Status s = backend_->StreamSynchronize(kDefaultStream);  // not implemented by the mock
  EXPECT_EQ(s.code(), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(s.message(), "cuStreamSynchronize: CUDA_ERROR_NOT_SUPPORTED");
  EXPECT_EQ(backend_->Memset(kBase, 0, 8, 1, 0).code(), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(CudaBackendMockTest, ParamInfoStopsAfterTheLastParameter) {
  auto p = backend_->FuncGetParamInfo(0x1234);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->size(), 3u);
  EXPECT_EQ((*p)[1].offset, 8u);
  EXPECT_EQ((*p)[1].size, 4u);
  EXPECT_EQ((*p)[2].offset, 16u);
}

TEST_F(CudaBackendMockTest, UnsupportedFunctionAttributesReadAsZero) {
  auto a = backend_->FuncGetAttributes(0x1234);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_EQ(a->size(), static_cast<size_t>(CU_FUNC_ATTRIBUTE_MAX));
  EXPECT_EQ((*a)[CU_FUNC_ATTRIBUTE_NUM_REGS], 100 + CU_FUNC_ATTRIBUTE_NUM_REGS);
  EXPECT_EQ((*a)[CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE], 0);
}

TEST_F(CudaBackendMockTest, LaunchPassesThePackedBufferThroughExtra) {
  LaunchConfig c;
  c.grid[0] = 7, c.grid[1] = 2, c.block[0] = 128, c.block[2] = 2, c.shared_bytes = 512;
  // Unaligned on purpose: the backend must hand the driver an aligned copy.
  std::string storage(1 + 24, '\0');
  for (size_t i = 1; i < storage.size(); ++i) storage[i] = static_cast<char>(i * 7);
  std::string_view params(storage.data() + 1, 24);
  ASSERT_TRUE(backend_->LaunchKernel(0x1234, c, 0x5000, params).ok());
  EXPECT_TRUE(mock_->launch_extra);
  EXPECT_FALSE(mock_->launch_had_params);
  EXPECT_TRUE(mock_->launch_buffer_aligned);
  ASSERT_EQ(mock_->launch_buffer_size, 24u);
  EXPECT_EQ(0, std::memcmp(mock_->launch_buffer, params.data(), 24));
  EXPECT_EQ(mock_->launch_grid[0], 7u);
  EXPECT_EQ(mock_->launch_grid[1], 2u);
  EXPECT_EQ(mock_->launch_grid[2], 1u);
  EXPECT_EQ(mock_->launch_block[0], 128u);
  EXPECT_EQ(mock_->launch_block[2], 2u);
  EXPECT_EQ(mock_->launch_smem, 512u);
  EXPECT_EQ(mock_->last_stream, 0x5000u);
  // No parameters: neither kernelParams nor extra.
  ASSERT_TRUE(backend_->LaunchKernel(0x1234, c, 0, {}).ok());
  EXPECT_FALSE(mock_->launch_extra);
}

// Contexts the guest created (cuCtxCreate): made with the worker's limits
// and popped, so the primary stays current; selected for the calls after;
// destroyed (the primary current again when it was), or with the backend.
TEST_F(CudaBackendMockTest, CreatedContextsHaveTheWorkersLimitsAndDieWithTheBackend) {
  mock_->current_ctx = 0x1000;  // the primary, as Init left it
  Result<uint64_t> c = backend_->CtxCreate(0);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(mock_->ctx_created, 1);
  EXPECT_EQ(mock_->limits_set, static_cast<int>(std::size(kWorkerContextLimits)));
  EXPECT_EQ(mock_->limits_ctx, *c);  // set in the new context
  EXPECT_EQ(mock_->ctx_pops, 1);
  EXPECT_EQ(mock_->current_ctx, 0x1000u);
  ASSERT_TRUE(backend_->CtxSelect(*c).ok());
  EXPECT_EQ(mock_->current_ctx, *c);
  EXPECT_EQ(backend_->CtxSelect(0xdead00).code(), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(mock_->current_ctx, *c);
  ASSERT_TRUE(backend_->CtxDestroy(*c).ok());  // while current
  EXPECT_EQ(mock_->last_destroyed, *c);
  EXPECT_EQ(mock_->current_ctx, 0x1000u);
  EXPECT_EQ(backend_->CtxDestroy(*c).code(), CUDA_ERROR_INVALID_CONTEXT);  // twice
  EXPECT_EQ(mock_->ctx_destroyed, 1);
  Result<uint64_t> left = backend_->CtxCreate(0);
  ASSERT_TRUE(left.ok());
  backend_.reset();
  EXPECT_EQ(mock_->ctx_destroyed, 2);
  EXPECT_EQ(mock_->last_destroyed, *left);
  EXPECT_EQ(mock_->ctx_releases, 1);
}

TEST_F(CudaBackendMockTest, DestructorReleasesThePrimaryContext) {
  backend_.reset();
  EXPECT_EQ(mock_->ctx_releases, 1);
}

}  // namespace
}  // namespace smolvm
