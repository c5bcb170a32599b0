// Line I/O of libsmolvm-guest: see guest_io.h.
#include "guest/guest_io.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "guest/forkpoint_wire.h"

namespace smolvm_guest {
namespace {

int WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

}  // namespace

int SendLine(int fd, const char* fmt, ...) {
  char line[SMOLVM_FP_MAX_LINE];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  if (n < 0 || n >= (int)sizeof line - 1) return -EINVAL;
  line[n++] = '\n';
  return WriteAll(fd, line, (size_t)n);
}

int ReadLine(int fd, char* buf, size_t cap, int* fd_out) {
  if (fd_out != nullptr) *fd_out = -1;
  size_t n = 0;
  for (;;) {
    char c;
    struct iovec iov = {&c, 1};
    alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t r = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (r == 0) return -ECONNRESET;
    for (struct cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm != nullptr; cm = CMSG_NXTHDR(&msg, cm)) {
      if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
        int got;
        memcpy(&got, CMSG_DATA(cm), sizeof got);
        if (fd_out != nullptr && *fd_out < 0) {
          *fd_out = got;
        } else {
          close(got);
        }
      }
    }
    if (c == '\n') break;
    if (n + 1 >= cap) return -EMSGSIZE;
    buf[n++] = c;
  }
  buf[n] = '\0';
  return 0;
}

int Connect(const char* path) {
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  if (strlen(path) >= sizeof addr.sun_path) return -ENAMETOOLONG;
  strcpy(addr.sun_path, path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  int r;
  do {
    r = connect(fd, (struct sockaddr*)&addr, sizeof addr);
  } while (r < 0 && errno == EINTR);
  if (r < 0) {
    int e = errno;
    close(fd);
    return -e;
  }
  return fd;
}

int ErrFromLine(const char* line) {
  int e = 0;
  if (sscanf(line, "ERR %d", &e) == 1 && e > 0 && e < 4096) return -e;
  return -EIO;
}

int Expect(int fd, const char* want, int* fd_out) {
  char line[SMOLVM_FP_MAX_LINE];
  int r = ReadLine(fd, line, sizeof line, fd_out);
  if (r < 0) return r;
  if (strcmp(line, want) == 0) return 0;
  if (fd_out != nullptr && *fd_out >= 0) {
    close(*fd_out);
    *fd_out = -1;
  }
  return ErrFromLine(line);
}

}  // namespace smolvm_guest
