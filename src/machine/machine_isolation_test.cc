// The machine attacks of docs/threat-model.md ("What a guest can reach"), run
// in both isolation modes, and a gVisor machine's lifecycle (fixture:
// machine_test_fixture.h). Each test names the threat model's row it checks.
// The gVisor cases skip, saying why, where runsc is not installed.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/utsname.h>

#include "machine/gvisor.h"
#include "machine/machine_test_fixture.h"

namespace smolvm::machine {
namespace {

using namespace testing_support;

class IsolationTest : public MachineTest, public ::testing::WithParamInterface<const char*> {
 protected:
  void SetUp() override {
    MachineTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (Gvisor()) {
      auto runsc = FindRunsc();
      if (!runsc.ok()) GTEST_SKIP() << "gVisor untested here: " << runsc.status().message();
    }
  }
  bool Gvisor() const { return std::string(GetParam()) == "gvisor"; }

  // `machine create --name N --isolation <mode> ARGS...` then start.
  void CreateAndStart(const std::string& name, std::vector<std::string> args) {
    std::vector<std::string> a = {"machine", "create", "--name", name, "--isolation", GetParam()};
    a.insert(a.end(), args.begin(), args.end());
    CliRun r = Cli(a);
    ASSERT_EQ(r.rc, 0) << r.err;
    r = Cli({"machine", "start", "--name", name});
    ASSERT_EQ(r.rc, 0) << r.err << Logs(name);
  }

  // The machine's memory cgroup file `v1` (or `v2`), read on the host.
  std::string MemoryFile(const std::string& name, const std::string& v1, const std::string& v2) {
    auto layout = DetectCgroups();
    for (const auto& h : layout->hierarchies) {
      if (!layout->v2 && h.controllers.find("memory") == std::string::npos) continue;
      return Slurp(h.mount_point + "/" + cgroup_parent_ + "/" + name + "/" + (layout->v2 ? v2 : v1));
    }
    return "";
  }

