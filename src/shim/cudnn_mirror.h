// The guest's mirror of cuDNN backend descriptors and handles (libcudnn.so.9
// of the shim). A cudnnBackendDescriptor_t is a GuestDesc: its type, the
// attributes the program set (references to other descriptors and handles
// kept as their guest ids, proto/dnn_attrs.h) and what the worker holds of
// it. Setting attributes never leaves the process; Finalize sends the
// descriptor to the worker (a variant pack is finalized here and travels by
// value with each execute).
//
// By-value tensors (CUDNN_ATTR_TENSOR_IS_BY_VALUE) hand cuDNN host pointers
// in the variant pack: at finalize every descriptor records the uid and byte
// size of the by-value tensors it reaches through its references (a tensor,
// its operations, their graph, the engine, config and plan built on it; what
// a GetAttribute wrote takes its source's), so an execute sends those values.
//
// Thread safety: every function REQUIRES the caller to hold Mirror::mu().
#pragma once

#include <cudnn_graph.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "proto/dnn_attrs.h"

namespace smolvm::shim {

using DnnByValue = std::map<int64_t, uint32_t>;  // uid -> bytes
inline constexpr uint64_t kDnnMaxByValueElements = 64;

struct GuestDesc {
  uint64_t id = 0;
  cudnnBackendDescriptorType_t type{};
  bool finalized = false;
  bool on_worker = false;  // the worker holds it under `id`
  bool filled = false;     // written by the worker (GetAttribute): attrs are not known here
  proto::DnnAttrs attrs;
  std::shared_ptr<const DnnByValue> by_value;
  // Answers of the worker for this finalized descriptor, by (name, type,
  // requested); requested -1 for a count-only answer (no element array).
  std::map<std::tuple<uint32_t, uint32_t, int64_t>, std::pair<int64_t, std::string>> answers;
};

}  // namespace smolvm::shim

struct cudnnContext {
  uint64_t id = 0;
  cudaStream_t stream = nullptr;
};

namespace smolvm::shim {

class Mirror {
 public:
  static Mirror& Get();
  std::mutex& mu() { return mu_; }

  GuestDesc* NewDesc(cudnnBackendDescriptorType_t type);
  void DeleteDesc(GuestDesc* d);
  // nullptr for a pointer that is not a live descriptor of this process.
  GuestDesc* Find(void* p) const;
  GuestDesc* FindId(uint64_t id) const;
  void AddHandle(cudnnContext* h) { handles_.insert(h); }
  void RemoveHandle(cudnnContext* h) { handles_.erase(h); }
  bool IsHandle(void* p) const { return handles_.count(static_cast<cudnnContext*>(p)) != 0; }
  cudnnContext* HandleById(uint64_t id) const;

  // Attribute elements as the API passes them -> the encoding's elements.
  // BAD_PARAM for an unknown descriptor or handle.
  cudnnStatus_t Encode(cudnnBackendAttributeType_t type, int64_t count, const void* elements,
                       std::string* out) const;
  // After a successful finalize: the by-value table `d` carries (Derive).
  void Derive(GuestDesc* d);

 private:
  std::mutex mu_;
  uint64_t next_id_ = 1;
  std::unordered_map<GuestDesc*, std::unique_ptr<GuestDesc>> descs_;
  std::unordered_map<uint64_t, GuestDesc*> by_id_;
  std::unordered_set<cudnnContext*> handles_;
};

// Bytes of one element of a cudnnDataType_t (by-value tensors).
size_t DnnDataTypeBytes(int32_t type);

}  // namespace smolvm::shim
