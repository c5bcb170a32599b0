// LibCall: one call of a library shim (libcublas, libcublasLt,
// libnvidia-ml) on the cudart shim's session (lib_api.h). Holds the session
// lock for its lifetime, so a library call's frames are contiguous on the
// wire, and encodes / decodes the op table's messages.
//
//   LibCall call;
//   if (int32_t e = call.begin_error()) return ...;
//   call.Enqueue(proto::BlasSetStreamRequest{...});
//   proto::BlasGetVersionReply rep;
//   int32_t r = call.Call(proto::BlasGetVersionRequest{}, &rep);
//
// Results (int32_t): 0, a CUresult, a smolvm Code, a library status
// (proto/lib_status.h), or SMOLVM_SHIM_SESSION_FAILURE + cudaError_t when
// the session is broken.
#pragma once

#include <cstdint>
#include <string>

#include "proto/messages.h"
#include "shim/lib_api.h"

namespace smolvm::shim {

class LibCall {
 public:
  LibCall() : api_(smolvm_shim_lib_api()) { begin_ = api_->begin(); }
  ~LibCall() { api_->end(); }
  LibCall(const LibCall&) = delete;
  LibCall& operator=(const LibCall&) = delete;

  // The cudaError_t the session failed with (no daemon, refused, poisoned), or 0.
  int32_t begin_error() const { return begin_; }

  template <typename Req>
  void Enqueue(const Req& m) {
    static_assert(Req::kKind == proto::OpKind::ASYNC);
    buf_.clear();
    proto::Encoder enc(&buf_);
    proto::Encode(enc, m);
    api_->enqueue(static_cast<uint16_t>(Req::kOp), buf_.data(), buf_.size());
  }

  template <typename Req, typename Rep>
  int32_t Call(const Req& m, Rep* rep) {
    static_assert(Req::kKind == proto::OpKind::SYNC);
    buf_.clear();
    proto::Encoder enc(&buf_);
    proto::Encode(enc, m);
    const char* fields = nullptr;
    size_t n = 0;
    int32_t r = api_->call(static_cast<uint16_t>(Req::kOp), buf_.data(), buf_.size(), &fields, &n);
    if (r != 0) return r;
    proto::Decoder dec(std::string_view(fields, n));
    if (!proto::Decode(dec, rep)) return static_cast<int32_t>(100006);  // Code::kMalformed
    return 0;
  }

  int32_t TakeDeferred(int32_t lo, int32_t hi) { return api_->take_deferred(lo, hi); }
  int32_t StreamId(const void* stream, uint64_t* id) { return api_->stream_id(const_cast<void*>(stream), id); }
  uint64_t NewHandle() { return api_->new_handle(); }

 private:
  const smolvm_shim_lib* api_;
  int32_t begin_ = 0;
  std::string buf_;
};

}  // namespace smolvm::shim
