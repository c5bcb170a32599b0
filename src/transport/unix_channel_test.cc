#include "transport/unix_channel.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "proto/frame.h"

namespace smolvm {
namespace {

TEST(UnixChannel, BatchedFramesArriveOneByOne) {
  UniqueFd a, b;
  ASSERT_TRUE(SocketPair(&a, &b).ok());
  UnixChannel ca(std::move(a)), cb(std::move(b));
  std::string batch;
  for (uint32_t i = 0; i < 100; ++i)
    proto::AppendRequest(&batch, proto::MemsetRequest{.dst = i, .value = i}, i);
  ASSERT_TRUE(ca.Write(batch).ok());
  for (uint32_t i = 0; i < 100; ++i) {
    proto::FrameHeader h;
    std::string payload;
    std::vector<UniqueFd> fds;
    ASSERT_TRUE(cb.ReadFrame(&h, &payload, &fds).ok());
    EXPECT_EQ(h.seq, i);
    proto::MemsetRequest m;
    proto::Decoder dec(payload);
    ASSERT_TRUE(proto::Decode(dec, &m));
    EXPECT_EQ(m.dst, i);
  }
}

// For the daemon's poll loop (daemon/control_links.h): a frame that
// arrives in pieces is taken only when whole, without ever waiting, and
// its descriptors, which came with its first byte, come with it.
TEST(UnixChannel, TryReadFrameTakesAFrameOnlyWhenWholeAndNeverWaits) {
  UniqueFd a, b;
  ASSERT_TRUE(SocketPair(&a, &b).ok());
  int raw = a.get();
  UnixChannel cb(std::move(b));
  std::string frame;
  proto::AppendRequest(&frame, proto::MemcpyHtoDRequest{.dst = 5, .data = std::string(100000, 'q')}, 3, 1);
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  proto::FrameHeader h;
  std::string payload;
  std::vector<UniqueFd> fds;
  auto got = cb.TryReadFrame(&h, &payload, &fds);
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(*got);  // nothing yet, and no wait
  EXPECT_FALSE(cb.PartialSince());
  // The first 10 bytes with the descriptor, then the rest in two pieces.
  char dummy_ctl[CMSG_SPACE(sizeof(int))] = {};
  struct iovec iov = {frame.data(), 10};
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = dummy_ctl;
  msg.msg_controllen = sizeof dummy_ctl;
  struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &pipefd[1], sizeof(int));
  ASSERT_EQ(::sendmsg(raw, &msg, 0), 10);
  got = cb.TryReadFrame(&h, &payload, &fds);
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(*got);
  EXPECT_TRUE(cb.PartialSince());
  ASSERT_EQ(::send(raw, frame.data() + 10, 50000, 0), 50000);
  got = cb.TryReadFrame(&h, &payload, &fds);
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(*got);
  ASSERT_EQ(::send(raw, frame.data() + 50010, frame.size() - 50010, 0), static_cast<ssize_t>(frame.size() - 50010));
  got = cb.TryReadFrame(&h, &payload, &fds);
  ASSERT_TRUE(got.ok());
  ASSERT_TRUE(*got);
  EXPECT_EQ(h.seq, 3u);
  EXPECT_EQ(payload.size(), frame.size() - proto::kFrameHeaderBytes);
  ASSERT_EQ(fds.size(), 1u);
  EXPECT_FALSE(cb.PartialSince());
  ::close(pipefd[0]);
  ::close(pipefd[1]);
}

TEST(UnixChannel, LargePayloadAndDescriptorsTravel) {
  UniqueFd a, b;
  ASSERT_TRUE(SocketPair(&a, &b).ok());
  UnixChannel ca(std::move(a)), cb(std::move(b));
  std::string data(5 << 20, 'x');
  for (size_t i = 0; i < data.size(); i += 4096) data[i] = static_cast<char>(i >> 12);
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  std::string frame;
  proto::AppendRequest(&frame, proto::MemcpyHtoDRequest{.dst = 1, .data = data}, 9, 1);
  std::thread writer([&] { ASSERT_TRUE(ca.Write(frame, std::span<const int>(&pipefd[1], 1)).ok()); });
  proto::FrameHeader h;
  std::string payload;
  std::vector<UniqueFd> fds;
  ASSERT_TRUE(cb.ReadFrame(&h, &payload, &fds).ok());
  writer.join();
  ASSERT_EQ(fds.size(), 1u);
  proto::MemcpyHtoDRequest m;
  proto::Decoder dec(payload);
  ASSERT_TRUE(proto::Decode(dec, &m));
  EXPECT_EQ(m.data, data);
  // The received descriptor is the pipe's write end: a byte written to it arrives.
  ASSERT_EQ(::write(fds[0].get(), "z", 1), 1);
  char c = 0;
  ASSERT_EQ(::read(pipefd[0], &c, 1), 1);
  EXPECT_EQ(c, 'z');
  ::close(pipefd[0]);
  ::close(pipefd[1]);
}

TEST(UnixChannel, RejectsOversizedHeaderWithoutReadingIt) {
  UniqueFd a, b;
  ASSERT_TRUE(SocketPair(&a, &b).ok());
  UnixChannel ca(std::move(a)), cb(std::move(b));
  uint8_t hdr[proto::kFrameHeaderBytes];
  proto::EncodeHeader({.payload_bytes = proto::kMaxPayloadBytes + 1, .op = 3}, hdr);
  ASSERT_TRUE(ca.Write(std::string_view(reinterpret_cast<char*>(hdr), sizeof hdr)).ok());
  proto::FrameHeader h;
  std::string payload;
  std::vector<UniqueFd> fds;
  Status s = cb.ReadFrame(&h, &payload, &fds);
  EXPECT_EQ(s.code(), static_cast<int32_t>(Code::kMalformed));
}

TEST(UnixChannel, ClaimedDescriptorsThatNeverCameAreRejected) {
  UniqueFd a, b;
  ASSERT_TRUE(SocketPair(&a, &b).ok());
  UnixChannel ca(std::move(a)), cb(std::move(b));
  std::string frame;
  proto::AppendRequest(&frame, proto::PingRequest{}, 1, /*num_fds=*/3);
  ASSERT_TRUE(ca.Write(frame).ok());
  proto::FrameHeader h;
  std::string payload;
  std::vector<UniqueFd> fds;
  EXPECT_EQ(cb.ReadFrame(&h, &payload, &fds).code(), static_cast<int32_t>(Code::kMalformed));
}

TEST(UnixChannel, PeerCloseIsUnavailable) {
  UniqueFd a, b;
  ASSERT_TRUE(SocketPair(&a, &b).ok());
  UnixChannel cb(std::move(b));
  a.Reset();
  proto::FrameHeader h;
  std::string payload;
  std::vector<UniqueFd> fds;
  EXPECT_EQ(cb.ReadFrame(&h, &payload, &fds).code(), static_cast<int32_t>(Code::kUnavailable));
}

// The spin that spares a reader its scheduler wakeup: false when nothing
// came within the budget (and at once for a budget of 0), true for data
// already there, data that arrives while it spins, and a peer gone.
TEST(UnixChannel, SpinUntilReadableSeesDataArrivingAndAPeerGone) {
  UniqueFd a, b;
  ASSERT_TRUE(SocketPair(&a, &b).ok());
  EXPECT_FALSE(SpinUntilReadable(b.get(), 0));
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(SpinUntilReadable(b.get(), 200));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::microseconds(200));
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_EQ(::write(a.get(), "x", 1), 1);
  });
  EXPECT_TRUE(SpinUntilReadable(b.get(), 1000 * 1000));  // ends when the byte comes, not after 1 s
  writer.join();
  EXPECT_TRUE(SpinUntilReadable(b.get(), 10));  // still unread: still readable
  char c;
  ASSERT_EQ(::read(b.get(), &c, 1), 1);
  EXPECT_FALSE(SpinUntilReadable(b.get(), 10));
  a.Reset();
  EXPECT_TRUE(SpinUntilReadable(b.get(), 10));  // hung up: the read says so
  EXPECT_TRUE(WaitUntilReadable(b.get(), 0).ok());
}


