#include "backend/dnn_fake.h"

#include <cudnn_graph.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "proto/dnn_attrs.h"

namespace smolvm {
namespace {

Status Bad(const std::string& what) {
  return DnnError(CUDNN_STATUS_BAD_PARAM, "fake cuDNN: " + what);
}
Status Pattern(const std::string& what) {
  return DnnError(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN, "fake cuDNN: " + what);
}

std::vector<int64_t> Int64s(const FakeDnnBackend::Attr& a) {
  std::vector<int64_t> v(a.values.size() / 8);
  std::memcpy(v.data(), a.values.data(), v.size() * 8);
  return v;
}

template <typename T>
T First(const FakeDnnBackend::Attr& a) {
  T v{};
  std::memcpy(&v, a.values.data(), std::min(sizeof v, a.values.size()));
  return v;
}

struct Tensor {
  int64_t uid = 0;
  int32_t dtype = -1;
  std::vector<int64_t> dims, strides;
  bool is_virtual = false, by_value = false;
  int64_t Span() const {  // elements from the first to one past the last
    int64_t s = 1;
    for (size_t d = 0; d < dims.size(); ++d) s += (dims[d] - 1) * strides[d];
    return s;
  }
  // The element at y's multi-index `idx`, dimensions of size 1 broadcast.
  int64_t Offset(const std::vector<int64_t>& idx) const {
    int64_t o = 0;
    size_t lead = idx.size() - dims.size();
    for (size_t d = 0; d < dims.size(); ++d) o += (dims[d] == 1 ? 0 : idx[lead + d]) * strides[d];
    return o;
  }
};

Result<Tensor> TensorOf(const FakeDnnBackend::Desc& d) {
  if (d.type != CUDNN_BACKEND_TENSOR_DESCRIPTOR) return Bad("not a tensor descriptor");
  Tensor t;
  auto need = [&](uint32_t n) { return d.attrs.count(n) != 0; };
  if (!need(CUDNN_ATTR_TENSOR_DATA_TYPE) || !need(CUDNN_ATTR_TENSOR_DIMENSIONS) ||
      !need(CUDNN_ATTR_TENSOR_STRIDES) || !need(CUDNN_ATTR_TENSOR_UNIQUE_ID) ||
      !need(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT))
    return Bad("tensor lacks data type, dimensions, strides, unique id or alignment");
  t.dtype = First<int32_t>(d.attrs.at(CUDNN_ATTR_TENSOR_DATA_TYPE));
  t.dims = Int64s(d.attrs.at(CUDNN_ATTR_TENSOR_DIMENSIONS));
  t.strides = Int64s(d.attrs.at(CUDNN_ATTR_TENSOR_STRIDES));
  t.uid = First<int64_t>(d.attrs.at(CUDNN_ATTR_TENSOR_UNIQUE_ID));
  if (auto it = d.attrs.find(CUDNN_ATTR_TENSOR_IS_VIRTUAL); it != d.attrs.end())
    t.is_virtual = First<bool>(it->second);
  if (auto it = d.attrs.find(CUDNN_ATTR_TENSOR_IS_BY_VALUE); it != d.attrs.end())
    t.by_value = First<bool>(it->second);
  if (t.dims.empty() || t.dims.size() > CUDNN_DIM_MAX || t.dims.size() != t.strides.size())
    return Bad("tensor rank: dimensions and strides must have the same 1..8 entries");
  for (size_t i = 0; i < t.dims.size(); ++i)
    if (t.dims[i] <= 0 || t.strides[i] <= 0)
      return Bad("tensor dimensions and strides must be positive");
  return t;
}

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

}  // namespace

uint64_t FakeDnnBackend::handle_stream(uint64_t handle) const {
  auto it = handles_.find(handle);
  return it == handles_.end() ? 0 : it->second;
}

Result<uint64_t> FakeDnnBackend::Create() {
  uint64_t h = next_++;
  handles_[h] = 0;
  return h;
}

Status FakeDnnBackend::Destroy(uint64_t handle) {
  if (!handles_.erase(handle))
    return DnnError(CUDNN_STATUS_NOT_INITIALIZED, "fake cuDNN: unknown handle");
  return Status::Ok();
}

Status FakeDnnBackend::SetStream(uint64_t handle, uint64_t stream) {
  auto it = handles_.find(handle);
  if (it == handles_.end())
    return DnnError(CUDNN_STATUS_NOT_INITIALIZED, "fake cuDNN: unknown handle");
  it->second = stream;
  return Status::Ok();
}

DnnVersion FakeDnnBackend::Version() const { return DnnVersion{kVersion, 13000, "fake"}; }

Result<uint64_t> FakeDnnBackend::DescCreate(uint32_t type) {
  if (type > CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR) return Bad("unknown descriptor type");
  uint64_t d = next_++;
  descs_[d].type = type;
  return d;
}

FakeDnnBackend::Desc* FakeDnnBackend::Live(uint64_t desc) {
  auto it = descs_.find(desc);
  return it == descs_.end() || it->second.destroyed ? nullptr : &it->second;
}

size_t FakeDnnBackend::live_descriptors() const {
  size_t n = 0;
  for (const auto& [id, d] : descs_) n += !d.destroyed;
  return n;
}

Status FakeDnnBackend::DescDestroy(uint64_t desc) {
  Desc* d = Live(desc);
  if (d == nullptr) return Bad("unknown descriptor");
  d->destroyed = true;
  return Status::Ok();
}

Status FakeDnnBackend::DescSet(uint64_t desc, uint32_t name, uint32_t type, int64_t count,
                               const void* values) {
  Desc* d = Live(desc);
  if (d == nullptr) return Bad("unknown descriptor");
  if (d->finalized) return Bad("descriptor already finalized");
  size_t e = proto::DnnElemBytes(type);
  if (e == 0 || count < 0) return Bad("attribute type or count");
  Attr a{type, std::string(static_cast<const char*>(values), static_cast<size_t>(count) * e)};
  if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
    for (int64_t i = 0; i < count; ++i) {
      Desc* r = Live(First<uint64_t>(Attr{type, a.values.substr(i * 8, 8)}));
      if (r == nullptr) return Bad("attribute names an unknown descriptor");
      if (!r->finalized)
        return DnnError(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED,
                        "fake cuDNN: referenced descriptor not finalized");
    }
  }
  if (type == CUDNN_TYPE_HANDLE && !handles_.count(First<uint64_t>(a)))
    return Bad("attribute names an unknown handle");
  d->attrs[name] = std::move(a);
  return Status::Ok();
}

