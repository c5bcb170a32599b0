// HostMirrors: the worker's copies of a guest's pinned memory, in a session
// that passes no descriptors (docs/shim.md, "Without descriptors").
//
// A guest that passes no descriptors (Hello flag kHelloNoDescriptors: a
// gVisor machine) keeps its pinned memory as its own pages; the worker maps
// a copy of each segment at the same address (HostRegister without a memfd:
// a mirror), so its copies to and from pinned memory run as in any session.
// The bytes cross in frames:
//  * guest -> mirror, before a host-to-device copy from pinned memory: the
//    guest's HostWrite, applied at dispatch; or, while host functions the
//    guest queued have not all finished (one of them may still write the
//    memory, in stream order), HostFetch: when its stream reaches it, the
//    worker asks the guest (a HostFuncCall of kind 2) and the guest answers
//    with HostFetchData, applied by whichever thread reads it.
//  * mirror -> guest: a device-to-host copy into a mirror is a landing; its
//    bytes reach the guest in HostLand frames written ahead of the next reply
//    once the copy has finished (a synchronization, an event query, any SYNC
//    op), or ahead of the HostFuncCall of a host function queued after it on
//    the same stream. So an async copy into pinned memory lands by the next
//    synchronization, event query or callback.
// Until a landing is sent, the mirror's bytes under it are newer than the
// guest's: guest bytes written into the mirror skip them.
//
// Threads: the serve loop calls everything; host function callbacks (the
// driver's threads) call TakeStream and WriteGuestBytes, which touch no
// backend (CUDA forbids API calls there). One lock.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/gpu_backend.h"
#include "base/status.h"

namespace smolvm {

class HostMirrors {
 public:
  // Landings not sent yet, at most: past it the guest has queued this many
  // copies into pinned memory without ever waiting for a reply.
  static constexpr size_t kMaxPending = 65536;
  // Bytes of one HostLand frame, at most (under the frame limit).
  static constexpr uint64_t kMaxFrameBytes = 32ull << 20;

  explicit HostMirrors(GpuBackend* backend) : backend_(backend) {}
  // Destroys its events: on the serve loop, while the backend lives.
  ~HostMirrors();
  HostMirrors(const HostMirrors&) = delete;
  HostMirrors& operator=(const HostMirrors&) = delete;

  // --- segments (serve loop) ---
  // [addr, +bytes) is mapped and registered as a mirror.
  void AddSegment(uint64_t addr, uint64_t bytes);
  // The mirror at addr goes (the guest freed it): its landings are dropped.
  void RemoveSegment(uint64_t addr);
  // Whether [addr, +bytes) lies inside one mirror (any thread).
  bool Contains(uint64_t addr, uint64_t bytes) const;
  // Guest bytes for [addr, +data.size()) (HostWrite, HostFetchData): into
  // the mirror, but for bytes a landing still fills. kInvalidArgument
  // (CUDA_ERROR_INVALID_VALUE) unless the range lies inside one mirror.
  Status WriteGuestBytes(uint64_t addr, std::string_view data);

  // --- landings ---
  // Serve loop, right after a copy into mirror bytes [addr, +bytes) was
  // queued on backend stream `stream` (the guest's stream `wire_stream`):
  // records an event behind it. CUDA_ERROR_OUT_OF_MEMORY past kMaxPending.
  Status AddLanding(uint64_t addr, uint64_t bytes, uint64_t stream, uint64_t wire_stream);
  // Writes one HostLand frame (the channel's Write); called with no lock of
  // this class held, once per frame, in order.
  using FrameSink = std::function<Status(const std::string& frame)>;
  // Serve loop, before a reply: HostLand frames for every landing whose
  // event has completed (per stream in order: the first one unfinished
  // holds back the ones after it). The first failed write ends it.
  Status TakeFinished(const FrameSink& write);
  // A host function callback on guest stream `wire_stream`, before its
  // HostFuncCall: frames for the landings on that stream numbered below
  // `before` (finished: the device reached the function behind them).
  Status TakeStream(uint64_t wire_stream, uint64_t before, const FrameSink& write);
  // The number the next landing gets (a host function queued now runs
  // after every landing numbered below it on its stream).
  uint64_t next() const;
  size_t pending() const;

 private:
  struct Landing {
    uint64_t addr = 0, bytes = 0;
    uint64_t stream = 0, wire_stream = 0;
    uint64_t event = 0;
  };
  // The frames of `taken` (their mirror bytes as they are now), one at a
  // time (at most kMaxFrameBytes of data each) into `write`.
  static Status Send(const std::vector<Landing>& taken, const FrameSink& write);
  bool ContainsLocked(uint64_t addr, uint64_t bytes) const;

  GpuBackend* backend_;
  mutable std::mutex mu_;
  std::map<uint64_t, uint64_t> segments_;  // base -> bytes
  std::map<uint64_t, Landing> pending_;    // by number, ascending
  std::vector<uint64_t> free_events_;      // recorded before, reusable
  std::vector<uint64_t> all_events_;       // every event made, destroyed at the end
  uint64_t next_ = 1;
};

}  // namespace smolvm
