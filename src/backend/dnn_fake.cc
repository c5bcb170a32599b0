#include "backend/dnn_fake.h"

#include <cudnn_graph.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/device_footprint.h"
#include "backend/dnn_fake_internal.h"
#include "proto/dnn_attrs.h"

namespace smolvm {
namespace fake_dnn {

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

}  // namespace fake_dnn

using namespace fake_dnn;

uint64_t FakeDnnBackend::handle_stream(uint64_t handle) const {
  auto it = handles_.find(handle);
  return it == handles_.end() ? 0 : it->second;
}

FakeDnnBackend::~FakeDnnBackend() { gpu_->LibraryRelease(handles_.size() * kFakeLibraryFootprint.dnn_handle); }

Result<uint64_t> FakeDnnBackend::Create() {
  if (!gpu_->LibraryReserve(kFakeLibraryFootprint.dnn_handle))
    return DnnError(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED, "fake cuDNN: device memory is full");
  uint64_t h = next_++;
  handles_[h] = 0;
  return h;
}

Status FakeDnnBackend::Destroy(uint64_t handle) {
  if (!handles_.erase(handle))
    return DnnError(CUDNN_STATUS_NOT_INITIALIZED, "fake cuDNN: unknown handle");
  gpu_->LibraryRelease(kFakeLibraryFootprint.dnn_handle);
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
      return ValidateEngine(d);
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
      return ValidateConfig(d);
    case CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR:
      RETURN_IF_ERROR(need(CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE));
      return need(CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE);
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
        const Desc& op = descs_.at(RefAt(ops, i));
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
  if (requested < 0 || count == nullptr) return Bad("requested count or count pointer");
  bool handled = false;
  RETURN_IF_ERROR(EngineGet(d, name, type, requested, count, values, &handled));
  if (handled) return Status::Ok();
  auto a = d.attrs.find(name);
  if (a == d.attrs.end()) return Bad("attribute " + std::to_string(name) + " not available");
  if (a->second.type != type)
    return DnnError(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE, "fake cuDNN: attribute type");
  size_t e = proto::DnnElemBytes(type);
  *count = static_cast<int64_t>(a->second.values.size() / e);
  if (values == nullptr) return Status::Ok();  // the count only
  int64_t n = std::min(*count, requested);
  if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {  // deep copies into the caller's descriptors
    for (int64_t i = 0; i < n; ++i)
      RETURN_IF_ERROR(CopyInto(RefAt(a->second, i), static_cast<uint64_t*>(values)[i]));
    return Status::Ok();
  }
  std::memcpy(values, a->second.values.data(), static_cast<size_t>(n) * e);
  return Status::Ok();
}

}  // namespace smolvm
