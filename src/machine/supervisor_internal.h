// The supervisor's object (supervisor.h is its entry point): one Supervisor
// per supervisor process. Its start, event loop and end are in supervisor.cc;
// the fork of a clone (the host side of guest/forkpoint_wire.h, and the CUDA
// daemon's half for --cuda machines) is in supervisor_fork.cc.
// Internal to src/machine; used by the supervisor process's one thread.
#pragma once

#include <sys/types.h>
#include <time.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"
#include "machine/cgroups.h"
#include "machine/cuda_link.h"
#include "machine/disk_layers.h"
#include "machine/paths.h"
#include "machine/store.h"
#include "machine/supervisor_conn.h"

namespace smolvm::machine {

class Supervisor {
 public:
  using Clock = std::chrono::steady_clock;
  // A FORK request on the control socket, served once the golden waits at its forkpoint.
  struct PendingFork {
    Conn* ctl;
    std::string clone;
    std::string share;
    Clock::time_point deadline;
  };

  Supervisor(std::string home, std::string name, int64_t run_id)
      : home_(std::move(home)), name_(std::move(name)), run_id_(run_id), paths_(home_, name_) {}

  int Run(int ready_fd);

 private:
  static constexpr auto kCloneStepTimeout = std::chrono::seconds(10);
  // A GPU fork waits for the daemon to build the clone (a worker may have to
  // start first) before the golden forks.
  static constexpr auto kCudaForkTimeout = std::chrono::seconds(60);
  static constexpr size_t kMaxGuestConns = 32;

  static int64_t NowSeconds() { return static_cast<int64_t>(::time(nullptr)); }
  static Status MkDirOwned(const std::string& path, mode_t mode, int64_t uid);

  // supervisor.cc: start, the event loop, the end.
  Status Start();
  void Loop();
  void Finish(int status);
  void Accept(int listen_fd, Conn::Kind kind);
  void OnLine(Conn& c, const std::string& line);
  // supervisor_fork.cc: forks asked for on the control socket, one at a time.
  void ServeForks();
  Status DoFork(const PendingFork& req, int* index, pid_t* init_pid);
  void CloneEnded(Conn& c);
  Status Update(const std::string& name, const std::function<Status(MachineRecord&)>& fn);
  void Log(const std::string& msg);
  void ReleaseHostResources();

  std::string home_, name_;
  int64_t run_id_;
  MachinePaths paths_;
  std::unique_ptr<Store> store_;
  MachineRecord rec_;
  CgroupLayout layout_;
  std::optional<MachineCgroup> cgroup_;
  std::optional<CudaDaemon> cuda_;  // --cuda: the host's daemon
  UniqueFd host_mnt_;               // the host's mount namespace (ours is private)
  bool pack_held_ = false;          // a pack_users row of ours exists
  std::unique_ptr<DiskLayers> layers_;
  std::vector<UniqueFd> retired_;   // the golden's replaced /tmp, /workspace (closed when idle)
  UniqueFd cuda_endpoint_;          // holds this machine's endpoint in the daemon
  UniqueFd ctl_listen_, fp_listen_, report_, signals_;
  pid_t init_pid_ = 0;
  std::list<Conn> conns_;
  Conn* golden_ = nullptr;
  pid_t golden_pid_ = 0;
  std::deque<PendingFork> pending_;
  int next_index_ = 0;
  bool stopping_ = false;
};

}  // namespace smolvm::machine
