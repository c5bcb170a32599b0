// Host functions (ops 130-132): cudaLaunchHostFunc and cudaStreamAddCallback
// run in the guest process; the worker enqueues a trampoline on the stream
// that asks the guest to run them (guest_link.h).
#include <cuda.h>

#include "worker/worker.h"

namespace smolvm {

Status Worker::Handle(const proto::LaunchHostFuncRequest& q, proto::LaunchHostFuncReply*, Ctx*) {
  if (q.fn == 0 || q.kind > 1)
    return Status(CUDA_ERROR_INVALID_VALUE, "a host function needs a function and a kind of 0 or 1");
  ASSIGN_OR_RETURN(uint64_t s, Stream(q.stream));
  auto call = std::make_unique<HostCall>();
  call->link = link_.get();
  call->fn = q.fn;
  call->user = q.user;
  call->stream = q.stream;
  call->kind = q.kind;
  call->status = &callback_status_;
  // Captured into a graph it runs at every launch: kept with the session.
  if (!captures_.empty()) {
    Result<bool> capturing = backend_->StreamIsCapturing(s);
    if (capturing.ok() && *capturing) {
      if (capture_calls_.size() >= GraphRegistry::kMaxNodes)
        return Status(CUDA_ERROR_OUT_OF_MEMORY, "too many host functions captured");
      call->once = false;
      HostCall* kept = call.get();
      RETURN_IF_ERROR(backend_->LaunchHostFunc(s, HostCallTrampoline, kept));
      capture_calls_.push_back(std::move(call));
      return Status::Ok();
    }
  }
  if (mirrors_ != nullptr && mirrors_->pending() != 0) {
    call->mirrors = mirrors_.get();
    call->landings_before = mirrors_->next();
  }
  HostCall* kept = link_->Keep(std::move(call));
  Status st = backend_->LaunchHostFunc(s, HostCallTrampoline, kept);
  if (!st.ok()) link_->Forget(kept);
  return st;
}

Status Worker::Handle(const proto::HostFuncDoneRequest& q, proto::HostFuncDoneReply*, Ctx*) {
  link_->Complete(q.call);
  return Status::Ok();
}

}  // namespace smolvm
