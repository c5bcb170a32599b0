// The dispatch of the control table (control_ops.h), generated like the
// guest's (dispatch.h): decodes a frame and calls the handler's
// `Status Handle(const NameRequest&, ControlContext*)`.
//
// Control requests are answered by the handler itself, when it can (an
// admin fork replies once its clones are built): the dispatch sends nothing.
// A handler implements only the ops its link accepts; any other number, even
// one in a table, comes back as kUnknownOp; a frame that does not decode, or
// carries the wrong async flag, as kMalformed. Neither reaches the handler.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"
#include "proto/frame.h"
#include "proto/messages.h"

namespace smolvm::proto {

// What a control handler sees of the frame besides its fields.
struct ControlContext {
  const FrameHeader* header = nullptr;
  std::vector<UniqueFd>* fds_in = nullptr;  // descriptors that came with the frame
};

template <typename H>
Status DispatchControl(H& handler, const FrameHeader& h, std::string_view payload, ControlContext* ctx) {
  const bool async = (h.flags & kFlagAsync) != 0;
  switch (h.op) {
#define SMOLVM_CONTROL_CASE(num, name, kind, req, rep)                                    \
  case num:                                                                               \
    if constexpr (requires(const name##Request& q) { handler.Handle(q, ctx); }) {         \
      name##Request q;                                                                    \
      Decoder dec(payload);                                                               \
      if (!Decode(dec, &q)) return Malformed(#name " does not decode");                   \
      if ((OpKind::kind == OpKind::ASYNC) != async)                                       \
        return Malformed(#name " sent with the wrong async flag");                        \
      return handler.Handle(q, ctx);                                                      \
    }                                                                                     \
    break;
    SMOLVM_CONTROL_OPS(SMOLVM_CONTROL_CASE)
#undef SMOLVM_CONTROL_CASE
    default:
      break;
  }
  return Status(Code::kUnknownOp, "control op " + std::to_string(h.op) + " is not accepted here");
}

}  // namespace smolvm::proto
