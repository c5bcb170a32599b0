// The driver API, part 2: memory, copies, memsets, stream memory writes,
// streams and events (driver.h). Most entries are the
// runtime's calls under a DriverCallScope: the same wire ops, the same
// call-time checks, the same queue.
#include <cstring>
#include <mutex>

#include "shim/driver.h"
#include "shim/runtime.h"

namespace smolvm::shim {
namespace {

void* Ptr(CUdeviceptr p) { return reinterpret_cast<void*>(p); }
cudaEvent_t E(CUevent e) { return reinterpret_cast<cudaEvent_t>(e); }

CUresult Copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, CUstream stream,
              bool async, bool per_thread) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().Memcpy(dst, src, bytes, kind, RuntimeStream(stream), async, per_thread));
}

}  // namespace

// --- allocations -------------------------------------------------------------

CUresult Driver::cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;  // the driver refuses what cudaMalloc accepts
  Runtime::DriverCallScope scope;
  void* p = nullptr;
  CUresult e = ToCuResult(rt().Malloc(&p, bytes));
  if (e == CUDA_SUCCESS) *dptr = reinterpret_cast<CUdeviceptr>(p);
  return e;
}

CUresult Driver::cuMemFree_v2(CUdeviceptr dptr) {
  Runtime::DriverCallScope scope;
  if (dptr == 0) return CUDA_SUCCESS;
  return ToCuResult(rt().Free(Ptr(dptr)));
}

CUresult Driver::cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().MemGetInfo(free_bytes, total_bytes));
}

CUresult Driver::cuMemAllocHost_v2(void** p, size_t bytes) { return cuMemHostAlloc(p, bytes, 0); }

CUresult Driver::cuMemHostAlloc(void** p, size_t bytes, unsigned int flags) {
  Runtime::DriverCallScope scope;
  // CU_MEMHOSTALLOC_* equal the cudaHostAlloc* flags.
  return ToCuResult(rt().MallocHost(p, bytes, flags));
}

CUresult Driver::cuMemFreeHost(void* p) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().FreeHost(p));
}

// CU_MEMHOSTREGISTER_* equal the runtime's cudaHostRegister* flags.
static_assert(CU_MEMHOSTREGISTER_DEVICEMAP == cudaHostRegisterMapped &&
              CU_MEMHOSTREGISTER_IOMEMORY == cudaHostRegisterIoMemory &&
              CU_MEMHOSTREGISTER_READ_ONLY == cudaHostRegisterReadOnly);

CUresult Driver::cuMemHostRegister_v2(void* p, size_t bytes, unsigned int flags) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().HostRegister(p, bytes, flags));
}

CUresult Driver::cuMemHostUnregister(void* p) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().HostUnregister(p));
}

// --- copies ---------------------------------------------------------------------

CUresult Driver::cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t bytes) {
  return Copy(Ptr(dst), src, bytes, cudaMemcpyHostToDevice, nullptr, false, false);
}
CUresult Driver::cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t bytes) {
  return Copy(dst, Ptr(src), bytes, cudaMemcpyDeviceToHost, nullptr, false, false);
}
CUresult Driver::cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  return Copy(Ptr(dst), Ptr(src), bytes, cudaMemcpyDeviceToDevice, nullptr, false, false);
}
CUresult Driver::cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  return Copy(Ptr(dst), Ptr(src), bytes, cudaMemcpyDefault, nullptr, false, false);
}
CUresult Driver::cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s) {
  return Copy(Ptr(dst), Ptr(src), bytes, cudaMemcpyDefault, s, true, false);
}
CUresult Driver::cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s) {
  return Copy(Ptr(dst), Ptr(src), bytes, cudaMemcpyDefault, s, true, true);
}
CUresult Driver::cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t bytes, CUstream s) {
  return Copy(Ptr(dst), src, bytes, cudaMemcpyHostToDevice, s, true, false);
}
CUresult Driver::cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t bytes, CUstream s) {
  return Copy(dst, Ptr(src), bytes, cudaMemcpyDeviceToHost, s, true, false);
}
CUresult Driver::cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s) {
  return Copy(Ptr(dst), Ptr(src), bytes, cudaMemcpyDeviceToDevice, s, true, false);
}

// --- memsets and stream memory writes -------------------------------------------------

