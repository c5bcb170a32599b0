// FakeCloneDriver: machines as records in memory, for serve's unit tests and
// `smolvm serve --driver fake`. A golden's first command word picks what its
// clones do once leased (their "program"):
//   fake:echo    completes the first payload with {"echo": payload, "machine": name}, then exits 0
//   fake:reply   replies {"echo": payload} to each payload; once the lease is
//                ended from the host (End) it completes {"replies": n} and exits 0
//   fake:crash   exits with status 3 at the first payload, without completing
//   fake:hang    takes payloads and never answers
// Any other command behaves as fake:echo.
//
// Honest where serve relies on the machine layer: links replay unacked
// events to a new reader, removing a machine ends it, names are unique, a
// fork is all or none (SetDevice: and fits or is refused). Tests steer it:
// FailForks, Kill, SetFreeGpuMib, SetDevice, SetForkDelay, SetRemoveDelay,
// and count calls (forks, removes).
//
// SetForkDelay makes a fork take that long and, as the machine layer's
// golden supervisor (one thread, which runs the fork and relays every lease
// link of its clones), keeps the golden busy meanwhile: a link to one of its
// clones opens only once the fork ended, and a parked clone's first payload
// is taken at once but releases the clone only then.
//
// Thread safety: all methods from any thread. Links must not outlive it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "serve/clone_driver.h"

namespace smolvm::serve {

class FakeCloneDriver final : public CloneDriver {
 public:
  FakeCloneDriver();
  ~FakeCloneDriver() override;

  Status StartGolden(const std::string& name, const GoldenRequest& request) override;
  Status ForkParked(const std::string& golden, const std::vector<std::string>& clones, const std::string& share,
                    std::chrono::milliseconds timeout) override;
  Result<std::unique_ptr<CloneLink>> OpenLink(const std::string& clone) override;
  Status Remove(const std::string& machine) override;
  Result<std::vector<MachineState>> List() override;
  int64_t FreeGpuMib() override;
  // "fake log of NAME\n"; Exec answers {0, "NAME: " + cmd joined by ' ' + "\n"}.
  Result<std::string> Logs(const std::string& machine, size_t max_bytes) override;
  Result<ExecResult> Exec(const std::string& machine, const std::vector<std::string>& cmd,
                          std::chrono::milliseconds timeout, size_t max_bytes) override;

  // The next n forks fail with `message` (kUnavailable, as the daemon's admission).
  void FailForks(int n, const std::string& message);
  // Ends a machine as if its program died (wait status `wait_status`).
  void Kill(const std::string& machine, int wait_status);
  void SetFreeGpuMib(int64_t mib);
  // Each later fork takes `d` (its golden busy meanwhile: see above); each
  // later removal takes `d` (the caller's thread only, as `machine rm`).
  void SetForkDelay(std::chrono::milliseconds d);
  void SetRemoveDelay(std::chrono::milliseconds d);
  // A device of device_mib on which each live clone holds clone_mib: a fork
  // whose clones do not all fit is refused with kNoRoom, worded as the CUDA
  // daemon's admission ("fork needs X MiB, Y MiB free"). 0: no such bound.
  void SetDevice(int64_t device_mib, int64_t clone_mib);
  int refused_forks() const { return refused_forks_.load(); }  // forks SetDevice's bound refused
  // The next List() runs `hook` once after it took its snapshot, before it
  // returns (outside the driver's lock): what happens there is what a real
  // List misses while it reads (a refill finishing, say).
  void AfterNextList(std::function<void()> hook);
  // The next StartGolden runs `hook` between making the machine (listed, not
  // live yet) and starting it, as the machine layer's create-then-start does.
  void DuringNextStart(std::function<void()> hook);
  int forks() const { return forks_.load(); }          // ForkParked calls that made clones
  int forked_clones() const { return forked_clones_.load(); }
  int removes() const { return removes_.load(); }
  // Machines that exist (live or ended), goldens included.
  size_t machines() const;
  // Whether a clone has been released (got its first payload).
  bool Released(const std::string& clone) const;
  // When it was released (its program got the first payload), also once it
  // was removed; nullopt before.
  std::optional<std::chrono::steady_clock::time_point> ReleasedAt(const std::string& clone) const;

 private:
  struct Link;
  struct Machine {
    std::string name, golden, behaviour;
    bool is_golden = false, live = true, released = false, ended_by_host = false;
    int exit_code = -1;
    uint64_t next_seq = 1, payloads = 0;
    std::vector<CloneEvent> unacked;
    std::vector<std::string> held;  // payloads sent while its golden was busy
    Link* reader = nullptr;
    int64_t uid_base = 0;
  };
  Status ForkLocked(const std::string& golden, const std::vector<std::string>& clones);  // mu_ held
  void Emit(Machine& m, CloneEvent e);          // mu_ held
  void Exit(Machine& m, int wait_status);       // mu_ held
  void OnPayload(Machine& m, const std::string& payload);  // mu_ held

  mutable std::mutex mu_;
  std::condition_variable idle_;  // a golden's fork ended
  std::map<std::string, Machine> machines_;
  std::map<std::string, int> busy_;  // golden -> forks in progress
  std::map<std::string, std::chrono::steady_clock::time_point> released_at_;  // kept past a removal
  std::chrono::milliseconds fork_delay_{0}, remove_delay_{0};
  int fail_forks_ = 0;
  std::string fail_message_;
  int64_t free_gpu_mib_ = -1;
  int64_t device_mib_ = 0, clone_mib_ = 0;
  int64_t next_uid_base_ = 1000000;
  std::function<void()> after_list_, during_start_;
  std::atomic<int> forks_{0}, forked_clones_{0}, removes_{0}, refused_forks_{0};
};

}  // namespace smolvm::serve
