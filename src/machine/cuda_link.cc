#include "machine/cuda_link.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "machine/paths.h"
#include "machine/process.h"
#include "proto/enums.h"
#include "proto/frame.h"
#include "transport/read_reply.h"
#include "transport/unix_channel.h"

namespace smolvm::machine {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kDaemonStartTimeoutMs = 15000;
// The daemon's --idle-exit when $SMOLVM_CUDA_IDLE_EXIT is unset: long enough
// that a script's next `machine start` finds it warm, short enough that a
// GPU is not held for minutes after the last machine.
constexpr int kDefaultIdleExitS = 60;
constexpr int kMaxIdleExitS = 7 * 24 * 3600;  // the daemon's --idle-exit range

std::string RecordPath(const std::string& home) { return CudaDir(home) + "/daemon.json"; }

std::string WantedBackend() {
  const char* b = std::getenv("SMOLVM_CUDA_BACKEND");
  return b != nullptr && b[0] != '\0' ? b : "";
}

Result<CudaDaemon> ReadRecord(const std::string& home) {
  std::ifstream in(RecordPath(home));
  if (!in) return NotFound("no CUDA daemon recorded under " + CudaDir(home));
  std::stringstream ss;
  ss << in.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return NotFound("the CUDA daemon record is unreadable");
  CudaDaemon d;
  d.pid = j.value("pid", 0);
  d.start = j.value("start", int64_t{0});
  d.socket = j.value("socket", "");
  d.backend = j.value("backend", "");
  return d;
}

bool Alive(const CudaDaemon& d) {
  if (d.pid <= 0 || !ProcessAlive(d.pid, d.start)) return false;
  return ConnectUnix(d.socket + ".admin").ok();
}

Status WriteRecord(const std::string& home, const CudaDaemon& d) {
  nlohmann::json j = {{"pid", d.pid}, {"start", d.start}, {"socket", d.socket}, {"backend", d.backend}};
  std::string tmp = RecordPath(home) + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << j.dump() << "\n";
    if (!out) return Status(Code::kIo, "cannot write " + tmp);
  }
  if (::rename(tmp.c_str(), RecordPath(home).c_str()) < 0) return ErrnoStatus("rename " + tmp, errno);
  return Status::Ok();
}

// $SMOLVM_CUDA_IDLE_EXIT, else the default: the daemon's --idle-exit.
Result<int> IdleExitSeconds() {
  const char* env = std::getenv("SMOLVM_CUDA_IDLE_EXIT");
  if (env == nullptr || env[0] == '\0') return kDefaultIdleExitS;
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(env, &end, 10);
  if (errno != 0 || *end != '\0' || v < 0 || v > kMaxIdleExitS)
    return InvalidArgument("SMOLVM_CUDA_IDLE_EXIT must be whole seconds from 0 (never) to " +
                           std::to_string(kMaxIdleExitS) + ", not '" + env + "'");
  return static_cast<int>(v);
}

// The last line the daemon wrote to its log from `offset` on (its reason
// when it exits at start), without the command's own prefix.
std::string LastLogLine(const std::string& log, off_t offset) {
  std::ifstream in(log);
  in.seekg(offset);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  for (const char* prefix : {"smolvm cuda daemon: ", "smolvm _cuda-daemon: "})
    if (last.rfind(prefix, 0) == 0) last = last.substr(std::strlen(prefix));
  return last;
}

off_t FileSize(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? st.st_size : 0;
}

// Starts `smolvm _cuda-daemon` detached (own session, reparented away from
// us) and returns its pid.
Result<pid_t> SpawnDaemon(const std::string& home, const std::string& socket, const std::string& backend) {
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) < 0) return ErrnoStatus("pipe", errno);
  UniqueFd rd(pipefd[0]), wr(pipefd[1]);
  std::string log = CudaDir(home) + "/daemon.log";
  const char* pool = std::getenv("SMOLVM_CUDA_POOL");
  std::string pool_arg = pool != nullptr && pool[0] != '\0' ? pool : "1";
  const char* spares = std::getenv("SMOLVM_CUDA_SPARES");
  std::string spares_arg = spares != nullptr && spares[0] != '\0' ? spares : pool_arg;
  // Clones rebuilt at once in a fork (the daemon's --fork-parallel); its
  // default when unset. The daemon validates the value.
  const char* parallel = std::getenv("SMOLVM_CUDA_FORK_PARALLEL");
  std::string parallel_arg = parallel != nullptr && parallel[0] != '\0' ? parallel : "";
  ASSIGN_OR_RETURN(int idle_s, IdleExitSeconds());
  std::string idle_arg = std::to_string(idle_s);
  pid_t child = ::fork();
  if (child < 0) return ErrnoStatus("fork", errno);
  if (child == 0) {
    ::setsid();
    pid_t daemon = ::fork();
    if (daemon != 0) {
      (void)!::write(wr.get(), &daemon, sizeof daemon);
      ::_exit(daemon < 0 ? 1 : 0);
    }
    int null_fd = ::open("/dev/null", O_RDWR);
    int log_fd = ::open(log.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0600);
    ::dup2(null_fd, 0);
    ::dup2(log_fd >= 0 ? log_fd : null_fd, 1);
    ::dup2(log_fd >= 0 ? log_fd : null_fd, 2);
    ::syscall(SYS_close_range, 3u, ~0u, 0u);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    const char* argv[] = {"smolvm", "_cuda-daemon", socket.c_str(), "--backend", backend.c_str(),
                          "--pool", pool_arg.c_str(), "--spares", spares_arg.c_str(), "--idle-exit", idle_arg.c_str(),
                          parallel_arg.empty() ? nullptr : "--fork-parallel", parallel_arg.c_str(), nullptr};
    ::execv("/proc/self/exe", const_cast<char**>(argv));
    ::_exit(127);
  }
  wr.Reset();
  int status;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  pid_t daemon = 0;
  if (::read(rd.get(), &daemon, sizeof daemon) != sizeof daemon || daemon <= 0)
    return Internal("could not start the CUDA daemon");
  return daemon;
}