  std::string HostKernel() {
    struct utsname u;
    uname(&u);
    return u.release;
  }
};

INSTANTIATE_TEST_SUITE_P(Modes, IsolationTest, ::testing::Values("sandbox", "gvisor"),
                         [](const auto& info) { return std::string(info.param); });

// Rows "host files", "its supervisor" ($SMOLVM_HOME), "GPU".
TEST_P(IsolationTest, HostFilesAreOnlyTheSystemDirectoriesAndTheVolumes) {
  std::string rw = scratch_ + "/vol-rw", ro = scratch_ + "/vol-ro";
  fs::create_directories(rw);
  fs::create_directories(ro);
  chmod(rw.c_str(), 0777);
  std::ofstream(ro + "/file") << "read-only-volume";
  CreateAndStart("files", {"-v", rw + ":/data", "-v", ro + ":/ro:ro", "--", "sleep", "1000"});
  for (const char* p : {"/home", "/root", "/srv", "/mnt", "/work", "/var", home_.c_str(), scratch_.c_str()})
    EXPECT_EQ(Sh("files", std::string("test -e ") + p).rc, 1) << p << " is visible inside";
  EXPECT_EQ(Sh("files", "test -d /usr/bin && test -d /etc && test -d /workspace && test -d /tmp").rc, 0);
  EXPECT_NE(Sh("files", "touch /usr/smolvm-test").rc, 0) << "/usr must be read-only";
  EXPECT_NE(Sh("files", "touch /etc/smolvm-test").rc, 0) << "/etc must be read-only";
  EXPECT_NE(Sh("files", "touch /smolvm-test").rc, 0) << "/ must be read-only";
  EXPECT_EQ(Sh("files", "echo hi > /data/written").rc, 0);
  EXPECT_EQ(Slurp(rw + "/written"), "hi\n");
  EXPECT_EQ(Sh("files", "cat /ro/file").out, "read-only-volume");
  CliRun r = Sh("files", "echo x > /ro/new");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("Read-only file system"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(ro + "/new"));
  EXPECT_EQ(Sh("files", "echo x > /workspace/w && echo y > /tmp/t && cat /workspace/w /tmp/t").out, "x\ny\n");
  EXPECT_EQ(Sh("files", "ls /dev | grep -c nvidia || true").out, "0\n");
  EXPECT_EQ(Sh("files", "hostname").out, "files\n");
}

// Row "host files" (read-only mounts are locked): the guest's root cannot
// make a read-only mount writable, remove it, or reach the host under one.
// (Was PackTest.ReadOnlyMountsAreLockedAgainstTheMachinesRoot.)
TEST_P(IsolationTest, ReadOnlyMountsCannotBeMadeWritable) {
  std::string ro = scratch_ + "/ro";
  fs::create_directories(ro);
  std::ofstream(ro + "/file") << "host";
  CreateAndStart("lk", {"-v", ro + ":/ro:ro", "-v", bin_dir_ + ":/opt/bin:ro", "--", "sleep", "1000"});
  CliRun r = Cli({"machine", "exec", "--name", "lk", "--", "/opt/bin/locks", "/usr", "/ro", "/run/smolvm", "/"});
  ASSERT_EQ(r.rc, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  int checked = 0;
  while (std::getline(lines, line)) {
    SCOPED_TRACE(line);
    // Every way to undo the mount failed (how it failed differs: the host
    // kernel's EPERM, or gVisor's own refusal), and the write is EROFS.
    for (const char* undo : {" remount=OK", " setattr=OK", " clone_setattr=OK", " umount=OK", " detach=OK"})
      EXPECT_EQ(line.find(undo), std::string::npos) << undo;
    EXPECT_NE(line.find(" write=EROFS"), std::string::npos);
    if (!Gvisor()) {
      // The host kernel's lock: EPERM; the open_tree copy is refused or keeps it.
      EXPECT_NE(line.find(" remount=EPERM "), std::string::npos);
      EXPECT_NE(line.find(" setattr=EPERM "), std::string::npos);
      EXPECT_TRUE(line.find("clone_setattr=EPERM") != std::string::npos ||
                  line.find("clone_setattr=NOCLONE") != std::string::npos);
    }
    ++checked;
  }
  EXPECT_EQ(checked, 4) << r.out;
  // A mount over them is the machine's own business (the sandbox's root may;
  // gVisor's lacks CAP_SYS_ADMIN): the host sees nothing.
  r = Cli({"machine", "exec", "--name", "lk", "--", "/opt/bin/locks", "--over", "/ro", "--over", "/run/smolvm"});
  if (!Gvisor()) {
    EXPECT_EQ(r.out, "/ro over=OK write=OK\n/run/smolvm over=OK write=OK\n");
  }
  EXPECT_FALSE(fs::exists(ro + "/over-probe"));
  EXPECT_FALSE(fs::exists(home_ + "/machines/lk/run/over-probe"));
  EXPECT_EQ(Slurp(ro + "/file"), "host");
  // What must change still does: /workspace is writable.
  EXPECT_EQ(Sh("lk", "echo w > /workspace/x && cat /workspace/x").out, "w\n");
  if (!Gvisor()) {
    EXPECT_EQ(Sh("lk", "cat /proc/1/comm").out, "smolvm-init\n");
  }
}

// Row "host root": uid 0 inside is an unprivileged host uid of the machine's
// own range, so what it writes (a setuid file included) is not root's.
TEST_P(IsolationTest, TheGuestsRootOwnsNothingAsHostRoot) {
  std::string rw = scratch_ + "/rw";
  fs::create_directories(rw);
  chmod(rw.c_str(), 0777);
  CreateAndStart("uid", {"-v", rw + ":/data", "--", "sleep", "1000"});
  EXPECT_EQ(Sh("uid", "id -u").out, "0\n");
  ASSERT_EQ(Sh("uid", "cp /bin/true /data/suid && chmod 4755 /data/suid && echo x > /data/f").rc, 0);
  for (const char* f : {"/suid", "/f"}) {
    struct stat st;
    ASSERT_EQ(stat((rw + f).c_str(), &st), 0) << f;
    EXPECT_GE(st.st_uid, 100000u) << f << " is owned by host uid " << st.st_uid;
    EXPECT_GE(st.st_gid, 100000u) << f;
  }
}

// Rows "host processes" and "other machines": a machine sees its own
// processes only, not another machine's nor the host's.
TEST_P(IsolationTest, OnlyItsOwnProcesses) {
  CreateAndStart("pa", {"--", "sleep", "1001"});
  CreateAndStart("pb", {"--", "sleep", "1002"});
  CliRun r = Sh("pa", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '");
  EXPECT_NE(r.out.find("sleep 1001"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("sleep 1002"), std::string::npos) << "another machine's program is visible: " << r.out;
  EXPECT_EQ(r.out.find("machine_isolation_test"), std::string::npos) << r.out;
  r = Sh("pa", "ls -d /proc/[0-9]* | wc -l");
  EXPECT_LE(std::stoi(r.out), 5) << "more processes than its own";
}

// Row "network": loopback only; a host service on 127.0.0.1 is not reached.
TEST_P(IsolationTest, NoNetworkButItsOwnLoopback) {
  int listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  struct sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(listener, 4), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len), 0);
  std::string port = std::to_string(ntohs(a.sin_port));
  CreateAndStart("net", {"--", "sleep", "1000"});
  EXPECT_EQ(Sh("net", "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '").out, "lo\n");
  CliRun r = Cli({"machine", "exec", "--name", "net", "--", "bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/" + port});
  EXPECT_NE(r.rc, 0) << "the guest reached the host's 127.0.0.1:" << port;
  EXPECT_LT(accept(listener, nullptr, nullptr), 0);
  EXPECT_EQ(errno, EAGAIN) << "a connection from the guest arrived";
  close(listener);
}

// Rows "resources" and "its own cgroup limits": --disk and --mem hold, and
// the guest's root cannot raise its own limits.
TEST_P(IsolationTest, DiskAndMemoryAreBoundedAndTheLimitsStay) {
  CreateAndStart("res", {"--mem", "96", "--disk", "16", "--", "sleep", "1000"});
  CliRun r = Sh("res", "dd if=/dev/zero of=/workspace/big bs=1M count=24 2>&1; echo rc=$?");
  EXPECT_NE(r.out.find("No space left on device"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rc=1"), std::string::npos) << r.out;
  EXPECT_EQ(Sh("res", "rm /workspace/big && echo ok").out, "ok\n");
  const std::string limit = MemoryFile("res", "memory.limit_in_bytes", "memory.max");
  ASSERT_EQ(limit, std::to_string(96 << 20) + "\n");
  // Whatever the guest's root tries on its cgroups (the view may be missing
  // or read-only; a mount needs what it lacks), the host's limit stays.
  Sh("res",
     "for f in /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/memory.max; do echo -1 > $f; echo max > $f; done;"
     "mkdir -p /tmp/cg && mount -t cgroup -o memory cgroup /tmp/cg && echo -1 > /tmp/cg/memory.limit_in_bytes;"
     "mount -t cgroup2 none /tmp/cg && echo max > /tmp/cg/memory.max; true");
  EXPECT_EQ(MemoryFile("res", "memory.limit_in_bytes", "memory.max"), limit);
  // Past --mem: the allocation fails (gVisor: the whole machine ends, its
  // sentry holds the guest's memory), and the host's count stays bounded.
  r = Cli({"machine", "exec", "--name", "res", "--", "python3", "-c", "b = b'x' * (256 << 20); print('allocated')"});
  EXPECT_NE(r.rc, 0);
  EXPECT_EQ(r.out.find("allocated"), std::string::npos);
  std::string peak = MemoryFile("res", "memory.max_usage_in_bytes", "memory.peak");
  if (!peak.empty()) {
    EXPECT_LE(std::stoll(peak), 96ll << 20);
  }
}

// Row "kernel attack surface": sandbox: seccomp refuses the calls;
// gVisor: they reach gVisor's kernel, never the host's.
TEST_P(IsolationTest, DangerousCallsNeverReachTheHostKernel) {
  CreateAndStart("sys", {"-v", bin_dir_ + ":/opt/bin:ro", "--", "sleep", "1000"});
  CliRun r = Cli({"machine", "exec", "--name", "sys", "--", "/opt/bin/syscalls"});
  ASSERT_EQ(r.rc, 0) << r.err;
  std::map<std::string, int> got;
  std::istringstream lines(r.out);
  std::string name;
  int err;
  while (lines >> name >> err) got[name] = err;
  std::string kernel = Sh("sys", "uname -r").out;
  if (!Gvisor()) {
    EXPECT_EQ(kernel, HostKernel() + "\n");
    EXPECT_EQ(got["clone3"], ENOSYS);
    for (const char* n : {"ptrace", "bpf", "keyctl", "perf_event_open", "userfaultfd", "init_module", "kexec_load", "reboot"})
      EXPECT_EQ(got[n], EPERM) << n;
    return;
  }
  EXPECT_EQ(kernel, "4.4.0\n") << "gVisor's kernel answers, not the host's (" << HostKernel() << ")";
  for (const char* n : {"bpf", "keyctl", "perf_event_open", "init_module", "kexec_load", "reboot"})
    EXPECT_NE(got[n], 0) << n << " succeeded";
}

// Row "the host terminal (exec)": a command run with the caller's terminal
// as its stdin cannot push input into it (TIOCSTI).
TEST_P(IsolationTest, ExecCannotInjectInputIntoTheCallersTerminal) {
  CreateAndStart("tty", {"--", "sleep", "1000"});
  int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  ASSERT_GE(master, 0);
  ASSERT_EQ(grantpt(master), 0);
  ASSERT_EQ(unlockpt(master), 0);
  std::string slave = ptsname(master);
  std::string out = scratch_ + "/tty-out";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, slave.c_str(), O_RDWR | O_NOCTTY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, 2, out.c_str(), O_WRONLY | O_APPEND, 0600);
  std::vector<std::string> argv = {SMOLVM_CLI, "machine", "exec", "--name", "tty", "--", "python3", "-c",
                                   "import fcntl, termios\n"
                                   "try:\n"
                                   "    fcntl.ioctl(0, termios.TIOCSTI, b'Z')\n"
                                   "    print('injected')\n"
                                   "except OSError as e:\n"
                                   "    print('refused', e.errno)\n"};
  std::vector<char*> a;
  for (auto& x : argv) a.push_back(x.data());
  a.push_back(nullptr);
  pid_t pid;
  ASSERT_EQ(posix_spawn(&pid, a[0], &fa, nullptr, a.data(), environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  int status;
  waitpid(pid, &status, 0);
  std::string said = Slurp(out);
  EXPECT_NE(said.find("refused"), std::string::npos) << said;
  EXPECT_EQ(said.find("injected"), std::string::npos) << said;
  // Nothing arrived on the terminal's input side.
  fcntl(master, F_SETFL, O_NONBLOCK);
  char buf[64];
  ssize_t n = read(master, buf, sizeof buf);
  EXPECT_EQ(std::string(buf, n > 0 ? static_cast<size_t>(n) : 0).find('Z'), std::string::npos);
  close(master);
}

// --- a gVisor machine's lifecycle (issue 35, must-show 1) ----------------------

class GvisorMachineTest : public MachineTest {
 protected:
  void SetUp() override {
    MachineTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto runsc = FindRunsc();
    if (!runsc.ok()) GTEST_SKIP() << "gVisor untested here: " << runsc.status().message();
  }
  // Cgroup directories of machine `name` in every mounted hierarchy (runsc
  // would make some in hierarchies smolvm does not manage).
  std::vector<std::string> CgroupsNamed(const std::string& name) {
    std::vector<std::string> out;
    std::ifstream mounts("/proc/self/mounts");
    std::string dev, mp, type, rest;
    while (mounts >> dev >> mp >> type && std::getline(mounts, rest)) {
      if (type != "cgroup" && type != "cgroup2") continue;
      for (const auto& dir : {mp + "/" + cgroup_parent_ + "/" + name, mp + "/" + name})
        if (fs::exists(dir)) out.push_back(dir);
    }
    return out;
  }
  int RunscProcesses() {
    int n = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc", ec))
      if (Slurp(e.path().string() + "/cmdline").find(home_ + "/machines/") != std::string::npos) ++n;
    return n;
  }
};

TEST_F(GvisorMachineTest, ACpuMachineRunsExecsLogsAndLeavesNothing) {
  std::string ro = scratch_ + "/ro";
  fs::create_directories(ro);
  std::ofstream(ro + "/file") << "host";
  CliRun r = Cli({"machine", "create", "--name", "gv", "--isolation", "gvisor", "--cpus", "1", "--mem", "256", "-e",
                  "GREETING=a,b c", "-v", ro + ":/ro:ro", "--", "sh", "-c",
                  "echo hello-$GREETING; uname -r; pwd; sleep 1000"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(Find("gv")["isolation"], "gvisor");
  r = Cli({"machine", "start", "--name", "gv"});
  ASSERT_EQ(r.rc, 0) << r.err << Logs("gv");
  EXPECT_EQ(Find("gv")["state"], "running");
  EXPECT_TRUE(WaitForLog("gv", "hello-a,b c\n4.4.0\n/workspace\n")) << Logs("gv");
  // exec: its own stdout, stderr and exit code; the machine's env.
  r = Sh("gv", "echo out-$((6*7)) $GREETING; echo err-text >&2; exit 7");
  EXPECT_EQ(r.rc, 7);
  EXPECT_EQ(r.out, "out-42 a,b c\n");
  EXPECT_EQ(r.err, "err-text\n");
  EXPECT_EQ(Sh("gv", "uname -r").out, "4.4.0\n");
  EXPECT_NE(Sh("gv", "echo x > /ro/new").rc, 0);
  EXPECT_FALSE(fs::exists(ro + "/new"));
  EXPECT_EQ(Sh("gv", "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '").out, "lo\n");
  // runsc's state and debug log have their places in the machine's directory.
  EXPECT_TRUE(fs::exists(home_ + "/machines/gv/gvisor/state"));
  EXPECT_TRUE(fs::exists(home_ + "/machines/gv/gvisor/log/smolvm.txt"));
  EXPECT_NE(Slurp(home_ + "/machines/gv/gvisor/log/smolvm.txt").find("platform ptrace"), std::string::npos)
      << "this host's /dev/kvm is not used without a probe saying it works";
  // Its whole sandbox lives in the machine's cgroup.
  EXPECT_GE(RunscProcesses(), 3) << "runsc, its gofer and its sandbox";
  // stop: the program gets SIGTERM; runsc's state goes, the log stays.
  r = Cli({"machine", "stop", "--name", "gv"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(Find("gv")["state"], "stopped");
  EXPECT_EQ(RunscProcesses(), 0);
  EXPECT_FALSE(fs::exists(home_ + "/machines/gv/gvisor/state"));
  EXPECT_EQ(CgroupsNamed("gv"), std::vector<std::string>{});
  EXPECT_NE(Logs("gv").find("hello-a,b c"), std::string::npos);
  // Started again, then rm: nothing left.
  r = Cli({"machine", "start", "--name", "gv"});
  ASSERT_EQ(r.rc, 0) << r.err << Logs("gv");
  ASSERT_EQ(Cli({"machine", "rm", "--force", "--name", "gv"}).rc, 0);
  EXPECT_TRUE(Find("gv").is_null());
  EXPECT_FALSE(fs::exists(home_ + "/machines/gv"));
  EXPECT_EQ(RunscProcesses(), 0);
  EXPECT_EQ(CgroupsNamed("gv"), std::vector<std::string>{});
  ExpectNothingLeft();
}

TEST_F(GvisorMachineTest, AKilledRunscEndsTheMachineAndLeavesNothing) {
  ASSERT_EQ(Cli({"machine", "create", "--name", "kill", "--isolation", "gvisor", "--", "sleep", "1000"}).rc, 0);
  CliRun r = Cli({"machine", "start", "--name", "kill"});
  ASSERT_EQ(r.rc, 0) << r.err << Logs("kill");
  int pid = Find("kill")["pid"];
  ASSERT_GT(pid, 0);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  for (int i = 0; i < 500 && Find("kill")["state"] == "running"; ++i) usleep(20000);
  EXPECT_EQ(Find("kill")["state"], "failed");
  // The supervisor empties the cgroup (the sandbox and gofer with it) and
  // removes runsc's state.
  auto done = [&] {
    return RunscProcesses() == 0 && CgroupsNamed("kill").empty() && !fs::exists(home_ + "/machines/kill/gvisor/state");
  };
  for (int i = 0; i < 500 && !done(); ++i) usleep(20000);
  EXPECT_EQ(RunscProcesses(), 0);
  EXPECT_EQ(CgroupsNamed("kill"), std::vector<std::string>{});
  EXPECT_FALSE(fs::exists(home_ + "/machines/kill/gvisor/state"));
  ASSERT_EQ(Cli({"machine", "rm", "--name", "kill"}).rc, 0);
  ExpectNothingLeft();
}

TEST_F(GvisorMachineTest, WhatGvisorMachinesCannotDoYetIsRefusedByName) {
  CliRun r = Cli({"machine", "create", "--name", "c", "--isolation", "gvisor", "--image", scratch_, "--", "true"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--image is not supported with --isolation gvisor"), std::string::npos) << r.err;
  r = Cli({"machine", "create", "--name", "c", "--isolation", "vm", "--", "true"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--isolation must be sandbox or gvisor"), std::string::npos) << r.err;
  EXPECT_EQ(Cli({"machine", "list", "--json"}).out, "[]\n") << "a refused create leaves no machine";
  ASSERT_EQ(Cli({"machine", "create", "--name", "g", "--isolation", "gvisor", "--", "sleep", "1000"}).rc, 0);
  r = Cli({"machine", "start", "--name", "g", "--forkable"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("forking a gVisor machine is not supported"), std::string::npos) << r.err;
  EXPECT_EQ(Find("g")["state"], "created");
  // A runsc that is not there: the fix is named.
  setenv("SMOLVM_RUNSC", "/nonexistent/runsc", 1);
  r = Cli({"machine", "start", "--name", "g"});
  unsetenv("SMOLVM_RUNSC");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("SMOLVM_RUNSC"), std::string::npos) << r.err;
  EXPECT_EQ(Find("g")["state"], "failed");
  ExpectNothingLeft();
}

}  // namespace
}  // namespace smolvm::machine
