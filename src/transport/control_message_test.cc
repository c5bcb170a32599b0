#include "transport/control_message.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "proto/frame.h"
#include "transport/unix_channel.h"

namespace smolvm {
namespace {

bool IsOpen(int fd) { return ::fcntl(fd, F_GETFD) >= 0; }

// A control buffer as a failed recvmsg leaves it: msg_controllen as the
// caller set it and an SCM_RIGHTS message from before naming `fd`.
struct StaleBuffer {
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * 2)] = {};
  struct msghdr msg = {};
  explicit StaleBuffer(int fd) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * 2);
    int two[2] = {fd, fd};
    std::memcpy(CMSG_DATA(c), two, sizeof two);
  }
};

// Issue 29: the daemon closed descriptors it did not own (its stdin, a
// worker's pidfd, a machine's listening socket) after EAGAIN reads.
TEST(ControlMessage, AFailedReadAdoptsNothingFromAStaleBuffer) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  {
    StaleBuffer stale(p[0]);
    ControlMessage cm = TakeControlMessage(-1, stale.msg);
    EXPECT_TRUE(cm.fds.empty());
    EXPECT_FALSE(cm.creds);
    ControlMessage eof = TakeControlMessage(0, stale.msg);
    EXPECT_TRUE(eof.fds.empty());
  }
  EXPECT_TRUE(IsOpen(p[0])) << "a descriptor named by stale bytes was closed";
  ::close(p[0]);
  ::close(p[1]);
}

TEST(ControlMessage, AReadAdoptsItsDescriptorsAndCredentials) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  UniqueFd a(sv[0]), b(sv[1]);
  int on = 1;
  ASSERT_EQ(::setsockopt(b.get(), SOL_SOCKET, SO_PASSCRED, &on, sizeof on), 0);
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  UniqueFd pr(p[0]), pw(p[1]);
  ASSERT_TRUE(UnixChannel(UniqueFd(::dup(a.get()))).Write("x", std::span<const int>(&p[0], 1)).ok());
  char byte;
  struct iovec iov = {&byte, 1};
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(sizeof(int) * 4)];
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t r = ::recvmsg(b.get(), &msg, MSG_CMSG_CLOEXEC);
  ASSERT_EQ(r, 1);
  ControlMessage cm = TakeControlMessage(r, msg);
  ASSERT_EQ(cm.fds.size(), 1u);
  EXPECT_NE(cm.fds[0].get(), p[0]);
  EXPECT_TRUE(IsOpen(cm.fds[0].get()));
  ASSERT_TRUE(cm.creds);
  EXPECT_EQ(cm.creds->pid, ::getpid());
  EXPECT_FALSE(cm.truncated);
}

// The same through UnixChannel: a frame's descriptors, handed out, are not
// taken back by the next read that finds nothing (MSG_DONTWAIT, EAGAIN),
// whose control buffer on the stack still holds the earlier message.
TEST(ControlMessage, AnEmptyTryReadAfterDescriptorsLeavesThemOpen) {
  UniqueFd a, b;
  ASSERT_TRUE(SocketPair(&a, &b).ok());
  UnixChannel ca(std::move(a)), cb(std::move(b));
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  UniqueFd pr(p[0]), pw(p[1]);
  for (int round = 0; round < 50; ++round) {
    std::string frame;
    proto::AppendRequest(&frame, proto::PingRequest{}, round, 2);
    ASSERT_TRUE(ca.Write(frame, std::span<const int>(p, 2)).ok());
    proto::FrameHeader h;
    std::string payload;
    std::vector<UniqueFd> fds;
    Result<bool> got = false;
    while ((got = cb.TryReadFrame(&h, &payload, &fds)).ok() && !*got) {
    }
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(fds.size(), 2u);
    // Nothing more has arrived: EAGAIN.
    got = cb.TryReadFrame(&h, &payload, &fds);
    ASSERT_TRUE(got.ok());
    EXPECT_FALSE(*got);
    // A frame without descriptors: the channel drops what no frame claims.
    std::string ping;
    proto::AppendRequest(&ping, proto::PingRequest{}, 1000 + round, 0);
    ASSERT_TRUE(ca.Write(ping).ok());
    std::vector<UniqueFd> none;
    while ((got = cb.TryReadFrame(&h, &payload, &none)).ok() && !*got) {
    }
    ASSERT_TRUE(got.ok());
    for (const UniqueFd& fd : fds) ASSERT_TRUE(IsOpen(fd.get())) << "round " << round << ": fd " << fd.get();
  }
}

}  // namespace
}  // namespace smolvm
