// libsmolvm-guest without a machine: the ENOTSUP paths, the hook seam, and
// the golden side of the forkpoint protocol against a scripted controller.
#include "smolvm/guest.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace {

class GuestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("SMOLVM_FORKPOINT_SOCKET");
    smolvm_guest_set_cuda_hooks(nullptr);
  }
  void TearDown() override {
    unsetenv("SMOLVM_FORKPOINT_SOCKET");
    smolvm_guest_set_cuda_hooks(nullptr);
  }
};

TEST_F(GuestTest, NoControllerIsNotSupported) {
  EXPECT_EQ(smolvmForkpoint(), -ENOTSUP);
  int x = 0;
  EXPECT_EQ(smolvmMarkFrozen(&x, sizeof x), -ENOTSUP);
}

struct Counts {
  int mark = 0;
  int forkpoint = 0;
  const void* ptr = nullptr;
  size_t bytes = 0;
};

TEST_F(GuestTest, HooksRouteMarkFrozenAndForkpoint) {
  static Counts counts;
  smolvm_cuda_hooks h{};
  h.size = sizeof h;
  h.ctx = &counts;
  h.mark_frozen = [](void* ctx, const void* p, size_t n) {
    auto* c = static_cast<Counts*>(ctx);
    c->mark++;
    c->ptr = p;
    c->bytes = n;
    return n == 0 ? -EINVAL : 0;
  };
  h.forkpoint = [](void* ctx) {
    static_cast<Counts*>(ctx)->forkpoint++;
    return 3;
  };
  ASSERT_EQ(smolvm_guest_set_cuda_hooks(&h), 0);
  int x = 0;
  EXPECT_EQ(smolvmMarkFrozen(&x, 64), 0);
  EXPECT_EQ(counts.ptr, &x);
  EXPECT_EQ(counts.bytes, 64u);
  EXPECT_EQ(smolvmMarkFrozen(&x, 0), -EINVAL);
  EXPECT_EQ(smolvmForkpoint(), 3);  // no machine socket: the shim's controller
  EXPECT_EQ(counts.forkpoint, 1);
}

TEST_F(GuestTest, TooSmallHookStructIsRejected) {
  smolvm_cuda_hooks h{};
  h.size = sizeof(size_t);
  EXPECT_EQ(smolvm_guest_set_cuda_hooks(&h), -EINVAL);
}

// A controller that reads HELLO and answers with one scripted line.
int RunScripted(const std::string& reply, std::string* got) {
  char dir[] = "/tmp/smolvm-guest-test-XXXXXX";
  EXPECT_NE(mkdtemp(dir), nullptr);
  std::string path = std::string(dir) + "/fp.sock";
  int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, path.c_str());
  EXPECT_EQ(bind(ls, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  EXPECT_EQ(listen(ls, 4), 0);
  std::thread server([&] {
    int c = accept(ls, nullptr, nullptr);
    char buf[64] = {};
    ssize_t n = read(c, buf, sizeof buf - 1);
    if (n > 0) got->assign(buf, static_cast<size_t>(n));
    if (write(c, reply.data(), reply.size()) < 0) {
    }
    close(c);
  });
  setenv("SMOLVM_FORKPOINT_SOCKET", path.c_str(), 1);
  int r = smolvmForkpoint();
  server.join();
  close(ls);
  unlink(path.c_str());
  rmdir(dir);
  return r;
}

TEST_F(GuestTest, ReleasedGoldenReturnsCanceled) {
  std::string got;
  EXPECT_EQ(RunScripted("RELEASE\n", &got), -ECANCELED);
  EXPECT_EQ(got, "HELLO\n");
}

TEST_F(GuestTest, RefusalCarriesTheControllersErrno) {
  std::string got;
  EXPECT_EQ(RunScripted("ERR 16 another process waits\n", &got), -EBUSY);
}

TEST_F(GuestTest, GarbageFromControllerIsAProtocolError) {
  std::string got;
  EXPECT_EQ(RunScripted("FORK banana\n", &got), -EPROTO);
  EXPECT_EQ(RunScripted("", &got), -ECONNRESET);
}

TEST_F(GuestTest, MissingSocketReportsConnectError) {
  setenv("SMOLVM_FORKPOINT_SOCKET", "/nonexistent/smolvm/fp.sock", 1);
  EXPECT_EQ(smolvmForkpoint(), -ENOENT);
}

}  // namespace
