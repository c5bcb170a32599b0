// Helpers of the hostile-guest tests (hostile_test.cc: issue 15;
// hostile_caps_test.cc: issue 29): a fake-backend daemon, machine endpoints
// attached to it, guests on the raw wire, and what the daemon holds.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "daemon_client.h"
#include "forkpoint_golden.h"

namespace smolvm::testing {

using namespace smolvm::proto;
using Clock = std::chrono::steady_clock;

inline nlohmann::json StatusOf(const DaemonProcess& d) {
  auto fd = ConnectUnix(d.socket() + ".admin");
  if (!fd.ok()) return nlohmann::json::object();
  UnixChannel ch(std::move(fd).value());
  AdminStatusReply rep;
  EXPECT_TRUE(AdminRoundTrip(ch, AdminStatusRequest{}, &rep).ok());
  return nlohmann::json::parse(rep.json, nullptr, false);
}

// A machine endpoint attached to the daemon (its socket, fake cgroup dirs and
// the admin connection that keeps it attached).
struct Machine {
  std::string name, socket;
  std::unique_ptr<UnixChannel> admin;
};

// forkable: as a machine started --forkable (its goldens export ahead).
inline Status Attach(const DaemonProcess& d, Machine* m, const std::string& name, uint64_t gpu_mem_mib,
              bool forkable = true) {
  m->name = name;
  m->socket = d.dir() + "/" + name + ".sock";
  std::string dir = d.dir() + "/cg-" + name;
  ::mkdir(dir.c_str(), 0755);
  std::ofstream(dir + "/cgroup.procs").flush();
  ASSIGN_OR_RETURN(UniqueFd listener, ListenUnix(m->socket, 0666));
  ASSIGN_OR_RETURN(UniqueFd conn, ConnectUnix(d.socket() + ".admin"));
  m->admin = std::make_unique<UnixChannel>(std::move(conn));
  AdminMachineAttachReply rep;
  return AdminRoundTrip(*m->admin, AdminMachineAttachRequest{name, dir + "\n", gpu_mem_mib << 20, forkable ? 1u : 0u}, &rep,
                        listener.get());
}

inline int OpenFds(pid_t pid) {
  int n = 0;
  if (DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/fd").c_str())) {
    while (struct dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
  }
  return n;
}

inline int WorkerOf(const DaemonProcess& d, uint64_t session) {
  auto status = StatusOf(d);
  for (const auto& s : status["sessions"])
    if (s["session"] == session) return s["worker_pid"];
  return 0;
}

// A connection that does not wait for the daemon to accept it (invalid when
// the backlog is full).
inline UniqueFd NonBlockingConnect(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  if (::connect(fd.get(), reinterpret_cast<struct sockaddr*>(&addr), sizeof addr) < 0) return UniqueFd();
  return fd;
}

// A Hello on `socket` whose reply is awaited at most `wait`: the reply's status.
inline Status HelloWithin(const std::string& socket, std::chrono::seconds wait) {
  ASSIGN_OR_RETURN(UniqueFd fd, ConnectUnix(socket));
  struct timeval tv = {static_cast<time_t>(wait.count()), 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  UnixChannel ch(std::move(fd));
  std::string out;
  AppendRequest(&out, HelloRequest{kProtoHash, 0, static_cast<uint32_t>(::getpid()), "", 0}, 1);
  RETURN_IF_ERROR(ch.Write(out));
  HelloReply rep;
  return ReadReplyFrame(ch, &rep);
}

inline double Median3(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

#ifdef PROG_DIR
// Runs a test program through the shim against `socket`; returns its wall
// time in seconds, or a large number when it failed or ran past 30 s.
inline double RunGuestProgram(const DaemonProcess& d, const std::string& socket, const std::string& name) {
  std::string exe = std::string(PROG_DIR) + "/" + name;
  auto t0 = Clock::now();
  pid_t pid = ::fork();
  if (pid == 0) {
    int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 1);
    ::dup2(devnull, 2);
    ::setenv("LD_LIBRARY_PATH", SHIM_DIR, 1);
    ::setenv("SMOLVM_CUDA_SOCKET", socket.c_str(), 1);
    ::execl(exe.c_str(), exe.c_str(), nullptr);
    ::_exit(127);
  }
  int st = 0;
  while (::waitpid(pid, &st, WNOHANG) == 0) {
    if (Clock::now() - t0 > std::chrono::seconds(30)) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      ADD_FAILURE() << name << " ran past 30 s\n" << d.Log().substr(0, 4000);
      return 1e9;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << name << " failed";
  return (WIFEXITED(st) && WEXITSTATUS(st) == 0) ? s : 1e9;
}
#endif

// A session of `chunks` chunks (2 MiB each) on `socket`, waiting at its
// forkpoint (its worker exports ahead), and released on destruction.
struct WaitingGolden {
  const DaemonProcess& d;
  RawClient client;
  std::unique_ptr<Golden> golden;
  WaitingGolden(const DaemonProcess& daemon, const std::string& socket, int chunks) : d(daemon) {
    EXPECT_TRUE(client.Connect(socket).ok()) << d.Log();
    for (int i = 0; i < chunks; ++i) {
      MemAllocReply m;
      EXPECT_TRUE(client.Call(MemAllocRequest{.bytes = 2 << 20}, &m).ok());
    }
    golden = std::make_unique<Golden>(&client);
  }
  uint64_t session() const { return client.hello().session_id; }
  ~WaitingGolden() {
    UnixChannel admin(ConnectUnix(d.socket() + ".admin").value());
    AdminReleaseReply rel;
    (void)AdminRoundTrip(admin, AdminReleaseRequest{session(), 0}, &rel);
    golden.reset();
  }
};

// Waits until the daemon's log holds `line` (at most 20 s).
inline bool LogShows(const DaemonProcess& d, const std::string& line) {
  auto deadline = Clock::now() + std::chrono::seconds(20);
  while (d.Log().find(line) == std::string::npos && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return d.Log().find(line) != std::string::npos;
}

inline std::string AheadLine(uint64_t session, int chunks) {
  return "fork ahead: session " + std::to_string(session) + " at its forkpoint, " + std::to_string(chunks) +
         " chunks exported";
}

// A connection made by a child process (so its SO_PEERCRED pid is the
// child's), handed back to this process; the child has exited.
inline UniqueFd ConnectAsChild(const std::string& socket, pid_t* child_pid) {
  UniqueFd a, b;
  if (!SocketPair(&a, &b).ok()) return UniqueFd();
  pid_t pid = ::fork();
  if (pid == 0) {
    auto fd = ConnectUnix(socket);
    if (fd.ok()) {
      int one = fd->get();
      (void)UnixChannel(std::move(b)).Write("x", std::span<const int>(&one, 1));
    }
    ::_exit(0);
  }
  *child_pid = pid;
  ::waitpid(pid, nullptr, 0);
  b.Reset();
  UnixChannel ch(std::move(a));
  char byte;
  struct iovec iov = {&byte, 1};
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  if (::recvmsg(ch.fd(), &msg, MSG_CMSG_CLOEXEC) != 1) return UniqueFd();
  struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (c == nullptr || c->cmsg_type != SCM_RIGHTS) return UniqueFd();
  int fd;
  std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
  return UniqueFd(fd);
}

}  // namespace smolvm::testing
