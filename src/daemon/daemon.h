// Daemon: accepts guest sessions on its socket and hands each to a worker
// process of its own (one CUDA context per session), keeps a pool of
// pre-started workers, supervises and reaps every worker, and answers
// operators on the admin socket (`<socket>.admin`, mode 0600).
//
// One class, its parts in one file each (docs/daemon.md draws them):
//   daemon.cc            the loop: sockets, poll, stop
//   pending_guests.cc    connections until their Hello is whole; admission caps
//   worker_pool.cc       starting, drawing and reaping workers
//   worker_link.cc       what workers send on their control links
//   session_registry.cc  the sessions, by id and by pid; their state and stats
//   admin_server.cc      the admin socket's requests
//   daemon_status.cc     the status (typed, daemon_status.h)
//   fork_engine.cc       fork jobs and their state machine (AdvanceForks)
//   fork_ahead.cc        the work ahead of forks (exports, preloads)
//   clone_tokens.cc      clone tokens; releasing built clones to the golden
//   daemon_machines.cc   machine endpoints, cgroups, --gpu-mem budgets
//
// The daemon never initialises CUDA itself: workers are started by fork+exec
// of this binary (`smolvm _cuda-worker`), with the shim directories removed
// from LD_LIBRARY_PATH. A worker's death ends only its session.
//
// Threading: one thread, a poll loop. Run() returns after SIGTERM/SIGINT
// (or RequestStop) once every worker has been stopped and reaped.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"
#include "daemon/accept_backoff.h"
#include "daemon/daemon_jail.h"
#include "daemon/daemon_status.h"
#include "daemon/descriptor_budget.h"
#include "daemon/guest_admission.h"
#include "daemon/idle_exit.h"
#include "daemon/log_throttle.h"
#include "daemon/machine_budget.h"
#include "daemon/module_cache_bound.h"
#include "worker/op_counts.h"
#include "worker/worker_uids.h"
#include "proto/enums.h"
#include "proto/messages.h"
#include "transport/unix_channel.h"

