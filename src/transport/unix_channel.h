// UnixChannel: a Channel over a connected AF_UNIX SOCK_STREAM socket, with
// SCM_RIGHTS for descriptors. Reads are buffered so that a batch of queued
// frames costs one system call on the receiving side.
//
// Hostile peers: descriptors that no frame header announces are closed as
// soon as the frame they came with is read (they never pile up); a
// descriptor batch cut short in transit (MSG_CTRUNC) or more descriptors than
// frames may carry end the connection (kMalformed); a large payload's buffer
// grows with the bytes that actually arrive, never with the declared length.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "transport/channel.h"

namespace smolvm {

class UnixChannel final : public Channel {
 public:
  explicit UnixChannel(UniqueFd socket);

  Status Write(std::string_view bytes, std::span<const int> fds = {}) override;
  // Writes what the socket takes now without waiting (MSG_DONTWAIT), no
  // descriptors: the number of bytes written, 0 when the socket buffer is
  // full. A stream socket may take a prefix that ends inside a frame; the
  // caller writes the rest before anything else (order is the stream's).
  Result<size_t> TryWrite(std::string_view bytes);
  Status ReadFrame(proto::FrameHeader* header, std::string* payload,
                   std::vector<UniqueFd>* fds) override;
  bool HasBufferedFrame() const override;
  int fd() const override { return sock_.get(); }

  // For a poll loop that must never wait on one peer: reads what has
  // arrived without waiting (MSG_DONTWAIT) and returns true with the next
  // frame once it is whole; false, consuming nothing, while it is not (the
  // bytes stay buffered, the buffer growing with what arrives). Errors as
  // ReadFrame's.
  Result<bool> TryReadFrame(proto::FrameHeader* header, std::string* payload, std::vector<UniqueFd>* fds);
  // Since when bytes of a frame that is not whole yet have been waiting in
  // the buffer (TryReadFrame sets it); nullopt when none are.
  std::optional<std::chrono::steady_clock::time_point> PartialSince() const { return partial_since_; }

  // Takes the socket back (for handing the connection to another process).
  // Fails when bytes or descriptors are already buffered.
  Result<UniqueFd> TakeSocket();

 private:
  // Reads at least one more byte into the buffer (and any descriptors).
  // flags MSG_DONTWAIT: kTimeout when nothing has arrived.
  Status Fill(int flags = 0);

  // Closes the descriptors no frame can claim any more: those that arrived
  // with bytes wholly before the next unread frame (a frame's descriptors
  // ride with its first byte, so a batch that came with bytes [b, e) belongs
  // to a frame starting in [b, e)).
  void DropUnclaimedFds();

  struct ArrivedFd {
    UniqueFd fd;
    uint64_t batch_end;  // stream offset just past the bytes it arrived with
  };
  // The bytes received and not consumed yet. Unlike a std::string it never
  // zero-fills the room a read is offered: resizing a string by the read's
  // 256 KiB cost each side of a round trip ~2.4 us, measured on the fake
  // backend (a third of the sync round trip).
  class RecvBuffer {
   public:
    char* data() { return p_.get(); }
    const char* data() const { return p_.get(); }
    size_t size() const { return size_; }
    void clear() { size_ = 0; }
    // Drops the first n bytes (n <= size()).
    void EraseFront(size_t n);
    // Makes room for at least n bytes past size(), keeping what is there;
    // returns where they go.
    char* Reserve(size_t n);
    // n bytes were written at data() + size() (n <= the room reserved).
    void Grew(size_t n) { size_ += n; }

   private:
    std::unique_ptr<char[]> p_;
    size_t size_ = 0;
    size_t capacity_ = 0;
  };
  UniqueFd sock_;
  RecvBuffer buf_;
  size_t start_ = 0;        // first unconsumed byte of buf_
  uint64_t consumed_ = 0;   // stream offset of the next unread frame
  uint64_t received_ = 0;   // stream offset just past the last byte received
  std::deque<ArrivedFd> fds_;
  std::optional<std::chrono::steady_clock::time_point> partial_since_;
};

// Busy-waits up to `spin_us` microseconds for `fd` to become readable,
// without sleeping; true when it did. A reply that arrives within the spin
// costs no scheduler wakeup (tens of microseconds on a VM).
bool SpinUntilReadable(int fd, int spin_us);
// Waits until `fd` is readable, hung up or failed: spins up to `spin_us`
// (SpinUntilReadable), then sleeps in poll(POLLIN). A reader asleep in
// poll is woken by what arrives only; asleep in recvmsg, it is also woken
// for nothing when the peer reads what this side sent (the kernel tells the
// sender's socket it has room, a POLLOUT wake-up of every sleeper on it),
// and that wake-up is paid by the peer on its way to its reply.
Status WaitUntilReadable(int fd, int spin_us);
// A spin budget in microseconds from the environment variable `env`
// (clamped to [0, 1000]), else `fallback`.
int SpinMicrosFromEnv(const char* env, int fallback);
// The guest's wait for a reply: SMOLVM_SPIN_US (default 0: measured on the
// H200, a guest spinning on its socket slowed the worker's reply; a worker
// spinning 20 us for the next request took the round trip from 22 to 16 us).
inline int GuestSpinMicros() { return SpinMicrosFromEnv("SMOLVM_SPIN_US", 0); }
// A worker's wait for its guest's next request: SMOLVM_WORKER_SPIN_US (default 20).
inline int WorkerSpinMicros() { return SpinMicrosFromEnv("SMOLVM_WORKER_SPIN_US", 20); }

// Connects to the unix socket at `path`.
Result<UniqueFd> ConnectUnix(const std::string& path);
// Creates a listening unix socket at `path` (replacing a stale socket file)
// with the given mode.
Result<UniqueFd> ListenUnix(const std::string& path, unsigned mode);
// A connected pair (SOCK_STREAM, close-on-exec).
Status SocketPair(UniqueFd* a, UniqueFd* b);

}  // namespace smolvm
