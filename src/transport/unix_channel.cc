#include "transport/unix_channel.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <algorithm>
#include <cstring>

#include "transport/control_message.h"

namespace smolvm {
namespace {

constexpr size_t kReadChunk = 256 << 10;

}  // namespace

UnixChannel::UnixChannel(UniqueFd socket) : sock_(std::move(socket)) {}

Status UnixChannel::Write(std::string_view bytes, std::span<const int> fds) {
  if (fds.size() > proto::kMaxFdsPerFrame) return InvalidArgument("too many descriptors for one frame");
  const char* p = bytes.data();
  size_t left = bytes.size();
  bool first = true;
  while (left > 0 || (first && !fds.empty())) {
    struct iovec iov = {const_cast<char*>(p), left};
    struct msghdr msg = {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * proto::kMaxFdsPerFrame)];
    if (first && !fds.empty()) {
      size_t n = fds.size() * sizeof(int);
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(n);
      struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(n);
      std::memcpy(CMSG_DATA(c), fds.data(), n);
    }
    ssize_t w = ::sendmsg(sock_.get(), &msg, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EPIPE || errno == ECONNRESET) return Unavailable("peer closed the connection");
      return ErrnoStatus("sendmsg", errno);
    }
    first = false;
    p += w;
    left -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

Result<size_t> UnixChannel::TryWrite(std::string_view bytes) {
  ssize_t w;
  do {
    w = ::send(sock_.get(), bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  } while (w < 0 && errno == EINTR);
  if (w >= 0) return static_cast<size_t>(w);
  if (errno == EAGAIN || errno == EWOULDBLOCK) return size_t{0};
  if (errno == EPIPE || errno == ECONNRESET) return Unavailable("peer closed the connection");
  return ErrnoStatus("send", errno);
}

Status UnixChannel::Fill(int flags) {
  if (start_ > 0 && start_ == buf_.size()) {
    buf_.clear();
    start_ = 0;
  } else if (start_ > (1u << 20)) {
    buf_.EraseFront(start_);
    start_ = 0;
  }
  struct iovec iov = {buf_.Reserve(kReadChunk), kReadChunk};
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * 253)];
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t r;
  do {
    r = ::recvmsg(sock_.get(), &msg, MSG_CMSG_CLOEXEC | flags);
  } while (r < 0 && errno == EINTR);
  int err = errno;
  if (r > 0) {
    buf_.Grew(static_cast<size_t>(r));
    received_ += static_cast<uint64_t>(r);
  }
  // Every descriptor that arrived is owned (and so closed) from here on,
  // whatever happens next; after a failed read there are none
  // (control_message.h: the buffer then holds stale bytes).
  ControlMessage cm = TakeControlMessage(r, msg);
  for (UniqueFd& fd : cm.fds) fds_.push_back({std::move(fd), received_});
  if (r < 0) {
    if (err == ECONNRESET) return Unavailable("peer closed the connection");
    if (err == EAGAIN || err == EWOULDBLOCK) return Status(Code::kTimeout, "nothing to read yet");
    return ErrnoStatus("recvmsg", err);
  }
  if (r == 0) return Unavailable("peer closed the connection");
  if (cm.truncated) {
    fds_.clear();
    return Malformed("descriptors truncated in transit");
  }
  // A frame carries at most kMaxFdsPerFrame; one read holds at most one
  // batch, plus the one of a frame whose header is still incomplete.
  if (fds_.size() > 2 * proto::kMaxFdsPerFrame) {
    fds_.clear();
    return Malformed("more descriptors sent than frames announce");
  }
  return Status::Ok();
}

void UnixChannel::RecvBuffer::EraseFront(size_t n) {
  std::memmove(p_.get(), p_.get() + n, size_ - n);
  size_ -= n;
}

