// Host functions: cudaLaunchHostFunc and cudaStreamAddCallback. The worker
// enqueues them on the stream and asks this process to run each one when
// the stream reaches it (LaunchHostFunc, then HostFuncCall / HostFuncDone;
// host_funcs.h runs them).
#include "shim/driver.h"
#include "shim/errors.h"
#include "shim/runtime.h"

namespace smolvm::shim {

cudaError_t Runtime::LaunchHostFunc(cudaStream_t stream, uint64_t fn, uint64_t user, uint32_t kind, bool per_thread) {
  if (fn == 0) return Record(cudaErrorInvalidValue);
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  uint64_t sid;
  if (cudaError_t e = StreamId(stream, per_thread, &sid); e != cudaSuccess) return Finish(e);
  proto::LaunchHostFuncRequest req;
  req.stream = sid;
  req.fn = fn;
  req.user = user;
  req.kind = kind;
  HostFuncRunner& runner = session_.Callbacks();
  if (CaptureTable::Capture* c = captures_.Of(sid)) {
    // cudaStreamAddCallback cannot be captured (CUDA's rule); a host
    // function becomes a host node, run at each launch of the graph.
    if (kind != 0) {
      c->invalidated = true;
      return Finish(cudaErrorStreamCaptureUnsupported);
    }
    session_.Enqueue(req);
    ++c->host_nodes;
    return Finish(cudaSuccess);
  }
  session_.Enqueue(req);
  runner.Expect(1);
  // The worker asks for it as soon as the stream reaches it: send it now.
  return FinishStatus(session_.Flush());
}

// The driver's entry points: the same calls, without touching the thread's
// last runtime error. CUstreamCallback's status is a CUresult with the same
// values as the cudaError_t the runtime passes.
CUresult Driver::cuLaunchHostFunc(CUstream s, CUhostFn fn, void* user) {
  Runtime::DriverCallScope scope;
  return ToCuResult(Runtime::Get().LaunchHostFunc(reinterpret_cast<cudaStream_t>(s), reinterpret_cast<uint64_t>(fn),
                                                  reinterpret_cast<uint64_t>(user), 0, false));
}
CUresult Driver::cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void* user) {
  Runtime::DriverCallScope scope;
  return ToCuResult(Runtime::Get().LaunchHostFunc(reinterpret_cast<cudaStream_t>(s), reinterpret_cast<uint64_t>(fn),
                                                  reinterpret_cast<uint64_t>(user), 0, true));
}
CUresult Driver::cuStreamAddCallback(CUstream s, CUstreamCallback fn, void* user, unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Runtime::DriverCallScope scope;
  return ToCuResult(Runtime::Get().LaunchHostFunc(reinterpret_cast<cudaStream_t>(s), reinterpret_cast<uint64_t>(fn),
                                                  reinterpret_cast<uint64_t>(user), 1, false));
}
CUresult Driver::cuStreamAddCallback_ptsz(CUstream s, CUstreamCallback fn, void* user, unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Runtime::DriverCallScope scope;
  return ToCuResult(Runtime::Get().LaunchHostFunc(reinterpret_cast<cudaStream_t>(s), reinterpret_cast<uint64_t>(fn),
                                                  reinterpret_cast<uint64_t>(user), 1, true));
}

}  // namespace smolvm::shim
