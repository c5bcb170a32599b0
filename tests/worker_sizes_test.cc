// Issue 15: sizes and counts from a hostile guest, through the daemon to a
// worker on the fake backend. Each bad request gets an error (in its reply
// or as the next reply's deferred error) and the worker lives on: the same
// connection answers afterwards, served by the same worker.
#include <cublasLt.h>
#include <cublas_api.h>
#include <cuda.h>
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <climits>
#include <nlohmann/json.hpp>

#include "backend/blas_backend.h"
#include "daemon/layout.h"
#include "worker/module_cache.h"
#include "daemon_client.h"
#include "proto/lib_status.h"
#include "proto/lt_attrs.h"

namespace smolvm::testing {
namespace {

using namespace smolvm::proto;

constexpr int32_t kBlasInvalid = kBlasStatusBase + CUBLAS_STATUS_INVALID_VALUE;

class WorkerSizesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(c.Connect(daemon.socket()).ok()) << daemon.Log();
    MemAllocReply m;
    ASSERT_TRUE(c.Call(MemAllocRequest{.bytes = 4 << 20}, &m).ok());
    dptr = m.dptr;
  }
  // The error an ASYNC request left behind, as the next reply reports it.
  int32_t Deferred() {
    PingReply pong;
    CallResult r = c.Call(PingRequest{}, &pong);
    EXPECT_TRUE(r.transport.ok()) << "the worker is gone: " << r.transport.ToString() << "\n" << daemon.Log();
    return r.head.deferred;
  }
  // The worker still serves the session: an allocation, a copy and a read back.
  void ExpectAlive() {
    MemcpyDtoHReply back;
    c.Queue(MemcpyHtoDRequest{.dst = dptr, .stream = 0, .data = "alive"});
    CallResult r = c.Call(MemcpyDtoHRequest{.src = dptr, .bytes = 5, .stream = 0}, &back);
    ASSERT_TRUE(r.transport.ok()) << "the worker is gone: " << r.transport.ToString() << "\n" << daemon.Log();
    EXPECT_EQ(r.head.result, 0) << r.head.message;
    EXPECT_EQ(back.data, "alive");
    EXPECT_EQ(Count(daemon.Log(), "killed by signal") + Count(daemon.Log(), "exited with"), 0u) << daemon.Log();
  }
  DaemonProcess daemon;
  RawClient c;
  uint64_t dptr = 0;
};

// The review's crash: count * elem_bytes wrapped to 0, nothing was checked,
// and the fake worker wrote 2^62 elements (SIGSEGV).
TEST_F(WorkerSizesTest, MemsetWithOverflowingCountIsAnErrorAndTheWorkerLives) {
  c.Queue(MemsetRequest{.dst = dptr, .value = 1, .elem_bytes = 4, .count = 1ull << 62, .stream = 0});
  EXPECT_EQ(Deferred(), CUDA_ERROR_INVALID_VALUE);
  c.Queue(MemsetRequest{.dst = dptr, .value = 1, .elem_bytes = 3, .count = 8, .stream = 0});
  EXPECT_EQ(Deferred(), CUDA_ERROR_INVALID_VALUE);
  ExpectAlive();
}

TEST_F(WorkerSizesTest, CopiesWhoseRangesWrapAreErrors) {
  c.Queue(MemcpyDtoDRequest{.dst = dptr, .src = ~uint64_t{0} - 16, .bytes = 4096, .stream = 0});
  EXPECT_EQ(Deferred(), CUDA_ERROR_INVALID_VALUE);
  c.Queue(MemcpyDtoDRequest{.dst = ~uint64_t{0} - 16, .src = dptr, .bytes = 4096, .stream = 0});
  EXPECT_EQ(Deferred(), CUDA_ERROR_INVALID_VALUE);
  MemcpyDtoHReply back;
  EXPECT_EQ(c.Call(MemcpyDtoHRequest{.src = ~uint64_t{0} - 4, .bytes = 64, .stream = 0}, &back).head.result,
            CUDA_ERROR_INVALID_VALUE);
  c.Queue(MemcpyHtoDHostRequest{.dst = dptr, .src = kHostBase, .bytes = ~uint64_t{0}, .stream = 0});
  EXPECT_EQ(Deferred(), CUDA_ERROR_INVALID_VALUE);
  ExpectAlive();
}

