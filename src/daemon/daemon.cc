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

#include "daemon/context_size.h"
#include "daemon/control.h"
#include "daemon/control_links.h"
#include "daemon/module_cache.h"
#include "daemon/worker_jail.h"
#include "daemon/worker_seccomp.h"
#include "proto/dispatch.h"
#include "proto/frame.h"
#include "proto/proto_hash.h"

#ifdef SMOLVM_HAVE_CUDA_BACKEND
#include "backend/nvml_host.h"
#endif

namespace smolvm {
namespace {

int PidfdOpen(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

bool ReadableNow(const Channel& ch) {
  struct pollfd p = {ch.fd(), POLLIN, 0};
  return ch.HasBufferedFrame() || ::poll(&p, 1, 0) > 0;
}

std::string Hex(uint64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

// A daemon that cannot start workers stops trying after this many failures
// in a row, and tells waiting guests why.
constexpr int kMaxStartFailures = 3;
constexpr int kShutdownGraceMs = 5000;

void ReplyError(UnixChannel& ch, uint32_t seq, Code code, const std::string& message) {
  std::string out;
  proto::AppendErrorReply(&out, static_cast<uint16_t>(proto::Op::kHello), seq,
                          static_cast<int32_t>(code), 0, message);
  (void)ch.Write(out);
}

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

Daemon::Daemon(DaemonOptions options) : options_(std::move(options)) {
  admin_path_ = options_.socket_path + ".admin";
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

Status Daemon::Listen() {
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
  return Status::Ok();
}

Status Daemon::SpawnWorker() {
  UniqueFd mine, theirs;
  RETURN_IF_ERROR(SocketPair(&mine, &theirs));
  RETURN_IF_ERROR(SetLinkSendTimeout(mine.get()));
  std::vector<std::string> args = {
      "smolvm-worker",     "_cuda-worker",        "--control-fd",
      "3",                 "--backend",           options_.backend,
      "--arena-base",      Hex(options_.arena_base),
      "--arena-bytes",     Hex(options_.arena_bytes),
      "--host-base",       Hex(options_.host_base),
      "--host-bytes",      Hex(options_.host_bytes),
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
    WorkerProc* free_worker = PickPooledWorker(0);
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
        ReplyError(*g.channel, g.hello_seq, Code::kUnavailable, placed.message());
        if (free_worker->budget_slot >= 0 || !free_worker->machine.empty()) DiscardWorker(*free_worker);
        continue;
      }
      machine = e->second.machine;
    }
    auto uid = uids_.Acquire(machine);
    if (!uid.ok()) {
      ReplyError(*g.channel, g.hello_seq, Code::kUnavailable, uid.status().message());
      if (free_worker->budget_slot >= 0 || !free_worker->machine.empty()) DiscardWorker(*free_worker);
      continue;
    }
    free_worker->uid = *uid;
    auto sock = g.channel->TakeSocket();
    if (!sock.ok()) continue;
    uint64_t id = next_session_++;
    proto::WorkerAdoptRequest adopt{id, g.hello_seq, g.role, g.guest_pid, g.flags, *uid};
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
    s.machine = machine;
    s.role = g.role;
    sessions_[id] = s;
    Log("session %llu: guest pid %u served by worker %d", static_cast<unsigned long long>(id),
        g.guest_pid, free_worker->pid);
  }
  // Keep the pool full: what is left of the first pool_size started ahead,
  // and at least enough for the waiting guests and the clones to build plus
  // the spares.
  size_t pooled = 0;
  for (auto& [pid, w] : workers_)
    if (w.session_id == 0 && w.control) ++pooled;
  const uint64_t pool = static_cast<uint64_t>(options_.pool_size);
  // No spare is started while a fork is in flight: new contexts would
  // compete with the clones' builds on the device (context creation takes
  // the driver's locks); AdvanceForks refills once the forks are done.
  const uint64_t spares = !forks_.empty() ? 0 : options_.spares < 0 ? pool : static_cast<uint64_t>(options_.spares);
  uint64_t needs = waiting_.size();
  for (const auto& [id, job] : forks_)
    if (job.phase == ForkJob::kBuilding)
      for (const auto& c : job.clones) needs += c.worker < 0 ? 1 : 0;
  const size_t want = static_cast<size_t>(std::max(drawn_ < pool ? pool - drawn_ : 0, needs + spares));
  while (!stopping_ && pooled < want && failures < kMaxStartFailures &&
         workers_.size() < static_cast<size_t>(options_.max_workers)) {
    Status st = SpawnWorker();
    if (!st.ok()) {
      Log("cannot start a worker: %s", st.ToString().c_str());
      ++failures;
      continue;
    }
    ++pooled;
  }
}

void Daemon::OnWorkerControl(WorkerProc& w) {
  proto::FrameHeader h;
  std::string payload;
  std::vector<UniqueFd> fds;
  auto whole = w.control->TryReadFrame(&h, &payload, &fds);  // never waits (control_links.h)
  if (whole.ok() && !*whole) return;
  Status st = whole.status();
  if (!st.ok()) {
    w.control.reset();  // its exit arrives through the pidfd
    return;
  }
  proto::Decoder dec(payload);
  if (h.op == static_cast<uint16_t>(proto::Op::kWorkerReady)) {
    proto::WorkerReadyRequest r;
    if (proto::Decode(dec, &r)) {
      w.ready = true;
      w.context_bytes = r.context_bytes ? r.context_bytes : MeasuredContextBytes(w.pid);
      start_failures_ = 0;
      AssignWorkers();
      PrimeWorkers();
    }
  } else if (h.op == static_cast<uint16_t>(proto::Op::kWorkerState)) {
    proto::WorkerStateRequest r;
    if (proto::Decode(dec, &r)) {
      auto it = sessions_.find(r.session_id);
      if (it != sessions_.end() && it->second.worker_pid == w.pid) {
        it->second.state = r.state;
        if (r.state == "forkpoint" && it->second.role == 0) it->second.role = 1;
        if (r.state != "forkpoint") ForgetAhead(r.session_id);
      }
      AdvanceForks();
    }
  } else if (h.op == static_cast<uint16_t>(proto::Op::kForkManifest)) {
    proto::ForkManifestRequest r;
    if (proto::Decode(dec, &r)) OnForkManifest(w, r);
  } else if (h.op == static_cast<uint16_t>(proto::Op::kCloneBuilt)) {
    proto::CloneBuiltRequest r;
    if (proto::Decode(dec, &r)) OnCloneBuilt(w, r);
  } else if (h.op == static_cast<uint16_t>(proto::Op::kForkAhead)) {
    proto::ForkAheadRequest r;
    if (proto::Decode(dec, &r)) OnForkAhead(w, r);
  } else if (h.op == static_cast<uint16_t>(proto::Op::kPreloadDone)) {
    proto::PreloadDoneRequest r;
    if (proto::Decode(dec, &r)) OnPreloadDone(w, r);
  } else if (h.op == static_cast<uint16_t>(proto::Op::kWorkerOps)) {
    proto::WorkerOpsRequest r;
    if (proto::Decode(dec, &r) && r.session_id == w.session_id) (void)ops_.Update(r);
  } else if (h.op == static_cast<uint16_t>(proto::Op::kWorkerStats)) {
    proto::WorkerStatsRequest r;
    if (proto::Decode(dec, &r)) {
      auto it = sessions_.find(r.session_id);
      if (it != sessions_.end() && it->second.worker_pid == w.pid) {
        it->second.shared_chunks = r.shared_chunks;
        it->second.shared_bytes = r.shared_bytes;
        it->second.private_chunks = r.private_chunks;
        it->second.private_bytes = r.private_bytes;
        it->second.allocations = r.allocations;
      }
    }
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
  if (start_failed) {
    if (++start_failures_ >= kMaxStartFailures) {
      for (auto& g : waiting_)
        ReplyError(*g.channel, g.hello_seq, Code::kUnavailable,
                   "the smolvm daemon cannot start a GPU worker (see the daemon's log)");
      waiting_.clear();
      return;
    }
  }
  AssignWorkers();
}

std::string Daemon::StatusJson() const {
  nlohmann::json j;
  j["daemon_pid"] = ::getpid();
  j["backend"] = options_.backend;
  j["proto_hash"] = proto::HashHex(proto::kProtoHash);
  nlohmann::json sessions = nlohmann::json::array();
  static const char* kRoles[] = {"standalone", "golden", "clone"};
  // Context memory per session: what NVML counts for its worker minus the
  // chunks it owns (a golden owns its shared chunks; a clone's are imports,
  // which NVML does not count in the importer); else the estimate.
  std::map<uint32_t, uint64_t> nvml_used;
  std::string context_source = options_.backend == "fake" ? "fixed" : "estimate";
#ifdef SMOLVM_HAVE_CUDA_BACKEND
  if (options_.backend != "fake") {
    if (auto used = HostProcessMemory(); used.ok()) {
      nvml_used = std::move(used).value();
      context_source = "nvml";
    }
  }
#endif
  for (const auto& [id, s] : sessions_) {
    uint64_t context = EstimatedContextBytes(options_.backend);
    if (auto u = nvml_used.find(static_cast<uint32_t>(s.worker_pid)); u != nvml_used.end()) {
      uint64_t owned = s.private_bytes + (s.role == 1 ? s.shared_bytes : 0);
      context = u->second > owned ? u->second - owned : 0;
    }
    nlohmann::json charged;  // what this session holds of its machine's --gpu-mem, by part
    if (auto w = workers_.find(s.worker_pid); w != workers_.end() && w->second.budget && w->second.budget_slot >= 0) {
      const uint64_t held = w->second.budget->SlotUsed(static_cast<uint32_t>(w->second.budget_slot));
      const uint64_t ctx = std::min(held, w->second.context_bytes);
      charged = {{"context_mib", static_cast<double>(ctx) / (1 << 20)},
                 {"chunks_mib", static_cast<double>(held - ctx) / (1 << 20)},
                 {"total_mib", static_cast<double>(held) / (1 << 20)}};
    }
    sessions.push_back({{"session", id},
                        {"pid", s.guest_pid},
                        {"host_pid", s.host_pid},
                        {"machine", s.machine},
                        {"worker_pid", s.worker_pid},
                        {"role", s.role < 3 ? kRoles[s.role] : "unknown"},
                        {"state", s.state},
                        {"shared_chunks", s.shared_chunks},
                        {"shared_mib", static_cast<double>(s.shared_bytes) / (1 << 20)},
                        {"private_chunks", s.private_chunks},
                        {"private_mib", static_cast<double>(s.private_bytes) / (1 << 20)},
                        {"allocations", s.allocations},
                        {"context_mib", static_cast<double>(context) / (1 << 20)},
                        {"preloaded_workers", PreloadedWorkers(id)},
                        {"gpu_mem_charged", charged},
                        {"ops", ops_.Session(id)}});
  }
  j["sessions"] = sessions;
  j["ops_total"] = ops_.Totals();  // every session since the daemon started
  j["context_source"] = context_source;  // nvml | estimate | fixed (the fake)
  nlohmann::json machines = nlohmann::json::array();
  for (const auto& [id, e] : endpoints_) {
    nlohmann::json m = {{"machine", e.machine}, {"cgroups", e.cgroups}};
    if (e.budget) {
      m["gpu_mem_mib"] = static_cast<double>(e.budget->limit()) / (1 << 20);
      m["gpu_used_mib"] = static_cast<double>(e.budget->used()) / (1 << 20);
    }
    machines.push_back(m);
  }
  j["machines"] = machines;
  size_t pooled = 0, ready = 0;
  for (const auto& [pid, w] : workers_) {
    if (w.session_id != 0) continue;
    ++pooled;
    if (w.ready) ++ready;
  }
  j["pooled_workers"] = pooled;
  j["ready_workers"] = ready;  // context created, waiting for a guest or a clone
  size_t preloaded = 0;
  nlohmann::json pool = nlohmann::json::array();
  for (const auto& [pid, w] : workers_) {
    if (w.session_id != 0) continue;
    preloaded += w.primed != 0 && w.primed_done;
    pool.push_back({{"pid", pid}, {"ready", w.ready}, {"preloaded_session", w.primed_done ? w.primed : 0}});
  }
  j["preloaded_workers"] = preloaded;  // ready and holding a golden's shared chunks
  j["pool"] = pool;
  return j.dump();
}

namespace {

struct AdminHandler {
  const std::function<std::string()>* status_json;
  Status Handle(const proto::AdminStatusRequest&, proto::AdminStatusReply* r, proto::CallContext*) {
    r->json = (*status_json)();
    return Status::Ok();
  }
};

}  // namespace

void Daemon::AcceptAdmin() {
  int fd = ::accept4(admin_listen_.get(), nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return;
  (void)SetLinkSendTimeout(fd);
  admin_clients_[next_admin_client_++] = std::make_unique<UnixChannel>(UniqueFd(fd));
}

void Daemon::ServeAdmin(uint64_t client) {
  auto it = admin_clients_.find(client);
  if (it == admin_clients_.end()) return;
  UnixChannel& ch = *it->second;
  proto::FrameHeader h;
  std::string payload;
  std::vector<UniqueFd> fds;
  auto whole = ch.TryReadFrame(&h, &payload, &fds);  // never waits (control_links.h)
  if (whole.ok() && !*whole) return;
  Status st = whole.status();
  if (!st.ok()) {
    admin_clients_.erase(it);
    DetachEndpointsOf(client);
    return;
  }
  proto::Decoder dec(payload);
  if (h.op == static_cast<uint16_t>(proto::Op::kAdminMachineAttach)) {
    proto::AdminMachineAttachRequest r;
    if (!proto::Decode(dec, &r))
      return AdminReply(client, h.seq, h.op, Malformed("AdminMachineAttach does not decode"), "");
    return AttachMachine(client, h.seq, r, &fds);
  }
  if (h.op == static_cast<uint16_t>(proto::Op::kAdminMachineFork)) {
    proto::AdminMachineForkRequest r;
    if (!proto::Decode(dec, &r))
      return AdminReply(client, h.seq, h.op, Malformed("AdminMachineFork does not decode"), "");
    return StartMachineFork(client, h.seq, r);
  }
  if (h.op == static_cast<uint16_t>(proto::Op::kAdminFork)) {
    proto::AdminForkRequest r;
    if (!proto::Decode(dec, &r)) return AdminReply(client, h.seq, h.op, Malformed("AdminFork does not decode"), "");
    return StartFork(client, h.seq, r);
  }
  if (h.op == static_cast<uint16_t>(proto::Op::kAdminRelease)) {
    proto::AdminReleaseRequest r;
    if (!proto::Decode(dec, &r)) return AdminReply(client, h.seq, h.op, Malformed("AdminRelease does not decode"), "");
    return Release(client, h.seq, r);
  }
  std::function<std::string()> json = [this] { return StatusJson(); };
  AdminHandler handler{&json};
  proto::CallContext ctx;
  ctx.header = &h;
  ctx.fds_in = &fds;
  std::string out;
  proto::Dispatch(handler, h, payload, &ctx, &out);
  if (!out.empty()) (void)ch.Write(out);
}

void Daemon::AdminReply(uint64_t client, uint32_t seq, uint16_t op, const Status& st, const std::string& json) {
  auto it = admin_clients_.find(client);
  if (it == admin_clients_.end()) return;
  std::string out;
  if (st.ok()) {
    proto::AppendReply(&out, op, seq, 0, proto::AdminForkReply{json});
  } else {
    proto::AppendErrorReply(&out, op, seq, st.code(), 0, st.message());
  }
  (void)it->second->Write(out);
}

Daemon::Session* Daemon::FindSession(uint64_t session, uint32_t pid) {
  if (session) {
    auto it = sessions_.find(session);
    return it == sessions_.end() ? nullptr : &it->second;
  }
  Session* found = nullptr;
  for (auto& [id, s] : sessions_)
    if (s.guest_pid == pid && s.role != 2) found = &s;
  return found;
}

void Daemon::StartFork(uint64_t client, uint32_t seq, const proto::AdminForkRequest& req) {
  const uint16_t op = static_cast<uint16_t>(proto::Op::kAdminFork);
  if (req.count == 0) return AdminReply(client, seq, op, InvalidArgument("--count must be at least 1"), "");
  if (req.count > 256) return AdminReply(client, seq, op, InvalidArgument("--count is at most 256"), "");
  if (req.share != "on" && req.share != "off" && req.share != "auto")
    return AdminReply(client, seq, op, InvalidArgument("--share must be on, off or auto"), "");
  Session* s = FindSession(req.session, req.pid);
  if (!s && (req.session || req.wait_ms == 0)) {
    std::string who = req.session ? "session " + std::to_string(req.session) : "pid " + std::to_string(req.pid);
    return AdminReply(client, seq, op, NotFound("no CUDA session of " + who + " (see 'smolvm cuda status')"), "");
  }
  if (QueueFork(client, seq, op, req.pid, s ? s->id : 0, req.count, req.share, req.wait_ms)) AdvanceForks();
}

Daemon::ForkJob* Daemon::QueueFork(uint64_t client, uint32_t seq, uint16_t op, uint32_t pid, uint64_t golden,
                                   uint32_t count, const std::string& share, uint32_t wait_ms) {
  for (const auto& [id, other] : forks_)
    if (golden && other.golden == golden) {
      AdminReply(client, seq, op, Status(Code::kAlreadyExists, "a fork of this session is already in progress"), "");
      return nullptr;
    }
  ForkJob job;
  job.id = next_fork_job_++;
  job.pid = pid;
  job.admin_client = client;
  job.admin_seq = seq;
  job.admin_op = op;
  job.golden = golden;
  job.count = count;
  job.share = share;
  job.t0 = std::chrono::steady_clock::now();
  job.deadline = job.t0 + std::chrono::milliseconds(wait_ms);
  job.clones.resize(count);
  // Tokens exist before any clone can be attached (clone_tokens.cc).
  for (auto& c : job.clones) {
    c.token = NewCloneToken();
    if (c.token.empty()) {
      AdminReply(client, seq, op, Internal("getrandom failed: no clone tokens"), "");
      return nullptr;
    }
  }
  ForkJob& queued = forks_[job.id];
  queued = std::move(job);
  return &queued;
}

void Daemon::Release(uint64_t client, uint32_t seq, const proto::AdminReleaseRequest& req) {
  const uint16_t op = static_cast<uint16_t>(proto::Op::kAdminRelease);
  Session* s = FindSession(req.session, req.pid);
  if (!s) return AdminReply(client, seq, op, NotFound("no CUDA session of pid " + std::to_string(req.pid)), "");
  if (s->state != "forkpoint")
    return AdminReply(client, seq, op, InvalidArgument("the session is not waiting at its forkpoint"), "");
  auto w = workers_.find(s->worker_pid);
  if (w == workers_.end() || !w->second.control) return AdminReply(client, seq, op, Unavailable("its worker is gone"), "");
  std::string out;
  proto::AppendRequest(&out, proto::ForkGoRequest{-1, ""}, 0);
  (void)w->second.control->Write(out);
  s->state = "running";
  auto it = admin_clients_.find(client);
  if (it != admin_clients_.end()) {
    std::string rep;
    proto::AppendReply(&rep, op, seq, 0, proto::AdminReleaseReply{});
    (void)it->second->Write(rep);
  }
}

void Daemon::FailFork(ForkJob& job, Status why) {
  Log("fork of session %llu (pid %u) failed: %s", static_cast<unsigned long long>(job.golden), job.pid,
      why.ToString().c_str());
  for (auto& c : job.clones) {
    if (c.worker > 0 && !c.attached) {
      ::kill(c.worker, SIGKILL);  // reaped through its pidfd
      sessions_.erase(c.session);
    }
  }
  bool released = false;
  for (const auto& c : job.clones) released = released || c.released;
  if (job.machine_fork && !released) CancelGoldenWait(job);  // the golden never got its order
  AdminReply(job.admin_client, job.admin_seq, job.admin_op, why, "");
  forks_.erase(job.id);
}

void Daemon::OnForkManifest(WorkerProc& w, const proto::ForkManifestRequest& m) {
  auto it = forks_.begin();
  while (it != forks_.end() && !(it->second.golden == w.session_id && w.session_id != 0)) ++it;
  // The descriptors follow the manifest on the same link; take them even if
  // the job is gone, to keep the link in step.
  std::vector<UniqueFd> fds;
  if (m.result == 0) {
    LinkReader link(*w.control, std::chrono::steady_clock::now() + kLinkFrameDeadline);
    auto got = ReceiveChunkFds(link, m.num_chunks);
    if (!got.ok()) {
      if (it != forks_.end()) FailFork(it->second, got.status());
      return;
    }
    fds = std::move(got).value();
  }
  if (it == forks_.end() || it->second.phase != ForkJob::kPreparing) return;
  ForkJob& job = it->second;
  if (m.result != 0) return FailFork(job, Status(m.result, m.message));
  // Admission: the clones' private copies and the contexts of any workers
  // not started yet must fit in what the device has free now.
  size_t ready = 0;
  for (auto& [pid, x] : workers_)
    if (x.ready && x.session_id == 0 && x.control) ++ready;
  uint64_t ctx = options_.backend == "cuda" ? (600ull << 20) : 0;
  uint64_t extra_workers = job.count > ready ? job.count - ready : 0;
  uint64_t need = m.private_bytes * job.count + ctx * extra_workers;
  if (need > m.free_bytes) {
    char msg[128];
    std::snprintf(msg, sizeof msg, "fork needs %llu MiB, %llu MiB free",
                  static_cast<unsigned long long>(need >> 20), static_cast<unsigned long long>(m.free_bytes >> 20));
    return FailFork(job, Status(static_cast<int32_t>(2) /* CUDA_ERROR_OUT_OF_MEMORY */, msg));
  }
  if (Status fits = AdmitClones(job); !fits.ok()) return FailFork(job, fits);
  if (m.ahead_generation != 0) {
    // The chunks are those the golden exported when it reached its forkpoint.
    auto a = aheads_.find(job.golden);
    if (a == aheads_.end() || a->second.generation != m.ahead_generation)
      return FailFork(job, Internal("the golden's chunk descriptors exported ahead are gone"));
    for (const UniqueFd& fd : a->second.fds) {
      UniqueFd dup(::fcntl(fd.get(), F_DUPFD_CLOEXEC, 0));
      if (!dup.valid()) return FailFork(job, ErrnoStatus("dup", errno));
      fds.push_back(std::move(dup));
    }
  }
  if (Status admit = AdmitToMachine(job, m.private_bytes); !admit.ok()) return FailFork(job, admit);
  job.manifest = m.manifest;
  job.fds = std::move(fds);
  job.phase = ForkJob::kBuilding;
  job.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  AssignWorkers();
  AdvanceForks();
}

void Daemon::OnCloneBuilt(WorkerProc& w, const proto::CloneBuiltRequest& b) {
  for (auto& [golden, job] : forks_) {
    for (auto& c : job.clones) {
      if (c.worker != w.pid) continue;
      if (b.result != 0) return FailFork(job, Status(b.result, "clone build: " + b.message));
      c.built = true;
      c.info = b;
      ReleaseClone(job, c);
      AdvanceForks();
      return;
    }
  }
}

void Daemon::AdvanceForks() {
  auto now = std::chrono::steady_clock::now();
  const bool had_forks = !forks_.empty();
  for (auto it = forks_.begin(); it != forks_.end();) {
    auto next = std::next(it);
    const uint64_t key = it->first;
    ForkJob& job = it->second;
    if (job.golden == 0) {
      // Waiting for the pid to connect at all.
      if (Session* s = FindSession(0, job.pid)) {
        job.golden = s->id;
      } else {
        if (now >= job.deadline)
          FailFork(job, NotFound("no CUDA session of pid " + std::to_string(job.pid) +
                                 " appeared in time (see 'smolvm cuda status')"));
        it = next;
        continue;
      }
    }
    auto golden = sessions_.find(job.golden);
    if (golden == sessions_.end()) {
      FailFork(job, Unavailable("the golden session ended"));
      it = next;
      continue;
    }
    auto gw = workers_.find(golden->second.worker_pid);
    if (job.phase == ForkJob::kWaitForkpoint) {
      if (golden->second.state == "forkpoint" && gw != workers_.end() && gw->second.control) {
        std::string out;
        proto::AppendRequest(&out, proto::ForkPrepareRequest{job.share, job.count}, 0);
        (void)gw->second.control->Write(out);
        // Fork latency counts from here: the request meets a golden at its forkpoint.
        job.waited_ms = std::chrono::duration<double, std::milli>(now - job.t0).count();
        job.t0 = now;
        job.phase = ForkJob::kPreparing;
        job.deadline = now + std::chrono::seconds(60);
      } else if (now >= job.deadline) {
        FailFork(job, Timeout("pid " + std::to_string(golden->second.guest_pid) +
                              " did not reach its forkpoint in time (is it calling smolvmForkpoint()?)"));
      }
    } else if (job.phase == ForkJob::kBuilding) {
      // Clones rebuild a few at a time: the driver serializes VMM calls across
      // processes, and sixteen at once each took 67x as long as one alone
      // (H200, 2026-12-02: 4.4 s vs 65 ms).
      int in_flight = 0;
      for (const auto& c : job.clones) in_flight += (c.sent && !c.built) ? 1 : 0;
      for (auto& c : job.clones) {
        if (c.worker > 0) continue;
        if (in_flight >= options_.fork_build_parallel) break;
        WorkerProc* free_worker = PickPooledWorker(job.golden);
        if (!free_worker) break;
        if (job.machine_fork) {
          Endpoint* e = FindEndpoint(job.clone_machine);
          Status placed = e ? PlaceWorker(*free_worker, *e)
                            : Unavailable("machine '" + job.clone_machine + "' has no CUDA endpoint any more");
          if (!placed.ok()) {
            DiscardWorker(*free_worker);  // it may be half placed
            FailFork(job, placed);
            break;
          }
        }
        // A clone runs as its golden's tenant (same uid: it reads that tenant's modules).
        auto golden_session = sessions_.find(job.golden);
        auto uid = uids_.Acquire(golden_session == sessions_.end() ? job.clone_machine : golden_session->second.machine);
        if (!uid.ok()) {
          if (job.machine_fork) DiscardWorker(*free_worker);  // placed in the clone machine above
          FailFork(job, uid.status());
          break;
        }
        free_worker->uid = *uid;
        c.worker = free_worker->pid;
        c.session = next_session_++;
        DrawPooledWorker(*free_worker, c.session);
        Session s;
        s.id = c.session;
        s.worker_pid = c.worker;
        s.machine = job.clone_machine;
        s.role = 2;
        s.state = "building";
        sessions_[c.session] = s;
        std::string out;
        proto::AppendRequest(&out, proto::CloneBuildRequest{c.session, 0, job.manifest,
                                                            static_cast<uint32_t>(job.fds.size()), job.golden,
                                                            free_worker->uid}, 0);
        std::vector<int> fds;
        for (auto& fd : job.fds) fds.push_back(fd.get());
        Status st = free_worker->control->Write(out);
        if (st.ok()) st = SendChunkFds(*free_worker->control, fds);
        if (!st.ok()) {
          FailFork(job, st);
          break;
        }
        c.sent = true;
        ++in_flight;
      }
      if (forks_.count(key) == 0) {
        it = next;
        continue;
      }
      // Each clone is released to the golden as soon as it is built
      // (OnCloneBuilt); the reply waits for every child to attach.
      bool all_sent = true, all_attached = true;
      for (auto& c : job.clones) {
        all_sent = all_sent && c.sent;
        all_attached = all_attached && c.attached;
      }
      if (all_sent) job.fds.clear();
      if (all_attached) {
        Log("fork of session %llu: %zu clones attached %.1f ms after the request met the forkpoint",
            static_cast<unsigned long long>(job.golden), job.clones.size(),
            std::chrono::duration<double, std::milli>(now - job.t0).count());
        nlohmann::json lines = nlohmann::json::array();
        for (auto& c : job.clones)
          lines.push_back({{"clone", c.index},
                           {"golden_pid", golden->second.guest_pid},
                           {"host_pid", c.host_pid},
                           {"refused_attaches", job.refused_attaches},
                           {"session", c.session},
                           {"shared", c.info.shared_chunks},
                           {"private", c.info.private_chunks},
                           {"shared_mib", c.info.shared_bytes / 1048576.0},
                           {"private_mib", c.info.private_bytes / 1048576.0},
                           {"build_ms", c.info.ms},
                           {"preloaded", c.info.preloaded},
                           {"waited_ms", job.waited_ms},
                           {"ms", c.ms}});
        AdminReply(job.admin_client, job.admin_seq, job.admin_op, Status::Ok(), lines.dump());
        forks_.erase(it);
      } else if (now >= job.deadline) {
        size_t made = 0;
        for (auto& c : job.clones) made += c.attached;
        FailFork(job, Timeout("clones were not built and attached in time (" + std::to_string(made) + " of " +
                              std::to_string(job.clones.size()) + " attached and running)"));
      }
    } else if (now >= job.deadline) {
      FailFork(job, Timeout("the golden did not describe its session in time"));
    }
    it = next;
  }
  if (had_forks && forks_.empty()) AssignWorkers();  // the spares held back during the forks
}

int Daemon::NextTimeoutMs() const {
  auto link = NextLinkDeadline();
  if (forks_.empty() && pending_.empty() && !link) return -1;
  auto now = std::chrono::steady_clock::now();
  auto soonest = link.value_or(now + std::chrono::hours(1));
  for (const auto& [id, job] : forks_) soonest = std::min(soonest, job.deadline);
  for (const auto& [id, p] : pending_) soonest = std::min(soonest, p.deadline);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(soonest - now).count();
  return static_cast<int>(std::clamp<long long>(ms + 1, 0, 60000));
}

Status Daemon::Run() {
  Log("listening on %s (admin %s), backend %s, proto %s", options_.socket_path.c_str(),
      admin_path_.c_str(), options_.backend.c_str(), proto::HashHex(proto::kProtoHash).c_str());
  AssignWorkers();
  while (!stopping_) {
    std::vector<struct pollfd> pfds;
    enum Kind { kListen, kAdminListen, kSignal, kPidfd, kControl, kAdmin, kEndpoint, kPending };
    std::vector<std::pair<Kind, long>> what;
    auto add = [&](int fd, Kind k, long arg) {
      pfds.push_back({fd, POLLIN, 0});
      what.emplace_back(k, arg);
    };
    add(listen_.get(), kListen, 0);
    add(admin_listen_.get(), kAdminListen, 0);
    add(signal_fd_.get(), kSignal, 0);
    for (auto& [pid, w] : workers_) {
      add(w.pidfd.get(), kPidfd, pid);
      if (w.control) add(w.control->fd(), kControl, pid);
    }
    for (auto& [id, c] : admin_clients_) add(c->fd(), kAdmin, static_cast<long>(id));
    for (auto& [id, e] : endpoints_) add(e.listen.get(), kEndpoint, static_cast<long>(id));
    for (auto& [id, p] : pending_) add(p.fd.get(), kPending, static_cast<long>(id));
    int n = ::poll(pfds.data(), pfds.size(), NextTimeoutMs());
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
  }
  Shutdown();
  return Status::Ok();
}

void Daemon::Shutdown() {
  stopping_ = true;
  pending_.clear();
  for (auto& g : waiting_)
    ReplyError(*g.channel, g.hello_seq, Code::kUnavailable, "the smolvm daemon is shutting down");
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
