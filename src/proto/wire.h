// Frame layout shared by every channel (all integers little-endian):
//
//   offset  size  field
//   0       4     payload_bytes   bytes that follow the header
//   4       2     op              proto::Op number
//   6       2     flags           bit 0 REPLY, bit 1 ASYNC (no reply expected)
//   8       4     seq             request sequence number; a reply echoes it
//   12      4     num_fds         file descriptors riding with this frame
//   16      ...   payload
//
// Reply payload: i32 result, i32 deferred, then
//   result == 0: the op's reply fields;   result != 0: str message.
// `result` is a CUresult or a smolvm Code; `deferred` is the first failure of
// an earlier ASYNC op of this session that has not been reported yet.
//
// File descriptors ride with the first byte of the frame that carries them,
// so a frame with num_fds > 0 is always the first frame of its sendmsg().
#pragma once

#include <cstdint>

namespace smolvm::proto {

inline constexpr uint32_t kFrameHeaderBytes = 16;
// Largest payload a peer accepts; larger frames are rejected, never allocated.
inline constexpr uint32_t kMaxPayloadBytes = 80u << 20;
// SCM_RIGHTS carries at most 253 descriptors a message.
inline constexpr uint32_t kMaxFdsPerFrame = 250;
// Bumped when the frame layout above changes; part of the proto hash.
inline constexpr uint32_t kFrameVersion = 1;

inline constexpr uint16_t kFlagReply = 1u << 0;
inline constexpr uint16_t kFlagAsync = 1u << 1;

struct FrameHeader {
  uint32_t payload_bytes = 0;
  uint16_t op = 0;
  uint16_t flags = 0;
  uint32_t seq = 0;
  uint32_t num_fds = 0;
};

// Writes `h` as 16 little-endian bytes at `out`.
void EncodeHeader(const FrameHeader& h, uint8_t* out);
FrameHeader DecodeHeader(const uint8_t* in);

}  // namespace smolvm::proto