namespace smolvm {

// The most workers `--pool` / `--spares` may ask the daemon to start ahead:
// room for a golden and a clone per learner that fits an H200 (64 learners
// of a 4-bit 7B model peaked at 122.5 GiB).
inline constexpr int kMaxPoolWorkers = 128;

// Caps on what guests can make the daemon hold (docs/threat-model.md). The
// defaults fit a golden with kMaxPoolWorkers clones plus a full pool: on one
// socket 1 + 128 sessions; on the daemon 129 sessions + 128 pooled workers.
inline constexpr int kDefaultMaxConnsPerMachine = 16;   // Hellos not finished yet, per socket (per uid on the daemon's)
inline constexpr int kDefaultMaxConnsPerPid = 8;        // ... per host pid, on the daemon's own socket
inline constexpr int kDefaultMaxConns = 128;            // the same, over every socket
inline constexpr int kDefaultMaxSessionsPerMachine = kMaxPoolWorkers + 32;
inline constexpr int kDefaultMaxWorkers = 2 * kMaxPoolWorkers + 64;
inline constexpr int kDefaultForkBuildParallel = 8;  // `--fork-parallel`, SMOLVM_CUDA_FORK_PARALLEL
static_assert(kDefaultMaxSessionsPerMachine >= 1 + kMaxPoolWorkers, "a golden and 128 clones fit on one socket");
static_assert(kDefaultMaxWorkers >= 1 + kMaxPoolWorkers + kMaxPoolWorkers, "and beside them a full pool");
// Largest Hello payload the daemon reads (its token is 32 hex characters).
inline constexpr uint32_t kMaxHelloBytes = 1024;

struct DaemonOptions {
  std::string socket_path;
  std::string backend = "cuda";
  int pool_size = 1;              // workers started ahead of guests
  // Spares kept once the first pool_size are drawn (-1: pool_size). A bench
  // that wants N warm workers for one fork and no idle contexts after it
  // says --pool N --spares 0.
  int spares = -1;
  uint64_t arena_base = 0;
  uint64_t arena_bytes = 0;
  uint64_t host_base = 0;
  uint64_t host_bytes = 0;
  std::string self_exe = "/proc/self/exe";
  int hello_timeout_ms = 2000;    // a guest must finish its whole Hello within this
  int max_conns_per_machine = kDefaultMaxConnsPerMachine;
  int max_conns_per_pid = kDefaultMaxConnsPerPid;
  int max_conns = kDefaultMaxConns;
  int max_sessions_per_machine = kDefaultMaxSessionsPerMachine;
  int max_workers = kDefaultMaxWorkers;
  // Chunk descriptors held per tenant and over the daemon
  // (descriptor_budget.h); max_fds 0: RLIMIT_NOFILE (raised to its hard
  // limit at start) less room for sockets, links and pidfds.
  size_t max_fds_per_machine = kDefaultMaxFdsPerMachine;
  size_t max_fds = 0;
  uint64_t module_cache_bytes = 4ull << 30;  // module images kept on disk, over every tenant
  // The most clones rebuilding at once during a fork (each fork picks up to
  // this many from its clones' shape: fork_parallel.h). Not 1: a fork of N
  // learner clones would wait N x ~110 ms of serial rebuilds (H200, 7B).
  int fork_build_parallel = kDefaultForkBuildParallel;
  // false: every fork builds fork_build_parallel at once; true: each fork
  // picks from its clones' shape, at most that many (fork_parallel.h).
  bool fork_parallel_by_shape = true;
  bool quiet = false;
  // Stop after this many seconds with no session, machine endpoint, fork or
  // admin connection (idle_exit.h; docs/daemon.md "Lifetime"). 0: never, the
  // default of a daemon started by hand; the machine layer passes 60.
  int idle_exit_s = 0;
  // Workers' jail (worker_jail.h): the uid range they drop to, one uid per
  // tenant (base 0: they keep the daemon's uid; a daemon that is not root
  // keeps it too), and their seccomp mode (worker_seccomp.h; "": enforce on
  // the fake backend, log on cuda until the H200 allowlist is in).
  uint32_t worker_uid_base = kDefaultWorkerUidBase;
  uint32_t worker_uids = kDefaultWorkerUidCount;
  std::string worker_seccomp;
  std::string worker_seccomp_learn;  // learn mode: the file workers append to
  // The daemon's own limits (daemon_jail.h): capabilities (drop | keep) and
  // its seccomp mode ("": enforce on the fake backend, log on cuda).
  std::string daemon_caps = "drop";
  std::string daemon_seccomp;
  std::string daemon_seccomp_learn;
};

class Daemon {
 public:
  explicit Daemon(DaemonOptions options);
  ~Daemon();

  // Binds the sockets. Fails when another daemon listens on the path.
  Status Listen();
  // Serves until a stop signal; stops and reaps every worker before returning.
  Status Run();

