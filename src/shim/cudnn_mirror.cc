#include "shim/cudnn_mirror.h"

#include <cstring>
#include <algorithm>
#include <vector>

namespace smolvm::shim {

Mirror& Mirror::Get() {
  static Mirror* m = new Mirror();  // never destroyed: exports may run during exit
  return *m;
}

GuestDesc* Mirror::NewDesc(cudnnBackendDescriptorType_t type) {
  auto d = std::make_unique<GuestDesc>();
  d->id = next_id_++;
  d->type = type;
  GuestDesc* p = d.get();
  by_id_[p->id] = p;
  descs_[p] = std::move(d);
  return p;
}

void Mirror::DeleteDesc(GuestDesc* d) {
  by_id_.erase(d->id);
  descs_.erase(d);
}

GuestDesc* Mirror::Find(void* p) const {
  auto it = descs_.find(static_cast<GuestDesc*>(p));
  return it == descs_.end() ? nullptr : it->second.get();
}

GuestDesc* Mirror::FindId(uint64_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second;
}

cudnnContext* Mirror::HandleById(uint64_t id) const {
  for (cudnnContext* h : handles_)
    if (h->id == id) return h;
  return nullptr;
}

cudnnStatus_t Mirror::Encode(cudnnBackendAttributeType_t type, int64_t count, const void* elements,
                             std::string* out) const {
  size_t e = proto::DnnElemBytes(type);
  if (e == 0) return CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE;
  if (count < 0 || static_cast<size_t>(count) * e > proto::DnnAttrs::kMaxValueBytes)
    return CUDNN_STATUS_BAD_PARAM;
  if (count > 0 && elements == nullptr) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  out->assign(static_cast<size_t>(count) * e, '\0');
  if (type != CUDNN_TYPE_BACKEND_DESCRIPTOR && type != CUDNN_TYPE_HANDLE) {
    if (count > 0) std::memcpy(out->data(), elements, out->size());
    return CUDNN_STATUS_SUCCESS;
  }
  auto* ptrs = static_cast<void* const*>(elements);
  for (int64_t i = 0; i < count; ++i) {
    uint64_t id = 0;
    if (type == CUDNN_TYPE_HANDLE) {
      if (!IsHandle(ptrs[i])) return CUDNN_STATUS_BAD_PARAM;
      id = static_cast<cudnnContext*>(ptrs[i])->id;
    } else {
      GuestDesc* d = Find(ptrs[i]);
      if (d == nullptr) return CUDNN_STATUS_BAD_PARAM;
      id = d->id;
    }
    std::memcpy(out->data() + i * 8, &id, 8);
  }
  return CUDNN_STATUS_SUCCESS;
}

size_t DnnDataTypeBytes(int32_t type) {
  switch (type) {
    case CUDNN_DATA_DOUBLE:
    case CUDNN_DATA_INT64:
    case CUDNN_DATA_COMPLEX_FP32:
      return 8;
    case CUDNN_DATA_COMPLEX_FP64:
      return 16;
    case CUDNN_DATA_HALF:
    case CUDNN_DATA_BFLOAT16:
      return 2;
    case CUDNN_DATA_INT8:
    case CUDNN_DATA_UINT8:
    case CUDNN_DATA_BOOLEAN:
    case CUDNN_DATA_FP8_E4M3:
    case CUDNN_DATA_FP8_E5M2:
    case CUDNN_DATA_FP8_E8M0:
    case CUDNN_DATA_FP4_E2M1:
    case CUDNN_DATA_INT4:
    case CUDNN_DATA_UINT4:
      return 1;
    default:
      return 4;
  }
}

// A descriptor's by-value table: its own entry when it is a by-value tensor,
// and the union of the tables of every descriptor it references (so an
// operation collects its tensors', a graph its operations', and engine,
// config and plan their graph's). Taken at finalize, when what it references
// is finalized and immutable, so later destroys do not matter.
void Mirror::Derive(GuestDesc* d) {
  auto table = std::make_shared<DnnByValue>();
  if (d->type == CUDNN_BACKEND_TENSOR_DESCRIPTOR) {
    const proto::DnnAttr* bv = d->attrs.Find(CUDNN_ATTR_TENSOR_IS_BY_VALUE);
    const proto::DnnAttr* uid = d->attrs.Find(CUDNN_ATTR_TENSOR_UNIQUE_ID);
    const proto::DnnAttr* dt = d->attrs.Find(CUDNN_ATTR_TENSOR_DATA_TYPE);
    const proto::DnnAttr* dims = d->attrs.Find(CUDNN_ATTR_TENSOR_DIMENSIONS);
    if (bv && !bv->values.empty() && bv->values[0] != 0 && uid && dt && dt->values.size() >= 4) {
      int32_t type = 0;
      std::memcpy(&type, dt->values.data(), 4);
      uint64_t n = 1;
      for (int64_t i = 0; dims && i < dims->count(); ++i) n *= dims->U64(i);
      (*table)[static_cast<int64_t>(uid->U64(0))] =
          static_cast<uint32_t>(std::min<uint64_t>(n, kDnnMaxByValueElements) * DnnDataTypeBytes(type));
    }
  }
  for (const auto& [name, a] : d->attrs.attrs()) {
    if (a.type != CUDNN_TYPE_BACKEND_DESCRIPTOR) continue;
    for (int64_t i = 0; i < a.count(); ++i) {
      GuestDesc* src = FindId(a.U64(i));
      if (src != nullptr && src->by_value) table->insert(src->by_value->begin(), src->by_value->end());
    }
  }
  if (!table->empty()) d->by_value = std::move(table);
}

}  // namespace smolvm::shim
