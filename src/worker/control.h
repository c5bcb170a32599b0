// Helpers for the daemon <-> worker control link: chunk descriptors travel
// in ForkFds frames of at most kMaxFdsPerFrame each, in manifest order.
#pragma once

#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"
#include "transport/channel.h"

namespace smolvm {

// Sends `fds` as ForkFds frames.
Status SendChunkFds(Channel& ch, const std::vector<int>& fds);
// Reads ForkFds frames until `count` descriptors have arrived.
Result<std::vector<UniqueFd>> ReceiveChunkFds(Channel& ch, uint32_t count);
// Reads the same frames, closing each batch as it comes (a refused set is
// never held whole: at most kMaxFdsPerFrame at a time).
Status DiscardChunkFds(Channel& ch, uint32_t count);

}  // namespace smolvm