 private:
  struct WorkerProc {
    pid_t pid = -1;
    UniqueFd pidfd;
    std::unique_ptr<UnixChannel> control;
    bool ready = false;
    uint64_t session_id = 0;  // 0 while pooled
    // Pooled: the golden whose shared chunks it holds imported ahead (0: none).
    uint64_t primed = 0;
    uint64_t primed_generation = 0;
    bool primed_done = false;  // its PreloadDone for primed_generation arrived
    // Set once it serves a machine (daemon_machines.cc): its cgroups were
    // joined and its budget slot is reclaimed when it exits.
    std::string machine;
    std::shared_ptr<MachineBudget> budget;
    int budget_slot = -1;
    // What its context costs on the device, measured when it became ready;
    // charged to a machine's --gpu-mem with the worker.
    uint64_t context_bytes = 0;
    uint32_t uid = 0;  // its tenant's (WorkerUids), once drawn; 0: the daemon's
    // It entered its jail as `uid` while pooled (a preload, fork_ahead.cc):
    // it holds a reference on uid and serves that uid's tenant only.
    bool jailed = false;
  };
  // A golden's chunks, exported when it reached its forkpoint (ForkAhead):
  // what pooled workers preload, and the descriptors a fork in the same
  // generation reuses (fork_ahead.cc).
  struct Ahead {
    uint64_t generation = 0;
    std::vector<UniqueFd> fds;         // every chunk, in manifest order
    std::string preload;               // the candidates, an encoded ManifestChunkList
    std::vector<size_t> preload_fds;   // their indexes in fds
    std::string setup;                 // ForkAhead.setup: for workers in the golden's jail only
    DescriptorBudget::Charge charge;   // fds, charged to the golden's tenant
  };
  struct Session {
    uint64_t id = 0;
    pid_t worker_pid = -1;
    uint32_t guest_pid = 0;
    uint32_t host_pid = 0;   // SO_PEERCRED of its connection (0 for clones not attached yet)
    uint32_t host_uid = 0;   // SO_PEERCRED; a clone's: its golden's until it attaches
    std::string machine;     // "" on the daemon's own socket
    proto::SessionRole role = proto::SessionRole::kStandalone;
    std::string state = "running";
    uint64_t shared_chunks = 0, shared_bytes = 0, private_chunks = 0, private_bytes = 0, allocations = 0;
    uint64_t module_bytes = 0, limit_bytes = 0, workspace_bytes = 0;  // device_charges.h
    uint64_t private_live_bytes = ~0ull;  // in use in its private chunks, at its forkpoint (else ~0)
    uint64_t created_contexts = 0;        // cuCtxCreate's, live (worker/context_table.h)
  };
  // A connection whose Hello has not fully arrived (pending_guests.cc): read
  // by the poll loop as bytes come, never blocking it.
  struct Pending {
    UniqueFd fd;                  // non-blocking until handed on
    uint64_t endpoint = 0;        // 0: the daemon's own socket
    uint32_t host_pid = 0;        // SO_PEERCRED
    uint32_t host_uid = 0;        // SO_PEERCRED
    std::chrono::steady_clock::time_point deadline;  // for the whole Hello
    std::string buf;              // the Hello so far: grows with bytes received
    Status refusal;               // over a cap: read its Hello only to say so
  };
  struct PendingGuest {
    std::unique_ptr<UnixChannel> channel;
    uint32_t hello_seq = 0;
    proto::SessionRole role = proto::SessionRole::kStandalone;
    uint32_t guest_pid = 0;
    uint64_t flags = 0;
    uint32_t host_pid = 0;
    uint32_t host_uid = 0;
    uint64_t endpoint = 0;  // 0: the daemon's own socket
  };
  // A machine's guest socket (AdminMachineAttach). Sessions accepted on it
  // belong to the machine; its workers join the machine's cgroups and budget.
  struct Endpoint {
    uint64_t id = 0;
    std::string machine;
    std::vector<std::string> cgroups;
    std::shared_ptr<MachineBudget> budget;  // null: no --gpu-mem
    UniqueFd listen;
    uint64_t admin_client = 0;  // closing this connection removes the endpoint
    // Started --forkable: its goldens' chunks are exported ahead of forks
    // (a machine that cannot be forked holds no descriptors for it).
    bool forkable = false;
    // Its guests pass no descriptors (a gVisor machine): every session gets
    // kHelloNoDescriptors, and SO_PEERCRED names the sandbox, not the guest.
    bool no_descriptors = false;
  };
  // One fork request in flight (at most one per golden session).
  struct ForkJob {
    uint64_t id = 0;
    uint32_t pid = 0;     // the golden's pid while its session is not known yet
    uint64_t admin_client = 0;
    uint32_t admin_seq = 0;
    uint16_t admin_op = 0;  // the request's op, for its reply
    uint64_t golden = 0;  // session id (0 until the pid's session appears)
    uint32_t count = 0;
    proto::ShareMode share = proto::ShareMode::kOff;
    // Machine forks (AdminMachineFork): each clone belongs to its machine
    // (Clone::machine) and attaches on that machine's endpoint only.
    bool machine_fork = false;
    enum Phase { kWaitForkpoint, kPreparing, kBuilding } phase = kWaitForkpoint;
    // t0: the request met the golden at its forkpoint (the request's arrival
    // unless it had to wait for the golden to get there: waited_ms).
    std::chrono::steady_clock::time_point t0, deadline;
    double waited_ms = 0;
    // ms from t0 to now: the clock of every step the fork's lines report.
    double MsSinceT0() const {
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
    std::string manifest;  // encoded ForkManifestBody, passed on as the golden sent it
    int parallel = 1;      // its clone builds at once (fork_parallel.h), set with the manifest
    uint64_t private_bytes = 0;  // copied into each clone (the manifest's), for admission
    uint64_t free_bytes = 0;     // the device's free memory the manifest reported, for messages
    std::vector<UniqueFd> fds;
    DescriptorBudget::Charge fds_charge;  // fds, charged to the golden's tenant
    struct Clone {
      pid_t worker = -1;
      uint64_t session = 0;
      int32_t index = -1;
      std::string token;  // 32 hex of 128 random bits, set when the job is made; single use
      std::string machine;  // a machine fork's clone machine ("" : the daemon's socket)
      uint32_t host_pid = 0;  // SO_PEERCRED of whoever attached
      bool sent = false, built = false, released = false, attached = false;
      // Its child's Hello, when it came before the clone's build finished:
      // adopted by the clone's worker once built (OnCloneBuilt).
      std::optional<PendingGuest> parked;
      proto::CloneBuiltRequest info;
      double ms = 0;
      // Its steps, in ms since t0 (0: not reached): build sent to a worker,
      // built, its order in the golden's ForkGo, its child's Hello arrived.
      double sent_ms = 0, built_ms = 0, released_ms = 0, hello_ms = 0;
    };
    std::vector<Clone> clones;
    bool released = false;  // the golden has every clone's order (its one ForkGo)
    uint32_t refused_attaches = 0;  // clone Hellos with a wrong token while it ran
    // Control frames the daemon wrote to the golden's worker for this job
    // (SendToGolden): reported with the clones, so a test can hold the
    // fork's exchanges with the golden to one prepare and one release.
    uint32_t golden_messages = 0;
  };

