// cuDNN backend (graph) helpers of the cuDNN test programs (prog_dnn,
// prog_hotpath): descriptors, fp32 tensors, pointwise operations, a plan
// from the heuristics' first engine config that finalizes, and an execute
// with a fresh variant pack, as cudnn-frontend builds one per call. Each
// check prints what failed and exits non-zero.
#pragma once

#include <cudnn.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "blas_check.h"

#define CHECK_DNN(x)                                                                             \
  do {                                                                                           \
    cudnnStatus_t s_ = (x);                                                                      \
    if (s_ != CUDNN_STATUS_SUCCESS) {                                                            \
      char m_[256];                                                                              \
      cudnnGetLastErrorString(m_, sizeof m_);                                                    \
      std::printf("FAIL %s:%d %s -> %s (%s)\n", __FILE__, __LINE__, #x, cudnnGetErrorString(s_), \
                  m_);                                                                           \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

namespace dnn_test {

using Desc = cudnnBackendDescriptor_t;

inline Desc Make(cudnnBackendDescriptorType_t t) {
  Desc d;
  CHECK_DNN(cudnnBackendCreateDescriptor(t, &d));
  return d;
}

inline void SetDesc(Desc d, cudnnBackendAttributeName_t n, Desc v) {
  CHECK_DNN(cudnnBackendSetAttribute(d, n, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v));
}

// An fp32 tensor [1, rows, cols] with the given strides.
inline Desc Strided(int64_t uid, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride,
             bool is_virtual = false, bool by_value = false) {
  Desc t = Make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  cudnnDataType_t dt = CUDNN_DATA_FLOAT;
  int64_t dims[3] = {1, rows, cols}, strides[3] = {rows * cols, row_stride, col_stride}, align = 16;
  CHECK_DNN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
  CHECK_DNN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 3, dims));
  CHECK_DNN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 3, strides));
  CHECK_DNN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
  CHECK_DNN(
      cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
  if (is_virtual)
    CHECK_DNN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1,
                                       &is_virtual));
  if (by_value)
    CHECK_DNN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1,
                                       &by_value));
  CHECK_DNN(cudnnBackendFinalize(t));
  return t;
}

// A packed fp32 tensor [1, rows, cols].
inline Desc Tensor(int64_t uid, int64_t rows, int64_t cols, bool is_virtual = false,
            bool by_value = false) {
  return Strided(uid, rows, cols, cols, 1, is_virtual, by_value);
}

// y = mode(x, b); b == nullptr for a unary mode.
inline Desc Pointwise(cudnnPointwiseMode_t mode, Desc x, Desc b, Desc y) {
  Desc pw = Make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  cudnnDataType_t prec = CUDNN_DATA_FLOAT;
  CHECK_DNN(
      cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
  CHECK_DNN(
      cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec));
  CHECK_DNN(cudnnBackendFinalize(pw));
  Desc op = Make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  SetDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
  SetDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
  if (b != nullptr) SetDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
  SetDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
  CHECK_DNN(cudnnBackendFinalize(op));
  // No read-back of POINTWISE_MODE here: cuDNN 9.19 on the H200 answers it
  // NOT_SUPPORTED (2026-12-03), so a program that expected it failed natively.
  return op;
}

// Operation graph -> heuristics -> the first engine config whose plan
// finalizes. Returns the plan (nullptr: no engine takes this graph here).
inline Desc Plan(cudnnHandle_t h, std::vector<Desc> ops, int64_t* workspace) {
  Desc graph = Make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  CHECK_DNN(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                     static_cast<int64_t>(ops.size()), ops.data()));
  CHECK_DNN(
      cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
  CHECK_DNN(cudnnBackendFinalize(graph));
  Desc heur = Make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  SetDesc(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  CHECK_DNN(
      cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
  CHECK_DNN(cudnnBackendFinalize(heur));
  Desc cfgs[8];
  for (Desc& c : cfgs) c = Make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  int64_t found = 0;
  CHECK_DNN(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 8, &found, cfgs));
  std::printf("heuristics: %lld engine configs\n", static_cast<long long>(found));
  Desc plan = nullptr;
  for (int64_t i = 0; i < std::min<int64_t>(found, 8) && plan == nullptr; ++i) {
    Desc p = Make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    SetDesc(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfgs[i]);
    CHECK_DNN(
        cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    if (cudnnBackendFinalize(p) == CUDNN_STATUS_SUCCESS) {
      plan = p;
    } else {
      CHECK_DNN(cudnnBackendDestroyDescriptor(p));
    }
  }
  // The engine configs, the heuristics and the graph may go: the plan holds what it needs.
  for (Desc& c : cfgs) CHECK_DNN(cudnnBackendDestroyDescriptor(c));
  CHECK_DNN(cudnnBackendDestroyDescriptor(heur));
  CHECK_DNN(cudnnBackendDestroyDescriptor(graph));
  if (plan == nullptr) return nullptr;
  int64_t n = 0;
  CHECK_DNN(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                     CUDNN_TYPE_INT64, 1, &n, workspace));
  EXPECT(n == 1 && *workspace >= 0);
  return plan;
}

inline void Execute(cudnnHandle_t h, Desc plan, std::vector<int64_t> uids, std::vector<void*> ptrs,
             void* ws) {
  Desc pack = Make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  CHECK_DNN(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                     static_cast<int64_t>(uids.size()), uids.data()));
  CHECK_DNN(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                     CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(ptrs.size()),
                                     ptrs.data()));
  CHECK_DNN(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR,
                                     1, &ws));
  CHECK_DNN(cudnnBackendFinalize(pack));
  CHECK_DNN(cudnnBackendExecute(h, plan, pack));
  CHECK_DNN(cudnnBackendDestroyDescriptor(pack));
}


}  // namespace dnn_test
