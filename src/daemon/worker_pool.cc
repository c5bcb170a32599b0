// The worker pool: starting workers (fork+exec of `_cuda-worker`), keeping
// the pool full, handing a pooled worker to a guest, reaping every exit.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <set>

#include "base/hex.h"
#include "daemon/control_links.h"
#include "daemon/daemon.h"
#include "proto/frame.h"
#include "worker/worker.h"
#include "worker/worker_jail.h"
#include "worker/worker_seccomp.h"

namespace smolvm {
namespace {

int PidfdOpen(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

// A daemon that cannot start workers stops trying after this many failures
// in a row, and tells waiting guests why.
constexpr int kMaxStartFailures = 3;

bool ReadableNow(const Channel& ch) {
  struct pollfd p = {ch.fd(), POLLIN, 0};
  return ch.HasBufferedFrame() || ::poll(&p, 1, 0) > 0;
}

}  // namespace

Status Daemon::SpawnWorker() {
  UniqueFd mine, theirs;
  RETURN_IF_ERROR(SocketPair(&mine, &theirs));
  RETURN_IF_ERROR(SetLinkSendTimeout(mine.get()));
  std::vector<std::string> args = {
      "smolvm-worker",     "_cuda-worker",        "--control-fd",
      "3",                 "--backend",           options_.backend,
      "--arena-base",      HexOfAddress(options_.arena_base),
      "--arena-bytes",     HexOfAddress(options_.arena_bytes),
      "--host-base",       HexOfAddress(options_.host_base),
      "--host-bytes",      HexOfAddress(options_.host_bytes),
      "--module-cache",    module_dir_,
      "--module-cache-bytes", std::to_string(options_.module_cache_bytes),
      "--jail-dir",        jail_dir_,
      "--seccomp",         options_.worker_seccomp.empty() ? DefaultSeccompMode(options_.backend)
                                                           : options_.worker_seccomp};
  if (!options_.worker_seccomp_learn.empty()) {
    args.push_back("--seccomp-learn");
    args.push_back(options_.worker_seccomp_learn);
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::string ld = LibraryPathWithoutShims(::getenv("LD_LIBRARY_PATH"));
  pid_t pid = ::fork();
  if (pid < 0) return ErrnoStatus("fork", errno);
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    if (theirs.get() == 3) {
      ::fcntl(3, F_SETFD, 0);
    } else if (::dup2(theirs.get(), 3) < 0) {
      ::_exit(126);
    }
    if (ld.empty()) {
      ::unsetenv("LD_LIBRARY_PATH");
    } else {
      ::setenv("LD_LIBRARY_PATH", ld.c_str(), 1);
    }
    ::execv(options_.self_exe.c_str(), argv.data());
    ::_exit(127);
  }
  WorkerProc w;
  w.pid = pid;
  w.pidfd.Reset(PidfdOpen(pid));
  if (!w.pidfd.valid()) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return ErrnoStatus("pidfd_open", errno);
  }
  w.control = std::make_unique<UnixChannel>(std::move(mine));
  workers_[pid] = std::move(w);
  return Status::Ok();
}

void Daemon::DrawPooledWorker(WorkerProc& w, uint64_t session) {
  w.session_id = session;
  w.primed = 0;  // what it preloaded is the worker's to use or drop now
  ++drawn_;
}

void Daemon::DiscardWorker(WorkerProc& w) {
  ::kill(w.pid, SIGKILL);  // reaped through its pidfd
  w.control.reset();       // never picked again meanwhile
}

void Daemon::AssignWorkers() {
  int failures = 0;
  while (!waiting_.empty()) {
    // A worker jailed ahead serves its own tenant only (fork_ahead.cc).
    uint32_t tenant_uid = uids_.Find("");
    if (const PendingGuest& front = waiting_.front(); front.endpoint) {
      auto e = endpoints_.find(front.endpoint);
      tenant_uid = e == endpoints_.end() ? 0 : uids_.Find(e->second.machine);
    }
    WorkerProc* free_worker = PickPooledWorker(0, tenant_uid);
    if (!free_worker) break;
    PendingGuest g = std::move(waiting_.front());
    waiting_.pop_front();
    std::string machine;
    if (g.endpoint) {
      auto e = endpoints_.find(g.endpoint);
      Status placed = e == endpoints_.end() ? Unavailable("the machine's CUDA endpoint was removed")
                                            : PlaceWorker(*free_worker, e->second);
      if (!placed.ok()) {
        Log("cannot serve a guest of an endpoint: %s", placed.ToString().c_str());
        ReplyHelloError(*g.channel, g.hello_seq, Code::kUnavailable, placed.message());
        if (free_worker->budget_slot >= 0 || !free_worker->machine.empty()) DiscardWorker(*free_worker);
        continue;
      }
      machine = e->second.machine;
    }
    auto uid = free_worker->jailed ? Result<uint32_t>(free_worker->uid) : uids_.Acquire(machine);
    if (!uid.ok()) {
      ReplyHelloError(*g.channel, g.hello_seq, Code::kUnavailable, uid.status().message());
      if (free_worker->budget_slot >= 0 || !free_worker->machine.empty()) DiscardWorker(*free_worker);
      continue;
    }
    free_worker->uid = *uid;
    auto sock = g.channel->TakeSocket();
    if (!sock.ok()) continue;
    uint64_t id = next_session_++;
    proto::WorkerAdoptRequest adopt{id, g.hello_seq, proto::Wire(g.role), g.guest_pid, g.flags, *uid};
    std::string out;
    proto::AppendRequest(&out, adopt, 0, 1);
    int fd = sock->get();
    Status st = free_worker->control->Write(out, std::span<const int>(&fd, 1));
    if (!st.ok()) {
      Log("worker %d did not take session %llu: %s", free_worker->pid,
          static_cast<unsigned long long>(id), st.ToString().c_str());
      free_worker->control.reset();
      ++failures;
      continue;
    }
    DrawPooledWorker(*free_worker, id);
    Session s;
    s.id = id;
    s.worker_pid = free_worker->pid;
    s.guest_pid = g.guest_pid;
    s.host_pid = g.host_pid;
    s.host_uid = g.host_uid;
    s.machine = machine;
    s.role = g.role;
    sessions_[id] = s;
    Log("session %llu: guest pid %u served by worker %d", static_cast<unsigned long long>(id),
        g.guest_pid, free_worker->pid);
  }
  // Keep the pool full: what is left of the first pool_size started ahead,
  // and at least enough for the waiting guests and the clones to build plus
  // the spares.
  size_t pooled = 0, unbound = 0;  // unbound: not in the jail of a tenant's uid
  size_t exiting = 0;              // let go, not reaped yet: each frees a place
  for (auto& [pid, w] : workers_)
    if (w.session_id == 0 && w.control) {
      ++pooled;
      unbound += !(w.jailed && w.uid != 0);
    } else if (w.session_id == 0) {
      ++exiting;
    }
  const uint64_t pool = static_cast<uint64_t>(options_.pool_size);
  // No spare is started while a fork is in flight: new contexts would
  // compete with the clones' builds on the device (context creation takes
  // the driver's locks); AdvanceForks refills once the forks are done.
  const bool top_up = forks_.empty() && !pool_paused_for_memory_;
  const uint64_t spares = !top_up ? 0 : options_.spares < 0 ? pool : static_cast<uint64_t>(options_.spares);
  uint64_t needs = waiting_.size();
  for (const auto& [id, job] : forks_)
    if (job.phase == ForkJob::kBuilding)
      for (const auto& c : job.clones) needs += c.worker < 0 ? 1 : 0;
  const uint64_t first_pool = drawn_ < pool && !pool_paused_for_memory_ ? pool - drawn_ : 0;
  const size_t want = static_cast<size_t>(std::max(first_pool, needs + spares));
  // Guests still waiting when every pooled worker is another tenant's get
  // new workers too, and so do clones (fork_engine.cc).
  size_t clones_short = ForkWorkersShort();
  while (!stopping_ && (pooled < want || unbound < waiting_.size() || clones_short > 0) &&
         failures < kMaxStartFailures && workers_.size() < static_cast<size_t>(options_.max_workers)) {
    Status st = SpawnWorker();
    if (!st.ok()) {
      Log("cannot start a worker: %s", st.ToString().c_str());
      ++failures;
      continue;
    }
    ++pooled;
    ++unbound;
    clones_short -= clones_short > 0;
  }
  // At the worker cap, a guest never waits on workers jailed ahead for
  // another tenant's fork: one of those goes, and a new worker starts as it
  // exits (OnWorkerExit).
  const bool at_cap = workers_.size() >= static_cast<size_t>(options_.max_workers);
  for (auto it = workers_.begin(); at_cap && it != workers_.end() && unbound + exiting < waiting_.size(); ++it) {
    WorkerProc& w = it->second;
    if (w.session_id != 0 || !w.control || !(w.jailed && w.uid != 0)) continue;
    Log("worker %d retired (in the jail of uid %u) for a waiting guest at the worker cap", w.pid, w.uid);
    DiscardWorker(w);
    ++unbound;
    ++exiting;
  }
  if (at_cap && clones_short > 0) RetireForClones(clones_short, exiting);
}

void Daemon::RetireForClones(size_t short_by, size_t exiting) {
  // Clones no pooled worker may build wait at the cap the same way: workers
  // jailed ahead for a tenant with no fork building go (each exit starts a
  // worker, OnWorkerExit). A building fork's own tenant keeps its workers.
  std::set<uint32_t> building;
  for (const auto& [id, job] : forks_)
    if (job.phase == ForkJob::kBuilding) building.insert(GoldenUid(job.golden));
  for (auto it = workers_.begin(); it != workers_.end() && exiting < short_by; ++it) {
    WorkerProc& w = it->second;
    if (w.session_id != 0 || !w.control || !(w.jailed && w.uid != 0) || building.count(w.uid)) continue;
    Log("worker %d retired (in the jail of uid %u) for a fork's clones at the worker cap", w.pid, w.uid);
    DiscardWorker(w);
    ++exiting;
  }
}

void Daemon::OnWorkerExit(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, WNOHANG) <= 0) return;
  // What it wrote before it exited (its session's final op counts) first.
  for (auto c = workers_.find(pid); c != workers_.end() && c->second.control && ReadableNow(*c->second.control);
       c = workers_.find(pid))
    OnWorkerControl(c->second);
  auto it = workers_.find(pid);
  if (it == workers_.end()) return;
  WorkerProc& w = it->second;
  std::string how = WIFEXITED(status) ? "exited with " + std::to_string(WEXITSTATUS(status))
                                      : "killed by signal " + std::to_string(WTERMSIG(status));
  if (w.session_id) {
    Log("session %llu ended: worker %d %s", static_cast<unsigned long long>(w.session_id), pid, how.c_str());
    sessions_.erase(w.session_id);
    ops_.End(w.session_id);
  } else if (!stopping_) {
    Log("pooled worker %d %s before serving anyone", pid, how.c_str());
  }
  bool start_failed = !w.ready && w.session_id == 0;
  if (w.ready && pool_paused_for_memory_) {
    pool_paused_for_memory_ = false;  // its context's memory is free again
    Log("pool: worker %d freed its context; the pool refills again", pid);
  }
  uint64_t session = w.session_id;
  // Whatever it still held of its machine's --gpu-mem goes back now: a
  // killed worker never refunds, but the driver freed its memory.
  if (w.budget && w.budget_slot >= 0) w.budget->ReclaimSlot(static_cast<uint32_t>(w.budget_slot));
  RemoveWorkerJail(jail_dir_, pid, w.uid, uids_.Release(w.uid));
  workers_.erase(it);
  if (stopping_) return;
  if (session) ForgetAhead(session);
  for (auto job = forks_.begin(); job != forks_.end();) {
    auto next = std::next(job);
    bool touched = session != 0 && job->second.golden == session;
    for (const auto& c : job->second.clones) touched = touched || (c.worker == pid && !c.attached);
    if (touched) FailFork(job->second, Unavailable("a worker of this fork exited (" + how + ")"));
    job = next;
  }
  const bool no_memory = start_failed && WIFEXITED(status) && WEXITSTATUS(status) == kWorkerExitNoMemory;
  if (no_memory) {
    if (!pool_paused_for_memory_)
      Log("pool: worker %d's context did not fit in the device's memory; the pool stops refilling until a worker "
          "frees its context", pid);
    pool_paused_for_memory_ = true;
    FailForksShortOfRoom();
  }
  if (start_failed) {
    last_start_failure_ = "worker " + std::to_string(pid) + " " + how;
    if (++start_failures_ >= kMaxStartFailures) {
      const std::string see =
          log_path_.empty() ? " (see the daemon's stderr)" : " (see the daemon's log, " + log_path_ + ")";
      for (auto& g : waiting_)
        ReplyHelloError(*g.channel, g.hello_seq, Code::kUnavailable,
                        no_memory ? "the smolvm daemon cannot start a GPU worker: the GPU has no memory left for "
                                    "another CUDA context" + see
                                  : "the smolvm daemon cannot start a GPU worker: " + last_start_failure_ + see);
      waiting_.clear();
      return;
    }
  }
  AssignWorkers();
}
}  // namespace smolvm
