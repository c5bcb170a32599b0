#include <gtest/gtest.h>

#include <cstring>

#include "proto/frame.h"
#include "proto/messages.h"
#include "proto/proto_hash.h"

namespace smolvm::proto {
namespace {

TEST(ProtoHash, IsSixteenHexDigitsAndCoversTheTableText) {
  std::string hex = HashHex(kProtoHash);
  EXPECT_EQ(hex.size(), 16u);
  EXPECT_EQ(hex.find_first_not_of("0123456789abcdef"), std::string::npos);
  // The schema text holds field types and names, not comments.
  std::string text = kSchemaText;
  EXPECT_NE(text.find("55 LaunchKernel ASYNC (F(u64, function)"), std::string::npos);
  EXPECT_EQ(text.find("/*"), std::string::npos);
}

TEST(Codec, RoundTripsEveryFieldType) {
  DeviceGetInfoReply in;
  in.name = "NVIDIA H200";
  in.uuid = std::string_view("\x01\x02\x00\x04", 4);
  in.total_mem = 0x1122334455667788ull;
  in.driver_version = -13000;
  in.attrs = {1, -2, 3};
  std::string buf;
  Encoder enc(&buf);
  Encode(enc, in);
  DeviceGetInfoReply out;
  Decoder dec(buf);
  ASSERT_TRUE(Decode(dec, &out));
  EXPECT_EQ(out.name, in.name);
  EXPECT_EQ(out.uuid, in.uuid);
  EXPECT_EQ(out.total_mem, in.total_mem);
  EXPECT_EQ(out.driver_version, in.driver_version);
  EXPECT_EQ(out.attrs, in.attrs);
}

TEST(Codec, IsLittleEndian) {
  std::string buf;
  Encoder enc(&buf);
  enc.Put(uint32_t{0x01020304});
  ASSERT_EQ(buf.size(), 4u);
  EXPECT_EQ(buf[0], 0x04);
  EXPECT_EQ(buf[3], 0x01);
}

TEST(Codec, RejectsEveryTruncation) {
  LaunchKernelRequest in;
  in.function = 7;
  in.grid_x = 3;
  in.params = "0123456789abcdef";
  std::string buf;
  Encoder enc(&buf);
  Encode(enc, in);
  for (size_t n = 0; n < buf.size(); ++n) {
    Decoder dec(std::string_view(buf.data(), n));
    LaunchKernelRequest out;
    EXPECT_FALSE(Decode(dec, &out)) << "accepted a frame cut at " << n;
  }
}

TEST(Codec, RejectsTrailingBytes) {
  std::string buf;
  Encoder enc(&buf);
  Encode(enc, MemFreeRequest{.dptr = 5});
  buf.push_back('x');
  Decoder dec(buf);
  MemFreeRequest out;
  EXPECT_FALSE(Decode(dec, &out));
}

TEST(Codec, RejectsOversizedLengths) {
  std::string buf;
  Encoder enc(&buf);
  enc.Put(uint32_t{0xffffffff});  // a bytes field claiming 4 GiB
  Decoder dec(buf);
  std::string_view v;
  dec.Get(&v);
  EXPECT_FALSE(dec.ok());
  Decoder dec2(buf);
  std::vector<int32_t> vec;
  dec2.Get(&vec);
  EXPECT_FALSE(dec2.ok());
  EXPECT_TRUE(vec.empty());
}

TEST(Frame, RequestAndReplyRoundTrip) {
  std::string out;
  AppendRequest(&out, MemAllocRequest{.bytes = 4096}, 42);
  FrameHeader h = DecodeHeader(reinterpret_cast<const uint8_t*>(out.data()));
  EXPECT_EQ(h.op, static_cast<uint16_t>(Op::kMemAlloc));
  EXPECT_EQ(h.seq, 42u);
  EXPECT_EQ(h.flags, 0);
  EXPECT_EQ(h.payload_bytes, out.size() - kFrameHeaderBytes);

  std::string rep;
  AppendReply(&rep, h.op, h.seq, 719, MemAllocReply{.dptr = 0x600000000000ull});
  ReplyHead head;
  MemAllocReply r;
  ASSERT_TRUE(DecodeReply(std::string_view(rep).substr(kFrameHeaderBytes), &head, &r).ok());
  EXPECT_EQ(head.result, 0);
  EXPECT_EQ(head.deferred, 719);
  EXPECT_EQ(r.dptr, 0x600000000000ull);

  std::string err;
  AppendErrorReply(&err, h.op, h.seq, 2, 0, "out of memory");
  ASSERT_TRUE(DecodeReply(std::string_view(err).substr(kFrameHeaderBytes), &head, &r).ok());
  EXPECT_EQ(head.result, 2);
  EXPECT_EQ(head.message, "out of memory");
}

TEST(Frame, AsyncOpsCarryTheAsyncFlag) {
  std::string out;
  AppendRequest(&out, LaunchKernelRequest{}, 1);
  FrameHeader h = DecodeHeader(reinterpret_cast<const uint8_t*>(out.data()));
  EXPECT_EQ(h.flags & kFlagAsync, kFlagAsync);
  EXPECT_TRUE(IsAsyncOp(h.op));
  EXPECT_FALSE(IsAsyncOp(static_cast<uint16_t>(Op::kStreamSynchronize)));
  EXPECT_FALSE(IsKnownOp(9999));
  EXPECT_STREQ(OpName(static_cast<uint16_t>(Op::kHello)), "Hello");
}

}  // namespace
}  // namespace smolvm::proto