char* UnixChannel::RecvBuffer::Reserve(size_t n) {
  if (capacity_ - size_ < n) {
    size_t cap = std::max(capacity_ * 2, size_ + n);
    auto p = std::make_unique_for_overwrite<char[]>(cap);
    if (size_ > 0) std::memcpy(p.get(), p_.get(), size_);
    p_ = std::move(p);
    capacity_ = cap;
  }
  return p_.get() + size_;
}

void UnixChannel::DropUnclaimedFds() {
  while (!fds_.empty() && fds_.front().batch_end <= consumed_) fds_.pop_front();
}

bool UnixChannel::HasBufferedFrame() const {
  size_t have = buf_.size() - start_;
  if (have < proto::kFrameHeaderBytes) return false;
  proto::FrameHeader h = proto::DecodeHeader(reinterpret_cast<const uint8_t*>(buf_.data() + start_));
  return h.payload_bytes <= proto::kMaxPayloadBytes &&
         have >= proto::kFrameHeaderBytes + h.payload_bytes;
}

Status UnixChannel::ReadFrame(proto::FrameHeader* header, std::string* payload,
                              std::vector<UniqueFd>* fds) {
  while (buf_.size() - start_ < proto::kFrameHeaderBytes) RETURN_IF_ERROR(Fill());
  proto::FrameHeader h = proto::DecodeHeader(reinterpret_cast<const uint8_t*>(buf_.data() + start_));
  if (h.payload_bytes > proto::kMaxPayloadBytes)
    return Malformed("frame payload of " + std::to_string(h.payload_bytes) + " bytes exceeds the limit");
  if (h.num_fds > proto::kMaxFdsPerFrame) return Malformed("frame claims too many descriptors");
  if (h.num_fds > fds_.size()) return Malformed("frame claims descriptors that did not arrive");
  start_ += proto::kFrameHeaderBytes;
  size_t need = h.payload_bytes;
  size_t have = std::min(need, buf_.size() - start_);
  payload->assign(buf_.data() + start_, have);
  start_ += have;
  if (have < need) {
    // Large payload: read the rest straight into place, the buffer growing
    // with what arrives (a peer that declares 80 MiB and sends 1 byte costs
    // 1 MiB, not 80).
    size_t at = have;
    while (at < need) {
      if (payload->size() == at) payload->resize(std::min(need, std::max<size_t>(at * 2, at + (1u << 20))));
      ssize_t r = ::read(sock_.get(), payload->data() + at, payload->size() - at);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return ErrnoStatus("read", errno);
      if (r == 0) return Unavailable("peer closed the connection mid-frame");
      at += static_cast<size_t>(r);
      received_ += static_cast<uint64_t>(r);
    }
  }
  fds->clear();
  for (uint32_t i = 0; i < h.num_fds; ++i) {
    fds->push_back(std::move(fds_.front().fd));
    fds_.pop_front();
  }
  consumed_ += proto::kFrameHeaderBytes + need;
  DropUnclaimedFds();
  *header = h;
  return Status::Ok();
}

Result<bool> UnixChannel::TryReadFrame(proto::FrameHeader* header, std::string* payload,
                                       std::vector<UniqueFd>* fds) {
  while (!HasBufferedFrame()) {
    size_t have = buf_.size() - start_;
    if (have >= proto::kFrameHeaderBytes) {
      proto::FrameHeader h = proto::DecodeHeader(reinterpret_cast<const uint8_t*>(buf_.data() + start_));
      if (h.payload_bytes > proto::kMaxPayloadBytes) break;  // ReadFrame refuses it
    }
    Status st = Fill(MSG_DONTWAIT);
    if (st.code() == static_cast<int32_t>(Code::kTimeout)) {
      if (buf_.size() > start_ && !partial_since_) partial_since_ = std::chrono::steady_clock::now();
      return false;
    }
    RETURN_IF_ERROR(st);
  }
  RETURN_IF_ERROR(ReadFrame(header, payload, fds));
  partial_since_.reset();
  if (buf_.size() > start_ && !HasBufferedFrame()) partial_since_ = std::chrono::steady_clock::now();
  return true;
}

