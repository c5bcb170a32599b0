// A torch training step in miniature, through the shims (or natively): the
// calls torch makes per step and how often, in the order it makes them —
// device and error queries, capture queries, function attributes and
// occupancy before a launch, <<<>>> launches, memsets, small pageable and
// pinned host-to-device copies, cuBLAS's stream / workspace / math-mode
// setters around every GemmEx, a cuBLASLt matmul with bias behind a fresh
// heuristic (a new bias address every call), a cuDNN execute behind a fresh
// variant pack — then the loss read back and a stream synchronization.
//
// Through the shims, libcudart's counters (smolvm_shim_op_counts) must show
// exactly two round trips per steady-state step (the read-back and the
// synchronization) and none of the setters on the wire when their values do
// not change (issue 13, "zero round trips on the hot path"). A handle state
// that does change must still reach the worker before the next GEMM: the
// last part switches cuBLAS to device scalars and checks the result.
// Natively there are no counters: only the results are checked.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cudnn.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "blas_check.h"
#include "dnn_graph.h"
#include "../shim/op_counts.h"

namespace {

using namespace dnn_test;

// --- the shim's counters --------------------------------------------------------------

using op_counts::Counts;
using op_counts::Op;
using op_counts::Snap;

// Round trips between a and b, each op named.
uint64_t RoundTrips(const Counts& a, const Counts& b, std::string* which) {
  uint64_t n = 0;
  for (uint32_t op = 0; op < op_counts::kSlots; ++op) {
    uint64_t d = b.round_trips[op] - a.round_trips[op];
    if (d == 0) continue;
    n += d;
    *which += std::string(" ") + op_counts::Name(op) + "=" + std::to_string(d);
  }
  return n;
}

uint64_t Queued(const Counts& a, const Counts& b, const char* name) {
  uint32_t op = Op(name);
  return b.queued[op] - a.queued[op];
}

// --- cuDNN: Y = X + B (B broadcast over rows), fp32 ------------------------------------------

// The plan of Y = X + B, or nullptr when no engine takes it (then the cuDNN part is skipped).
Desc AddPlan(cudnnHandle_t h, int rows, int cols, int64_t* ws_bytes) {
  Desc x = Tensor(1, rows, cols), b = Tensor(2, 1, cols), y = Tensor(3, rows, cols);
  Desc add = Pointwise(CUDNN_POINTWISE_ADD, x, b, y);
  Desc plan = Plan(h, {add}, ws_bytes);
  for (Desc d : {add, x, b, y}) CHECK_DNN(cudnnBackendDestroyDescriptor(d));
  return plan;
}

// What cudnn-frontend does per execute: the workspace size, then a fresh variant pack.
void DnnExecute(cudnnHandle_t h, Desc plan, void* x, void* b, void* y, void* ws, size_t ws_have) {
  int64_t n = 0, ws_bytes = 0;
  CHECK_DNN(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                     &ws_bytes));
  EXPECT(n == 1 && ws_bytes >= 0 && size_t(ws_bytes) <= ws_have);
  Execute(h, plan, {1, 2, 3}, {x, b, y}, ws);
}

// --- cuBLASLt: D = A^T B + bias, as torch's gemm_and_bias asks for it ------------------------

void LtMatmulWithBias(cublasLtHandle_t lt, cudaStream_t s, int m, int n, int k, const void* a,
                      const void* b, void* d, const void* bias, void* ws, size_t ws_bytes) {
  cublasLtMatmulDesc_t op;
  CHECK_BLAS(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t t = CUBLAS_OP_T;
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
  CHECK_BLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
  CHECK_BLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  CHECK_BLAS(
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  cublasLtMatrixLayout_t la, lb, ld;
  CHECK_BLAS(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, k, m, k));
  CHECK_BLAS(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, k, n, k));
  CHECK_BLAS(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, m));
  cublasLtMatmulPreference_t pref;
  CHECK_BLAS(cublasLtMatmulPreferenceCreate(&pref));
  CHECK_BLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &ws_bytes, sizeof ws_bytes));
  cublasLtMatmulHeuristicResult_t heur;
  int found = 0;
  CHECK_BLAS(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 1, &heur, &found));
  EXPECT(found == 1);
  float alpha = 1, beta = 0;
  CHECK_BLAS(cublasLtMatmul(lt, op, &alpha, a, la, b, lb, &beta, d, ld, d, ld, &heur.algo, ws,
                            ws_bytes, s));
  CHECK_BLAS(cublasLtMatmulPreferenceDestroy(pref));
  for (cublasLtMatrixLayout_t l : {la, lb, ld}) CHECK_BLAS(cublasLtMatrixLayoutDestroy(l));
  CHECK_BLAS(cublasLtMatmulDescDestroy(op));
}

}  // namespace

