// CloneDriver: what serve needs of the machine layer, as a narrow interface
// so that pools, leases, expiry, refill and restart are tested over a fake
// (fake_clone_driver.h) and run over the machines (machine_clone_driver.h).
//
//   StartGolden  make and start a forkable golden machine for a pool
//   ForkParked   fork clones that wait, their CUDA sessions attached, until
//                their first payload (all or none); kNoRoom (errors.h) when
//                the device has no memory for them all (fewer may fit)
//   OpenLink     a clone's message channel (mirrors machine/lease_link.h)
//   Remove       stop and remove a machine (OK when it is already gone)
//   List         the machines of serve's prefix that exist, live or ended
//   FreeGpuMib   the device's free memory for admission (-1: unknown)
//   Logs, Exec   a machine's log; a command run inside it
//
// Thread safety: every method may be called from any thread concurrently;
// a CloneLink is used by one thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "serve/model.h"

namespace smolvm::serve {

struct CloneEvent {
  enum Kind { kReply, kComplete, kExit, kFault } kind = kReply;
  std::string json;      // kReply/kComplete: the clone's JSON; kFault: {"error": ...}
  int wait_status = -1;  // kExit: waitpid's status; -1 unknown
  uint64_t seq = 0;      // per clone, stable across links (Ack, de-duplication)
  uint64_t payload = 0;  // kReply/kComplete: the payload number answered (1 = first)
};

class CloneLink {
 public:
  virtual ~CloneLink() = default;
  // A JSON object of at most 1 MiB; the first releases a parked clone.
  virtual Status Send(const std::string& payload_json) = 0;
  // The clone's next_payload() then returns None (no more payloads).
  virtual Status End() = 0;
  // The next event, waiting until deadline; nullopt on timeout;
  // kUnavailable once the link is closed.
  virtual Result<std::optional<CloneEvent>> Next(std::chrono::steady_clock::time_point deadline) = 0;
  // Events up to seq are processed (a later link does not see them again).
  virtual Status Ack(uint64_t seq) = 0;
  // Readable when Next has something.
  virtual int fd() const = 0;
};

struct GoldenRequest {
  GoldenSpec spec;
  double cpus = 0;
  int64_t mem_mib = 0, gpu_mem_mib = 0;
};

struct MachineState {
  std::string name;
  bool live = false;   // its program runs (or waits parked)
  int exit_code = -1;  // once ended
  std::string detail;
  int64_t uid_base = 0;
};

struct ExecResult {
  int exit_code = -1;
  std::string out, err;
  bool timed_out = false;
};

class CloneDriver {
 public:
  virtual ~CloneDriver() = default;
  virtual Status StartGolden(const std::string& name, const GoldenRequest& request) = 0;
  virtual Status ForkParked(const std::string& golden, const std::vector<std::string>& clones,
                            const std::string& share, std::chrono::milliseconds timeout) = 0;
  virtual Result<std::unique_ptr<CloneLink>> OpenLink(const std::string& clone) = 0;
  virtual Status Remove(const std::string& machine) = 0;
  virtual Result<std::vector<MachineState>> List() = 0;
  virtual int64_t FreeGpuMib() = 0;
  // The last max_bytes of a machine's log (its program's stdout and stderr).
  virtual Result<std::string> Logs(const std::string& machine, size_t max_bytes) = 0;
  // Runs cmd inside a running machine, its output captured (at most
  // max_bytes each), killed after timeout.
  virtual Result<ExecResult> Exec(const std::string& machine, const std::vector<std::string>& cmd,
                                  std::chrono::milliseconds timeout, size_t max_bytes) = 0;
};

}  // namespace smolvm::serve