int OpenFdCount() {
  int n = 0;
  for (int fd = 0; fd < 65536; ++fd) n += ::fcntl(fd, F_GETFD) >= 0;
  return n;
}

// Descriptors a frame header does not announce are closed once that frame is
// read; announced ones still arrive, in order, with their frames.
TEST(UnixChannel, UnannouncedDescriptorsAreClosedAtOnce) {
  UniqueFd a, b;
  ASSERT_TRUE(SocketPair(&a, &b).ok());
  UnixChannel ca(std::move(a)), cb(std::move(b));
  UniqueFd memfd(::memfd_create("unannounced", MFD_CLOEXEC));
  std::vector<int> many(proto::kMaxFdsPerFrame, memfd.get());
  const int before = OpenFdCount();
  for (uint32_t i = 0; i < 60; ++i) {
    std::string out;
    proto::AppendRequest(&out, proto::PingRequest{}, i, 0);
    ASSERT_TRUE(ca.Write(out, many).ok());
    proto::FrameHeader h;
    std::string payload;
    std::vector<UniqueFd> fds;
    ASSERT_TRUE(cb.ReadFrame(&h, &payload, &fds).ok());
    EXPECT_EQ(h.seq, i);
    EXPECT_TRUE(fds.empty());
    EXPECT_LE(OpenFdCount(), before + 1) << "after frame " << i;
  }
  // One frame announcing 2 of 3 descriptors, then one announcing 1.
  std::string first, second;
  proto::AppendRequest(&first, proto::PingRequest{}, 100, 2);
  proto::AppendRequest(&second, proto::PingRequest{}, 101, 1);
  int three[3] = {memfd.get(), memfd.get(), memfd.get()};
  ASSERT_TRUE(ca.Write(first, std::span<const int>(three, 3)).ok());
  ASSERT_TRUE(ca.Write(second, std::span<const int>(three, 1)).ok());
  for (size_t want : {2u, 1u}) {
    proto::FrameHeader h;
    std::string payload;
    std::vector<UniqueFd> fds;
    ASSERT_TRUE(cb.ReadFrame(&h, &payload, &fds).ok());
    EXPECT_EQ(fds.size(), want);
  }
  EXPECT_LE(OpenFdCount(), before + 1);
}

