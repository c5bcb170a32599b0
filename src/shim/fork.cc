// The shim's side of a GPU fork (DESIGN §5): the golden's forkpoint loop
// with the daemon as controller, smolvmMarkFrozen, and the child's move to a
// clone session. Reached through libsmolvm-guest.so's hooks.
#include <errno.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "shim/parallel_copy.h"
#include "shim/runtime.h"

namespace smolvm::shim {

Status Runtime::BecomeClone(const std::string& token) {
  ParallelCopyResetAfterFork();
  // Nothing may touch the parent's memory or socket from here on.
  RETURN_IF_ERROR(host_mem_.PrivatizeForClone());
  session_.DetachForClone(token);
  RETURN_IF_ERROR(session_.Connect());
  RETURN_IF_ERROR(host_mem_.RegisterAll(session_));
  // The golden synchronized before it forked: no staging copy is in flight.
  for (Staging& s : staging_) s.in_use = false;
  return Status::Ok();
}

int Runtime::Forkpoint() {
  std::unique_lock lock(session_.mu());
  if (Begin() != cudaSuccess) return -ENOTSUP;
  // Work queued before the forkpoint runs before the golden is described.
  if (!session_.Flush().ok()) return -ECONNRESET;
  while (true) {
    proto::ForkpointWaitReply order;
    Status st = session_.Call(proto::ForkpointWaitRequest{}, &order);
    if (!st.ok()) {
      std::fprintf(stderr, "smolvm cudart: forkpoint: %s\n", st.ToString().c_str());
      return -ECONNRESET;
    }
    if (order.clone_index < 0) return -ECANCELED;
    std::fflush(nullptr);
    pid_t pid = ::fork();
    if (pid < 0) {
      // The daemon gives up on this clone after its attach timeout.
      std::fprintf(stderr, "smolvm cudart: forkpoint: fork failed: %s\n", strerror(errno));
      continue;
    }
    if (pid == 0) {
      Status become = BecomeClone(order.token);
      if (!become.ok()) {
        std::fprintf(stderr, "smolvm cudart: clone %d could not attach to its GPU session: %s\n",
                     order.clone_index, become.ToString().c_str());
        std::fflush(stderr);
        ::_exit(70);
      }
      ::setenv("SMOLVM_FORK_INDEX", std::to_string(order.clone_index).c_str(), 1);
      return order.clone_index;
    }
    // The golden waits for its next order.
  }
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
  std::fflush(nullptr);
  machine_fork_token_ = order.token;
  return 0;  // still holding the session: nothing may run between here and fork(2)
}

void Runtime::AfterMachineForkInParent() {
  machine_fork_token_.clear();
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
