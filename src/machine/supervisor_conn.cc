#include "machine/supervisor_conn.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "guest/forkpoint_wire.h"
#include "transport/control_message.h"

namespace smolvm::machine {
namespace {
using Clock = SupervisorClock;
}  // namespace


Status Fill(Conn& c, std::optional<Clock::time_point> deadline, pid_t* sender) {
  if (deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now()).count();
    struct pollfd p = {c.fd.get(), POLLIN, 0};
    int r;
    do {
      r = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(left, 0)));
    } while (r < 0 && errno == EINTR);
    if (r == 0) return Timeout("no answer from the guest in time");
  }
  char data[SMOLVM_FP_MAX_LINE];
  struct iovec iov = {data, sizeof data};
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(sizeof(int) * 4)];
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t r;
  do {
    r = ::recvmsg(c.fd.get(), &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  } while (r < 0 && errno == EINTR);
  int err = errno;
  // Only a read that returned bytes carries a control message
  // (control_message.h); descriptors a guest sends are closed unread here,
  // as `cm` goes.
  ControlMessage cm = TakeControlMessage(r, msg);
  if (cm.creds && sender != nullptr) *sender = cm.creds->pid;
  if (r < 0) {
    if (err == EAGAIN || err == EWOULDBLOCK) return Status::Ok();
    return ErrnoStatus("recvmsg", err);
  }
  if (r == 0) return Unavailable("connection closed");
  c.buf.append(data, static_cast<size_t>(r));
  if (c.buf.size() > MaxBuffered(c.kind)) return Malformed("line too long");
  return Status::Ok();
}

std::optional<std::string> PopLine(Conn& c) {
  size_t nl = c.buf.find('\n');
  if (nl == std::string::npos) return std::nullopt;
  std::string line = c.buf.substr(0, nl);
  c.buf.erase(0, nl + 1);
  return line;
}

Result<std::string> ReadLine(Conn& c, Clock::time_point deadline, pid_t* sender) {
  for (;;) {
    if (auto l = PopLine(c)) return *l;
    RETURN_IF_ERROR(Fill(c, deadline, sender));
  }
}

Status SendLine(int fd, const std::string& line, int pass_fd) {
  std::string s = line + "\n";
  struct iovec iov = {s.data(), s.size()};
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  if (pass_fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    struct cmsghdr* cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cm), &pass_fd, sizeof(int));
  }
  ssize_t w;
  do {
    w = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
  } while (w < 0 && errno == EINTR);
  if (w != static_cast<ssize_t>(s.size())) return Unavailable("peer closed the connection");
  return Status::Ok();
}

std::string ErrLine(const Status& s) {
  std::string m = s.message();
  for (char& ch : m)
    if (ch == '\n') ch = ' ';
  return "ERR " + std::to_string(s.code()) + " " + m;
}

size_t MaxBuffered(Conn::Kind kind) { return kind == Conn::kCtl ? 64 * 1024 : 4 * SMOLVM_FP_MAX_LINE; }

Status StatusOfErrLine(const std::string& line, const std::string& fallback) {
  if (line.rfind("ERR ", 0) == 0) {
    char* end = nullptr;
    long code = std::strtol(line.c_str() + 4, &end, 10);
    if (end != nullptr && *end == ' ') return Status(code != 0 ? static_cast<int32_t>(code) : 1, end + 1);
  }
  return Internal(fallback + (line.empty() ? "" : ": " + line));
}

bool PeerHungUp(int fd) {
  char b;
  ssize_t n;
  do {
    n = ::recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

pid_t PeerPid(int fd) {
  struct ucred uc = {};
  socklen_t len = sizeof uc;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) < 0) return 0;
  return uc.pid;
}

}  // namespace smolvm::machine