// A peer that declares a large payload and sends little of it costs what it
// sent, not what it declared.
TEST(UnixChannel, PayloadBufferGrowsWithBytesReceived) {
  UniqueFd a, b;
  ASSERT_TRUE(SocketPair(&a, &b).ok());
  UnixChannel cb(std::move(b));
  std::string out(proto::kFrameHeaderBytes, '\0');
  proto::EncodeHeader({.payload_bytes = 64u << 20, .op = 3, .flags = 0, .seq = 1},
                      reinterpret_cast<uint8_t*>(out.data()));
  out += std::string(300 << 10, 'x');  // more than one read chunk, far less than declared
  std::thread peer([&] {
    for (size_t at = 0; at < out.size();) {
      ssize_t w = ::write(a.get(), out.data() + at, out.size() - at);
      if (w <= 0) break;
      at += static_cast<size_t>(w);
    }
    a.Reset();  // then hangs up
  });
  proto::FrameHeader h;
  std::string payload;
  std::vector<UniqueFd> fds;
  Status st = cb.ReadFrame(&h, &payload, &fds);
  peer.join();
  EXPECT_EQ(st.code(), static_cast<int32_t>(Code::kUnavailable));
  EXPECT_LE(payload.capacity(), 4u << 20) << "sized from the declared 64 MiB";
}

// The receive buffer (reused, grown and compacted without zero-filling)
// hands out every frame intact: frames of many sizes, some larger than a
// read and larger than the 1 MiB past which consumed bytes are dropped from
// its front, written in pieces that cut frames anywhere, read by ReadFrame
// and by TryReadFrame (which buffers a frame whole before it hands it out).
TEST(UnixChannel, AStreamCutAnywhereArrivesFrameByFrame) {
  UniqueFd a, b;
  ASSERT_TRUE(SocketPair(&a, &b).ok());
  UnixChannel cb(std::move(b));
  auto payload_of = [](uint32_t i) {
    size_t n = i % 97 == 0 ? (1100u << 10) + i : (i * 37) % 4000;
    std::string p(n, '\0');
    for (size_t k = 0; k < n; ++k) p[k] = static_cast<char>(i * 131 + k * 7);
    return p;
  };
  constexpr uint32_t kFrames = 1000;
  std::string stream;
  for (uint32_t i = 0; i < kFrames; ++i) {
    std::string p = payload_of(i);
    std::string h(proto::kFrameHeaderBytes, '\0');
    proto::EncodeHeader({.payload_bytes = static_cast<uint32_t>(p.size()), .op = 3, .flags = 0, .seq = i},
                        reinterpret_cast<uint8_t*>(h.data()));
    stream += h + p;
  }
  std::thread peer([&] {
    uint32_t cut = 1;
    for (size_t at = 0; at < stream.size();) {
      cut = cut * 1103515245u + 12345u;
      size_t n = std::min<size_t>(stream.size() - at, 1 + (cut >> 8) % (700u << 10));
      ssize_t w = ::write(a.get(), stream.data() + at, n);
      if (w <= 0) break;
      at += static_cast<size_t>(w);
    }
  });
  for (uint32_t i = 0; i < kFrames; ++i) {
    proto::FrameHeader h;
    std::string payload;
    std::vector<UniqueFd> fds;
    if (i % 3 == 0) {
      ASSERT_TRUE(cb.ReadFrame(&h, &payload, &fds).ok()) << i;
    } else {
      for (;;) {
        auto got = cb.TryReadFrame(&h, &payload, &fds);
        ASSERT_TRUE(got.ok()) << i;
        if (*got) break;
        struct pollfd p = {cb.fd(), POLLIN, 0};
        ASSERT_EQ(::poll(&p, 1, 10000), 1) << "frame " << i << " never came whole";
      }
    }
    ASSERT_EQ(h.seq, i);
    ASSERT_TRUE(payload == payload_of(i)) << "frame " << i << " of " << payload.size() << " bytes";
  }
  peer.join();
}

}  // namespace
}  // namespace smolvm
