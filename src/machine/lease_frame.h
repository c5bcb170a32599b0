// The lease link's frames (guest/lease_wire.h) for host code: encoding, the
// checked decoding of a header, the strict JSON check of a body, and a reader
// that takes one frame at a time off a non-blocking socket. Used by the
// supervisor's relay (lease_relay.h) and the host's LeaseLink (lease_link.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "guest/lease_wire.h"

namespace smolvm::machine {

struct LeaseFrameHeader {
  uint8_t kind = 0;
  uint32_t length = 0;
  uint64_t seq = 0;
  uint64_t payload = 0;
};

inline constexpr size_t kLeaseHeader = SMOLVM_LEASE_HEADER;
inline constexpr size_t kLeaseMaxJson = SMOLVM_LEASE_MAX_JSON;
// How deep a clone's JSON may nest (objects and arrays).
inline constexpr int kLeaseMaxDepth = 128;

// The whole frame: header then body.
std::string EncodeLeaseFrame(uint8_t kind, std::string_view body, uint64_t seq, uint64_t payload);

// Decodes the 24 header bytes; kMalformed when flags/reserved are not zero,
// the kind is unknown or the length is over kLeaseMaxJson.
Result<LeaseFrameHeader> DecodeLeaseHeader(const char* bytes);

// OK when `text` is one strict JSON value (RFC 8259: no comments, no NaN, no
// trailing bytes, valid UTF-8) nesting at most kLeaseMaxDepth deep; with
// object_only, a JSON object. Never builds the document (a hostile depth or
// size costs no stack and no more memory than the text).
Status CheckLeaseJson(std::string_view text, bool object_only);

// Reads frames off a socket one at a time, never past the current frame
// (so a bounded buffer, and the socket stays readable while frames wait).
class LeaseFrameReader {
 public:
  struct Frame {
    LeaseFrameHeader header;
    std::string body;
  };
  // Reads what is there (MSG_DONTWAIT). A whole frame: returned; nullopt:
  // not yet (or nothing readable). kUnavailable on EOF or a socket error,
  // kMalformed for a bad header (the stream is then out of step).
  Result<std::optional<Frame>> ReadSome(int fd);
  // Bytes of a frame read so far (0 between frames).
  size_t partial() const { return buf_.size(); }
  void Reset() { buf_.clear(); }

 private:
  std::string buf_;
};

}  // namespace smolvm::machine
