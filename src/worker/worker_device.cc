// The worker's device and context handlers (ops 10-16), mirroring the
// shim's forward_device.cc.
#include <cuda.h>

#include "worker/cu_status.h"
#include "worker/worker.h"

namespace smolvm {
namespace {

}  // namespace

Status Worker::Handle(const proto::DeviceGetCountRequest&, proto::DeviceGetCountReply* r, Ctx*) {
  // A session sees the one device its worker's context lives on.
  r->count = 1;
  return Status::Ok();
}

Status Worker::Handle(const proto::DeviceGetInfoRequest& q, proto::DeviceGetInfoReply* r, Ctx*) {
  if (q.device != 0) return Cu(CUDA_ERROR_INVALID_DEVICE, "a session has one device, 0");
  ASSIGN_OR_RETURN(DeviceInfo info, backend_->GetDeviceInfo(0));
  scratch_ = info.uuid;
  r->name = info.name;
  r->uuid = scratch_;
  r->total_mem = info.total_mem;
  r->driver_version = info.driver_version;
  r->attrs = std::move(info.attrs);
  r->unsupported = std::move(info.unsupported);
  return Status::Ok();
}

Status Worker::Handle(const proto::MemGetInfoRequest&, proto::MemGetInfoReply* r, Ctx*) {
  RETURN_IF_ERROR(backend_->MemGetInfo(&r->free_bytes, &r->total_bytes));
  if (options_.memory_limit_bytes) {
    uint64_t left = options_.memory_limit_bytes - std::min(options_.memory_limit_bytes, memory_->chunk_bytes());
    r->total_bytes = options_.memory_limit_bytes;
    r->free_bytes = std::min(r->free_bytes, left);
  }
  return Status::Ok();
}

Status Worker::Handle(const proto::CtxSynchronizeRequest&, proto::CtxSynchronizeReply*, Ctx*) {
  return backend_->CtxSynchronize();
}

Status Worker::Handle(const proto::CtxGetLimitRequest& q, proto::CtxGetLimitReply* r, Ctx*) {
  ASSIGN_OR_RETURN(r->value, backend_->CtxGetLimit(q.limit));
  return Status::Ok();
}

Status Worker::Handle(const proto::CtxSetLimitRequest& q, proto::CtxSetLimitReply*, Ctx*) {
  RETURN_IF_ERROR(backend_->CtxSetLimit(q.limit, q.value));
  SendChargedStats();
  return Status::Ok();
}

Status Worker::Handle(const proto::StreamPriorityRangeRequest&, proto::StreamPriorityRangeReply* r,
                      Ctx*) {
  int least = 0, greatest = 0;
  RETURN_IF_ERROR(backend_->StreamPriorityRange(&least, &greatest));
  r->least = least;
  r->greatest = greatest;
  return Status::Ok();
}

}  // namespace smolvm
