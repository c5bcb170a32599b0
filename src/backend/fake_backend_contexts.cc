// FakeBackend's contexts the guest created (GpuBackend::CtxCreate): each
// holds kFakeCreatedContextBytes of the fake device while it lives and owns
// what was made in it, which its destruction takes along. Device memory is
// the device's (chunks in the arena), reachable from every context, as
// unified addressing makes a GPU's.
#include <cuda.h>

#include "backend/fake_backend.h"

namespace smolvm {

Result<uint64_t> FakeBackend::CtxCreate(uint32_t flags) {
  RETURN_IF_ERROR(Enter("CtxCreate"));
  if (flags & ~0xffu) return Cu(CUDA_ERROR_INVALID_VALUE, "cuCtxCreate: unknown flags");
  if (kFakeCreatedContextBytes > options_.total_mem - used_bytes_)
    return Cu(CUDA_ERROR_OUT_OF_MEMORY, "no room for a context on the fake device");
  used_bytes_ += kFakeCreatedContextBytes;
  uint64_t h = (next_handle_++) << 4 | 0x8;
  contexts_.insert(h);
  return h;
}

Status FakeBackend::CtxDestroy(uint64_t ctx) {
  FlushDeviceOutput();  // the context's end
  RETURN_IF_ERROR(Enter("CtxDestroy"));
  if (!contexts_.erase(ctx)) return Cu(CUDA_ERROR_INVALID_CONTEXT, "not a live context");
  if (current_ctx_ == ctx) current_ctx_ = 0;
  for (auto it = owner_.begin(); it != owner_.end();) {
    if (it->second != ctx) {
      ++it;
      continue;
    }
    ForgetOwned(it->first);
    it = owner_.erase(it);
  }
  used_bytes_ -= kFakeCreatedContextBytes;
  return Status::Ok();
}

Status FakeBackend::CtxSelect(uint64_t ctx) {
  RETURN_IF_ERROR(Enter("CtxSelect"));
  if (ctx != 0 && !contexts_.count(ctx)) return Cu(CUDA_ERROR_INVALID_CONTEXT, "not a live context");
  current_ctx_ = ctx;
  return Status::Ok();
}

}  // namespace smolvm
