// DnnBackend: what a worker needs of cuDNN, at its backend (graph) API level
// (docs/architecture.md §3: remoted per call family, never by intercepting kernels).
//
// Two implementations, named like the BlasBackend pair:
//   CudaDnnBackend (dnn_cuda.cc): NVIDIA's libcudnn.so.9, dlopened by
//     absolute path (FindCudaLibrary's order; directories holding a
//     `.smolvm-shim` marker are skipped: our guest shim carries the same
//     soname), called on the worker's context and real streams;
//   FakeDnnBackend (dnn_fake.cc): a host emulation that validates every
//     descriptor graph it is given (tensors, operations, operation graph,
//     engine, engine config, plan, variant pack) and executes fp32 pointwise
//     and matmul graphs over FakeBackend's device memory, so CI tests the
//     mirroring and the ordering with numbers.
// A DnnBackend is created lazily by the worker on the session's first cuDNN
// op, owned by the worker and called on its one thread.
//
// Descriptors and handles are the backend's own values carried as uint64_t;
// the worker maps guest ids onto them. Attribute elements are cuDNN's own
// representation (proto/dnn_attrs.h), with descriptor and handle elements
// already translated to backend values. Errors: Status(proto::kDnnStatusBase
// + the cudnnStatus_t), handed to the guest unchanged.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/gpu_backend.h"
#include "base/status.h"
#include "proto/lib_status.h"

namespace smolvm {

inline Status DnnError(int32_t cudnn_status, std::string what) {
  return Status(proto::kDnnStatusBase + cudnn_status, std::move(what));
}

// cudnnStatus_t values the worker side names (cudnn_graph.h).
inline constexpr int32_t kDnnNotInitialized = 1001;
inline constexpr int32_t kDnnBadParam = 2000;
inline constexpr int32_t kDnnBadParamNotFinalized = 2004;
inline constexpr int32_t kDnnNotSupported = 3000;
inline constexpr int32_t kDnnExecutionFailed = 5000;

// The variant pack of one execute: data pointers are device addresses or,
// for by-value tensors, host pointers valid for the call.
struct DnnVariantPack {
  std::vector<int64_t> uids;
  std::vector<void*> ptrs;
  void* workspace = nullptr;
};

struct DnnVersion {
  uint64_t version = 0;         // cudnnGetVersion
  uint64_t cudart_version = 0;  // cudnnGetCudartVersion
  std::string library;          // the file it was loaded from
};

class DnnBackend {
 public:
  virtual ~DnnBackend() = default;
  virtual std::string_view Name() const = 0;

  virtual Result<uint64_t> Create() = 0;
  virtual Status Destroy(uint64_t handle) = 0;
  virtual Status SetStream(uint64_t handle, uint64_t stream) = 0;
  virtual DnnVersion Version() const = 0;

  virtual Result<uint64_t> DescCreate(uint32_t type) = 0;
  virtual Status DescDestroy(uint64_t desc) = 0;
  // `values`: `count` elements of cudnnBackendAttributeType_t `type`.
  virtual Status DescSet(uint64_t desc, uint32_t name, uint32_t type, int64_t count,
                         const void* values) = 0;
  virtual Status DescFinalize(uint64_t desc) = 0;
  // Writes at most `requested` elements to `values` (descriptor elements:
  // backend descriptors the caller created) and their number to `*count`;
  // `values` nullptr: the count only, as cuDNN answers a null element array.
  virtual Status DescGet(uint64_t desc, uint32_t name, uint32_t type, int64_t requested,
                         int64_t* count, void* values) = 0;
  virtual Status Execute(uint64_t handle, uint64_t plan, const DnnVariantPack& pack) = 0;
};

// The DnnBackend that goes with `gpu`: fake over a FakeBackend, the real
// library over the cuda one (kUnavailable when it cannot be loaded).
Result<std::unique_ptr<DnnBackend>> MakeDnnBackend(GpuBackend* gpu);

}  // namespace smolvm
