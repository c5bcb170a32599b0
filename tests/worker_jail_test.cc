// Issue 15: workers in their jail, end to end on the fake backend (the
// daemon runs as root here, as on a GPU host). Each machine's workers run
// as that machine's own unprivileged uid, with no_new_privs and the seccomp
// filter loaded; a worker of one machine can neither signal nor trace
// another's; a forbidden system call ends only the worker that made it;
// a module one machine loaded is a miss for another.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <thread>
#include <map>
#include <nlohmann/json.hpp>

#include "proto/control_ops.h"
#include "proto/fork_manifest.h"
#include "worker/module_cache.h"
#include "worker/worker_seccomp.h"
#include "worker/worker_uids.h"
#include "daemon_client.h"

namespace smolvm::testing {
namespace {

using namespace smolvm::proto;

nlohmann::json StatusOf(const DaemonProcess& d) {
  UnixChannel ch(ConnectUnix(d.socket() + ".admin").value());
  AdminStatusReply rep;
  EXPECT_TRUE(AdminRoundTrip(ch, AdminStatusRequest{}, &rep).ok());
  return nlohmann::json::parse(rep.json);
}

// The "Name:\tv1\tv2..." line of /proc/<pid>/status, values only.
std::string StatusLine(pid_t pid, const std::string& name) {
  std::istringstream in(ReadFile("/proc/" + std::to_string(pid) + "/status"));
  for (std::string line; std::getline(in, line);)
    if (line.rfind(name + ":", 0) == 0) return line.substr(name.size() + 2);
  return "";
}

uint32_t UidOf(pid_t pid) { return static_cast<uint32_t>(std::stoul(StatusLine(pid, "Uid"))); }

class WorkerJailTest : public ::testing::Test {
 protected:
  explicit WorkerJailTest(int pool = 1, std::vector<std::string> extra = {})
      : daemon(DaemonArgs{"fake", pool, -1, std::move(extra), nullptr}) {}
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "workers drop their uid only under a root daemon";
  }
  // A machine endpoint (no cgroups, no --gpu-mem) and the admin connection
  // that keeps it attached.
  Status Attach(const std::string& name, std::string* socket) {
    *socket = daemon.dir() + "/" + name + ".sock";
    ASSIGN_OR_RETURN(UniqueFd listener, ListenUnix(*socket, 0666));
    ASSIGN_OR_RETURN(UniqueFd conn, ConnectUnix(daemon.socket() + ".admin"));
    admins.push_back(std::make_unique<UnixChannel>(std::move(conn)));
    AdminMachineAttachReply rep;
    return AdminRoundTrip(*admins.back(), AdminMachineAttachRequest{name, "", 0, 1}, &rep, listener.get());
  }
  pid_t WorkerOf(const RawClient& c) {
    const nlohmann::json status = StatusOf(daemon);
    for (const auto& s : status["sessions"])
      if (s["session"] == c.hello().session_id) return s["worker_pid"];
    return 0;
  }
  DaemonProcess daemon;
  std::vector<std::unique_ptr<UnixChannel>> admins;
};

TEST_F(WorkerJailTest, EachMachinesWorkersRunAsItsOwnUnprivilegedUid) {
  std::string sa, sb;
  ASSERT_TRUE(Attach("jail-a", &sa).ok());
  ASSERT_TRUE(Attach("jail-b", &sb).ok());
  RawClient a1, a2, b, own;
  ASSERT_TRUE(a1.Connect(sa).ok()) << daemon.Log();
  ASSERT_TRUE(a2.Connect(sa).ok()) << daemon.Log();
  ASSERT_TRUE(b.Connect(sb).ok()) << daemon.Log();
  ASSERT_TRUE(own.Connect(daemon.socket()).ok()) << daemon.Log();
  std::map<std::string, pid_t> w = {{"a1", WorkerOf(a1)}, {"a2", WorkerOf(a2)}, {"b", WorkerOf(b)}, {"own", WorkerOf(own)}};
  for (auto& [name, pid] : w) {
    ASSERT_GT(pid, 0) << name;
    // Real, effective, saved and filesystem uids and gids: all the tenant's.
    uint32_t uid = UidOf(pid);
    EXPECT_GE(uid, kDefaultWorkerUidBase) << name;
    EXPECT_EQ(StatusLine(pid, "Uid"), std::to_string(uid) + "\t" + std::to_string(uid) + "\t" + std::to_string(uid) +
                                          "\t" + std::to_string(uid)) << name;
    EXPECT_EQ(StatusLine(pid, "Gid").substr(0, std::to_string(uid).size()), std::to_string(uid)) << name;
    EXPECT_EQ(StatusLine(pid, "Groups").find_first_not_of(" \t"), std::string::npos) << name;
    EXPECT_EQ(StatusLine(pid, "CapEff"), "0000000000000000") << name;
    EXPECT_EQ(StatusLine(pid, "NoNewPrivs"), "1") << name;
    EXPECT_EQ(StatusLine(pid, "Seccomp"), "2") << name;  // filter mode
  }
  EXPECT_EQ(UidOf(w["a1"]), UidOf(w["a2"]));  // one tenant, one uid
  EXPECT_NE(UidOf(w["a1"]), UidOf(w["b"]));
  EXPECT_NE(UidOf(w["a1"]), UidOf(w["own"]));
  EXPECT_NE(UidOf(w["b"]), UidOf(w["own"]));
  // The worker's JIT cache (its CUDA_CACHE_PATH, <jail>/w<pid>) is its own
  // directory, owned by its uid.
  std::string cmdline = ReadFile("/proc/" + std::to_string(w["b"]) + "/cmdline");
  size_t at = cmdline.find(std::string("--jail-dir") + '\0');
  ASSERT_NE(at, std::string::npos);
  at += 11;
  std::string jail = cmdline.substr(at, cmdline.find('\0', at) - at);
  std::string cache = jail + "/w" + std::to_string(w["b"]);
  struct stat st;
  ASSERT_EQ(::stat(cache.c_str(), &st), 0) << cache;
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_uid, UidOf(w["b"]));
  EXPECT_EQ(st.st_mode & 077, 0u);
  // The jail goes with the daemon.
  a1.Close(), a2.Close(), b.Close(), own.Close();
  daemon.Stop();
  EXPECT_FALSE(std::filesystem::exists(jail)) << jail;
}

