// Issue 18 (review of the fork engine with parallel builds and early
// release): what may happen to a golden and its fork while clones are still
// being built after the golden got its orders.
#include <cstring>
#include <sstream>

#include "fork_fixture.h"

namespace smolvm::testing {
namespace {

// `cuda release` of a golden whose fork is in flight (orders given, clones
// still building or attaching) would let the golden leave its forkpoint and
// write the memory the clones still copy. It is refused, naming the fork;
// the fork completes with every clone holding the golden's bytes; the
// golden is releasable once the fork is done.
TEST_F(ForkTest, ReleaseIsRefusedWhileAForkOfTheGoldenIsInFlight) {
  Golden g(&golden);
  const std::string pid = std::to_string(::getpid());
  std::pair<int, std::string> cli;
  std::thread t([&] { cli = RunCommand(Cli(daemon, "fork --count 3 --share on --pid " + pid)); });
  ForkpointWaitReply first = g.Next();
  ASSERT_GE(first.clone_index, 0) << daemon.Log();
  // Orders given, no child attached: the fork is in flight.
  auto [rc, out] = RunCommand(Cli(daemon, "release --pid " + pid));
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("fork of this session is in progress"), std::string::npos) << out;
  std::vector<ForkpointWaitReply> orders{first, g.Next(), g.Next()};
  std::vector<std::unique_ptr<RawClient>> clones;
  for (const auto& o : orders) {
    ASSERT_GE(o.clone_index, 0) << "the golden left its forkpoint mid-fork: " << daemon.Log();
    auto c = std::make_unique<RawClient>();
    ASSERT_TRUE(c->Connect(daemon.socket(), kProtoHash, 2, o.token, 100000 + o.clone_index).ok()) << daemon.Log();
    clones.push_back(std::move(c));
  }
  t.join();
  EXPECT_EQ(cli.first, 0) << cli.second;
  for (auto& c : clones) EXPECT_EQ(Bytes(*c, priv.dptr, 4096), private_bytes.substr(0, 4096));
  // Nothing else was queued for the golden: it still waits, and goes on release.
  EXPECT_EQ(g.Next(std::chrono::milliseconds(300)).clone_index, -3);
  EXPECT_EQ(RunCommand(Cli(daemon, "release --pid " + pid)).first, 0);
  EXPECT_LT(g.Next().clone_index, 0);
}

}  // namespace
}  // namespace smolvm::testing