int main() {
  op_counts::Load();
  std::mt19937 rng(5);
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cublasHandle_t blas;
  CHECK_BLAS(cublasCreate(&blas));
  auto lt = reinterpret_cast<cublasLtHandle_t>(blas);  // as torch's getCurrentCUDABlasLtHandle
  cudnnHandle_t dnn;
  CHECK_DNN(cudnnCreate(&dnn));
  const size_t ws_bytes = 4 << 20;
  void* ws;
  CHECK_CUDA(cudaMalloc(&ws, ws_bytes));

  const int m = 32, n = 24, k = 40, rows = 16, cols = 64, elems = 4096;
  Mat a(CUDA_R_32F, size_t(k) * m, rng), b(CUDA_R_32F, size_t(k) * n, rng),
      c(CUDA_R_32F, size_t(m) * n, rng);
  Mat bias0(CUDA_R_32F, m + 4, rng), bias1(CUDA_R_32F, m, rng),
      lt_out(CUDA_R_32F, size_t(m) * n, rng);
  Mat dx(CUDA_R_32F, rows * cols, rng), db(CUDA_R_32F, cols, rng), dy(CUDA_R_32F, rows * cols, rng);
  float *x, *y, *pinned, *loss_dev;
  CHECK_CUDA(cudaMalloc(&x, elems * 4));
  CHECK_CUDA(cudaMalloc(&y, elems * 4));
  CHECK_CUDA(cudaMalloc(&loss_dev, 4));
  CHECK_CUDA(cudaMallocHost(&pinned, elems * 4));
  std::vector<float> pageable(256, 1.0f);
  for (int i = 0; i < elems; ++i) pinned[i] = float(i % 7);
  int64_t plan_ws = 0;
  Desc plan = AddPlan(dnn, rows, cols, &plan_ws);
  if (plan == nullptr)
    std::printf("note: no cuDNN engine for the pointwise graph; cuDNN part skipped\n");
  // The dynamic shared size torch's attention kernels set before every launch, set once first.
  CHECK_CUDA(cudaFuncSetAttribute((const void*)smolvm_test_saxpy,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, 1024));

  int step_no = 0;
  auto step = [&] {
    for (int i = 0; i < 40; ++i) {  // torch: ~13 cudaGetDevice and ~1.4 cudaGetLastError per launch
      int dev = -1;
      CHECK_CUDA(cudaGetDevice(&dev));
      EXPECT(dev == 0);
      if (i % 8 == 0) CHECK_CUDA(cudaGetLastError());
    }
    cudaStreamCaptureStatus cap;
    CHECK_CUDA(cudaStreamIsCapturing(s, &cap));
    EXPECT(cap == cudaStreamCaptureStatusNone);
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    CHECK_CUDA(cudaThreadExchangeStreamCaptureMode(&mode));
    CHECK_CUDA(cudaThreadExchangeStreamCaptureMode(&mode));
    int count = 0;
    CHECK_CUDA(cudaGetDeviceCount(&count));
    EXPECT(count >= 1);  // through the shims exactly 1
    int least = 0, greatest = 0;
    CHECK_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    // Before a launch: attributes, the same dynamic shared size again, occupancy.
    cudaFuncAttributes fa;
    CHECK_CUDA(cudaFuncGetAttributes(&fa, (const void*)smolvm_test_saxpy));
    EXPECT(fa.maxDynamicSharedSizeBytes == 1024);
    CHECK_CUDA(cudaFuncSetAttribute((const void*)smolvm_test_saxpy,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, 1024));
    int blocks = 0;
    CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, smolvm_test_saxpy, 256, 0));
    EXPECT(blocks > 0);
    // Inputs: a small pageable copy (the token ids), a pinned one, a memset.
    CHECK_CUDA(cudaMemcpyAsync(x, pinned, elems * 4, cudaMemcpyHostToDevice, s));
    CHECK_CUDA(cudaMemsetAsync(y, 0, elems * 4, s));
    CHECK_CUDA(cudaMemcpyAsync(y, pageable.data(), pageable.size() * 4, cudaMemcpyHostToDevice, s));
    for (int i = 0; i < 4; ++i) {
      smolvm_test_saxpy<<<elems / 256, 256, 0, s>>>(1.0f, x, y, elems);  // y += x
      CHECK_CUDA(cudaGetLastError());
    }
    // cuBLAS as at::cuda::blas::gemm: handle setters, then the GEMM, then the mode restored.
    for (int i = 0; i < 3; ++i) {
      CHECK_BLAS(cublasSetStream(blas, s));
      CHECK_BLAS(cublasSetWorkspace(blas, ws, ws_bytes));
      CHECK_BLAS(cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH));
      cublasMath_t mm;
      CHECK_BLAS(cublasGetMathMode(blas, &mm));
      EXPECT(mm == CUBLAS_DEFAULT_MATH);
      CHECK_BLAS(cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH));
      float alpha = 1, beta = 0;
      CHECK_BLAS(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, a.dev, CUDA_R_32F, k,
                              b.dev, CUDA_R_32F, k, &beta, c.dev, CUDA_R_32F, m, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
      CHECK_BLAS(cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH));
    }
    // A bias at a new address every call (torch's activations), the same problem.
    LtMatmulWithBias(lt, s, m, n, k, a.dev, b.dev, lt_out.dev, step_no % 2 ? bias1.dev : bias0.dev,
                     ws, ws_bytes);
    if (plan != nullptr) {
      CHECK_DNN(cudnnSetStream(dnn, s));
      DnnExecute(dnn, plan, dx.dev, db.dev, dy.dev, ws, ws_bytes);
    }
    // loss.item(): a small read-back and the stream's synchronization.
    CHECK_CUDA(cudaMemcpyAsync(loss_dev, y, 4, cudaMemcpyDeviceToDevice, s));
    float loss = 0;
    CHECK_CUDA(cudaMemcpyAsync(&loss, loss_dev, 4, cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    EXPECT(loss == 1.0f + 4 * 0.0f);  // y[0] = 1 (pageable) + 4 x[0] (pinned[0] = 0)
    ++step_no;
  };

  step();  // first use: modules, functions, heuristics, plans' answers
  step();
  Counts before = Snap();
  const int kSteps = 5;
  for (int i = 0; i < kSteps; ++i) step();
  Counts after = Snap();

  // The results are right: the last step's GEMM, Lt matmul and cuDNN add.
  std::vector<char> c_in = c.host;
  EXPECT(CheckGemm("GemmEx after elided setters", 1, 0, m, n, k, 1, a, k, 0, b, k, 0, 0, c_in,
                   c.Download(), CUDA_R_32F, m, 0));
  const Mat& last_bias = (step_no - 1) % 2 ? bias1 : bias0;
  EXPECT(CheckGemm("LtMatmul with the last bias (cached heuristic)", 1, 0, m, n, k, 1, a, k, 0, b,
                   k, 0, 0, c_in, lt_out.Download(), CUDA_R_32F, m, 0,
                   [&](double v, int i) { return v + HostLoad(last_bias.host, CUDA_R_32F, i); }));
  if (plan != nullptr) {
    std::vector<char> yv = dy.Download();
    double err = 0;
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j)
        err = std::max(err, std::fabs(double(HostLoad(dx.host, CUDA_R_32F, i * cols + j)) +
                                      HostLoad(db.host, CUDA_R_32F, j) -
                                      HostLoad(yv, CUDA_R_32F, i * cols + j)));
    EXPECT(err < 1e-5);
    std::printf("ok cuDNN add (max err %.3g)\n", err);
  }

  if (op_counts::Counted()) {
    std::string which;
    uint64_t rt = RoundTrips(before, after, &which);
    std::printf("round trips in %d steady steps: %llu (%s )\n", kSteps,
                static_cast<unsigned long long>(rt), which.c_str());
    EXPECT(rt == 2ull * kSteps);  // per step: MemcpyDtoH + StreamSynchronize, nothing else
    EXPECT(after.round_trips[Op("MemcpyDtoH")] - before.round_trips[Op("MemcpyDtoH")] ==
           uint64_t(kSteps));
    EXPECT(after.round_trips[Op("StreamSynchronize")] -
               before.round_trips[Op("StreamSynchronize")] ==
           uint64_t(kSteps));
    for (const char* setter :
         {"BlasSetStream", "BlasSetWorkspace", "BlasSetMode", "DnnSetStream"}) {
      uint64_t q = Queued(before, after, setter);
      std::printf("queued %s: %llu\n", setter, static_cast<unsigned long long>(q));
      EXPECT(q == 0);
    }
    EXPECT(Queued(before, after, "BlasGemm") == 3u * kSteps);
    EXPECT(Queued(before, after, "LtMatmul") == uint64_t(kSteps));
    EXPECT(Queued(before, after, "LaunchKernel") == 4u * kSteps);
    EXPECT(Queued(before, after, "DnnExecute") == (plan != nullptr ? uint64_t(kSteps) : 0u));
    // A bias of another alignment (16 bytes, not 256) is another question for the heuristic: asked
    // once, then answered here.
    Counts h0 = Snap();
    for (int i = 0; i < 2; ++i)
      LtMatmulWithBias(lt, s, m, n, k, a.dev, b.dev, lt_out.dev, static_cast<float*>(bias0.dev) + 4,
                       ws, ws_bytes);
    uint32_t heur = Op("LtHeuristic");
    EXPECT(Snap().round_trips[heur] - h0.round_trips[heur] == 1u);
  } else {
    std::printf("note: no smolvm_shim_op_counts (native run): results only\n");
  }

  // A handle state that changes reaches the worker before the next GEMM:
  // device scalars (alpha = 2 in device memory; the host word is garbage).
  float* scalars;
  CHECK_CUDA(cudaMalloc(&scalars, 8));
  float two_zero[2] = {2, 0};
  CHECK_CUDA(cudaMemcpy(scalars, two_zero, 8, cudaMemcpyHostToDevice));
  Counts q0 = Snap();
  CHECK_BLAS(cublasSetPointerMode(blas, CUBLAS_POINTER_MODE_DEVICE));
  CHECK_BLAS(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, scalars, a.dev, CUDA_R_32F, k,
                          b.dev, CUDA_R_32F, k, scalars + 1, c.dev, CUDA_R_32F, m,
                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  CHECK_BLAS(cublasSetPointerMode(blas, CUBLAS_POINTER_MODE_HOST));
  if (op_counts::Counted())
    EXPECT(Queued(q0, Snap(), "BlasSetMode") == 1u);  // sent once, with the GEMM
  CHECK_CUDA(cudaStreamSynchronize(s));
  EXPECT(CheckGemm("GemmEx with device scalars after a mode change", 1, 0, m, n, k, 2, a, k, 0, b,
                   k, 0, 0, c_in, c.Download(), CUDA_R_32F, m, 0));

  if (plan != nullptr) CHECK_DNN(cudnnBackendDestroyDescriptor(plan));
  CHECK_DNN(cudnnDestroy(dnn));
  CHECK_BLAS(cublasDestroy(blas));
  CHECK_CUDA(cudaFreeHost(pinned));
  std::printf("PASS hotpath\n");
  return 0;
}
