#include "worker/host_mirrors.h"

#include <cuda.h>
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "backend/fake_backend.h"
#include "backend/forwarding_backend.h"
#include "proto/frame.h"

namespace smolvm {
namespace {

// The fake, whose events can be held unfinished (a GPU still copying).
class HoldingBackend final : public ForwardingBackend {
 public:
  HoldingBackend() : ForwardingBackend(std::make_unique<FakeBackend>()) {}
  Status EventQuery(uint64_t event) override {
    if (held.count(event)) return Status(CUDA_ERROR_NOT_READY, "not yet");
    return ForwardingBackend::EventQuery(event);
  }
  Result<uint64_t> EventCreate(uint32_t flags) override {
    ASSIGN_OR_RETURN(last_event, ForwardingBackend::EventCreate(flags));
    return last_event;
  }
  std::set<uint64_t> held;
  uint64_t last_event = 0;
};

struct Landed {
  uint64_t addr;
  std::string data;
};

// Collects what a Take* writes, frame by frame.
struct Frames {
  std::string all;
  size_t writes = 0;
  HostMirrors::FrameSink Sink() {
    return [this](const std::string& f) {
      all += f;
      ++writes;
      return Status::Ok();
    };
  }
};

// The HostLand frames in `frames`, in order.
std::vector<Landed> Decode(const std::string& frames) {
  std::vector<Landed> out;
  size_t at = 0;
  while (at + proto::kFrameHeaderBytes <= frames.size()) {
    proto::FrameHeader h = proto::DecodeHeader(reinterpret_cast<const uint8_t*>(frames.data() + at));
    EXPECT_EQ(h.op, proto::HostLandRequest::kNumber);
    EXPECT_TRUE(h.flags & proto::kFlagAsync);
    proto::HostLandRequest m;
    proto::Decoder dec(std::string_view(frames).substr(at + proto::kFrameHeaderBytes, h.payload_bytes));
    EXPECT_TRUE(proto::Decode(dec, &m));
    out.push_back({m.addr, std::string(m.data)});
    at += proto::kFrameHeaderBytes + h.payload_bytes;
  }
  EXPECT_EQ(at, frames.size());
  return out;
}

class HostMirrorsTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kSeg = 1 << 20;
  void SetUp() override {
    ASSERT_TRUE(backend.Init(0).ok());
    void* p = ::mmap(nullptr, 3 * kSeg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    base = reinterpret_cast<uint64_t>(p);
    // Two mirrors with a gap between them.
    mirrors.AddSegment(base, kSeg);
    mirrors.AddSegment(base + 2 * kSeg, kSeg);
    auto s = backend.StreamCreate(0, 0);
    ASSERT_TRUE(s.ok());
    stream = *s;
  }
  void TearDown() override { ::munmap(reinterpret_cast<void*>(base), 3 * kSeg); }
  char* At(uint64_t off) { return reinterpret_cast<char*>(base + off); }

  HoldingBackend backend;
  HostMirrors mirrors{&backend};
  uint64_t base = 0, stream = 0;
};

TEST_F(HostMirrorsTest, GuestBytesOutsideOneMirrorAreRefused) {
  const std::string data(64, 'x');
  EXPECT_EQ(mirrors.WriteGuestBytes(base + kSeg - 32, data).code(), CUDA_ERROR_INVALID_VALUE) << "runs past the end";
  EXPECT_EQ(mirrors.WriteGuestBytes(base + kSeg, data).code(), CUDA_ERROR_INVALID_VALUE) << "the gap";
  EXPECT_EQ(mirrors.WriteGuestBytes(base - 64, data).code(), CUDA_ERROR_INVALID_VALUE) << "before the first";
  EXPECT_EQ(mirrors.WriteGuestBytes(UINT64_MAX - 16, data).code(), CUDA_ERROR_INVALID_VALUE) << "wraps";
  EXPECT_FALSE(mirrors.Contains(base + 2 * kSeg + 8, UINT64_MAX - 4));
  EXPECT_TRUE(mirrors.WriteGuestBytes(base + kSeg - 64, data).ok());
  EXPECT_EQ(std::string(At(kSeg - 64), 64), data);
  mirrors.RemoveSegment(base);
  EXPECT_EQ(mirrors.WriteGuestBytes(base, data).code(), CUDA_ERROR_INVALID_VALUE) << "removed";
}

// Bytes a device-to-host copy still lands in are newer than the guest's:
// its HostWrite leaves them, and writes them once the landing went out.
TEST_F(HostMirrorsTest, GuestBytesSkipWhatALandingStillFills) {
  std::memset(At(0), 'd', 300);  // what the device copied into the mirror
  ASSERT_TRUE(mirrors.AddLanding(base + 100, 100, stream, 7).ok());
  ASSERT_TRUE(mirrors.WriteGuestBytes(base, std::string(300, 'g')).ok());
  EXPECT_EQ(std::string(At(0), 100), std::string(100, 'g'));
  EXPECT_EQ(std::string(At(100), 100), std::string(100, 'd'));
  EXPECT_EQ(std::string(At(200), 100), std::string(100, 'g'));
  Frames frames;
  ASSERT_TRUE(mirrors.TakeFinished(frames.Sink()).ok());
  auto landed = Decode(frames.all);
  ASSERT_EQ(landed.size(), 1u);
  EXPECT_EQ(landed[0].addr, base + 100);
  EXPECT_EQ(landed[0].data, std::string(100, 'd'));
  ASSERT_TRUE(mirrors.WriteGuestBytes(base, std::string(300, 'h')).ok());
  EXPECT_EQ(std::string(At(0), 300), std::string(300, 'h'));
}

// An unfinished landing holds back the ones after it on its backend stream,
// not another stream's; a landing past the frame size goes in pieces.
TEST_F(HostMirrorsTest, FinishedLandingsGoInStreamOrderInFrameSizedPieces) {
  auto other = backend.StreamCreate(0, 0);
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(mirrors.AddLanding(base, 10, stream, 1).ok());
  backend.held.insert(backend.last_event);
  ASSERT_TRUE(mirrors.AddLanding(base + 10, 10, stream, 1).ok());
  ASSERT_TRUE(mirrors.AddLanding(base + 20, 10, *other, 2).ok());
  Frames frames;
  ASSERT_TRUE(mirrors.TakeFinished(frames.Sink()).ok());
  auto landed = Decode(frames.all);
  ASSERT_EQ(landed.size(), 1u);
  EXPECT_EQ(landed[0].addr, base + 20);
  EXPECT_EQ(mirrors.pending(), 2u);
  backend.held.clear();
  frames = Frames();
  ASSERT_TRUE(mirrors.TakeFinished(frames.Sink()).ok());
  landed = Decode(frames.all);
  ASSERT_EQ(landed.size(), 2u);
  EXPECT_EQ(landed[0].addr, base);
  EXPECT_EQ(landed[1].addr, base + 10);

  // 33 MiB: a 32 MiB piece and the rest.
  const uint64_t big = 33ull << 20;
  void* p = ::mmap(nullptr, big, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  const uint64_t b = reinterpret_cast<uint64_t>(p);
  mirrors.AddSegment(b, big);
  std::memset(p, 'z', big);
  ASSERT_TRUE(mirrors.AddLanding(b, big, stream, 1).ok());
  frames = Frames();
  ASSERT_TRUE(mirrors.TakeFinished(frames.Sink()).ok());
  landed = Decode(frames.all);
  ASSERT_EQ(landed.size(), 2u);
  EXPECT_EQ(landed[0].addr, b);
  EXPECT_EQ(landed[0].data.size(), HostMirrors::kMaxFrameBytes);
  EXPECT_EQ(landed[1].addr, b + HostMirrors::kMaxFrameBytes);
  EXPECT_EQ(landed[1].data.size(), big - HostMirrors::kMaxFrameBytes);
  EXPECT_EQ(frames.writes, 2u) << "a frame a write";
  mirrors.RemoveSegment(b);
  ::munmap(p, big);
}

// A host function's callback takes its stream's landings queued before it,
// without asking the backend (CUDA forbids it there), and nothing else.
TEST_F(HostMirrorsTest, AHostFunctionTakesItsStreamsEarlierLandingsOnly) {
  ASSERT_TRUE(mirrors.AddLanding(base, 10, stream, 1).ok());
  ASSERT_TRUE(mirrors.AddLanding(base + 10, 10, stream, 2).ok());
  const uint64_t before = mirrors.next();
  ASSERT_TRUE(mirrors.AddLanding(base + 20, 10, stream, 1).ok());
  backend.held.insert(backend.last_event);
  Frames frames;
  ASSERT_TRUE(mirrors.TakeStream(1, before, frames.Sink()).ok());
  auto landed = Decode(frames.all);
  ASSERT_EQ(landed.size(), 1u);
  EXPECT_EQ(landed[0].addr, base);
  EXPECT_EQ(mirrors.pending(), 2u);
}

// A freed segment's landings are dropped: nothing lands in freed memory.
TEST_F(HostMirrorsTest, RemovingASegmentDropsItsLandings) {
  ASSERT_TRUE(mirrors.AddLanding(base, 10, stream, 1).ok());
  ASSERT_TRUE(mirrors.AddLanding(base + 2 * kSeg, 10, stream, 1).ok());
  mirrors.RemoveSegment(base);
  Frames frames;
  ASSERT_TRUE(mirrors.TakeFinished(frames.Sink()).ok());
  auto landed = Decode(frames.all);
  ASSERT_EQ(landed.size(), 1u);
  EXPECT_EQ(landed[0].addr, base + 2 * kSeg);
}

// A guest that queues copies into pinned memory and never waits for a reply
// is refused past the cap, with what to do.
TEST_F(HostMirrorsTest, LandingsNeverSentAreCapped) {
  for (size_t i = 0; i < HostMirrors::kMaxPending; ++i) ASSERT_TRUE(mirrors.AddLanding(base, 8, stream, 1).ok()) << i;
  Status st = mirrors.AddLanding(base, 8, stream, 1);
  EXPECT_EQ(st.code(), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_NE(st.message().find("with no synchronization"), std::string::npos) << st.message();
  Frames frames;
  ASSERT_TRUE(mirrors.TakeFinished(frames.Sink()).ok());
  EXPECT_EQ(mirrors.pending(), 0u);
  EXPECT_TRUE(mirrors.AddLanding(base, 8, stream, 1).ok());
}

}  // namespace
}  // namespace smolvm
