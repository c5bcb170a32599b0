#include "transport/control_message.h"

#include <cstring>

namespace smolvm {

ControlMessage TakeControlMessage(ssize_t r, const struct msghdr& msg) {
  ControlMessage out;
  if (r <= 0) return out;  // the control buffer holds stale bytes, not a message
  out.truncated = (msg.msg_flags & MSG_CTRUNC) != 0;
  // CMSG_NXTHDR takes a non-const msghdr; it only reads it.
  auto* m = const_cast<struct msghdr*>(&msg);
  for (struct cmsghdr* c = CMSG_FIRSTHDR(m); c != nullptr; c = CMSG_NXTHDR(m, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_len < CMSG_LEN(0)) continue;
    const size_t data_bytes = c->cmsg_len - CMSG_LEN(0);
    if (c->cmsg_type == SCM_RIGHTS) {
      const size_t n = data_bytes / sizeof(int);
      for (size_t i = 0; i < n; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        out.fds.emplace_back(fd);
      }
    } else if (c->cmsg_type == SCM_CREDENTIALS && data_bytes >= sizeof(struct ucred)) {
      struct ucred uc;
      std::memcpy(&uc, CMSG_DATA(c), sizeof uc);
      out.creds = uc;
    }
  }
  return out;
}

}  // namespace smolvm
