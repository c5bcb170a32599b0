// FakeDnnBackend::Execute: a plan's graph computed on the host over
// FakeBackend's memory, operation by operation, fp32.
#include <cudnn_graph.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "backend/dnn_fake_internal.h"

namespace smolvm {
namespace fake_dnn {

bool Binary(int32_t mode) {
  return mode == CUDNN_POINTWISE_ADD || mode == CUDNN_POINTWISE_MUL ||
         mode == CUDNN_POINTWISE_SUB || mode == CUDNN_POINTWISE_MIN ||
         mode == CUDNN_POINTWISE_MAX || mode == CUDNN_POINTWISE_DIV;
}

float Apply(int32_t mode, float x, float b) {
  switch (mode) {
    case CUDNN_POINTWISE_ADD:
      return x + b;
    case CUDNN_POINTWISE_MUL:
      return x * b;
    case CUDNN_POINTWISE_SUB:
      return x - b;
    case CUDNN_POINTWISE_MIN:
      return std::min(x, b);
    case CUDNN_POINTWISE_MAX:
      return std::max(x, b);
    case CUDNN_POINTWISE_DIV:
      return x / b;
    case CUDNN_POINTWISE_RELU_FWD:
      return x > 0 ? x : 0;
    case CUDNN_POINTWISE_EXP:
      return std::exp(x);
    case CUDNN_POINTWISE_LOG:
      return std::log(x);
    case CUDNN_POINTWISE_NEG:
      return -x;
    case CUDNN_POINTWISE_RECIPROCAL:
      return 1 / x;
    default:
      return x;  // IDENTITY
  }
}

bool Supported(int32_t mode) {
  return Binary(mode) || mode == CUDNN_POINTWISE_IDENTITY || mode == CUDNN_POINTWISE_RELU_FWD ||
         mode == CUDNN_POINTWISE_EXP || mode == CUDNN_POINTWISE_LOG ||
         mode == CUDNN_POINTWISE_NEG || mode == CUDNN_POINTWISE_RECIPROCAL;
}

bool SupportedReduction(int32_t op) {
  return op == CUDNN_REDUCE_TENSOR_ADD || op == CUDNN_REDUCE_TENSOR_MAX ||
         op == CUDNN_REDUCE_TENSOR_MIN;
}

// Steps `idx` through every multi-index below `dims`; false after the last.
bool Next(std::vector<int64_t>& idx, const std::vector<int64_t>& dims) {
  for (size_t d = idx.size(); d-- > 0;) {
    if (++idx[d] < dims[d]) return true;
    idx[d] = 0;
  }
  return false;
}

}  // namespace fake_dnn

using namespace fake_dnn;

Status FakeDnnBackend::Execute(uint64_t handle, uint64_t plan, const DnnVariantPack& pack) {
  if (!handles_.count(handle))
    return DnnError(CUDNN_STATUS_NOT_INITIALIZED, "fake cuDNN: unknown handle");
  if (gpu_->Capturing(handle_stream(handle)))
    return DnnError(CUDNN_STATUS_NOT_SUPPORTED, "the fake cuDNN cannot be captured into a graph");
  Desc* p = Live(plan);
  if (p == nullptr || p->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR || !p->finalized)
    return Bad("execute needs a finalized execution plan");
  if (pack.uids.size() != pack.ptrs.size())
    return Bad("variant pack: as many pointers as unique ids");
  ASSIGN_OR_RETURN(const Desc* cfg, PlanConfig(*p));
  ASSIGN_OR_RETURN(int64_t ws, ConfigWorkspace(*cfg));
  if (ws > 0) {
    if (pack.workspace == nullptr) return Bad("variant pack lacks the plan's workspace");
    RETURN_IF_ERROR(gpu_->KernelAccess(reinterpret_cast<uint64_t>(pack.workspace), ws, true));
  }
  ASSIGN_OR_RETURN(int64_t index, ConfigEngine(*cfg));
  const bool fp32_accumulate = EngineAt(index)->fp32_accumulate;
  ASSIGN_OR_RETURN(const Desc* graph, GraphOf(*cfg));
  const Attr& ops = graph->attrs.at(CUDNN_ATTR_OPERATIONGRAPH_OPS);

  std::map<int64_t, std::vector<float>> virtuals;  // uid -> host buffer
  // The fp32 elements of the tensor an operation names at attribute `attr`.
  auto buffer = [&](const Desc& op, uint32_t attr, bool write, Tensor* t) -> Result<float*> {
    ASSIGN_OR_RETURN(const Desc* td, Ref(op, attr, CUDNN_BACKEND_TENSOR_DESCRIPTOR));
    ASSIGN_OR_RETURN(*t, TensorOf(*td));
    if (t->is_virtual) {
      std::vector<float>& v = virtuals[t->uid];
      if (v.size() < static_cast<size_t>(t->Span())) v.resize(t->Span());
      return v.data();
    }
    auto u = std::find(pack.uids.begin(), pack.uids.end(), t->uid);
    if (u == pack.uids.end()) return Bad("variant pack lacks unique id " + std::to_string(t->uid));
    void* ptr = pack.ptrs[u - pack.uids.begin()];
    if (ptr == nullptr)
      return DnnError(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "fake cuDNN: null data pointer");
    if (t->by_value)
      return static_cast<float*>(ptr);  // the worker's copy of the guest's host value
    RETURN_IF_ERROR(gpu_->KernelAccess(reinterpret_cast<uint64_t>(ptr), t->Span() * 4, write));
    return static_cast<float*>(ptr);
  };
  for (size_t i = 0; i < ops.values.size() / 8; ++i) {
    const Desc& op = descs_.at(RefAt(ops, i));
    if (op.type == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR) {
      ASSIGN_OR_RETURN(const Desc* pw, Ref(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
                                           CUDNN_BACKEND_POINTWISE_DESCRIPTOR));
      int32_t mode = First<int32_t>(pw->attrs.at(CUDNN_ATTR_POINTWISE_MODE));
      Tensor tx, tb, ty;
      ASSIGN_OR_RETURN(float* x, buffer(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, false, &tx));
      float* b = nullptr;
      if (Binary(mode)) {
        ASSIGN_OR_RETURN(b, buffer(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, false, &tb));
      }
      ASSIGN_OR_RETURN(float* y, buffer(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, true, &ty));
      if (tx.dims.size() > ty.dims.size() || (b && tb.dims.size() > ty.dims.size()))
        return DnnError(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH, "fake cuDNN: pointwise ranks");
      std::vector<int64_t> idx(ty.dims.size(), 0);
      for (bool more = true; more;) {
        float bv = b ? b[tb.Offset(idx)] : 0.f;
        y[ty.Offset(idx)] = Apply(mode, x[tx.Offset(idx)], bv);
        more = false;
        for (size_t d = idx.size(); d-- > 0;) {
          if (++idx[d] < ty.dims[d]) {
            more = true;
            break;
          }
          idx[d] = 0;
        }
      }
    } else if (op.type ==
               CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR) {  // Y's size-1 dims are reduced
      ASSIGN_OR_RETURN(const Desc* rd, Ref(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC,
                                           CUDNN_BACKEND_REDUCTION_DESCRIPTOR));
      int32_t r = First<int32_t>(rd->attrs.at(CUDNN_ATTR_REDUCTION_OPERATOR));
      Tensor tx, ty;
      ASSIGN_OR_RETURN(float* x, buffer(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, false, &tx));
      ASSIGN_OR_RETURN(float* y, buffer(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, true, &ty));
      if (tx.dims.size() != ty.dims.size())
        return DnnError(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH, "fake cuDNN: reduction ranks");
      for (size_t d = 0; d < ty.dims.size(); ++d)
        if (ty.dims[d] != 1 && ty.dims[d] != tx.dims[d])
          return DnnError(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH, "fake cuDNN: reduction shapes");
      float init = r == CUDNN_REDUCE_TENSOR_ADD   ? 0.f
                   : r == CUDNN_REDUCE_TENSOR_MAX ? -INFINITY
                                                  : INFINITY;
      std::vector<int64_t> idx(ty.dims.size(), 0);
      do y[ty.Offset(idx)] = init;
      while (Next(idx, ty.dims));
      idx.assign(tx.dims.size(), 0);
      do {
        float& acc = y[ty.Offset(idx)];
        float v = x[tx.Offset(idx)];
        acc = r == CUDNN_REDUCE_TENSOR_ADD   ? acc + v
              : r == CUDNN_REDUCE_TENSOR_MAX ? std::max(acc, v)
                                             : std::min(acc, v);
      } while (Next(idx, tx.dims));
    } else {  // matmul, checked at finalize: C[.., m, n] = sum_k A[.., m, k] B[.., k, n]
      Tensor ta, tb, tc;
      ASSIGN_OR_RETURN(float* a, buffer(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, false, &ta));
      ASSIGN_OR_RETURN(float* b, buffer(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, false, &tb));
      ASSIGN_OR_RETURN(float* c, buffer(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, true, &tc));
      size_t r = tc.dims.size();
      if (r < 2 || ta.dims.size() != r || tb.dims.size() != r || ta.dims[r - 1] != tb.dims[r - 2] ||
          ta.dims[r - 2] != tc.dims[r - 2] || tb.dims[r - 1] != tc.dims[r - 1])
        return DnnError(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH, "fake cuDNN: matmul shapes");
      int64_t m = tc.dims[r - 2], nn = tc.dims[r - 1], k = ta.dims[r - 1];
      std::vector<int64_t> idx(r, 0);
      for (bool more = true; more;) {  // idx walks C's batch dims; its last two stay 0
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < nn; ++j) {
            double acc = 0;
            float acc32 = 0;
            for (int64_t q = 0; q < k; ++q) {
              std::vector<int64_t> ia = idx, ib = idx;
              ia[r - 2] = i, ia[r - 1] = q, ib[r - 2] = q, ib[r - 1] = j;
              acc += static_cast<double>(a[ta.Offset(ia)]) * b[tb.Offset(ib)];
              acc32 += a[ta.Offset(ia)] * b[tb.Offset(ib)];
            }
            std::vector<int64_t> ic = idx;
            ic[r - 2] = i, ic[r - 1] = j;
            c[tc.Offset(ic)] = fp32_accumulate ? acc32 : static_cast<float>(acc);
          }
        more = false;
        for (size_t d = r - 2; d-- > 0;) {
          if (++idx[d] < tc.dims[d]) {
            more = true;
            break;
          }
          idx[d] = 0;
        }
      }
    }
  }
  ++executes_;
  return Status::Ok();
}

}  // namespace smolvm
