// The supervisor's object (supervisor.h is its entry point): one Supervisor
// per supervisor process. Its start, event loop and end are in supervisor.cc;
// a fork request for one or many clones (and the CUDA daemon's half for
// --cuda machines) in supervisor_fork.cc; the making of one clone (the host
// side of guest/forkpoint_wire.h) in supervisor_clone.cc; parked requests
// waiting for their clones to warm up and park in supervisor_park.cc.
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
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"
#include "machine/backend.h"
#include "machine/cgroups.h"
#include "machine/cuda_link.h"
#include "machine/disk_layers.h"
#include "machine/lease_relay.h"
#include "machine/owned_dir.h"
#include "machine/paths.h"
#include "machine/store.h"
#include "machine/supervisor_conn.h"

namespace smolvm::machine {

class Supervisor {
 public:
  using Clock = std::chrono::steady_clock;
  // A FORK or FORKN request on the control socket, served once the golden
  // waits at its forkpoint. Its clones' store rows exist (state forking).
  struct PendingFork {
    Conn* ctl;
    std::vector<std::string> clones;
    std::string share;
    Clock::time_point deadline;
    std::chrono::milliseconds timeout{0};  // the request's timeout_ms (park=1: also for the clones to park)
    bool batch = false;  // FORKN: "CLONE ..." lines then "OK <n>"; FORK: "OK <index> <pid>"
    bool park = false;   // FORKN park=1: the clones' programs wait for their first lease payload
  };
  // A parked request committed, answered once each clone parked
  // (supervisor_park.cc).
  struct ParkingFork {
    Conn* ctl;
    std::vector<std::string> answer;  // its answer lines, sent once every clone parked
    std::vector<std::string> clones;
    std::set<std::string> waiting;    // not parked (nor released) yet
    Clock::time_point t0, deadline;   // committed; t0 + the request's timeout
    Status failure = Status::Ok();    // set: answered with it, its clones killed
  };
  // A clone's detail in the store while parked: warming up until its
  // program parks (PARKED), then parked until its first payload.
  static constexpr const char* kDetailWarming = "warming up";
  static constexpr const char* kDetailParked = "parked";
  // One clone of a request, while it is made (supervisor_clone.cc).
  struct CloneWork {
    CloneWork(const std::string& home, const CgroupLayout& layout, const std::string& clone)
        : name(clone), paths(home, clone), cg(layout, clone) {}
    std::string name;
    MachineRecord rec;
    MachinePaths paths;
    MachineCgroup cg;
    WritableMounts disk;       // its /tmp and /workspace, mounted into it when it comes up
    UniqueFd log, endpoint;    // its log; --cuda: holds its CUDA endpoint in the daemon
    UniqueFd lease_listen;     // its lease.sock (lease_relay.h), mounted into it with /tmp
    std::optional<Conn> conn;  // C1's connection, then its init's (forkpoint_wire.h)
    int index = -1;
    pid_t init = 0;            // host pid of its init, once up
    double ms = 0;             // the request met the golden at its forkpoint -> this clone up (serving)
    bool order_spent = false;  // the golden took its order (forked for it, or failed to)
    pid_t sender = 0;          // the credentials of C1's connection's last bytes (its init's for INIT)
    // When each step of its making ended, in ms since ForkRun::t0 (0: not
    // reached), for the per-clone log line: the golden's FORK order sent, C1
    // connected, moved into the clone's cgroup, namespaces unshared, mounts
    // injected, its init up; for a GPU fork the daemon's steps on the same
    // clock: built, its order released to the golden, its child's Hello.
    struct Steps {
      double order = 0, c1 = 0, cgroup = 0, unshared = 0, mounts = 0, init = 0;
      double built = 0, released = 0, hello = 0;
    } steps;
  };
  // What a request's forks share: the daemon's one GPU fork of all its clones.
  struct ForkRun {
    std::string share;
    Clock::time_point t0;      // the request met the golden at its forkpoint
    double daemon_asked_ms = 0;  // t0 -> the daemon's request sent
    UniqueFd cuda_fork;        // --cuda: the daemon's reply arrives here
    bool gpu_fork = false;     // the golden's CUDA session is forked too
    bool released = false;     // the golden got its GPU orders (the daemon gives them all at once)
    bool golden_gone = false;  // the golden's connection failed: it left its forkpoint
    double Ms() const { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }
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
  // Clones in one FORKN request.
  static constexpr size_t kMaxForkCount = 1024;

  static int64_t NowSeconds() { return static_cast<int64_t>(::time(nullptr)); }

