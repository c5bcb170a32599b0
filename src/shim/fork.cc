// The shim's side of a GPU fork (docs/architecture.md §5): the golden's wait for the
// daemon's order (the daemon as controller) or the supervisor's (a machine),
// smolvmMarkFrozen, and the child's move to a clone session. Reached through
// libsmolvm-guest.so's hooks, which call them from the fork steps
// (smolvm/guest.h) in whatever process forks: C's fork(2) or Python's os.fork().
#include <errno.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "shim/parallel_copy.h"
#include "shim/runtime.h"

namespace smolvm::shim {

Status Runtime::BecomeClone(const std::string& token) {
  using Clock = std::chrono::steady_clock;
  auto ms = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  auto t0 = Clock::now();
  ParallelCopyResetAfterFork();
  // Nothing may touch the parent's memory or socket from here on.
  RETURN_IF_ERROR(host_mem_.PrivatizeForClone());
  auto t_copy = Clock::now();
  session_.DetachForClone(token);
  RETURN_IF_ERROR(session_.Connect());
  auto t_connect = Clock::now();
  RETURN_IF_ERROR(host_mem_.RegisterAll(session_));
  // The golden synchronized before it forked: no staging copy is in flight.
  for (Staging& s : staging_) s.in_use = false;
  // A clone machine's log (SMOLVM_FORK_NAME: set in machine clones only)
  // says where its attach went: the fork's per-clone steps end here.
  if (std::getenv("SMOLVM_FORK_NAME") != nullptr) {
    uint64_t bytes = 0, copied = 0;
    for (const auto& [addr, seg] : host_mem_.Segments()) {
      bytes += seg.bytes;
      copied += seg.scratch ? 0 : seg.bytes;
    }
    std::fprintf(stderr,
                 "smolvm cudart: clone attach: pinned copy %.1f ms (%.1f of %.1f MiB in %zu segments), connect %.1f ms, "
                 "register %.1f ms\n",
                 ms(t0, t_copy), copied / 1048576.0, bytes / 1048576.0, host_mem_.Segments().size(),
                 ms(t_copy, t_connect), ms(t_connect, Clock::now()));
  }
  return Status::Ok();
}

int Runtime::WaitForkOrder(int* index, char* token, size_t token_cap) {
  session_.mu().lock();
  auto fail = [&](int err) {
    session_.mu().unlock();
    return err;
  };
  if (Begin() != cudaSuccess) return fail(-ENOTSUP);
  // Work queued before the forkpoint runs before the golden is described.
  if (!session_.Flush().ok()) return fail(-ECONNRESET);
  proto::ForkpointWaitReply order;
  Status st = session_.Call(proto::ForkpointWaitRequest{}, &order);
  if (!st.ok()) {
    std::fprintf(stderr, "smolvm cudart: forkpoint: %s\n", st.ToString().c_str());
    return fail(-ECONNRESET);
  }
  if (order.clone_index < 0) return fail(-ECANCELED);
  if (order.token.empty() || order.token.size() >= token_cap) return fail(-EPROTO);
  std::memcpy(token, order.token.c_str(), order.token.size() + 1);
  *index = order.clone_index;
  machine_fork_token_ = order.token;
  // The worker synchronized before it answered: every host function ran.
  // No thread may be inside the shim at fork(2).
  session_.StopCallbacks();
  std::fflush(nullptr);
  return 0;  // still holding the session: nothing may run between here and fork(2)
}

int Runtime::PrepareMachineFork() {
  session_.mu().lock();
  // A process that never reached the daemon has no GPU state to fork; its
  // supervisor found no session for it either and forks it as a CPU program.
  if (!session_.connected()) {
    machine_fork_token_.clear();
    return 0;
  }
  auto fail = [&](int err) {
    session_.mu().unlock();
    return err;
  };
  if (sticky_ != cudaSuccess) return fail(-EIO);
  if (!session_.Flush().ok()) return fail(-ECONNRESET);
  // One order from the daemon, which the supervisor asked to fork us.
  proto::ForkpointWaitReply order;
  Status st = session_.Call(proto::ForkpointWaitRequest{}, &order);
  if (!st.ok()) {
    std::fprintf(stderr, "smolvm cudart: forkpoint: %s\n", st.ToString().c_str());
    return fail(-ECONNRESET);
  }
  if (order.clone_index < 0 || order.token.empty()) return fail(-ECANCELED);
  session_.StopCallbacks();
  std::fflush(nullptr);
  machine_fork_token_ = order.token;
  return 0;  // still holding the session: nothing may run between here and fork(2)
}

void Runtime::AfterMachineForkInParent() {
  machine_fork_token_.clear();
  session_.RestartCallbacks();
  session_.mu().unlock();
}

int Runtime::AfterMachineForkInChild(const char* token) {
  std::string t = token != nullptr && token[0] != '\0' ? token : machine_fork_token_;
  machine_fork_token_.clear();
  Status st = t.empty() ? Status::Ok() : BecomeClone(t);
  session_.mu().unlock();
  if (!st.ok()) {
    std::fprintf(stderr, "smolvm cudart: the clone could not attach to its GPU session: %s\n", st.ToString().c_str());
    return -EIO;
  }
  return 0;
}

int Runtime::MarkFrozen(const void* ptr, size_t bytes) {
  std::lock_guard lock(session_.mu());
  if (Begin() != cudaSuccess) return -EIO;
  proto::MarkFrozenRequest req;
  req.dptr = reinterpret_cast<uint64_t>(ptr);
  req.bytes = bytes;
  proto::MarkFrozenReply rep;
  Status st = session_.Call(req, &rep);
  if (st.ok()) return 0;
  return session_.failure() != SessionFailure::kNone ? -EIO : -EINVAL;
}

}  // namespace smolvm::shim
