#include "proto/messages.h"

#include <cstdio>

#include "proto/proto_hash.h"
#include "proto/wire.h"

namespace smolvm::proto {

const char* OpName(uint16_t op) {
  switch (op) {
#define SMOLVM_OP_NAME(num, name, kind, req, rep) \
  case num:                                       \
    return #name;
    SMOLVM_OPS(SMOLVM_OP_NAME)
#undef SMOLVM_OP_NAME
  }
  return nullptr;
}

const char* ControlOpName(uint16_t op) {
  switch (op) {
#define SMOLVM_OP_NAME(num, name, kind, req, rep) \
  case num:                                       \
    return #name;
    SMOLVM_CONTROL_OPS(SMOLVM_OP_NAME)
#undef SMOLVM_OP_NAME
  }
  return nullptr;
}

bool IsKnownOp(uint16_t op) { return OpName(op) != nullptr; }

bool IsAsyncOp(uint16_t op) {
  switch (op) {
#define SMOLVM_OP_ASYNC(num, name, kind, req, rep) \
  case num:                                        \
    return OpKind::kind == OpKind::ASYNC;
    SMOLVM_OPS(SMOLVM_OP_ASYNC)
#undef SMOLVM_OP_ASYNC
  }
  return false;
}

std::string HashHex(uint64_t hash) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(hash));
  return buf;
}

void EncodeHeader(const FrameHeader& h, uint8_t* out) {
  auto put = [&out](uint64_t v, int n) {
    for (int i = 0; i < n; ++i) *out++ = static_cast<uint8_t>(v >> (8 * i));
  };
  put(h.payload_bytes, 4);
  put(h.op, 2);
  put(h.flags, 2);
  put(h.seq, 4);
  put(h.num_fds, 4);
}

FrameHeader DecodeHeader(const uint8_t* in) {
  auto get = [&in](int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(*in++) << (8 * i);
    return v;
  };
  FrameHeader h;
  h.payload_bytes = static_cast<uint32_t>(get(4));
  h.op = static_cast<uint16_t>(get(2));
  h.flags = static_cast<uint16_t>(get(2));
  h.seq = static_cast<uint32_t>(get(4));
  h.num_fds = static_cast<uint32_t>(get(4));
  return h;
}

}  // namespace smolvm::proto

#include "proto/frame.h"

namespace smolvm::proto {

void AppendErrorReply(std::string* out, uint16_t op, uint32_t seq, int32_t result,
                      int32_t deferred, std::string_view message) {
  size_t at = out->size();
  out->resize(at + kFrameHeaderBytes);
  Encoder enc(out);
  enc.Put(result);
  enc.Put(deferred);
  enc.Put(message);
  FrameHeader h;
  h.payload_bytes = static_cast<uint32_t>(out->size() - at - kFrameHeaderBytes);
  h.op = op;
  h.flags = kFlagReply;
  h.seq = seq;
  EncodeHeader(h, reinterpret_cast<uint8_t*>(out->data() + at));
}

}  // namespace smolvm::proto