Status ReadReply(UnixChannel& ch, Clock::time_point deadline, std::string* json, bool has_json) {
  struct pollfd p = {ch.fd(), POLLIN, 0};
  while (!ch.HasBufferedFrame()) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return Timeout("the CUDA daemon did not answer in time");
    int r = ::poll(&p, 1, static_cast<int>(left));
    if (r < 0 && errno != EINTR) return ErrnoStatus("poll", errno);
    if (r > 0) break;
  }
  if (!has_json) {
    proto::AdminMachineAttachReply rep;
    return ReadReplyFrame(ch, &rep);
  }
  proto::AdminMachineForkReply rep;
  RETURN_IF_ERROR(ReadReplyFrame(ch, &rep));
  *json = rep.json;
  return Status::Ok();
}

}  // namespace

std::string CudaDir(const std::string& home) { return home + "/cuda"; }

Result<CudaDaemon> FindCudaDaemon(const std::string& home) {
  ASSIGN_OR_RETURN(CudaDaemon d, ReadRecord(home));
  if (!Alive(d)) return NotFound("the CUDA daemon recorded under " + CudaDir(home) + " is not running");
  return d;
}

Result<CudaDaemon> EnsureCudaDaemon(const std::string& home) {
  std::string dir = CudaDir(home);
  if (Status st = MakeHome(home); !st.ok()) return Status(st.code(), "$SMOLVM_HOME: " + st.message());
  if (::mkdir(dir.c_str(), 0700) < 0 && errno != EEXIST) return ErrnoStatus("mkdir " + dir, errno);
  UniqueFd lock(::open((dir + "/lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!lock.valid()) return ErrnoStatus("open " + dir + "/lock", errno);
  while (::flock(lock.get(), LOCK_EX) < 0)
    if (errno != EINTR) return ErrnoStatus("flock " + dir + "/lock", errno);
  std::string wanted = WantedBackend();
  if (auto d = ReadRecord(home); d.ok() && Alive(*d)) {
    if (!wanted.empty() && wanted != d->backend)
      return InvalidArgument("the host's CUDA daemon (pid " + std::to_string(d->pid) + ") runs the '" + d->backend +
                             "' backend, not '" + wanted + "' (stop it with 'smolvm cuda shutdown')");
    return *d;
  }
  CudaDaemon d;
  d.socket = dir + "/smolvm.sock";
  d.backend = wanted.empty() ? "cuda" : wanted;
  if (d.backend != "cuda" && d.backend != "fake")
    return InvalidArgument("SMOLVM_CUDA_BACKEND must be cuda or fake, not '" + d.backend + "'");
  const std::string log = dir + "/daemon.log";
  const off_t log_at = FileSize(log);
  ASSIGN_OR_RETURN(d.pid, SpawnDaemon(home, d.socket, d.backend));
  d.start = ProcessStartTime(d.pid);
  auto deadline = Clock::now() + std::chrono::milliseconds(kDaemonStartTimeoutMs);
  while (!ConnectUnix(d.socket + ".admin").ok()) {
    if (!ProcessAlive(d.pid, d.start)) {
      // Its own words first (a GPU-less host: the line that names the fix).
      std::string why = LastLogLine(log, log_at);
      return Unavailable(why.empty() ? "the CUDA daemon exited at start (see " + log + ")"
                                     : why + " (the CUDA daemon's log: " + log + ")");
    }
    if (Clock::now() > deadline) {
      ::kill(d.pid, SIGKILL);
      return Timeout("the CUDA daemon did not come up in time (see " + dir + "/daemon.log)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  RETURN_IF_ERROR(WriteRecord(home, d));
  return d;
}

Status StopCudaDaemon(const std::string& home, int timeout_ms) {
  auto d = ReadRecord(home);
  if (!d.ok()) return Status::Ok();
  auto pidfd = OpenPidfd(d->pid, d->start);
  if (pidfd.ok()) {
    RETURN_IF_ERROR(SignalPidfd(pidfd->get(), SIGTERM));
    if (!WaitPidfd(pidfd->get(), timeout_ms)) {
      (void)SignalPidfd(pidfd->get(), SIGKILL);
      if (!WaitPidfd(pidfd->get(), 5000)) return Timeout("the CUDA daemon (pid " + std::to_string(d->pid) + ") did not stop");
    }
  }
  ::unlink(RecordPath(home).c_str());
  return Status::Ok();
}

Result<UniqueFd> HoldCudaDaemon(const CudaDaemon& d) {
  auto conn = ConnectUnix(d.socket + ".admin");
  if (!conn.ok())
    return Status(conn.status().code(), "cannot hold the CUDA daemon (pid " + std::to_string(d.pid) + ") at " +
                                            d.socket + ".admin: " + conn.status().message());
  return std::move(*conn);
}

Result<UniqueFd> AttachCudaMachine(const CudaDaemon& d, const std::string& machine, const std::string& sock_path,
                                   const std::vector<std::string>& cgroup_dirs, int64_t gpu_mem_bytes, bool forkable,
                                   uid_t guest_uid, bool no_descriptors) {
  // The guest's own uid only (issue 29: it was 0666 under a 0755 home).
  ASSIGN_OR_RETURN(UniqueFd listener, ListenUnix(sock_path, 0600));
  if (::chown(sock_path.c_str(), guest_uid, guest_uid) < 0) return ErrnoStatus("chown " + sock_path, errno);
  ASSIGN_OR_RETURN(UniqueFd conn, ConnectUnix(d.socket + ".admin"));
  UnixChannel ch(std::move(conn));
  proto::AdminMachineAttachRequest req;
  req.machine = machine;
  for (const auto& dir : cgroup_dirs) req.cgroups += dir + "\n";
  req.gpu_mem_bytes = static_cast<uint64_t>(gpu_mem_bytes);
  req.forkable = forkable ? 1 : 0;
  req.no_descriptors = no_descriptors ? 1 : 0;
  std::string out;
  proto::AppendRequest(&out, req, 1, 1);
  int fd = listener.get();
  RETURN_IF_ERROR(ch.Write(out, std::span<const int>(&fd, 1)));
  std::string unused;
  Status st = ReadReply(ch, Clock::now() + std::chrono::seconds(10), &unused, false);
  if (!st.ok()) return Status(st.code(), "the CUDA daemon refused machine '" + machine + "': " + st.message());
  return ch.TakeSocket();
}

Result<UniqueFd> SendCudaMachineFork(const CudaDaemon& d, const std::string& golden, pid_t golden_pid,
                                     const std::vector<std::string>& clones, const std::string& share, int wait_ms) {
  const auto mode = proto::ParseShareMode(share);
  if (!mode) return InvalidArgument("--share must be on, off or auto");
  ASSIGN_OR_RETURN(UniqueFd conn, ConnectUnix(d.socket + ".admin"));
  proto::AdminMachineForkRequest req;
  req.golden_machine = golden;
  req.golden_pid = static_cast<uint32_t>(golden_pid);
  for (const auto& c : clones) req.clone_machines += c + "\n";
  req.share = proto::Wire(*mode);
  req.wait_ms = static_cast<uint32_t>(wait_ms);
  std::string out;
  proto::AppendRequest(&out, req, 1);
  UnixChannel ch(std::move(conn));
  RETURN_IF_ERROR(ch.Write(out));
  return ch.TakeSocket();
}

Status AnnounceCudaForkpoint(const CudaDaemon& d, const std::string& golden, pid_t golden_pid, bool at) {
  ASSIGN_OR_RETURN(UniqueFd conn, ConnectUnix(d.socket + ".admin"));
  proto::AdminForkpointRequest req;
  req.golden_machine = golden;
  req.golden_pid = static_cast<uint32_t>(golden_pid);
  req.at = at ? 1 : 0;
  std::string out;
  proto::AppendRequest(&out, req, 1);
  UnixChannel ch(std::move(conn));
  RETURN_IF_ERROR(ch.Write(out));
  // The daemon answers at once (the export runs in the golden's worker),
  // with an empty JSON string as every admin reply of the daemon's.
  std::string unused;
  return ReadReply(ch, Clock::now() + std::chrono::seconds(2), &unused, true);
}

Result<std::string> CudaDaemonStatus(const CudaDaemon& d) {
  ASSIGN_OR_RETURN(UniqueFd conn, ConnectUnix(d.socket + ".admin"));
  std::string out;
  proto::AppendRequest(&out, proto::AdminStatusRequest{}, 1);
  UnixChannel ch(std::move(conn));
  RETURN_IF_ERROR(ch.Write(out));
  std::string json;
  RETURN_IF_ERROR(ReadReply(ch, Clock::now() + std::chrono::seconds(5), &json, true));
  return json;
}

Result<std::string> ReadCudaMachineFork(int fd, Clock::time_point deadline) {
  UnixChannel ch{UniqueFd(::dup(fd))};
  std::string json;
  RETURN_IF_ERROR(ReadReply(ch, deadline, &json, true));
  return json;
}

}  // namespace smolvm::machine
