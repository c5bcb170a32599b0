// The fork arm's probe: one request for all N clones only when the
// supervisor answers CAPS with fork-count; anything else is per clone.
#include "bench/fork_requests.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace smolvm::bench {
namespace {

TEST(ForkRequestsTest, OnlyAnAdvertisedForkCountMeansOneRequest) {
  EXPECT_EQ(ForkRequestsOf("CAPS fork-count"), ForkRequests::kOneForAll);
  EXPECT_EQ(ForkRequestsOf("CAPS share-auto fork-count vm"), ForkRequests::kOneForAll);
  EXPECT_EQ(ForkRequestsOf("CAPS share-auto"), ForkRequests::kPerClone);
  EXPECT_EQ(ForkRequestsOf("ERR 3 unknown request"), ForkRequests::kPerClone);
  EXPECT_EQ(ForkRequestsOf("fork-count"), ForkRequests::kPerClone);
  EXPECT_EQ(ForkRequestsOf(""), ForkRequests::kPerClone);
  EXPECT_EQ(ForkRequestsText(ForkRequests::kOneForAll), "one request");
  EXPECT_EQ(ForkRequestsText(ForkRequests::kPerClone), "one request per clone");
}

// A one-connection supervisor stand-in answering `answer` to the probe.
class FakeSupervisor {
 public:
  explicit FakeSupervisor(std::string answer) {
    char tmpl[] = "/tmp/smolvm-forkreq-XXXXXX";
    dir_ = mkdtemp(tmpl);
    path_ = dir_ + "/ctl.sock";
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a = {};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path_.c_str(), sizeof a.sun_path - 1);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(fd_, 1), 0);
    thread_ = std::thread([this, answer] {
      int c = accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      char buf[64] = {};
      ssize_t n = read(c, buf, sizeof buf - 1);
      asked_ = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
      std::string line = answer + "\n";
      (void)!write(c, line.data(), line.size());
      close(c);
    });
  }
  // What the probe sent (waits for the one connection to be served).
  std::string Asked() {
    if (thread_.joinable()) thread_.join();
    return asked_;
  }
  ~FakeSupervisor() {
    if (thread_.joinable()) thread_.join();
    close(fd_);
    unlink(path_.c_str());
    rmdir(dir_.c_str());
  }
  std::string path_, dir_, asked_;
  int fd_ = -1;
  std::thread thread_;
};

TEST(ForkRequestsTest, ProbeAsksCapsAndReadsTheAnswer) {
  {
    FakeSupervisor sup("CAPS fork-count");
    ForkRequestsProbe p = ProbeForkRequests(sup.path_, 2000);
    EXPECT_EQ(p.mode, ForkRequests::kOneForAll);
    EXPECT_EQ(p.answer, "CAPS fork-count");
    EXPECT_EQ(sup.Asked(), "CAPS\n");
  }
  {
    FakeSupervisor sup("ERR 3 unknown request");
    ForkRequestsProbe p = ProbeForkRequests(sup.path_, 2000);
    EXPECT_EQ(p.mode, ForkRequests::kPerClone);
    EXPECT_EQ(p.answer, "ERR 3 unknown request");
  }
  ForkRequestsProbe none = ProbeForkRequests("/nonexistent/ctl.sock", 100);
  EXPECT_EQ(none.mode, ForkRequests::kPerClone);
  EXPECT_NE(none.answer.find("no answer"), std::string::npos) << none.answer;
}

TEST(ForkRequestsTest, OnlyTheDaemonsMemoryRefusalIsAResult) {
  // As the supervisor passes the daemon's answer on (fork_engine.cc, daemon_machines.cc).
  EXPECT_TRUE(RefusedForMemory(Status(2, "GPU fork: fork needs 150000 MiB, 139000 MiB free")));
  EXPECT_TRUE(RefusedForMemory(Status(2, "GPU fork: fork needs 1300 MiB (1000 MiB of private copies + 300 MiB of "
                                         "context), 900 MiB free under machine 'c9' --gpu-mem 4096")));
  // A worker started for a clone found no room for its context (FailForksShortOfRoom).
  EXPECT_TRUE(RefusedForMemory(Status(2, "GPU fork: fork needs a CUDA context for 5 more clone(s), and a new worker's "
                                         "did not fit in the device's memory (99 of 104 clones built; 95000 MiB free "
                                         "when the fork was admitted)")));
  EXPECT_FALSE(RefusedForMemory(Status::Ok()));
  EXPECT_FALSE(RefusedForMemory(Unavailable("the golden left its forkpoint")));
  EXPECT_FALSE(RefusedForMemory(Internal("clone setup failed: fork needs a clone machine")));
}

}  // namespace
}  // namespace smolvm::bench
