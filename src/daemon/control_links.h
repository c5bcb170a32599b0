// The daemon's reads of its worker control links and admin connections
// (issue 15): the poll loop takes a frame from one only when the frame is
// whole (UnixChannel::TryReadFrame), so a worker a guest has compromised, or
// an admin client, that stops mid-frame holds up nothing but its own link.
// A link whose frame stays incomplete past kLinkFrameDeadline is given up:
// the worker is killed (its session ends), the admin connection closed.
// The few places that must read a worker's next frames before going on
// (the chunk descriptors after a manifest) wait at most until a deadline
// (LinkReader); writes to both kinds of link time out too
// (SetLinkSendTimeout), so a peer that stops reading cannot hold the loop.
//
// Daemon-side, on the loop thread.
#pragma once

#include <chrono>

#include "base/status.h"
#include "transport/unix_channel.h"

namespace smolvm {

// How long a frame may take to arrive whole once its first byte came, and
// the longest a write to a link may block.
inline constexpr std::chrono::milliseconds kLinkFrameDeadline{2000};

// Bounds a link's blocking writes to kLinkFrameDeadline (SO_SNDTIMEO).
Status SetLinkSendTimeout(int fd);

// A Channel over `link` whose ReadFrame waits for a whole frame only until
// `deadline`, then fails with kTimeout (what it read stays buffered in
// `link`). For ReceiveChunkFds and the like.
class LinkReader final : public Channel {
 public:
  LinkReader(UnixChannel& link, std::chrono::steady_clock::time_point deadline) : link_(link), deadline_(deadline) {}

  Status Write(std::string_view bytes, std::span<const int> fds = {}) override { return link_.Write(bytes, fds); }
  Status ReadFrame(proto::FrameHeader* header, std::string* payload, std::vector<UniqueFd>* fds) override;
  bool HasBufferedFrame() const override { return link_.HasBufferedFrame(); }
  int fd() const override { return link_.fd(); }

 private:
  UnixChannel& link_;
  std::chrono::steady_clock::time_point deadline_;
};

}  // namespace smolvm
