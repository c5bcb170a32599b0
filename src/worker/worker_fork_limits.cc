// A clone's context limits are its golden's: a golden that raised its
// malloc heap, printf FIFO or stack (cudaDeviceSetLimit, or a stack its
// kernels grew) forks clones whose device malloc, printf and kernels behave
// the same. The golden's manifest names each limit that differs from a fresh
// worker's (backend/context_limits.h); the clone build sets it through the
// backend, so a budgeted clone is charged for it as for a guest's own
// CtxSetLimit (fork admission already counted the golden's limits charge).
#include <cuda.h>

#include <string>

#include "backend/context_limits.h"
#include "worker/worker.h"

namespace smolvm {

Status Worker::DescribeLimits(proto::ForkManifestBody* body) const {
  for (const ContextLimitValue& l : kWorkerContextLimits) {
    ASSIGN_OR_RETURN(uint64_t value, backend_->CtxGetLimit(l.limit));
    if (value != l.value) body->limits.push_back({l.limit, value});
  }
  return Status::Ok();
}

Status Worker::ApplyLimits(const proto::ForkManifestBody& want) {
  for (const proto::ManifestLimit& l : want.limits) {
    bool known = false;
    for (const ContextLimitValue& w : kWorkerContextLimits) known = known || w.limit == l.limit;
    if (!known) return Malformed("clone manifest: context limit " + std::to_string(l.limit) + " is not one a fork carries");
    Status st = backend_->CtxSetLimit(l.limit, l.value);
    if (!st.ok())
      return Status(st.code(), "setting the golden's context limit " + std::to_string(l.limit) + " to " +
                                   std::to_string(l.value) + ": " + st.message());
  }
  return Status::Ok();
}

}  // namespace smolvm