Result<UniqueFd> UnixChannel::TakeSocket() {
  if (start_ != buf_.size() || !fds_.empty()) return Internal("connection has unread data");
  return std::move(sock_);
}

namespace {

Status FillAddress(const std::string& path, struct sockaddr_un* addr) {
  std::memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  if (path.size() >= sizeof addr->sun_path) return InvalidArgument("socket path too long: " + path);
  std::memcpy(addr->sun_path, path.c_str(), path.size() + 1);
  return Status::Ok();
}

}  // namespace

Result<UniqueFd> ConnectUnix(const std::string& path) {
  struct sockaddr_un addr;
  RETURN_IF_ERROR(FillAddress(path, &addr));
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoStatus("socket", errno);
  int r;
  do {
    r = ::connect(fd.get(), reinterpret_cast<struct sockaddr*>(&addr), sizeof addr);
  } while (r < 0 && errno == EINTR);
  if (r < 0) return ErrnoStatus("connect " + path, errno);
  return fd;
}

Result<UniqueFd> ListenUnix(const std::string& path, unsigned mode) {
  struct sockaddr_un addr;
  RETURN_IF_ERROR(FillAddress(path, &addr));
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoStatus("socket", errno);
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) return InvalidArgument(path + " exists and is not a socket");
    // A live daemon answers a connect; a stale socket file does not.
    auto probe = ConnectUnix(path);
    if (probe.ok()) return Status(Code::kAlreadyExists, "a daemon already listens on " + path);
    ::unlink(path.c_str());
  }
  // Bound under a temporary name and renamed into place once listening, so
  // whoever waits for `path` to appear can connect at once (a bound socket
  // that does not listen yet refuses connections).
  std::string tmp = path + ".t" + std::to_string(::getpid());
  struct sockaddr_un tmp_addr;
  if (!FillAddress(tmp, &tmp_addr).ok()) tmp = path;  // too long: bind in place
  else addr = tmp_addr;
  ::unlink(tmp.c_str());
  if (::bind(fd.get(), reinterpret_cast<struct sockaddr*>(&addr), sizeof addr) < 0)
    return ErrnoStatus("bind " + path, errno);
  auto fail = [&](const char* what) {
    Status st = ErrnoStatus(std::string(what) + " " + path, errno);
    ::unlink(tmp.c_str());
    return st;
  };
  if (::chmod(tmp.c_str(), mode) < 0) return fail("chmod");
  if (::listen(fd.get(), 128) < 0) return fail("listen");
  if (tmp != path && ::rename(tmp.c_str(), path.c_str()) < 0) return fail("rename");
  return fd;
}

bool SpinUntilReadable(int fd, int spin_us) {
  if (spin_us <= 0) return false;
  auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
  char c;
  do {
    ssize_t r = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return true;
  } while (std::chrono::steady_clock::now() < end);
  return false;
}

Status WaitUntilReadable(int fd, int spin_us) {
  if (SpinUntilReadable(fd, spin_us)) return Status::Ok();
  struct pollfd p = {fd, POLLIN, 0};
  for (;;) {
    int n = ::poll(&p, 1, -1);
    if (n > 0) return Status::Ok();  // readable, hung up or failed: the read says which
    if (n < 0 && errno != EINTR) return ErrnoStatus("poll", errno);
  }
}

int SpinMicrosFromEnv(const char* env, int fallback) {
  const char* s = std::getenv(env);
  return s ? std::clamp(std::atoi(s), 0, 1000) : fallback;
}

Status SocketPair(UniqueFd* a, UniqueFd* b) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) return ErrnoStatus("socketpair", errno);
  a->Reset(sv[0]);
  b->Reset(sv[1]);
  return Status::Ok();
}

}  // namespace smolvm