// Run as machine A's uid (what a compromised worker of A is), machine B's
// worker cannot be signalled or traced; the daemon's pool (root) neither.
TEST_F(WorkerJailTest, AWorkerOfOneMachineCannotSignalOrTraceAnothers) {
  std::string sa, sb;
  ASSERT_TRUE(Attach("sig-a", &sa).ok());
  ASSERT_TRUE(Attach("sig-b", &sb).ok());
  RawClient a, b;
  ASSERT_TRUE(a.Connect(sa).ok());
  ASSERT_TRUE(b.Connect(sb).ok());
  pid_t wa = WorkerOf(a), wb = WorkerOf(b);
  uint32_t uid_a = UidOf(wa);
  pid_t child = ::fork();
  if (child == 0) {
    if (::setresgid(uid_a, uid_a, uid_a) < 0 || ::setresuid(uid_a, uid_a, uid_a) < 0) ::_exit(10);
    int code = 0;
    if (::kill(wb, SIGKILL) == 0 || errno != EPERM) code |= 1;
    if (::kill(wb, 0) == 0 || errno != EPERM) code |= 2;
    if (::ptrace(PTRACE_ATTACH, wb, nullptr, nullptr) == 0 || errno != EPERM) code |= 4;
    if (::kill(daemon.pid(), SIGTERM) == 0 || errno != EPERM) code |= 8;
    // Its own tenant's worker is not dumpable: no tracing there either.
    if (::ptrace(PTRACE_ATTACH, wa, nullptr, nullptr) == 0 || errno != EPERM) code |= 16;
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "bits: 1 kill, 2 probe, 4 ptrace B, 8 daemon, 16 ptrace own, 10 setuid";
  PingReply pong;
  EXPECT_TRUE(b.Call(PingRequest{}, &pong).ok());
}

TEST_F(WorkerJailTest, AModuleOneMachineLoadedIsAMissForAnother) {
  std::string sa, sb;
  ASSERT_TRUE(Attach("mod-a", &sa).ok());
  ASSERT_TRUE(Attach("mod-b", &sb).ok());
  RawClient a, a2, b;
  ASSERT_TRUE(a.Connect(sa).ok());
  ASSERT_TRUE(b.Connect(sb).ok());
  std::string image = "machine a's module";
  ModuleLoadReply lr;
  ASSERT_TRUE(a.Call(ModuleLoadRequest{.module = 1, .hash = ModuleHash(image), .image = image}, &lr).ok());
  CallResult r = b.Call(ModuleLoadRequest{.module = 1, .hash = ModuleHash(image), .image = ""}, &lr);
  EXPECT_EQ(r.head.result, static_cast<int32_t>(Code::kNotFound));
  // A module index is a golden's and its clones' (ModuleCache): another
  // session of machine a misses too, and its bytes are stored once.
  ASSERT_TRUE(a2.Connect(sa).ok());
  r = a2.Call(ModuleLoadRequest{.module = 1, .hash = ModuleHash(image), .image = ""}, &lr);
  EXPECT_EQ(r.head.result, static_cast<int32_t>(Code::kNotFound));
  EXPECT_TRUE(a2.Call(ModuleLoadRequest{.module = 1, .hash = ModuleHash(image), .image = image}, &lr).ok());
}

// Issue 15: a pooled worker that preloads a golden's chunks enters its jail
// then, as the golden's tenant, so a fork does not wait for the uid change.
// It serves that tenant only: another tenant's guest gets the one pooled
// worker kept out of any jail (or a new one), and once the tenant has no
// golden left its jailed workers are retired, never pooled for anyone else.
class PreloadJailTest : public WorkerJailTest {
 protected:
  explicit PreloadJailTest(std::vector<std::string> extra = {}) : WorkerJailTest(4, std::move(extra)) {}
  // Machine a's golden at its forkpoint (its thread waits there until the
  // session ends); returns its uid.
  uint32_t GoldenAtForkpoint(RawClient& golden, const std::string& socket, std::thread* at_forkpoint) {
    EXPECT_TRUE(golden.Connect(socket).ok()) << daemon.Log();
    MemAllocReply frozen;
    EXPECT_TRUE(golden.Call(MemAllocRequest{.bytes = 4u << 20}, &frozen).ok());
    MarkFrozenReply m;
    EXPECT_TRUE(golden.Call(MarkFrozenRequest{.dptr = frozen.dptr, .bytes = 4u << 20}, &m).ok());
    const uint32_t uid = UidOf(WorkerOf(golden));
    *at_forkpoint = std::thread([&golden] {
      ForkpointWaitReply r;
      (void)golden.Call(ForkpointWaitRequest{}, &r);  // ends when the session does
    });
    return uid;
  }
  // Polls the daemon's status until `pred` holds (or 10 s pass).
  template <typename Pred>
  nlohmann::json Wait(Pred pred) {
    nlohmann::json j;
    for (int i = 0; i < 1000; ++i) {
      j = StatusOf(daemon);
      if (pred(j)) return j;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return j;
  }
};

TEST_F(PreloadJailTest, PreloadedWorkersRunAsTheGoldensUidAndAreRetiredWithIt) {
  std::string sa, sb;
  ASSERT_TRUE(Attach("pre-a", &sa).ok());
  ASSERT_TRUE(Attach("pre-b", &sb).ok());
  RawClient golden;
  std::thread at_forkpoint;
  const uint32_t uid_a = GoldenAtForkpoint(golden, sa, &at_forkpoint);
  // Every pooled worker preloads; all but one are in machine a's jail.
  nlohmann::json j = Wait([](const nlohmann::json& j) {
    if (j["pool"].size() < 4u) return false;
    for (const auto& w : j["pool"])
      if (w["preloaded_session"] == 0) return false;
    return true;
  });
  std::vector<pid_t> jailed;
  int unjailed = 0;
  for (const auto& w : j["pool"]) {
    pid_t pid = w["pid"];
    uint32_t uid = UidOf(pid);
    if (uid == uid_a) {
      jailed.push_back(pid);
      EXPECT_EQ(StatusLine(pid, "Seccomp"), "2") << pid;
      EXPECT_EQ(StatusLine(pid, "CapEff"), "0000000000000000") << pid;
    } else {
      EXPECT_EQ(uid, 0u) << "a pooled worker in another tenant's jail";
      ++unjailed;
    }
  }
  EXPECT_EQ(jailed.size(), 3u) << j.dump() << daemon.Log();
  EXPECT_EQ(unjailed, 1) << j.dump();
  auto is_jailed = [&](pid_t pid) { return std::find(jailed.begin(), jailed.end(), pid) != jailed.end(); };

  // Machine b's guest, while a's golden waits: never one of a's workers.
  RawClient b;
  ASSERT_TRUE(b.Connect(sb).ok()) << daemon.Log();
  pid_t wb = WorkerOf(b);
  EXPECT_FALSE(is_jailed(wb));
  EXPECT_NE(UidOf(wb), uid_a);
  PingReply pong;
  EXPECT_TRUE(b.Call(PingRequest{}, &pong).ok());

  // The golden ends: its tenant's pooled workers are retired, not pooled again.
  ::shutdown(golden.channel().fd(), SHUT_RDWR);  // wakes the thread at the forkpoint too
  at_forkpoint.join();
  golden.Close();
  j = Wait([&](const nlohmann::json& j) {
    for (const auto& w : j["pool"])
      if (is_jailed(w["pid"])) return false;
    for (pid_t pid : jailed)
      if (std::filesystem::exists("/proc/" + std::to_string(pid))) return false;
    return j["pool"].size() >= 3u;
  });
  for (pid_t pid : jailed) EXPECT_FALSE(std::filesystem::exists("/proc/" + std::to_string(pid))) << pid;
  EXPECT_EQ(Count(daemon.Log(), "retired (in the jail of uid"), jailed.size()) << daemon.Log();
  // Whoever comes next, of any tenant, gets a worker in its own jail (a's
  // uid may be handed out again: no process of it is left).
  RawClient b2, own;
  ASSERT_TRUE(b2.Connect(sb).ok()) << daemon.Log();
  ASSERT_TRUE(own.Connect(daemon.socket()).ok()) << daemon.Log();
  for (RawClient* c : {&b2, &own}) {
    pid_t w = WorkerOf(*c);
    EXPECT_FALSE(is_jailed(w));
    EXPECT_GE(UidOf(w), kDefaultWorkerUidBase);
    EXPECT_TRUE(c->Call(PingRequest{}, &pong).ok());
  }
  EXPECT_EQ(UidOf(WorkerOf(b2)), UidOf(wb));
}

// At the worker cap, other tenants' guests still get workers: once the one
// pooled worker kept out of any jail is taken, a worker jailed ahead for
// machine a is retired to make room.
class PreloadJailAtCapTest : public PreloadJailTest {
 protected:
  PreloadJailAtCapTest() : PreloadJailTest({"--max-workers", "4"}) {}
};

TEST_F(PreloadJailAtCapTest, AnotherTenantsGuestsNeverWaitOnWorkersJailedAhead) {
  std::string sa, sb;
  ASSERT_TRUE(Attach("cap-a", &sa).ok());
  ASSERT_TRUE(Attach("cap-b", &sb).ok());
  RawClient golden;
  std::thread at_forkpoint;
  const uint32_t uid_a = GoldenAtForkpoint(golden, sa, &at_forkpoint);
  // The golden's worker and 3 pooled, all preloaded: 2 in a's jail.
  nlohmann::json j = Wait([uid_a](const nlohmann::json& j) {
    size_t jailed = 0;
    for (const auto& w : j["pool"]) jailed += w["preloaded_session"] != 0 && UidOf(w["pid"]) == uid_a;
    return j["pool"].size() == 3u && jailed == 2u;
  });
  ASSERT_EQ(j["pool"].size(), 3u) << j.dump() << daemon.Log();
  RawClient b1, b2;
  ASSERT_TRUE(b1.Connect(sb).ok()) << daemon.Log();
  ASSERT_TRUE(b2.Connect(sb).ok()) << daemon.Log();
  PingReply pong;
  for (RawClient* c : {&b1, &b2}) {
    EXPECT_NE(UidOf(WorkerOf(*c)), uid_a);
    EXPECT_TRUE(c->Call(PingRequest{}, &pong).ok());
  }
  EXPECT_EQ(Count(daemon.Log(), "for a waiting guest at the worker cap"), 1u) << daemon.Log();
  ::shutdown(golden.channel().fd(), SHUT_RDWR);
  at_forkpoint.join();
}

// The worker keeps its side of the rule on its own: once in one tenant's
// jail (entered at a preload), an adoption for another uid ends it
// (kWorkerExitJailFailed) rather than serving that guest. Driven here over
// its control link as the daemon would, with orders no daemon sends.
TEST(WorkerJailEndToEnd, AWorkerInOneTenantsJailRefusesAnotherTenantsGuest) {
  if (::geteuid() != 0) GTEST_SKIP() << "workers drop their uid only when started as root";
  char tmpl[] = "/tmp/smolvm-jail-test-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  struct RemoveAtEnd {
    std::string path;
    ~RemoveAtEnd() { std::filesystem::remove_all(path); }
  } remove_at_end{dir};
  ASSERT_EQ(::chmod(dir.c_str(), 0711), 0);
  const std::string jail = dir + "/jail", modules = dir + "/modules";
  ASSERT_EQ(::mkdir(jail.c_str(), 0711), 0);
  ASSERT_EQ(::mkdir(modules.c_str(), 0700), 0);
  UniqueFd mine, theirs;
  ASSERT_TRUE(SocketPair(&mine, &theirs).ok());
  char hex[4][32];
  std::snprintf(hex[0], 32, "0x%llx", 0x680000000000ull);
  std::snprintf(hex[1], 32, "0x%llx", 1ull << 40);
  std::snprintf(hex[2], 32, "0x%llx", 0x5c0000000000ull);
  std::snprintf(hex[3], 32, "0x%llx", 1ull << 30);
  pid_t pid = ::fork();
  if (pid == 0) {
    if (::dup2(theirs.get(), 3) < 0) ::_exit(126);
    ::execl(SMOLVM_BINARY, "smolvm", "_cuda-worker", "--control-fd", "3", "--backend", "fake", "--arena-base", hex[0],
            "--arena-bytes", hex[1], "--host-base", hex[2], "--host-bytes", hex[3], "--module-cache", modules.c_str(),
            "--jail-dir", jail.c_str(), "--seccomp", "enforce", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  theirs.Reset(-1);
  UnixChannel control(std::move(mine));
  FrameHeader h;
  std::string payload;
  std::vector<UniqueFd> fds;
  ASSERT_TRUE(control.ReadFrame(&h, &payload, &fds).ok());
  ASSERT_EQ(h.op, WorkerReadyRequest::kNumber);
  const uint32_t uid_a = kDefaultWorkerUidBase + 4000, uid_b = kDefaultWorkerUidBase + 4001;
  std::string chunks, out;
  Encoder enc(&chunks);
  EncodeFields(enc, ManifestChunkList{});
  AppendRequest(&out, ForkPreloadRequest{7, 1, chunks, 0, 1, uid_a}, 0);
  ASSERT_TRUE(control.Write(out).ok());
  ASSERT_TRUE(control.ReadFrame(&h, &payload, &fds).ok());
  ASSERT_EQ(h.op, PreloadDoneRequest::kNumber);
  EXPECT_EQ(UidOf(pid), uid_a);  // in a's jail before any fork
  EXPECT_EQ(StatusLine(pid, "Seccomp"), "2");
  UniqueFd guest, guest_peer;
  ASSERT_TRUE(SocketPair(&guest, &guest_peer).ok());
  out.clear();
  AppendRequest(&out, WorkerAdoptRequest{9, 1, 0, 4242, 0, uid_b}, 0, 1);
  int fd = guest.get();
  ASSERT_TRUE(control.Write(out, std::span<const int>(&fd, 1)).ok());
  guest.Reset(-1);  // the worker holds the only copy now
  int status = 0;
  pid_t done = 0;
  for (int i = 0; i < 1000 && done == 0; ++i) {
    done = ::waitpid(pid, &status, WNOHANG);
    if (done == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (done == 0) {
    ADD_FAILURE() << "the worker serves another tenant's guest from its jail";
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 6) << "kWorkerExitJailFailed";
  char c;
  EXPECT_EQ(::read(guest_peer.get(), &c, 1), 0) << "the refused guest got an answer";
}

// SMOLVM_WORKER_TEST_SYSCALL makes every Ping call unshare(0): not on the
// allowlist, so the worker that makes it ends; the other session lives.
TEST(WorkerSeccompEndToEnd, AForbiddenSystemCallEndsOnlyThatWorker) {
  ::setenv("SMOLVM_WORKER_TEST_SYSCALL", std::to_string(SYS_unshare).c_str(), 1);
  DaemonProcess daemon;
  ::unsetenv("SMOLVM_WORKER_TEST_SYSCALL");
  RawClient victim, bystander;
  ASSERT_TRUE(victim.Connect(daemon.socket()).ok()) << daemon.Log();
  ASSERT_TRUE(bystander.Connect(daemon.socket()).ok()) << daemon.Log();
  MemAllocReply m;
  ASSERT_TRUE(bystander.Call(MemAllocRequest{.bytes = 4096}, &m).ok());
  PingReply pong;
  CallResult r = victim.Call(PingRequest{}, &pong);
  EXPECT_FALSE(r.transport.ok()) << "the worker answered after a forbidden call";
  for (int i = 0; i < 200 && Count(daemon.Log(), "exited with 31") == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(Count(daemon.Log(), "system call unshare (" + std::to_string(SYS_unshare) + ") is not allowed"), 1u)
      << daemon.Log();
  EXPECT_EQ(Count(daemon.Log(), "exited with 31"), 1u) << daemon.Log();
  MemcpyDtoHReply back;
  EXPECT_TRUE(bystander.Call(MemcpyDtoHRequest{.src = m.dptr, .bytes = 16, .stream = 0}, &back).ok());
  RawClient next;
  ASSERT_TRUE(next.Connect(daemon.socket()).ok());
  EXPECT_TRUE(next.Call(MemAllocRequest{.bytes = 4096}, &m).ok());
}

// Learn mode through the daemon (what scripts/device-seccomp.sh runs on the
// H200): the same call runs, the session goes on, and its name is recorded
// once in the file, by a worker that dropped its uid first.
TEST(WorkerSeccompEndToEnd, LearnModeRecordsTheCallAndTheSessionGoesOn) {
  char path[] = "/tmp/smolvm-learn-XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::close(fd);
  ::setenv("SMOLVM_WORKER_TEST_SYSCALL", std::to_string(SYS_unshare).c_str(), 1);
  ::setenv("SMOLVM_WORKER_SECCOMP", "learn", 1);
  ::setenv("SMOLVM_WORKER_SECCOMP_LEARN", path, 1);
  auto daemon = std::make_unique<DaemonProcess>();
  for (const char* v : {"SMOLVM_WORKER_TEST_SYSCALL", "SMOLVM_WORKER_SECCOMP", "SMOLVM_WORKER_SECCOMP_LEARN"}) ::unsetenv(v);
  RawClient c;
  ASSERT_TRUE(c.Connect(daemon->socket()).ok()) << daemon->Log();
  PingReply pong;
  EXPECT_TRUE(c.Call(PingRequest{}, &pong).ok());
  EXPECT_TRUE(c.Call(PingRequest{}, &pong).ok());
  MemAllocReply m;
  EXPECT_TRUE(c.Call(MemAllocRequest{.bytes = 4096}, &m).ok());
  c.Close();
  daemon.reset();
  EXPECT_EQ(ReadFile(path), "unshare\n");
  ::unlink(path);
}

// The daemon's own filter in learn mode (scripts/plans/harden.plan's first
// step on the GPU): a call outside its table, made by a worker it started
// (here one whose own filter is off), runs and is recorded once.
TEST(WorkerSeccompEndToEnd, TheDaemonsLearnModeRecordsAWorkersCall) {
  char path[] = "/tmp/smolvm-daemon-learn-XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::close(fd);
  ::setenv("SMOLVM_WORKER_TEST_SYSCALL", std::to_string(SYS_unshare).c_str(), 1);
  ::setenv("SMOLVM_WORKER_SECCOMP", "off", 1);
  ::setenv("SMOLVM_DAEMON_SECCOMP", "learn", 1);
  ::setenv("SMOLVM_DAEMON_SECCOMP_LEARN", path, 1);
  auto daemon = std::make_unique<DaemonProcess>();
  for (const char* v : {"SMOLVM_WORKER_TEST_SYSCALL", "SMOLVM_WORKER_SECCOMP", "SMOLVM_DAEMON_SECCOMP",
                        "SMOLVM_DAEMON_SECCOMP_LEARN"})
    ::unsetenv(v);
  RawClient c;
  ASSERT_TRUE(c.Connect(daemon->socket()).ok()) << daemon->Log();
  PingReply pong;
  EXPECT_TRUE(c.Call(PingRequest{}, &pong).ok());
  EXPECT_TRUE(c.Call(PingRequest{}, &pong).ok());
  c.Close();
  EXPECT_NE(daemon->Log().find("seccomp learn"), std::string::npos) << daemon->Log();
  daemon.reset();
  EXPECT_EQ(ReadFile(path), "unshare\n");
  ::unlink(path);
}

}  // namespace
}  // namespace smolvm::testing