  // supervisor.cc: start, the event loop, the end.
  Status Start();
  void Loop();
  void Finish(int status);
  void Accept(int listen_fd, Conn::Kind kind);
  void OnLine(Conn& c, const std::string& line);
  // RELEASE on the control socket: the golden's forkpoint returns; the answer line.
  std::string ReleaseGolden();
  // supervisor_fork.cc: fork requests on the control socket, one at a time.
  void ServeForks();
  // Makes every clone of req, the golden's GPU session forked for all of them
  // in one daemon request; on failure spends the golden's orders left and
  // returns with *works holding what must be undone.
  Status DoForks(const PendingFork& req, std::vector<CloneWork>* works, ForkRun* run);
  // The clones made: running in the store, their init connections watched,
  // their lease links served; unless parked, their programs go on (GO).
  Status Commit(std::vector<CloneWork>& works, bool park);
  // A made clone's log line: index, name, init pid, ms and its steps.
  static std::string CloneLine(const CloneWork& w);
  void Answer(const PendingFork& req, const Status& s, const std::vector<CloneWork>& works);
  // A successful request's answer lines ("CLONE ..." and "OK <n>", or "OK <index> <pid>").
  static std::vector<std::string> AnswerLines(const PendingFork& req, const std::vector<CloneWork>& works);
  // supervisor_park.cc: a committed park=1 request waits for its clones to
  // park; ServeParked answers the ones done (parked, failed, timed out,
  // cancelled) and is called after every event; ParkingTimeoutMs bounds the
  // loop's poll (-1: none waiting); FailParking answers all with `why`.
  void ParkRequest(const PendingFork& req, std::vector<std::string> answer, const std::vector<CloneWork>& works);
  void CloneParked(const std::string& clone, bool released);
  void CloneEndedWhileParking(const std::string& clone);
  void ServeParked();
  int ParkingTimeoutMs() const;
  void FailParking(const Status& why);
  // A request that never ran (timed out, cancelled, the golden stopped):
  // its answer, and its clones' rows removed.
  void DropPending(const PendingFork& req, const Status& why);
  void DeleteForkingRows(const std::vector<std::string>& names);
  // supervisor_clone.cc: one clone.
  Status PrepareClone(CloneWork& w);
  // A clone is made in two halves, so that the golden forks the next
  // clones' C1s while the earlier ones' C1s unshare, get their mounts and
  // fork their inits (DoForks interleaves them): Start sends the golden its
  // order, takes C1's connection and moves C1 into the clone's cgroup;
  // Advance sees it unshared, injects its mounts and sees its init up, as
  // far as C1's lines have come (no deadline: never waits) or until done
  // (w.init set) by the deadline.
  Status StartClone(CloneWork& w, ForkRun& run, Clock::time_point c1_deadline);
  Status AdvanceClone(CloneWork& w, ForkRun& run, std::optional<Clock::time_point> deadline);
  // The golden holds a GPU order for a clone that will not be made: it forks
  // a child that is turned away, so no order is left for a later request.
  Status SpendOrder(const std::string& clone, ForkRun& run);
  void UndoClone(CloneWork& w);
  void CloneEnded(Conn& c);
  // A LEASE request on ctl.sock: the connection becomes the clone's reader.
  void AttachLeaseReader(Conn& c, const std::string& clone);
  // A parked clone's first payload came: its init gets GO.
  void ReleaseParked(const std::string& clone);
  // The released clones' records (their parked detail cleared), at once.
  void FlushReleased();
  Status Update(const std::string& name, const std::function<Status(MachineRecord&)>& fn);
  void Log(const std::string& msg);
  // --cuda: tells the daemon the golden waits at (or left) the forkpoint
  // (AnnounceCudaForkpoint, supervisor_fork.cc); a golden without a CUDA
  // session is not an error.
  void AnnounceForkpoint(bool at);
  void ReleaseHostResources();
  // The backend's Release once its launched process ended (or never came).
  void ReleaseBackend();

  std::string home_, name_;
  int64_t run_id_;
  MachinePaths paths_;
  std::unique_ptr<Store> store_;
  MachineRecord rec_;
  CgroupLayout layout_;
  std::optional<MachineCgroup> cgroup_;
  std::unique_ptr<IsolationBackend> backend_;  // what runs the machine (rec_.spec.isolation)
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
  std::list<ParkingFork> parking_;
  std::unique_ptr<LeaseRelay> leases_;  // the clones' lease links
  std::vector<std::string> released_;   // clones released since the last FlushReleased
  int next_index_ = 0;
  bool stopping_ = false;
};

}  // namespace smolvm::machine
