// Sessions without descriptors (issue 35, item 2; shim/host_mirror.h,
// worker/host_mirrors.h) end to end on the fake backend: the nvcc-built
// programs through the shim with SMOLVM_CUDA_NO_FDS=1 give what they give
// with descriptors; what such a session refuses is named; and, under
// gVisor's runsc where it is installed (and we are root), the same programs
// run inside a sandbox whose sentry cannot pass a descriptor at all.
// The machine-level check (a --cuda gVisor machine against a sandbox one) is
// src/machine/machine_cuda_isolation_test.cc.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "daemon_client.h"

namespace smolvm::testing {
namespace {

struct Ran {
  int rc = 0;
  std::string out, err;
};

// Runs a test program through the shim against `d`; `env` goes first.
Ran RunProgram(const DaemonProcess& d, const std::string& name, const std::string& env, const std::string& args = "",
               const std::string& wrapper = "") {
  static int serial = 0;
  std::string err = d.dir() + "/" + name + "." + std::to_string(++serial) + ".err";
  std::string cmd = "(" + wrapper + " env " + env + " LD_LIBRARY_PATH=" + SHIM_DIR + " SMOLVM_CUDA_SOCKET=" +
                    d.socket() + " " + PROG_DIR + "/" + name + " " + args + " 2>" + err + ")";
  auto [rc, out] = RunCommand(cmd);
  return Ran{rc, out, ReadFile(err)};
}

class NoDescriptorsE2eTest : public ::testing::Test {
 protected:
  DaemonProcess daemon{"fake", 2};
};

// The transfers program prints a checksum of every copy: 1 B to 40 MiB
// (the 32 MiB inline chunks crossed), pageable and pinned, and an async
// copy into pinned memory landing by each synchronization point.
TEST_F(NoDescriptorsE2eTest, TransfersGiveTheSameResultsWithAndWithoutDescriptors) {
  Ran with = RunProgram(daemon, "prog_transfers", "SMOLVM_CUDA_NO_FDS=0", "40");
  ASSERT_EQ(with.rc, 0) << with.out << with.err << daemon.Log();
  Ran without = RunProgram(daemon, "prog_transfers", "SMOLVM_CUDA_NO_FDS=1", "40");
  ASSERT_EQ(without.rc, 0) << without.out << without.err << daemon.Log();
  EXPECT_NE(without.out.find("PASS transfers"), std::string::npos) << without.out;
  EXPECT_EQ(with.out, without.out);
}

// The programs that exercise pinned memory, streams, host functions and
// threads pass without descriptors too (and arrays, whose host rows travel
// in frames either way).
TEST_F(NoDescriptorsE2eTest, MemoryStreamHostFunctionAndThreadProgramsPass) {
  for (const char* p : {"prog_memory", "prog_streams", "prog_hostfn", "prog_threads", "prog_kernels",
                        "prog_textures"}) {
    Ran r = RunProgram(daemon, p, "SMOLVM_CUDA_NO_FDS=1");
    EXPECT_EQ(r.rc, 0) << p << "\n" << r.out << r.err << daemon.Log();
    EXPECT_NE(r.out.find(std::string("PASS ") + (p + 5)), std::string::npos) << r.out;
  }
}

// Mapped pinned memory and pinned memory in graphs and captures would reach
// the worker's mirror, not the program's memory: refused, each named once.
TEST_F(NoDescriptorsE2eTest, MappedMemoryAndPinnedGraphCopiesAreRefusedByName) {
  Ran r = RunProgram(daemon, "prog_nofd", "SMOLVM_CUDA_NO_FDS=1");
  ASSERT_EQ(r.rc, 0) << r.out << r.err << daemon.Log();
  EXPECT_NE(r.out.find("PASS nofd"), std::string::npos) << r.out;
  for (const char* what : {"cudaHostAlloc with cudaHostAllocMapped in a session without descriptors",
                           "cudaHostGetDevicePointer in a session without descriptors",
                           "a copy with pinned memory on a capturing stream in a session without descriptors",
                           "a graph memcpy node with pinned memory in a session without descriptors"})
    EXPECT_EQ(Count(r.err, what), 1u) << what << "\n" << r.err;
}

// A golden without descriptors forks: each clone's pinned memory is a private
// copy already (anonymous pages, no memfd), registered again without a
// descriptor (nothing re-registers a memfd), and holds the golden's bytes.
TEST_F(NoDescriptorsE2eTest, AGoldenWithoutDescriptorsForksClonesThatKeepTheirPinnedMemory) {
  std::string outdir = daemon.dir() + "/fork-out", pidfile = daemon.dir() + "/golden.pid";
  ::mkdir(outdir.c_str(), 0755);
  // The golden in the background; its pid (sh execs env, which execs it) for `cuda fork --pid`.
  std::string cmd = "sh -c 'echo $$ > " + pidfile + "; exec env SMOLVM_CUDA_NO_FDS=1 LD_LIBRARY_PATH=" + SHIM_DIR +
                    " SMOLVM_CUDA_SOCKET=" + daemon.socket() + " " + PROG_DIR + "/prog_fork " + outdir + " 64 4' >" +
                    daemon.dir() + "/golden.out 2>&1 &";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  for (int t = 0; t < 500 && ReadFile(pidfile).empty(); ++t) ::usleep(10000);
  std::string pid = ReadFile(pidfile);
  while (!pid.empty() && pid.back() == '\n') pid.pop_back();
  ASSERT_FALSE(pid.empty());
  auto [rc, out] = RunCommand(std::string(SMOLVM_BINARY) + " cuda fork --pid " + pid +
                              " --count 2 --share on --wait 20 --socket " + daemon.socket());
  ASSERT_EQ(rc, 0) << out << ReadFile(daemon.dir() + "/golden.out") << daemon.Log();
  for (int i = 0; i < 2; ++i) {
    std::string path = outdir + "/clone" + std::to_string(i) + ".txt";
    for (int t = 0; t < 1000 && ReadFile(path).find('\n') == std::string::npos; ++t) ::usleep(10000);
    EXPECT_NE(ReadFile(path).find("table=1 frozen=1 private=1 pinned=1 own_private=1 cow=1 global=1"),
              std::string::npos)
        << path << ": " << ReadFile(path) << ReadFile(daemon.dir() + "/golden.out") << daemon.Log();
  }
  auto [rrc, rout] = RunCommand(std::string(SMOLVM_BINARY) + " cuda release --pid " + pid + " --socket " +
                                daemon.socket());
  EXPECT_EQ(rrc, 0) << rout;
  for (int t = 0; t < 1000 && ReadFile(outdir + "/golden.txt").empty(); ++t) ::usleep(10000);
  EXPECT_EQ(ReadFile(outdir + "/golden.txt"), "golden released=-125 ok=1\n");
  for (int t = 0; t < 500 && ::kill(std::stoi(pid), 0) == 0; ++t) ::usleep(10000);
}

// gVisor cannot hand its descriptors to a host process: with descriptors the
// first pinned allocation ends the session (sendmsg fails); without, every
// transfer works through runsc's host-UDS path. Skips without root or runsc.
TEST_F(NoDescriptorsE2eTest, InsideGvisorNoDescriptorCrosses) {
  const char* runsc = ::access("/usr/bin/runsc", X_OK) == 0 ? "/usr/bin/runsc" : nullptr;
  if (runsc == nullptr || ::geteuid() != 0) GTEST_SKIP() << "needs root and /usr/bin/runsc (apt-get install runsc)";
  // `runsc do`: the host's root as the sandbox's (an overlay), the daemon's
  // socket reached through --host-uds=open.
  std::string wrapper = std::string(runsc) + " --root=" + daemon.dir() + "/runsc --platform=ptrace --network=none " +
                        "--host-uds=open --ignore-cgroups do";
  Ran with = RunProgram(daemon, "prog_memory", "SMOLVM_CUDA_NO_FDS=0", "", wrapper);
  EXPECT_NE(with.rc, 0) << with.out << with.err;
  EXPECT_NE(with.err.find("sendmsg"), std::string::npos) << with.err;
  Ran without = RunProgram(daemon, "prog_transfers", "SMOLVM_CUDA_NO_FDS=1", "40", wrapper);
  ASSERT_EQ(without.rc, 0) << without.out << without.err << daemon.Log();
  Ran native = RunProgram(daemon, "prog_transfers", "SMOLVM_CUDA_NO_FDS=0", "40");
  EXPECT_EQ(native.out, without.out);
}

}  // namespace
}  // namespace smolvm::testing
