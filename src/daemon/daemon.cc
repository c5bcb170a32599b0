// The daemon's loop: its sockets, the poll over every descriptor it
// watches, and the stop. What each wakeup means is handled by the part that
// owns it (docs/daemon.md): worker_pool.cc, worker_link.cc, admin_server.cc,
// pending_guests.cc, daemon_machines.cc, fork_engine.cc.
#include "daemon/daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "worker/context_size.h"
#include "worker/control.h"
#include "worker/module_cache.h"
#include "worker/worker_jail.h"
#include "worker/worker_seccomp.h"
#include "proto/dispatch.h"
#include "proto/frame.h"
#include "proto/proto_hash.h"

#ifdef SMOLVM_HAVE_CUDA_BACKEND
#include "backend/nvml_host.h"
#endif

namespace smolvm {
namespace {

constexpr int kShutdownGraceMs = 5000;

}  // namespace

std::string LibraryPathWithoutShims(const char* ld_library_path) {
  if (!ld_library_path) return "";
  std::string out;
  std::string_view rest(ld_library_path);
  while (true) {
    size_t colon = rest.find(':');
    std::string dir(rest.substr(0, colon));
    std::error_code ec;
    if (!dir.empty() && !std::filesystem::exists(dir + "/.smolvm-shim", ec)) {
      if (!out.empty()) out += ':';
      out += dir;
    }
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  return out;
}

Daemon::Daemon(DaemonOptions options)
    : options_(std::move(options)),
      admission_(AdmissionCaps{.conns_per_machine = options_.max_conns_per_machine,
                               .conns_per_pid = options_.max_conns_per_pid,
                               .conns = options_.max_conns,
                               .sessions_per_machine = options_.max_sessions_per_machine,
                               .workers = options_.max_workers}),
      idle_(std::chrono::seconds(std::max(0, options_.idle_exit_s))) {
  admin_path_ = options_.socket_path + ".admin";
  log_path_ = StderrLogPath();
}

Daemon::~Daemon() {
  if (!workers_.empty()) Shutdown();
}

void Daemon::Log(const char* fmt, ...) const {
  if (options_.quiet) return;
  struct timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  ::localtime_r(&ts.tv_sec, &tm);
  char prefix[64];
  std::snprintf(prefix, sizeof prefix, "smolvmd[%d] %02d:%02d:%02d.%03ld: ", ::getpid(), tm.tm_hour,
                tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "%s%s\n", prefix, msg);
}

void Daemon::LogGuest(const char* kind, uint64_t source, const char* fmt, ...) {
  uint64_t suppressed = 0;
  if (!log_throttle_.Allow(kind, source, std::chrono::steady_clock::now(), &suppressed)) return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (suppressed > 0) {
    Log("%s (%llu more lines of this kind not logged)", msg, static_cast<unsigned long long>(suppressed));
  } else {
    Log("%s", msg);
  }
}

std::string Daemon::TenantOf(const Session& s) const { return TenantName(s.machine, s.host_uid); }

Result<UniqueFd> Daemon::AcceptOn(int listen_fd, int flags) {
  int fd = ::accept4(listen_fd, nullptr, nullptr, flags);
  if (fd >= 0) {
    accept_backoff_.Succeeded();
    return UniqueFd(fd);
  }
  int err = errno;
  if (AcceptBackoff::IsExhaustion(err)) {
    accept_backoff_.Failed(std::chrono::steady_clock::now());
    LogGuest("accept failed", 0, "accept: %s: not accepting for a while (%llu such failures)", std::strerror(err),
             static_cast<unsigned long long>(accept_backoff_.failures()));
  }
  return ErrnoStatus("accept", err);
}

Status Daemon::Listen() {
  const uint64_t nofile = RaiseNoFileLimit();
  // Room kept for what is not a chunk descriptor: two per worker (pidfd,
  // link), the pending and admin connections, endpoints, the loop's own.
  const size_t reserve = 2 * static_cast<size_t>(options_.max_workers) + static_cast<size_t>(options_.max_conns) + 1024;
  fd_budget_ = DescriptorBudget::ForDaemon(nofile, reserve, options_.max_fds_per_machine, options_.max_fds);
  Log("descriptors: RLIMIT_NOFILE %llu; chunk descriptors at most %zu per machine (or uid on the daemon's socket), "
      "%zu in all",
      static_cast<unsigned long long>(nofile), fd_budget_->per_tenant(), fd_budget_->total());
  ASSIGN_OR_RETURN(listen_, ListenUnix(options_.socket_path, 0660));
  ASSIGN_OR_RETURN(admin_listen_, ListenUnix(admin_path_, 0600));
  // Accepted only when poll says so; never wait in accept for a peer gone meanwhile.
  (void)::fcntl(listen_.get(), F_SETFL, ::fcntl(listen_.get(), F_GETFL) | O_NONBLOCK);
  // A fresh private directory of ours, never one found at a known path.
  ASSIGN_OR_RETURN(module_dir_, CreateModuleCacheDir(options_.socket_path + ".modules"));
  uint32_t uid_base = options_.worker_uid_base;
  if (uid_base && ::geteuid() != 0) {
    Log("workers keep uid %u: dropping them to per-tenant uids needs a root daemon", ::geteuid());
    uid_base = 0;
  }
  uids_ = WorkerUids(uid_base, options_.worker_uids);
  RETURN_IF_ERROR(uids_.Check());
  ASSIGN_OR_RETURN(jail_dir_, MakeJailDir());
  module_bound_ = std::make_unique<ModuleCacheBound>(module_dir_, jail_dir_, options_.module_cache_bytes);
  Log("workers: %s, seccomp %s, jail %s",
      uid_base ? ("one uid per tenant from " + std::to_string(uid_base)).c_str() : "keep the daemon's uid",
      options_.worker_seccomp.empty() ? DefaultSeccompMode(options_.backend) : options_.worker_seccomp.c_str(),
      jail_dir_.c_str());
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  ::sigprocmask(SIG_BLOCK, &mask, nullptr);
  signal_fd_.Reset(::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!signal_fd_.valid()) return ErrnoStatus("signalfd", errno);
  ::signal(SIGPIPE, SIG_IGN);
  // Last: only the capabilities it and its workers use, and its own filter
  // (daemon_jail.h), before the first worker starts.
  std::string jail;
  RETURN_IF_ERROR(EnterDaemonJail(DaemonJailOptions{.caps = options_.daemon_caps,
                                                    .seccomp = options_.daemon_seccomp,
                                                    .seccomp_learn = options_.daemon_seccomp_learn,
                                                    .backend = options_.backend,
                                                    .worker_seccomp = options_.worker_seccomp},
                                  &jail));
  Log("daemon: %s", jail.c_str());
  return Status::Ok();
}

int Daemon::NextTimeoutMs() const {
  auto link = NextLinkDeadline();
  auto now = std::chrono::steady_clock::now();
  const bool backing_off = accept_backoff_.Paused(now);
  if (forks_.empty() && pending_.empty() && !link && !backing_off) return -1;
  auto soonest = link.value_or(now + std::chrono::hours(1));
  if (backing_off) soonest = std::min(soonest, *accept_backoff_.Until());
  for (const auto& [id, job] : forks_) soonest = std::min(soonest, job.deadline);
  for (const auto& [id, p] : pending_) soonest = std::min(soonest, p.deadline);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(soonest - now).count();
  return static_cast<int>(std::clamp<long long>(ms + 1, 0, 60000));
}

Status Daemon::Run() {
  Log("listening on %s (admin %s), backend %s, proto %s, control %s", options_.socket_path.c_str(),
      admin_path_.c_str(), options_.backend.c_str(), proto::HashHex(proto::kProtoHash).c_str(),
      proto::HashHex(proto::kControlHash).c_str());
  AssignWorkers();
  while (!stopping_) {
    std::vector<struct pollfd> pfds;
    enum Kind { kListen, kAdminListen, kSignal, kPidfd, kControl, kAdmin, kEndpoint, kPending };
    std::vector<std::pair<Kind, long>> what;
    auto add = [&](int fd, Kind k, long arg) {
      pfds.push_back({fd, POLLIN, 0});
      what.emplace_back(k, arg);
    };
    // Listening sockets rest while accept fails for want of descriptors.
    const bool accepting = !accept_backoff_.Paused(std::chrono::steady_clock::now());
    if (accepting) {
      add(listen_.get(), kListen, 0);
      add(admin_listen_.get(), kAdminListen, 0);
    }
    add(signal_fd_.get(), kSignal, 0);
    for (auto& [pid, w] : workers_) {
      add(w.pidfd.get(), kPidfd, pid);
      if (w.control) add(w.control->fd(), kControl, pid);
    }
    for (auto& [id, c] : admin_clients_) add(c->fd(), kAdmin, static_cast<long>(id));
    if (accepting)
      for (auto& [id, e] : endpoints_) add(e.listen.get(), kEndpoint, static_cast<long>(id));
    for (auto& [id, p] : pending_) add(p.fd.get(), kPending, static_cast<long>(id));
    int timeout_ms = NextTimeoutMs();
    if (auto idle_ms = idle_.MsUntilDue(std::chrono::steady_clock::now()))
      timeout_ms = timeout_ms < 0 ? *idle_ms : std::min(timeout_ms, *idle_ms);
    int n = ::poll(pfds.data(), pfds.size(), timeout_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("poll", errno);
    }
    std::vector<uint64_t> admin_ready;
    for (size_t i = 0; i < pfds.size() && !stopping_; ++i) {
      if (!pfds[i].revents) continue;
      auto [kind, arg] = what[i];
      switch (kind) {
        case kListen:
          AcceptGuest(listen_.get(), 0);
          break;
        case kAdminListen:
          AcceptAdmin();
          break;
        case kSignal: {
          struct signalfd_siginfo si;
          if (::read(signal_fd_.get(), &si, sizeof si) == sizeof si) {
            Log("signal %u: shutting down", si.ssi_signo);
            stopping_ = true;
          }
          break;
        }
        case kPidfd:
          OnWorkerExit(static_cast<pid_t>(arg));
          break;
        case kControl: {
          // Frames already buffered would never wake poll again: drain them.
          auto it = workers_.find(static_cast<pid_t>(arg));
          while (it != workers_.end() && it->second.control) {
            OnWorkerControl(it->second);
            it = workers_.find(static_cast<pid_t>(arg));
            if (it == workers_.end() || !it->second.control || !it->second.control->HasBufferedFrame()) break;
          }
          break;
        }
        case kAdmin:
          admin_ready.push_back(static_cast<uint64_t>(arg));
          break;
        case kEndpoint:
          AcceptMachineGuest(static_cast<uint64_t>(arg));
          break;
        case kPending:
          OnPendingReadable(static_cast<uint64_t>(arg));
          break;
      }
    }
    for (uint64_t id : admin_ready) {
      ServeAdmin(id);
      for (auto c = admin_clients_.find(id); c != admin_clients_.end() && c->second->HasBufferedFrame();
           c = admin_clients_.find(id))
        ServeAdmin(id);
    }
    ExpirePending();
    ExpireStalledLinks();
    AdvanceForks();
    // Anything open on the daemon holds it: a session, a machine's endpoint,
    // a fork, a guest or admin connection (HoldCudaDaemon is one kept open).
    const auto now = std::chrono::steady_clock::now();
    idle_.Observe(!sessions_.empty() || !endpoints_.empty() || !forks_.empty() || !admin_clients_.empty() ||
                      !pending_.empty() || !waiting_.empty(),
                  now);
    if (!stopping_ && idle_.Due(now)) {
      Log("idle for %lld s (no session, machine, fork or admin connection): stopping",
          static_cast<long long>(idle_.after().count() / 1000));
      stopping_ = true;
    }
  }
  Shutdown();
  return Status::Ok();
}

void Daemon::Shutdown() {
  stopping_ = true;
  pending_.clear();
  for (auto& g : waiting_)
    ReplyHelloError(*g.channel, g.hello_seq, Code::kUnavailable, "the smolvm daemon is shutting down");
  waiting_.clear();
  for (auto& [pid, w] : workers_) ::kill(pid, SIGTERM);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kShutdownGraceMs);
  while (!workers_.empty()) {
    std::vector<struct pollfd> pfds;
    std::vector<pid_t> pids;
    for (auto& [pid, w] : workers_) {
      pfds.push_back({w.pidfd.get(), POLLIN, 0});
      pids.push_back(pid);
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      for (pid_t pid : pids) {
        Log("worker %d did not stop in time: killing it", pid);
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
        workers_.erase(pid);
      }
      break;
    }
    ::poll(pfds.data(), pfds.size(), static_cast<int>(left));
    for (size_t i = 0; i < pfds.size(); ++i)
      if (pfds[i].revents) OnWorkerExit(pids[i]);
  }
  for (auto& [id, job] : forks_)
    AdminReply(job.admin_client, job.admin_seq, job.admin_op, Unavailable("the smolvm daemon is shutting down"), "");
  forks_.clear();
  endpoints_.clear();
  sessions_.clear();
  admin_clients_.clear();
  if (listen_.valid()) {
    ::unlink(options_.socket_path.c_str());
    ::unlink(admin_path_.c_str());
    listen_.Reset();
    admin_listen_.Reset();
  }
  std::error_code ec;
  std::filesystem::remove_all(module_dir_, ec);
  if (!jail_dir_.empty()) std::filesystem::remove_all(jail_dir_, ec);
  Log("stopped");
}

int DaemonMain(const DaemonOptions& options) {
  Daemon d(options);
  Status st = d.Listen();
  if (!st.ok()) {
    std::fprintf(stderr, "smolvm _cuda-daemon: %s\n", st.ToString().c_str());
    return 1;
  }
  st = d.Run();
  if (!st.ok()) {
    std::fprintf(stderr, "smolvm _cuda-daemon: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace smolvm