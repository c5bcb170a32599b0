// Machine-layer status codes beyond base/status.h, and the CLI's exit codes.
//
// Exit codes of `smolvm machine ...` (stable, documented in docs/machines.md):
//   0  success (`exec`: the command's own exit code instead)
//   1  the host failed (system call, cgroup, mount, state store)
//   2  invalid argument (name, --cpus, --mem, volume, env, image, command)
//   3  no such machine
//   4  name already taken
//   5  wrong state (not running, not forkable, has clones, running on rm, clone restart)
//   6  timed out (fork waiting for the forkpoint, start)
//   7  permission denied (not root)
//   130 cancelled (Ctrl-C of `fork`: the request's clones are removed)
#pragma once

#include "base/status.h"

namespace smolvm::machine {

inline constexpr int32_t kWrongState = 200001;

inline constexpr int32_t kCancelled = 200002;

inline Status WrongState(std::string m) { return Status(kWrongState, std::move(m)); }
inline Status Cancelled(std::string m) { return Status(kCancelled, std::move(m)); }

inline int ExitCodeFor(const Status& s) {
  if (s.ok()) return 0;
  switch (s.code()) {
    case static_cast<int32_t>(Code::kInvalidArgument): return 2;
    case static_cast<int32_t>(Code::kNotFound): return 3;
    case static_cast<int32_t>(Code::kAlreadyExists): return 4;
    case kWrongState: return 5;
    case static_cast<int32_t>(Code::kTimeout): return 6;
    case static_cast<int32_t>(Code::kPermissionDenied): return 7;
    case kCancelled: return 130;
    default: return 1;
  }
}

}  // namespace smolvm::machine
