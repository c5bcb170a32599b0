#include "daemon/fork_admission.h"

namespace smolvm {

uint64_t ForkAdmissionNeed(const ForkAdmission& a) {
  uint64_t pending = 0;
  size_t ready = a.ready_workers;
  for (const ForkInFlight& f : a.in_flight) {
    pending += f.private_bytes * f.unbuilt;
    // Their clones take pooled workers first; past those, contexts to start.
    if (ready >= f.without_worker) {
      ready -= f.without_worker;
    } else {
      pending += a.context_bytes * (f.without_worker - ready);
      ready = 0;
    }
  }
  const uint64_t extra_workers = a.count > ready ? a.count - ready : 0;
  return a.private_bytes * a.count + a.context_bytes * extra_workers + pending;
}

}  // namespace smolvm
