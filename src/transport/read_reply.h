// Reads one reply frame from a channel and decodes it: the request's result
// as a Status (the reply's message when it failed), its fields in *rep.
// Used by the clients of the daemon's admin socket (CLI, machine layer, tests).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"
#include "proto/frame.h"
#include "transport/channel.h"

namespace smolvm {

template <typename Rep>
Status ReadReplyFrame(Channel& ch, Rep* rep) {
  proto::FrameHeader h;
  std::string payload;
  std::vector<UniqueFd> fds;
  RETURN_IF_ERROR(ch.ReadFrame(&h, &payload, &fds));
  proto::ReplyHead head;
  RETURN_IF_ERROR(proto::DecodeReply(payload, &head, rep));
  if (head.result != 0) return Status(head.result, head.message);
  return Status::Ok();
}

}  // namespace smolvm
