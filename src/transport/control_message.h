// What arrived beside the bytes of one recvmsg(2): the descriptors
// (SCM_RIGHTS) and the sender's credentials (SCM_CREDENTIALS). Every reader
// of a socket that may carry control messages (UnixChannel, the daemon's
// pending Hellos, the supervisor's forkpoint socket) walks its control
// buffer here and nowhere else.
//
// Why one place: after a recvmsg that failed (EAGAIN on a MSG_DONTWAIT read
// is the common case) the kernel leaves msg_controllen as the caller set it,
// so the buffer still holds whatever bytes were there before — on the stack,
// often the control message of an earlier read, naming descriptors that now
// belong to someone else. Walking it adopted (and later closed) them
// (issue 29). TakeControlMessage looks at the buffer only when recvmsg
// returned > 0 bytes. (These are stream sockets: descriptors ride with at
// least one byte of data, so a read of 0 bytes carries none.)
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <optional>
#include <vector>

#include "base/unique_fd.h"

namespace smolvm {

struct ControlMessage {
  std::vector<UniqueFd> fds;          // SCM_RIGHTS, in arrival order; owned
  std::optional<struct ucred> creds;  // SCM_CREDENTIALS (SO_PASSCRED on)
  bool truncated = false;             // MSG_CTRUNC: the kernel dropped some
};

// REQUIRES: `msg` is the msghdr recvmsg filled and `r` its result.
// Adopts nothing unless r > 0; then takes ownership of every descriptor in
// every SCM_RIGHTS message (the caller closes what it does not want by
// dropping them).
ControlMessage TakeControlMessage(ssize_t r, const struct msghdr& msg);

}  // namespace smolvm