  Status SpawnWorker();
  void AcceptAdmin();
  // --- pending connections (pending_guests.cc) ---
  // Accepts one connection on a guest socket (endpoint 0: the daemon's own)
  // and starts reading its Hello, or refuses it when a cap is reached.
  void AcceptGuest(int listen_fd, uint64_t endpoint);
  // Reads what has arrived of a pending Hello; acts on it once whole.
  void OnPendingReadable(uint64_t id);
  // Drops pending connections past their deadline.
  void ExpirePending();
  // A whole Hello: queues the guest for a worker or attaches its clone.
  void OnHello(Pending p, const proto::FrameHeader& h, std::string_view payload);
  // "machine 'a'", or "the daemon's socket" for endpoint 0.
  std::string SocketName(uint64_t endpoint) const;
  // The per-socket and per-daemon caps a new session must fit under.
  Status AdmitSession(uint64_t endpoint, uint32_t host_uid) const;
  void AssignWorkers();
  // A pooled worker starts serving `session` (a guest's or a clone's).
  void DrawPooledWorker(WorkerProc& w, uint64_t session);
  // Ends a worker that must serve no one (e.g. half placed in a machine).
  void DiscardWorker(WorkerProc& w);
  // A frame on a worker's control link, through the generated control
  // dispatch into WorkerLink (worker_link.cc).
  struct WorkerLink;
  void OnWorkerControl(WorkerProc& w);
  // Links stopped mid-frame past kLinkFrameDeadline (control_links.cc).
  void ExpireStalledLinks();
  std::optional<std::chrono::steady_clock::time_point> NextLinkDeadline() const;
  void OnWorkerExit(pid_t pid);
  // --- session registry (session_registry.cc) ---
  // By session id, else by the host pid of a session on the daemon's own
  // socket (`cuda fork --pid`, `cuda release --pid`).
  Session* FindSession(uint64_t session, uint32_t pid);
  // A machine's golden by the host pid its supervisor names; a Hello's pid
  // chooses only among that machine's sessions, when no host pid matches.
  // Machine "": FindSession(0, pid) (a session on the daemon's own socket).
  Session* FindMachineGolden(const std::string& machine, uint32_t pid);
  void OnSessionState(const WorkerProc& w, const proto::WorkerStateRequest& r);
  void OnSessionStats(const WorkerProc& w, const proto::WorkerStatsRequest& r);
  // --- admin server (admin_server.cc), through the generated control
  // dispatch into AdminLink ---
  struct AdminLink;
  void ServeAdmin(uint64_t client);
  DaemonStatus CollectStatus() const;  // daemon_status.cc
  // Admin requests (ServeAdmin dispatches here).
  void StartFork(uint64_t client, uint32_t seq, const proto::AdminForkRequest& req);
  void Release(uint64_t client, uint32_t seq, const proto::AdminReleaseRequest& req);
  // --- fork engine (fork_engine.cc) ---
  // A new fork job for an admin request, or the reply refusing it when a
  // fork of that golden is already in progress (then null).
  ForkJob* QueueFork(uint64_t client, uint32_t seq, uint16_t op, uint32_t pid, uint64_t golden, uint32_t count,
                     proto::ShareMode share, uint32_t wait_ms);
  // Moves fork jobs along; called whenever something they wait on happens.
  void AdvanceForks();
  // One job's step (may end it); its clones' CloneBuild orders; its reply.
  void AdvanceFork(ForkJob& job, std::chrono::steady_clock::time_point now);
  void SendCloneBuilds(ForkJob& job);
  // How many of `job`'s clones build at once, from its manifest (logged).
  int PickBuildParallelism(const ForkJob& job) const;
  // Workers to start for clones that no pooled worker may build (those in
  // other tenants' jails cannot), over the forks building now.
  size_t ForkWorkersShort() const;
  size_t WorkersShort(const ForkJob& job) const;  // one building job's share of that
  // A worker for clones could not start: its context did not fit in the
  // device's memory. Each building fork still short of workers fails as
  // refused for memory (all or nothing) rather than wait for its deadline.
  void FailForksShortOfRoom();
  // At the worker cap: retires pooled workers jailed for tenants with no fork
  // building until `exiting` (workers let go, not reaped yet) covers `short_by`.
  void RetireForClones(size_t short_by, size_t exiting);
  void FinishFork(ForkJob& job, const Session& golden, std::chrono::steady_clock::time_point now);
  void FailFork(ForkJob& job, Status why);
  // The admin connection `client` closed: its machine forks fail now (their
  // supervisor gave up and undoes the clone machines); other forks stand.
  void FailForksOf(uint64_t client);
  void OnForkManifest(WorkerProc& w, const proto::ForkManifestRequest& m);
  void OnCloneBuilt(WorkerProc& w, const proto::CloneBuiltRequest& b);
  // Sends the golden every clone's order in one ForkGo (when the job's
  // first clone is built); the built clones' orders come first.
  void ReleaseClones(ForkJob& job);
  // Whether `job`'s orders may go now: once any of its clones is built
  // (daemon_machines.cc).
  bool ReadyToRelease(const ForkJob& job) const;
  // Hands a clone's child (its Hello) to the clone's built worker.
  void AdoptClone(ForkJob& job, ForkJob::Clone& c, PendingGuest g);
  // Writes one control frame to the golden's worker for `job`, counted in
  // job.golden_messages. Unavailable when that worker or its link is gone.
  Status SendToGolden(ForkJob& job, const std::string& frame);
  // Ahead of forks (fork_ahead.cc).
  void OnForkAhead(WorkerProc& w, const proto::ForkAheadRequest& r);
  void OnPreloadDone(WorkerProc& w, const proto::PreloadDoneRequest& r);
  // A machine golden at (or away from) its supervisor's forkpoint (fork_ahead.cc).
  void OnAdminForkpoint(uint64_t client, uint32_t seq, const proto::AdminForkpointRequest& r);
  // The golden left its forkpoint or ended: its ahead goes, and pooled
  // workers let its chunks go, so its memory leaves with its last user.
  void ForgetAhead(uint64_t session);
  // Points each ready pooled worker at a golden's ahead chunks (spread over
  // the goldens at their forkpoint), updates stale ones, drops orphans.
  void PrimeWorkers();
  // A ready pooled worker that may serve tenant uid `uid` (one jailed as
  // another uid never): for a clone of `golden`, one primed for it first
  // (jailed ahead before unjailed); for a new session (golden 0), an
  // unprimed one first. Null if none.
  WorkerProc* PickPooledWorker(uint64_t golden, uint32_t uid = 0);
  // The uid a golden's tenant holds (0: none, or uids off).
  uint32_t GoldenUid(uint64_t golden) const;
  // How many pooled workers hold `golden`'s chunks, done preloading.
  size_t PreloadedWorkers(uint64_t golden) const;
  // --- clone tokens (clone_tokens.cc) ---
  // A fresh 128-bit random token (32 hex), or "" when getrandom fails.
  static std::string NewCloneToken();
  // Hands a clone Hello to the clone whose released, unused token it names
  // (constant-time compare, through the clone machine's socket only), or
  // keeps it with that clone until its build is done; refuses and logs an
  // empty, unknown or used token.
  void AttachClone(PendingGuest g, const std::string& token);
  void AdminReply(uint64_t client, uint32_t seq, uint16_t op, const Status& st, const std::string& json);
  int NextTimeoutMs() const;
  void Shutdown();
  // --- machines (daemon_machines.cc) ---
  void AttachMachine(uint64_t client, uint32_t seq, const proto::AdminMachineAttachRequest& req,
                     std::vector<UniqueFd>* fds);
  // The admin connection `client` closed: its endpoints go, its machine forks fail.
  void DetachEndpointsOf(uint64_t client);
  Endpoint* FindEndpoint(const std::string& machine);
  void AcceptMachineGuest(uint64_t endpoint);
  // Moves a worker into the machine's cgroups and hands it the budget, before
  // it adopts or builds anything of the machine.
  Status PlaceWorker(WorkerProc& w, const Endpoint& e);
  void StartMachineFork(uint64_t client, uint32_t seq, const proto::AdminMachineForkRequest& req);
  // A machine fork that failed before the golden got its order: cancel the
  // golden's wait so its smolvmForkpoint() reports the failure.
  void CancelGoldenWait(const ForkJob& job);
  // Refuses a fork whose clones would pass --max-workers or the clone
  // machine's --max-sessions-per-machine.
  Status AdmitClones(const ForkJob& job) const;
  // A ready worker's context on the device: NVML's count for its pid where
  // the host has NVML, else EstimatedContextBytes (docs/fork.md).
  uint64_t MeasuredContextBytes(pid_t worker) const;
  // The device's memory: as a worker reported it, else NVML's (cuda) or the
  // fake's; 0 when not known.
  uint64_t DeviceBytes() const;
  // Refuses a clone whose private copies do not fit its machine's budget.
  Status AdmitToMachine(const ForkJob& job, uint64_t private_bytes);
  void Log(const char* fmt, ...) const __attribute__((format(printf, 2, 3)));
  // A line a guest can cause, throttled per `source` (a connection or
  // socket id) and per `kind` (log_throttle.h).
  void LogGuest(const char* kind, uint64_t source, const char* fmt, ...) __attribute__((format(printf, 4, 5)));
  // Whose a session's descriptors and workers are (guest_admission.h).
  std::string TenantOf(const Session& s) const;
  // Accepts on a listening socket; false when accept failed for want of
  // descriptors or memory (the loop then backs off: accept_backoff.h).
  Result<UniqueFd> AcceptOn(int listen_fd, int flags);

