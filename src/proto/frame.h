// Building and parsing whole frames (wire.h) around messages (messages.h).
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "proto/messages.h"
#include "proto/wire.h"

namespace smolvm::proto {

// Appends the frame of request `m` to `out`. ASYNC ops get kFlagAsync.
template <typename Req>
void AppendRequest(std::string* out, const Req& m, uint32_t seq, uint32_t num_fds = 0) {
  size_t at = out->size();
  out->resize(at + kFrameHeaderBytes);
  Encoder enc(out);
  Encode(enc, m);
  FrameHeader h;
  h.payload_bytes = static_cast<uint32_t>(out->size() - at - kFrameHeaderBytes);
  h.op = static_cast<uint16_t>(Req::kOp);
  h.flags = Req::kKind == OpKind::ASYNC ? kFlagAsync : 0;
  h.seq = seq;
  h.num_fds = num_fds;
  EncodeHeader(h, reinterpret_cast<uint8_t*>(out->data() + at));
}

// Appends a successful reply carrying `m`.
template <typename Rep>
void AppendReply(std::string* out, uint16_t op, uint32_t seq, int32_t deferred, const Rep& m,
                 uint32_t num_fds = 0) {
  size_t at = out->size();
  out->resize(at + kFrameHeaderBytes);
  Encoder enc(out);
  enc.Put(int32_t{0});
  enc.Put(deferred);
  Encode(enc, m);
  FrameHeader h;
  h.payload_bytes = static_cast<uint32_t>(out->size() - at - kFrameHeaderBytes);
  h.op = op;
  h.flags = kFlagReply;
  h.seq = seq;
  h.num_fds = num_fds;
  EncodeHeader(h, reinterpret_cast<uint8_t*>(out->data() + at));
}

// Appends a failed reply: result != 0 and a message for humans.
void AppendErrorReply(std::string* out, uint16_t op, uint32_t seq, int32_t result,
                      int32_t deferred, std::string_view message);

// A decoded reply payload: result, deferred and the rest (fields or message).
struct ReplyHead {
  int32_t result = 0;
  int32_t deferred = 0;
  std::string message;  // set when result != 0
};

// Decodes a reply payload into `head` and, when result == 0, into `*rep`.
// Returns a kMalformed status when the payload does not decode exactly.
template <typename Rep>
Status DecodeReply(std::string_view payload, ReplyHead* head, Rep* rep) {
  Decoder dec(payload);
  dec.Get(&head->result);
  dec.Get(&head->deferred);
  if (!dec.ok()) return Malformed("reply shorter than its head");
  if (head->result != 0) {
    dec.Get(&head->message);
    if (!dec.done()) return Malformed("error reply does not decode");
    return Status::Ok();
  }
  if (!Decode(dec, rep)) return Malformed("reply fields do not decode");
  return Status::Ok();
}

}  // namespace smolvm::proto
