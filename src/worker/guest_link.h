// GuestLink: the worker's connection to its guest, shared by the serve loop
// and the host functions the guest enqueued (cudaLaunchHostFunc,
// cudaStreamAddCallback, graph host nodes).
//
// A host function runs in the guest process. When the device reaches one,
// the backend calls Call() on some host thread (the driver's callback thread
// on a GPU, the worker's own thread on the fake): it sends the guest an
// unsolicited HostFuncCall frame and waits for the guest's HostFuncDone, so
// the work queued behind the function waits for it, in stream order.
//
// The HostFuncDone may arrive while the serve loop is blocked in the driver
// (a cudaStreamSynchronize of the very stream that waits for the function),
// so whoever waits for a call reads the guest's frames itself when the serve
// loop is not reading: frames other than HostFuncDone are set aside, in
// order, for the serve loop, which takes them before reading more. Reading
// is serialized by one lock and writing by another, so the serve loop's
// replies and the callbacks' frames never interleave inside a frame. No
// descriptor travels on this path.
//
// Threads: the serve loop (ReadFrame, Write, Complete) and any number of
// callback threads (Call). Owns the channel; outlives the backend's last
// callback (the worker destroys it after its context).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "transport/channel.h"

namespace smolvm {

// One host function as the guest enqueued it; the backend hands a pointer
// to it to HostCallTrampoline. `once`: a stream launch, freed after it ran;
// otherwise a graph's node, which runs at every launch of the graph.
struct HostCall {
  class GuestLink* link = nullptr;
  uint64_t fn = 0, user = 0, stream = 0;
  uint32_t kind = 0;
  bool once = true;
  // The stream's error so far, passed to a cudaStreamCallback_t.
  std::atomic<int32_t>* status = nullptr;
  // A stream launch in a session without descriptors: the landings queued
  // on its stream before it (numbered below landings_before) reach the
  // guest ahead of its HostFuncCall (host_mirrors.h).
  class HostMirrors* mirrors = nullptr;
  uint64_t landings_before = 0;
};

// The backend's HostFn for every HostCall (the argument is a HostCall*).
void HostCallTrampoline(void* call);

class GuestLink final : public Channel {
 public:
  // Frames set aside for the serve loop while a call waits, at most this
  // many bytes: a guest queues at most a few MiB of ASYNC work ahead (its
  // flush threshold); past this the session is treated as hostile and ends.
  static constexpr size_t kMaxSetAsideBytes = 64u << 20;

  // Made with the worker, before any guest (a clone's build makes graph host
  // nodes that point at it); Attach gives it the guest's channel. Until then
  // a Call returns at once.
  GuestLink() = default;
  ~GuestLink() override { Close(); }
  void Attach(std::unique_ptr<Channel> inner) { inner_ = std::move(inner); }
  // HostFetchData frames a waiting call reads go into these mirrors at once
  // (the copy behind the fetch reads them when the call returns).
  void set_mirrors(class HostMirrors* mirrors) { mirrors_ = mirrors; }

  // Channel, for the serve loop. ReadFrame returns a set-aside frame first.
  Status Write(std::string_view bytes, std::span<const int> fds = {}) override;
  Status ReadFrame(proto::FrameHeader* header, std::string* payload, std::vector<UniqueFd>* fds) override;
  bool HasBufferedFrame() const override;
  int fd() const override { return inner_->fd(); }
  // False when the serve loop must poll again before ReadFrame: a waiting
  // call took the frame the loop's poll saw (ReadFrame would then block the
  // loop away from its control link).
  bool ReadyToRead();

  // Callback side: sends the call and waits for its HostFuncDone; returns
  // at once (without running it) once the guest is gone.
  void Call(const HostCall& call);
  // Serve loop: the guest's HostFuncDone for `call` (an unknown id is ignored).
  void Complete(uint64_t call);
  // The guest is gone: every waiting and later Call returns.
  void Close();

  // The once-calls alive (for the trampoline to free).
  HostCall* Keep(std::unique_ptr<HostCall> call);
  void Forget(HostCall* call);

 private:
  struct Frame {
    proto::FrameHeader header;
    std::string payload;
    std::vector<UniqueFd> fds;
  };
  // Reads one frame (REQUIRES read_mu_): HostFuncDone completes its call,
  // anything else is set aside. False when the channel failed.
  bool ReadAndRoute(int timeout_ms);

  std::unique_ptr<Channel> inner_;
  class HostMirrors* mirrors_ = nullptr;
  std::mutex write_mu_;
  std::mutex read_mu_;
  mutable std::mutex mu_;  // guards what follows
  std::condition_variable cv_;
  std::deque<Frame> set_aside_;
  size_t set_aside_bytes_ = 0;
  Status read_error_;  // a read by a waiting call failed: the serve loop's next ReadFrame returns it
  std::set<uint64_t> waiting_;  // calls sent and not done
  bool closed_ = false;
  uint64_t next_call_ = 1;
  std::atomic<int> callers_{0};  // calls waiting now
  std::map<HostCall*, std::unique_ptr<HostCall>> once_;
};

}  // namespace smolvm
