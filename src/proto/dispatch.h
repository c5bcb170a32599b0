// The dispatch switch, generated from the op table: decodes a request frame
// and calls the handler's `Status Handle(const NameRequest&, NameReply*, CallContext*)`.
//
// A handler implements only the ops its socket accepts; any other op number,
// even one in the table, is answered like an unknown op. SYNC requests get a
// reply appended to `out`; a failing ASYNC request is returned as a Status for
// the caller to keep as its deferred error. Decoding failures never reach the
// handler.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"
#include "proto/frame.h"
#include "proto/messages.h"

namespace smolvm::proto {

// What a handler sees of the frame besides its fields.
struct CallContext {
  const FrameHeader* header = nullptr;
  std::vector<UniqueFd>* fds_in = nullptr;  // descriptors that came with the request
  std::vector<int> fds_out;                 // descriptors to send with the reply (borrowed)
  int32_t deferred = 0;                     // stamped into a SYNC reply
};

struct DispatchOutcome {
  Status status;            // the op's result (or the decode/unknown-op failure)
  bool replied = false;     // a reply frame was appended to `out`
};

template <typename H>
DispatchOutcome Dispatch(H& handler, const FrameHeader& h, std::string_view payload,
                         CallContext* ctx, std::string* out) {
  const bool async = (h.flags & kFlagAsync) != 0;
  auto finish = [&](Status st, auto* rep) {
    DispatchOutcome o{std::move(st), false};
    if (!async) {
      if (o.status.ok()) {
        AppendReply(out, h.op, h.seq, ctx->deferred, *rep,
                    static_cast<uint32_t>(ctx->fds_out.size()));
      } else {
        AppendErrorReply(out, h.op, h.seq, o.status.code(), ctx->deferred, o.status.message());
      }
      o.replied = true;
    }
    return o;
  };
  switch (h.op) {
#define SMOLVM_DISPATCH_CASE(num, name, kind, req, rep)                                        \
  case num:                                                                                     \
    if constexpr (requires(name##Request q, name##Reply r) { handler.Handle(q, &r, ctx); }) {  \
      name##Request q;                                                                          \
      name##Reply r;                                                                            \
      Decoder dec(payload);                                                                     \
      if (!Decode(dec, &q)) return finish(Malformed(#name " request does not decode"), &r);    \
      if ((OpKind::kind == OpKind::ASYNC) != async)                                            \
        return finish(Malformed(#name " sent with the wrong async flag"), &r);                 \
      return finish(handler.Handle(q, &r, ctx), &r);                                           \
    }                                                                                           \
    break;
    SMOLVM_OPS(SMOLVM_DISPATCH_CASE)
#undef SMOLVM_DISPATCH_CASE
    default:
      break;
  }
  PingReply none;
  return finish(Status(Code::kUnknownOp, "op " + std::to_string(h.op) + " is not accepted here"),
                &none);
}

}  // namespace smolvm::proto
