// smolvm_shim_lib_api (lib_api.h): the session lent to the library shims.
// Linked into libcudart.so.13 itself (not the core archive) so the export
// survives --exclude-libs.
#include "shim/lib_api.h"

#include "shim/runtime.h"

namespace smolvm::shim {
namespace {

int32_t Begin() {
  rt().session().mu().lock();
  return rt().BeginLibraryCall();
}

void End() { rt().session().mu().unlock(); }

void Enqueue(uint16_t op, const char* payload, size_t bytes) {
  rt().session().EnqueueRaw(op, std::string_view(payload, bytes));
}

int32_t Call(uint16_t op, const char* payload, size_t bytes, const char** reply, size_t* reply_bytes) {
  std::string_view fields;
  Status st = rt().session().CallRaw(op, std::string_view(payload, bytes), &fields);
  if (rt().session().failure() != SessionFailure::kNone)
    return SMOLVM_SHIM_SESSION_FAILURE + static_cast<int32_t>(rt().session().failure());
  if (!st.ok()) return st.code();
  *reply = fields.data();
  *reply_bytes = fields.size();
  return 0;
}

int32_t TakeDeferred(int32_t lo, int32_t hi) { return rt().session().TakeDeferredIn(lo, hi); }

int32_t StreamId(void* stream, uint64_t* id) { return rt().WireStreamId(static_cast<cudaStream_t>(stream), id); }

uint64_t NewHandle() { return rt().NewLibraryHandle(); }

int32_t DeviceRangeOk(uint64_t p, uint64_t bytes) { return rt().DeviceRangeKnown(p, bytes) ? 1 : 0; }

const smolvm_shim_lib kApi = {sizeof(smolvm_shim_lib), Begin, End, Enqueue, Call, TakeDeferred, StreamId, NewHandle,
                              DeviceRangeOk};

}  // namespace
}  // namespace smolvm::shim

extern "C" __attribute__((visibility("default"))) const smolvm_shim_lib* smolvm_shim_lib_api(void) {
  return &smolvm::shim::kApi;
}