  DaemonOptions options_;
  // Declared before the aheads and fork jobs whose charges it holds.
  std::unique_ptr<DescriptorBudget> fd_budget_;  // made in Listen, once RLIMIT_NOFILE is raised
  GuestAdmission admission_;
  LogThrottle log_throttle_;
  AcceptBackoff accept_backoff_;
  RefusalTally refusals_;  // what `cuda status` shows
  std::unique_ptr<ModuleCacheBound> module_bound_;   // made in Listen (needs the jail)
  std::string admin_path_;
  std::string module_dir_;
  std::string jail_dir_;  // the workers' (worker_jail.h)
  WorkerUids uids_;
  UniqueFd listen_, admin_listen_, signal_fd_;
  std::map<pid_t, WorkerProc> workers_;
  std::map<uint64_t, Session> sessions_;
  OpLedger ops_;  // what each session's worker served (op_counts.h)
  std::deque<PendingGuest> waiting_;
  std::map<uint64_t, Pending> pending_;
  uint64_t next_pending_ = 1;
  std::map<uint64_t, std::unique_ptr<UnixChannel>> admin_clients_;
  uint64_t next_admin_client_ = 1;
  std::map<uint64_t, ForkJob> forks_;          // by job id
  std::map<uint64_t, Ahead> aheads_;           // by golden session id
  std::map<uint64_t, Endpoint> endpoints_;     // by id
  uint64_t next_endpoint_ = 1;
  uint64_t next_fork_job_ = 1;
  uint64_t drawn_ = 0;  // pooled workers that went on to serve a session
  std::map<uint64_t, int32_t> next_clone_index_;  // by golden session id
  uint64_t next_session_ = 1;
  int start_failures_ = 0;  // workers in a row that died before WorkerReady
  std::string last_start_failure_;  // "worker <pid> exited with <n>" of the last of them
  // The file the daemon's stderr goes to ("" for a terminal or a pipe): the
  // log that errors sent to guests point to (LogPathOfStderr, worker_pool.cc).
  std::string log_path_;
  // A worker's context did not fit (kWorkerExitNoMemory): the pool and its
  // spares stop refilling (workers start only for waiting guests and clones)
  // until a worker that had a context exits, freeing its memory. Else every
  // failed start starts another, a storm of context creations on a full card.
  bool pool_paused_for_memory_ = false;
  bool stopping_ = false;
  // The device's memory, as the first ready worker saw it (0: not known
  // yet): --gpu-mem reservations must fit it (daemon_machines.cc).
  uint64_t device_bytes_ = 0;
  IdleExit idle_{std::chrono::milliseconds(0)};
};

// Refuses a guest's Hello on its channel with (code, message).
void ReplyHelloError(UnixChannel& ch, uint32_t seq, Code code, const std::string& message);

// The `_cuda-daemon` command.
int DaemonMain(const DaemonOptions& options);

// LD_LIBRARY_PATH without the directories that hold a smolvm shim (marked by
// a `.smolvm-shim` file), so workers load NVIDIA's real libraries.
std::string LibraryPathWithoutShims(const char* ld_library_path);

}  // namespace smolvm
