// Channel: moves bytes and file descriptors between two processes, and cuts
// the byte stream into frames (proto/wire.h). Knows nothing of CUDA.
//
// A Channel is used by one thread at a time; callers that share one (the
// shim) serialize with their own lock.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"
#include "proto/wire.h"

namespace smolvm {

class Channel {
 public:
  virtual ~Channel() = default;

  // Writes all of `bytes` (one or more whole frames). `fds` ride with the
  // first byte. Returns kUnavailable when the peer is gone.
  virtual Status Write(std::string_view bytes, std::span<const int> fds = {}) = 0;

  // Reads the next whole frame. Rejects (kMalformed) a header whose payload
  // exceeds kMaxPayloadBytes or whose num_fds exceeds kMaxFdsPerFrame or the
  // descriptors actually received, without reading the payload. Returns
  // kUnavailable on a clean end of stream.
  virtual Status ReadFrame(proto::FrameHeader* header, std::string* payload,
                           std::vector<UniqueFd>* fds) = 0;

  // True when a whole frame is already buffered (no system call needed).
  virtual bool HasBufferedFrame() const = 0;

  // The descriptor to poll for readability.
  virtual int fd() const = 0;
};

}  // namespace smolvm