// A kernel whose element count overflows its byte count runs off the end
// of memory: a fault in that session (as on a GPU), never a worker crash.
TEST_F(WorkerSizesTest, KernelWithAnOverflowingCountFaultsOnlyItsSession) {
  std::string image = "fake-image";
  ModuleLoadReply ml;
  ASSERT_TRUE(c.Call(ModuleLoadRequest{.module = 1, .hash = ModuleHash(image), .image = image}, &ml).ok());
  ModuleGetFunctionReply gf;
  ASSERT_TRUE(c.Call(ModuleGetFunctionRequest{.module = 1, .function = 2, .name = "smolvm_test_fill_u32"}, &gf).ok());
  // A parameter buffer shorter than the kernel's parameters: refused.
  c.Queue(LaunchKernelRequest{.function = 2, .grid_x = 1, .grid_y = 1, .grid_z = 1, .block_x = 1, .block_y = 1,
                              .block_z = 1, .params = std::string(8, '\0')});
  EXPECT_EQ(Deferred(), CUDA_ERROR_INVALID_VALUE);
  ExpectAlive();
  std::string params(24, '\0');
  uint64_t n = (1ull << 62) + 1;
  std::memcpy(params.data(), &dptr, 8);
  std::memcpy(params.data() + 16, &n, 8);
  c.Queue(LaunchKernelRequest{.function = 2, .grid_x = 1, .grid_y = 1, .grid_z = 1, .block_x = 1, .block_y = 1,
                              .block_z = 1, .params = params});
  EXPECT_EQ(Deferred(), CUDA_ERROR_ILLEGAL_ADDRESS);
  // Sticky for this session, as a GPU fault is; another session is untouched.
  RawClient other;
  ASSERT_TRUE(other.Connect(daemon.socket()).ok());
  MemAllocReply m;
  EXPECT_TRUE(other.Call(MemAllocRequest{.bytes = 4096}, &m).ok());
  PingReply pong;
  EXPECT_TRUE(c.Call(PingRequest{}, &pong).transport.ok());
}

BlasGemmRequest Gemm(uint64_t dptr, int32_t m, int32_t lda) {
  float one = 1, zero = 0;
  BlasGemmRequest g{};
  g.handle = 5, g.fn = static_cast<uint32_t>(BlasGemmFn::kGemmEx);
  g.transa = CUBLAS_OP_N, g.transb = CUBLAS_OP_N, g.m = m, g.n = 2, g.k = 2;
  g.a = dptr, g.b = dptr, g.c = dptr + 4096;
  g.atype = g.btype = g.ctype = CUDA_R_32F;
  g.lda = lda, g.ldb = 2, g.ldc = std::max(m, 1), g.batch = 1;
  g.compute = CUBLAS_COMPUTE_32F, g.algo = -1;
  static std::string a(reinterpret_cast<char*>(&one), 4), b(reinterpret_cast<char*>(&zero), 4);
  g.alpha = a, g.beta = b;
  return g;
}

TEST_F(WorkerSizesTest, GemmDimensionsStridesAndBatchesAreChecked) {
  BlasCreateReply bc;
  ASSERT_TRUE(c.Call(BlasCreateRequest{.handle = 5}, &bc).ok());
  c.Queue(Gemm(dptr, 2, 2));
  EXPECT_EQ(Deferred(), 0);
  // A leading dimension below the rows: the fake read past the matrix.
  c.Queue(Gemm(dptr, 64, 1));
  EXPECT_EQ(Deferred(), kBlasInvalid);
  c.Queue(Gemm(dptr, -1, 1));
  EXPECT_EQ(Deferred(), kBlasInvalid);
  // A strided batch whose last matrix lies past the end of the address space.
  BlasGemmRequest g = Gemm(dptr, 2, 2);
  g.fn = static_cast<uint32_t>(BlasGemmFn::kGemmStridedBatchedEx);
  g.batch = INT32_MAX;
  g.stride_a = INT64_MAX / 2;
  c.Queue(g);
  EXPECT_EQ(Deferred(), kBlasInvalid);
  // A span of 2^31 columns x 2^31 rows of floats wraps when multiplied in 64 bits.
  g = Gemm(dptr, 2, INT32_MAX);
  g.k = INT32_MAX;
  c.Queue(g);
  EXPECT_EQ(Deferred(), kBlasInvalid);
  // A workspace whose range wraps.
  c.Queue(BlasSetWorkspaceRequest{.handle = 5, .dptr = ~uint64_t{0} - 64, .bytes = 1 << 20});
  EXPECT_EQ(Deferred(), kBlasInvalid);
  // Level 1: n x inc wraps.
  c.Queue(BlasLevel1Request{.handle = 5, .fn = static_cast<uint32_t>(BlasLevel1Fn::kSscal), .n = INT32_MAX,
                            .alpha = g.alpha, .alpha_ptr = 0, .x = ~uint64_t{0} - 64, .incx = INT32_MAX});
  EXPECT_EQ(Deferred(), kBlasInvalid);
  ExpectAlive();
}

