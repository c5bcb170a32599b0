// Fuzz target: arbitrary bytes as a guest's stream of frames, sent over a
// real unix socket pair, with descriptors (SCM_RIGHTS), to a fresh Worker on
// the fake backend serving through its own serve loop (Worker::Serve: the
// channel's frame and descriptor checks, decode, dispatch, handlers,
// deferred errors, replies). Nothing may crash, hang or leak. Everything
// runs on the calling thread: the input is written whole before the worker
// reads, and replies pile up in the socket's buffer.
//
// The input is cut into frames as the channel will read them: a frame
// header, then up to payload_bytes of what follows. Each frame is sent with
// one sendmsg carrying descriptors: as many as its header announces (at
// most kMaxFdsInFrame), plus one more it does not announce when its seq is
// odd. The descriptors are memfds of a few pages (what HostRegister wants),
// the size picked by the frame's flags; at most kMaxFdsPerInput per input.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backend/fake_backend.h"
#include "daemon/layout.h"
#include "worker/worker.h"
#include "proto/frame.h"
#include "transport/unix_channel.h"

namespace {

constexpr uint32_t kMaxFdsInFrame = 4;
constexpr int kMaxFdsPerInput = 16;

struct Frame {
  std::string bytes;  // header + the payload bytes present
  std::vector<smolvm::UniqueFd> fds;
};

std::vector<Frame> CutFrames(const uint8_t* data, size_t size) {
  using namespace smolvm::proto;
  std::vector<Frame> frames;
  int fds_left = kMaxFdsPerInput;
  size_t at = 0;
  while (size - at >= kFrameHeaderBytes) {
    FrameHeader h = DecodeHeader(data + at);
    size_t n = std::min<size_t>(h.payload_bytes, size - at - kFrameHeaderBytes);
    Frame f;
    f.bytes.assign(reinterpret_cast<const char*>(data + at), kFrameHeaderBytes + n);
    at += kFrameHeaderBytes + n;
    int want = static_cast<int>(std::min(h.num_fds, kMaxFdsInFrame)) + (h.seq & 1);
    for (int i = 0; i < want && fds_left > 0; ++i, --fds_left) {
      smolvm::UniqueFd fd(::memfd_create("fuzz", MFD_CLOEXEC));
      if (!fd.valid()) break;
      (void)!::ftruncate(fd.get(), (h.flags & 0x10) ? 4096 : (2u << 20));
      f.fds.push_back(std::move(fd));
    }
    frames.push_back(std::move(f));
  }
  return frames;
}

// Writes every frame with its descriptors, then half-closes: the worker
// reads them, and sees the guest hang up at the end. Without a reader yet,
// what does not fit in the socket's buffer is dropped (MSG_DONTWAIT).
void WriteAll(int fd, const std::vector<Frame>& frames) {
  for (const Frame& f : frames) {
    std::vector<int> raw;
    for (const auto& d : f.fds) raw.push_back(d.get());
    struct iovec iov = {const_cast<char*>(f.bytes.data()), f.bytes.size()};
    alignas(struct cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * (kMaxFdsInFrame + 1))] = {};
    struct msghdr msg = {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (!raw.empty()) {
      msg.msg_control = ctl;
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * raw.size());
      struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * raw.size());
      std::memcpy(CMSG_DATA(c), raw.data(), sizeof(int) * raw.size());
    }
    ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) break;
    // The rest of a frame the kernel took only in part (descriptors went with the first byte).
    for (size_t sent = static_cast<size_t>(n); sent < f.bytes.size();) {
      ssize_t m = ::send(fd, f.bytes.data() + sent, f.bytes.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (m <= 0) return;
      sent += static_cast<size_t>(m);
    }
  }
  ::shutdown(fd, SHUT_WR);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ::setenv("SMOLVM_WORKER_SPIN_US", "0", 1);  // no busy-waiting between frames
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  smolvm::WorkerOptions o;
  o.backend = "fake";
  o.arena_base = smolvm::kArenaBase;
  o.arena_bytes = 1ull << 31;
  o.host_base = smolvm::kHostBase;
  o.host_bytes = 1ull << 28;
  smolvm::FakeBackendOptions fo;
  fo.total_mem = 1ull << 30;  // a fuzz input may allocate; keep it small
  smolvm::Worker worker(std::make_unique<smolvm::FakeBackend>(fo), o);
  smolvm::Status st = worker.Start();
  if (!st.ok()) {
    std::fprintf(stderr, "frame fuzzer: worker start failed: %s\n", st.ToString().c_str());
    __builtin_trap();
  }
  smolvm::UniqueFd mine, theirs;
  if (!smolvm::SocketPair(&mine, &theirs).ok()) __builtin_trap();
  std::vector<Frame> frames = CutFrames(data, size);
  int fd = mine.get();
  // The whole input fits in the socket's buffer (inputs are a few KiB): it
  // is all there, hang-up included, before the worker reads, so the worker
  // never waits on another thread. Replies can be large: a thread drains them.
  WriteAll(fd, frames);
  // No thread reads the replies (starting one costs more than an input):
  // the worker's end gets a large buffer and does not block, so a reply
  // that does not fit ends the session as a guest that stopped reading would.
  int big = 16 << 20;
  if (::setsockopt(theirs.get(), SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big) < 0)
    (void)::setsockopt(theirs.get(), SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
  ::fcntl(theirs.get(), F_SETFL, ::fcntl(theirs.get(), F_GETFL) | O_NONBLOCK);
  smolvm::proto::WorkerAdoptRequest adopt;
  adopt.session_id = 1;
  (void)worker.Serve(std::make_unique<smolvm::UnixChannel>(std::move(theirs)), adopt, nullptr);
  return 0;
}
