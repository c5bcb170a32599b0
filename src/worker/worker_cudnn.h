// The worker's cuDNN state (worker_cudnn.cc): the DnnBackend, the guest's
// handles and the descriptors it finalized, by guest id, and what a clone
// replays to rebuild them under the same ids (docs/fork.md, cuDNN).
//
// Owned by the Worker; used on its one thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/dnn_backend.h"
#include "proto/fork_manifest.h"
#include "proto/messages.h"

namespace smolvm {

struct DnnState {
  struct HandleInfo {
    uint64_t handle = 0;  // the DnnBackend's
    uint64_t stream = 0;  // guest stream id
  };
  struct DescInfo {
    uint64_t value = 0;  // the DnnBackend's
    uint32_t type = 0;
  };
  std::unique_ptr<DnnBackend> backend;  // null until the first cuDNN op
  Status status;                        // why it could not be created, once tried
  std::map<uint64_t, HandleInfo> handles;
  std::map<uint64_t, DescInfo> descs;
  // Every Finalize, GetAttribute into descriptors and DestroyDesc that
  // reached the worker, in order (op number and encoded request): what a
  // clone replays through the guest dispatch (worker_fork_clone.cc).
  std::vector<proto::ManifestDnnCall> log;
  std::string scratch;  // DnnGetAttribute reply bytes
};

// A guest request as the cuDNN log keeps it.
template <typename Req>
proto::ManifestDnnCall RecordedDnnCall(const Req& q) {
  proto::ManifestDnnCall call{Req::kNumber, {}};
  proto::Encoder enc(&call.request);
  proto::Encode(enc, q);
  return call;
}

}  // namespace smolvm