std::string Layout(uint64_t rows, uint64_t cols, int64_t ld, int32_t batch = 1, int64_t stride = 0) {
  LtAttrs a;
  a.SetValue<uint32_t>(CUBLASLT_MATRIX_LAYOUT_TYPE, CUDA_R_32F);
  a.SetValue<uint64_t>(CUBLASLT_MATRIX_LAYOUT_ROWS, rows);
  a.SetValue<uint64_t>(CUBLASLT_MATRIX_LAYOUT_COLS, cols);
  a.SetValue<int64_t>(CUBLASLT_MATRIX_LAYOUT_LD, ld);
  a.SetValue<int32_t>(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, batch);
  a.SetValue<int64_t>(CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride);
  return a.Encode();
}

TEST_F(WorkerSizesTest, LtLayoutsWhoseMatricesWrapAreChecked) {
  LtCreateReply lc;
  ASSERT_TRUE(c.Call(LtCreateRequest{.handle = 6}, &lc).ok());
  LtAttrs d;
  d.SetValue<int32_t>(CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, CUBLAS_COMPUTE_32F);
  d.SetValue<int32_t>(CUBLASLT_MATMUL_DESC_SCALE_TYPE, CUDA_R_32F);
  std::string desc = d.Encode(), small = Layout(2, 2, 2);
  float one = 1;
  std::string alpha(reinterpret_cast<char*>(&one), 4);
  LtMatmulRequest m{};
  m.handle = 6, m.desc = desc, m.alpha = alpha, m.beta = alpha;
  m.a = m.b = m.c = m.d = dptr;
  m.adesc = m.bdesc = m.cdesc = m.ddesc = small;
  c.Queue(m);
  EXPECT_EQ(Deferred(), 0);
  // 2^33 columns with a leading dimension of 2^31: 2^64 elements.
  std::string huge = Layout(1, (1ull << 33) + 1, 1ll << 31);
  m.adesc = huge;
  c.Queue(m);
  EXPECT_EQ(Deferred(), kBlasInvalid);
  std::string batched = Layout(2, 2, 2, INT32_MAX, INT64_MAX / 4);
  m.adesc = m.bdesc = m.cdesc = m.ddesc = batched;
  c.Queue(m);
  EXPECT_EQ(Deferred(), kBlasInvalid);
  ExpectAlive();
}

// A host segment's memfd is the guest's: shorter than the segment at
// registration is refused; shrunk afterwards, the worker's touch of the
// lost pages reads zeros instead of dying of SIGBUS.
TEST_F(WorkerSizesTest, ShortOrShrunkHostSegmentsNeverKillTheWorker) {
  const uint64_t seg = 2 << 20;
  UniqueFd fd(::memfd_create("hostile", MFD_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  ASSERT_EQ(::ftruncate(fd.get(), 4096), 0);
  int raw = fd.get();
  HostRegisterReply hr;
  CallResult r = c.Call(HostRegisterRequest{.addr = kHostBase, .bytes = seg}, &hr, std::span<const int>(&raw, 1));
  ASSERT_TRUE(r.transport.ok());
  EXPECT_EQ(r.head.result, CUDA_ERROR_INVALID_VALUE) << r.head.message;
  ASSERT_EQ(::ftruncate(fd.get(), seg), 0);
  ASSERT_TRUE(c.Call(HostRegisterRequest{.addr = kHostBase, .bytes = seg}, &hr, std::span<const int>(&raw, 1)).ok());
  ASSERT_EQ(::ftruncate(fd.get(), 0), 0);
  c.Queue(MemcpyHtoDHostRequest{.dst = dptr, .src = kHostBase, .bytes = 4096, .stream = 0});
  EXPECT_EQ(Deferred(), 0);
  MemcpyDtoHReply back;
  ASSERT_TRUE(c.Call(MemcpyDtoHRequest{.src = dptr, .bytes = 4096, .stream = 0}, &back).ok());
  EXPECT_EQ(back.data, std::string(4096, '\0'));
  ExpectAlive();
}

}  // namespace
}  // namespace smolvm::testing
