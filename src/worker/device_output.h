// DeviceOutput: what the worker process prints on its stdout and stderr —
// the driver's device printf text (stdout) and device assert messages
// (stderr) at its flush points, and whatever NVIDIA's libraries print —
// kept for the guest, whose program would have printed it natively.
//
// Capture() points fds 1 and 2 (and the stdio streams on them, unbuffered)
// at two pipes and starts a thread that drains them into memory, so a
// driver writing a large flush never blocks on a full pipe. The worker's
// own diagnostics go on to the original stderr (base/diagnostics.h).
//
// The serve loop calls Take() before it writes a reply: everything the
// process wrote so far, so text the driver printed during a synchronizing
// call reaches the guest before that call returns (worker.cc sends it as
// DeviceOutput frames). At most kMaxPending bytes wait; beyond, text is
// dropped (as a full device printf FIFO drops it) and Take() says so.
//
// Threads: the drain thread and the serve loop; Take() may be called from
// any thread. One per process (it owns fds 1 and 2).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"

namespace smolvm {

class DeviceOutput {
 public:
  static constexpr size_t kMaxPending = 16u << 20;

  static Result<std::unique_ptr<DeviceOutput>> Capture();
  ~DeviceOutput();
  DeviceOutput(const DeviceOutput&) = delete;
  DeviceOutput& operator=(const DeviceOutput&) = delete;

  // Text written on fd 1 or 2, in the order it was read.
  struct Piece {
    int fd = 1;
    std::string text;
  };
  std::vector<Piece> Take();

 private:
  DeviceOutput() = default;
  // Reads what fd `which` (0: stdout's pipe, 1: stderr's) holds now.
  // REQUIRES mu_.
  void DrainLocked(int which);
  void Loop();

  UniqueFd read_[2];
  UniqueFd stop_;  // eventfd: the destructor wakes the thread
  std::mutex mu_;
  std::vector<Piece> pending_;
  size_t pending_bytes_ = 0;
  uint64_t dropped_ = 0;
  std::thread thread_;
};

}  // namespace smolvm