Result<const FakeDnnBackend::Desc*> FakeDnnBackend::Ref(const Desc& d, uint32_t name,
                                                        uint32_t want_type) const {
  auto a = d.attrs.find(name);
  if (a == d.attrs.end() || a->second.type != CUDNN_TYPE_BACKEND_DESCRIPTOR ||
      a->second.values.size() < 8)
    return Bad("missing descriptor attribute " + std::to_string(name));
  auto r = descs_.find(First<uint64_t>(a->second));
  if (r == descs_.end())
    return Bad("attribute " + std::to_string(name) + " names a destroyed descriptor");
  if (r->second.type != want_type)
    return DnnError(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE,
                    "fake cuDNN: attribute " + std::to_string(name) +
                        " names a descriptor of type " + std::to_string(r->second.type));
  return &r->second;
}

// The operations of a plan's graph, in graph order (plan -> engine config ->
// engine -> operation graph).
namespace {
struct PlanOps {
  std::vector<const FakeDnnBackend::Desc*> ops;
  bool matmul = false;
};
}  // namespace

Status FakeDnnBackend::Validate(const Desc& d) const {
  auto need = [&](uint32_t n) -> Status {
    return d.attrs.count(n) ? Status::Ok() : Bad("missing attribute " + std::to_string(n));
  };
  auto handle = [&](uint32_t n) -> Status {
    RETURN_IF_ERROR(need(n));
    if (!handles_.count(First<uint64_t>(d.attrs.at(n)))) return Bad("unknown handle");
    return Status::Ok();
  };
  switch (d.type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR: {
      ASSIGN_OR_RETURN(Tensor t, TensorOf(d));
      (void)t;
      return Status::Ok();
    }
    case CUDNN_BACKEND_POINTWISE_DESCRIPTOR:
      return need(CUDNN_ATTR_POINTWISE_MODE);
    case CUDNN_BACKEND_MATMUL_DESCRIPTOR:
      return need(CUDNN_ATTR_MATMUL_COMP_TYPE);
    case CUDNN_BACKEND_REDUCTION_DESCRIPTOR:
      return need(CUDNN_ATTR_REDUCTION_OPERATOR);
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR:
      RETURN_IF_ERROR(
          Ref(d, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_BACKEND_TENSOR_DESCRIPTOR).status());
      RETURN_IF_ERROR(
          Ref(d, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_BACKEND_TENSOR_DESCRIPTOR).status());
      return Ref(d, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_BACKEND_REDUCTION_DESCRIPTOR)
          .status();
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR: {
      ASSIGN_OR_RETURN(const Desc* pw, Ref(d, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
                                           CUDNN_BACKEND_POINTWISE_DESCRIPTOR));
      RETURN_IF_ERROR(
          Ref(d, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_BACKEND_TENSOR_DESCRIPTOR).status());
      RETURN_IF_ERROR(
          Ref(d, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_BACKEND_TENSOR_DESCRIPTOR).status());
      if (Binary(First<int32_t>(pw->attrs.at(CUDNN_ATTR_POINTWISE_MODE))))
        RETURN_IF_ERROR(
            Ref(d, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_BACKEND_TENSOR_DESCRIPTOR).status());
      return Status::Ok();
    }
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR:
      for (uint32_t n : {CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_ATTR_OPERATION_MATMUL_BDESC,
                         CUDNN_ATTR_OPERATION_MATMUL_CDESC})
        RETURN_IF_ERROR(Ref(d, n, CUDNN_BACKEND_TENSOR_DESCRIPTOR).status());
      return Ref(d, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_BACKEND_MATMUL_DESCRIPTOR).status();
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR:
      RETURN_IF_ERROR(handle(CUDNN_ATTR_OPERATIONGRAPH_HANDLE));
      RETURN_IF_ERROR(need(CUDNN_ATTR_OPERATIONGRAPH_OPS));
      if (d.attrs.at(CUDNN_ATTR_OPERATIONGRAPH_OPS).values.empty())
        return Bad("operation graph without operations");
      return Status::Ok();
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
      RETURN_IF_ERROR(need(CUDNN_ATTR_ENGINEHEUR_MODE));
      return Ref(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)
          .status();
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR:
      RETURN_IF_ERROR(need(CUDNN_ATTR_ENGINE_GLOBAL_INDEX));
      return Ref(d, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)
          .status();
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
      return Ref(d, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_BACKEND_ENGINE_DESCRIPTOR).status();
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: {
      RETURN_IF_ERROR(handle(CUDNN_ATTR_EXECUTION_PLAN_HANDLE));
      ASSIGN_OR_RETURN(const Desc* cfg, Ref(d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                            CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
      ASSIGN_OR_RETURN(const Desc* eng,
                       Ref(*cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_BACKEND_ENGINE_DESCRIPTOR));
      ASSIGN_OR_RETURN(const Desc* graph, Ref(*eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH,
                                              CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR));
      const Attr& ops = graph->attrs.at(CUDNN_ATTR_OPERATIONGRAPH_OPS);
      for (size_t i = 0; i < ops.values.size() / 8; ++i) {
        const Desc& op = descs_.at(First<uint64_t>(Attr{0, ops.values.substr(i * 8, 8)}));
        std::vector<uint32_t> tensors;
        if (op.type == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR) {
          ASSIGN_OR_RETURN(const Desc* pw, Ref(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
                                               CUDNN_BACKEND_POINTWISE_DESCRIPTOR));
          int32_t mode = First<int32_t>(pw->attrs.at(CUDNN_ATTR_POINTWISE_MODE));
          if (!Supported(mode)) return Pattern("pointwise mode " + std::to_string(mode));
          tensors = {CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_ATTR_OPERATION_POINTWISE_YDESC};
          if (Binary(mode)) tensors.push_back(CUDNN_ATTR_OPERATION_POINTWISE_BDESC);
        } else if (op.type == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR) {
          tensors = {CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_ATTR_OPERATION_MATMUL_BDESC,
                     CUDNN_ATTR_OPERATION_MATMUL_CDESC};
        } else if (op.type == CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR) {
          ASSIGN_OR_RETURN(const Desc* rd, Ref(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC,
                                               CUDNN_BACKEND_REDUCTION_DESCRIPTOR));
          int32_t r = First<int32_t>(rd->attrs.at(CUDNN_ATTR_REDUCTION_OPERATOR));
          if (!SupportedReduction(r)) return Pattern("reduction operator " + std::to_string(r));
          tensors = {CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_ATTR_OPERATION_REDUCTION_YDESC};
        } else {
          return Pattern("operation type " + std::to_string(op.type));
        }
        for (uint32_t n : tensors) {
          ASSIGN_OR_RETURN(const Desc* td, Ref(op, n, CUDNN_BACKEND_TENSOR_DESCRIPTOR));
          ASSIGN_OR_RETURN(Tensor t, TensorOf(*td));
          if (t.dtype != CUDNN_DATA_FLOAT)
            return DnnError(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE, "fake cuDNN: fp32 only");
        }
      }
      return Status::Ok();
    }
    default:
      return Status::Ok();
  }
}

Status FakeDnnBackend::DescFinalize(uint64_t desc) {
  Desc* d = Live(desc);
  if (d == nullptr) return Bad("unknown descriptor");
  if (d->finalized) return Bad("descriptor already finalized");
  RETURN_IF_ERROR(Validate(*d));
  d->finalized = true;
  ++finalizes_;
  return Status::Ok();
}

Status FakeDnnBackend::CopyInto(uint64_t src, uint64_t dst) {
  Desc* d = Live(dst);
  if (d == nullptr) return Bad("output names an unknown descriptor");
  const Desc& s = descs_.at(src);
  if (d->type != s.type)
    return DnnError(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE, "fake cuDNN: output type");
  *d = s;
  d->destroyed = false;
  return Status::Ok();
}

Status FakeDnnBackend::DescGet(uint64_t desc, uint32_t name, uint32_t type, int64_t requested,
                               int64_t* count, void* values) {
  Desc* live = Live(desc);
  if (live == nullptr) return Bad("unknown descriptor");
  const Desc& d = *live;
  if (!d.finalized)
    return DnnError(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, "fake cuDNN: descriptor not finalized");
  if (requested < 0) return Bad("requested count");
  auto* out = static_cast<uint64_t*>(values);
  if (d.type == CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR && name == CUDNN_ATTR_ENGINEHEUR_RESULTS) {
    if (type != CUDNN_TYPE_BACKEND_DESCRIPTOR)
      return DnnError(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE, "fake cuDNN");
    *count = 1;
    if (requested < 1) return Status::Ok();
    ASSIGN_OR_RETURN(uint64_t eng, DescCreate(CUDNN_BACKEND_ENGINE_DESCRIPTOR));
    descs_[eng].attrs[CUDNN_ATTR_ENGINE_OPERATION_GRAPH] =
        d.attrs.at(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
    descs_[eng].attrs[CUDNN_ATTR_ENGINE_GLOBAL_INDEX] =
        Attr{CUDNN_TYPE_INT64, std::string(8, '\0')};
    descs_[eng].finalized = true;
    Desc* cfg = Live(out[0]);
    if (cfg == nullptr || cfg->type != CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)
      return DnnError(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE,
                      "fake cuDNN: heuristics results need engine configs");
    cfg->attrs.clear();
    cfg->attrs[CUDNN_ATTR_ENGINECFG_ENGINE] =
        Attr{CUDNN_TYPE_BACKEND_DESCRIPTOR, std::string(8, '\0')};
    std::memcpy(cfg->attrs[CUDNN_ATTR_ENGINECFG_ENGINE].values.data(), &eng, 8);
    cfg->finalized = true;
    return Status::Ok();
  }
  if (d.type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR &&
      name == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE) {
    if (type != CUDNN_TYPE_INT64)
      return DnnError(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE, "fake cuDNN");
    const Desc& cfg =
        descs_.at(First<uint64_t>(d.attrs.at(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG)));
    const Desc& eng = descs_.at(First<uint64_t>(cfg.attrs.at(CUDNN_ATTR_ENGINECFG_ENGINE)));
    const Desc& graph = descs_.at(First<uint64_t>(eng.attrs.at(CUDNN_ATTR_ENGINE_OPERATION_GRAPH)));
    const Attr& ops = graph.attrs.at(CUDNN_ATTR_OPERATIONGRAPH_OPS);
    int64_t ws = 0;
    for (size_t i = 0; i < ops.values.size() / 8; ++i)
      if (descs_.at(First<uint64_t>(Attr{0, ops.values.substr(i * 8, 8)})).type ==
          CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR)
        ws = 256;
    *count = 1;
    if (requested >= 1) std::memcpy(values, &ws, 8);
    return Status::Ok();
  }
  if ((d.type == CUDNN_BACKEND_ENGINE_DESCRIPTOR &&
       (name == CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE || name == CUDNN_ATTR_ENGINE_NUMERICAL_NOTE)) ||
      (d.type == CUDNN_BACKEND_ENGINECFG_DESCRIPTOR && name == CUDNN_ATTR_ENGINECFG_KNOB_CHOICES)) {
    *count = 0;
    return Status::Ok();
  }
  if (d.type == CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR &&
      name == CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT) {
    int64_t one = 1;
    *count = 1;
    if (requested >= 1) std::memcpy(values, &one, 8);
    return Status::Ok();
  }
  auto a = d.attrs.find(name);
  if (a == d.attrs.end()) return Bad("attribute " + std::to_string(name) + " not available");
  if (a->second.type != type)
    return DnnError(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE, "fake cuDNN: attribute type");
  size_t e = proto::DnnElemBytes(type);
  *count = static_cast<int64_t>(a->second.values.size() / e);
  int64_t n = std::min(*count, requested);
  if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {  // deep copies into the caller's descriptors
    for (int64_t i = 0; i < n; ++i)
      RETURN_IF_ERROR(
          CopyInto(First<uint64_t>(Attr{0, a->second.values.substr(i * 8, 8)}), out[i]));
    return Status::Ok();
  }
  std::memcpy(values, a->second.values.data(), static_cast<size_t>(n) * e);
  return Status::Ok();
}

Status FakeDnnBackend::Execute(uint64_t handle, uint64_t plan, const DnnVariantPack& pack) {
  if (!handles_.count(handle))
    return DnnError(CUDNN_STATUS_NOT_INITIALIZED, "fake cuDNN: unknown handle");
  Desc* p = Live(plan);
  if (p == nullptr || p->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR || !p->finalized)
    return Bad("execute needs a finalized execution plan");
  if (pack.uids.size() != pack.ptrs.size())
    return Bad("variant pack: as many pointers as unique ids");
  int64_t ws = 0, n = 0;
  RETURN_IF_ERROR(
      DescGet(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws));
  if (ws > 0) {
    if (pack.workspace == nullptr) return Bad("variant pack lacks the plan's workspace");
    RETURN_IF_ERROR(gpu_->KernelAccess(reinterpret_cast<uint64_t>(pack.workspace), ws, true));
  }
  const Desc& cfg =
      descs_.at(First<uint64_t>(p->attrs.at(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG)));
  const Desc& eng = descs_.at(First<uint64_t>(cfg.attrs.at(CUDNN_ATTR_ENGINECFG_ENGINE)));
  const Desc& graph = descs_.at(First<uint64_t>(eng.attrs.at(CUDNN_ATTR_ENGINE_OPERATION_GRAPH)));
  const Attr& ops = graph.attrs.at(CUDNN_ATTR_OPERATIONGRAPH_OPS);

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
    const Desc& op = descs_.at(First<uint64_t>(Attr{0, ops.values.substr(i * 8, 8)}));
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
            for (int64_t q = 0; q < k; ++q) {
              std::vector<int64_t> ia = idx, ib = idx;
              ia[r - 2] = i, ia[r - 1] = q, ib[r - 2] = q, ib[r - 1] = j;
              acc += static_cast<double>(a[ta.Offset(ia)]) * b[tb.Offset(ib)];
            }
            std::vector<int64_t> ic = idx;
            ic[r - 2] = i, ic[r - 1] = j;
            c[tc.Offset(ic)] = static_cast<float>(acc);
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