CUresult Driver::MemsetElems(CUdeviceptr dst, uint32_t value, uint32_t elem_bytes, size_t count,
                             CUstream stream, bool per_thread) {
  Runtime::DriverCallScope driver_scope;
  Runtime& r = rt();
  std::lock_guard lock(r.session_.mu());
  if (cudaError_t e = r.Begin(); e != cudaSuccess) return ToCuResult(e);
  uint64_t sid;
  if (cudaError_t e = r.StreamId(RuntimeStream(stream), per_thread, &sid); e != cudaSuccess)
    return ToCuResult(r.Finish(e));
  if (count == 0) return ToCuResult(r.Finish(cudaSuccess));
  if (dst % elem_bytes != 0 || count > UINT64_MAX / elem_bytes ||
      !r.device_mem_.Contains(dst, count * elem_bytes))
    return ToCuResult(r.Finish(cudaErrorInvalidValue));
  proto::MemsetRequest req;
  req.dst = dst;
  req.value = elem_bytes == 1 ? (value & 0xffu) : value;
  req.elem_bytes = elem_bytes;
  req.count = count;
  req.stream = sid;
  r.session_.Enqueue(req);
  return ToCuResult(r.Finish(cudaSuccess));
}

CUresult Driver::cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n) {
  return MemsetElems(dst, v, 1, n, nullptr, false);
}
CUresult Driver::cuMemsetD32_v2(CUdeviceptr dst, unsigned int v, size_t n) {
  return MemsetElems(dst, v, 4, n, nullptr, false);
}
CUresult Driver::cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
  return MemsetElems(dst, v, 1, n, s, false);
}
CUresult Driver::cuMemsetD32Async(CUdeviceptr dst, unsigned int v, size_t n, CUstream s) {
  return MemsetElems(dst, v, 4, n, s, false);
}
CUresult Driver::cuMemsetD32Async_ptsz(CUdeviceptr dst, unsigned int v, size_t n, CUstream s) {
  return MemsetElems(dst, v, 4, n, s, true);
}

// A 4-byte write ordered after the stream's earlier work: on the wire, a
// one-element memset on that stream. The flags (memory barrier or not) only
// relax ordering against other agents, which a session does not have.
CUresult Driver::cuStreamWriteValue32_v2(CUstream s, CUdeviceptr addr, cuuint32_t value,
                                         unsigned int) {
  return MemsetElems(addr, value, 4, 1, s, false);
}
CUresult Driver::cuStreamWriteValue32_v2_ptsz(CUstream s, CUdeviceptr addr, cuuint32_t value,
                                              unsigned int) {
  return MemsetElems(addr, value, 4, 1, s, true);
}

// --- streams and events ----------------------------------------------------------------------

CUresult Driver::cuStreamCreate(CUstream* s, unsigned int flags) {
  return cuStreamCreateWithPriority(s, flags, 0);
}

CUresult Driver::cuStreamCreateWithPriority(CUstream* s, unsigned int flags, int priority) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().StreamCreate(reinterpret_cast<cudaStream_t*>(s), flags, priority));
}
CUresult Driver::cuStreamDestroy_v2(CUstream s) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().StreamDestroy(RuntimeStream(s)));
}
CUresult Driver::cuStreamSynchronize(CUstream s) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().StreamSynchronize(RuntimeStream(s), false));
}
CUresult Driver::cuStreamSynchronize_ptsz(CUstream s) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().StreamSynchronize(RuntimeStream(s), true));
}
CUresult Driver::cuStreamQuery(CUstream s) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().StreamQuery(RuntimeStream(s), false));
}
CUresult Driver::cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().StreamWaitEvent(RuntimeStream(s), E(e), flags, false));
}
CUresult Driver::cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned int flags) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().StreamWaitEvent(RuntimeStream(s), E(e), flags, true));
}
CUresult Driver::cuStreamGetFlags(CUstream s, unsigned int* flags) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().StreamGetFlags(RuntimeStream(s), flags));
}
CUresult Driver::cuStreamGetPriority(CUstream s, int* priority) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().StreamGetPriority(RuntimeStream(s), priority));
}
CUresult Driver::cuEventCreate(CUevent* e, unsigned int flags) {
  Runtime::DriverCallScope scope;
  // CU_EVENT_* equal the cudaEvent* flags.
  return ToCuResult(rt().EventCreate(reinterpret_cast<cudaEvent_t*>(e), flags));
}
CUresult Driver::cuEventDestroy_v2(CUevent e) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().EventDestroy(E(e)));
}
CUresult Driver::cuEventRecord(CUevent e, CUstream s) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().EventRecord(E(e), RuntimeStream(s), 0, false));
}
CUresult Driver::cuEventRecord_ptsz(CUevent e, CUstream s) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().EventRecord(E(e), RuntimeStream(s), 0, true));
}
CUresult Driver::cuEventSynchronize(CUevent e) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().EventSynchronize(E(e)));
}
CUresult Driver::cuEventQuery(CUevent e) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().EventQuery(E(e)));
}
CUresult Driver::cuEventElapsedTime_v2(float* ms, CUevent start, CUevent end) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().EventElapsedTime(ms, E(start), E(end)));
}

}  // namespace smolvm::shim
