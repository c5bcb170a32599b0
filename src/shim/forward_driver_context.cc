// The driver API's contexts (driver.h): the primary context, which the
// runtime uses, and contexts the program creates (cuCtxCreate), each a real
// context in the worker (ops 190-192; worker/context_table.h). A thread's
// current context is kept here, per thread, as the driver keeps it; the
// session sends the worker a CtxSetCurrent whenever the thread issuing the
// next op has another context current than the last op's (session.h).
//
// Handles: the primary context is a fixed object; a created context is a
// record that is never freed (a destroyed context's handle stays distinct
// from every later one), known by the live set while it lives. A CUcontext
// the program passes is only ever compared against these, never read.
#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

#include "shim/driver.h"
#include "shim/runtime.h"
#include "shim/stub_report.h"

namespace smolvm::shim {
namespace {

struct ContextRecord {
  uint64_t id = 0;      // the wire id (0: the primary)
  unsigned flags = 0;   // as created, or as cuCtxSetFlags left them
  bool live = true;
};
// The primary context: CUcontext values point here.
ContextRecord primary;
CUcontext PrimaryHandle() { return reinterpret_cast<CUcontext>(&primary); }
// Created contexts, never freed; guarded by the session lock.
std::deque<ContextRecord> records;
std::map<CUcontext, ContextRecord*> live;
uint64_t next_id = 1;

thread_local std::vector<CUcontext> tl_ctx_stack;  // cuCtxPushCurrent/PopCurrent, cuCtxSetCurrent
thread_local bool tl_ctx_set = false;              // cuCtxSetCurrent(NULL) left none current

// The record of a context the program names: the primary, a live created
// one, or null. REQUIRES the session lock.
ContextRecord* Find(CUcontext ctx) {
  if (ctx == PrimaryHandle()) return &primary;
  auto it = live.find(ctx);
  return it == live.end() ? nullptr : it->second;
}

// After the thread's stack changed: the context its next ops run in. A
// context destroyed while current here keeps its id, which the worker
// refuses (CUDA_ERROR_INVALID_CONTEXT), as the driver refuses a destroyed
// context's calls.
void SyncThread() {
  if (tl_ctx_stack.empty() || tl_ctx_stack.back() == PrimaryHandle()) {
    t_guest_context = 0;
    return;
  }
  t_guest_context = reinterpret_cast<ContextRecord*>(tl_ctx_stack.back())->id;
}

// The calling thread's current context record (the primary when it has
// none and the session is up); null when none. REQUIRES the session lock.
ContextRecord* Current(Runtime& r) {
  if (!tl_ctx_stack.empty()) {
    CUcontext c = tl_ctx_stack.back();
    return c == PrimaryHandle() ? &primary : reinterpret_cast<ContextRecord*>(c);
  }
  return !tl_ctx_set ? &primary : nullptr;
}

}  // namespace

CUcontext Driver::Primary() { return PrimaryHandle(); }

// --- the primary context ---------------------------------------------------

CUresult Driver::cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  SMOLVM_DRIVER_BEGIN(r);
  if (dev != 0) return ToCuResult(r.Finish(cudaErrorInvalidDevice));
  *ctx = PrimaryHandle();
  return ToCuResult(r.Finish(cudaSuccess));
}

CUresult Driver::cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  // The worker's context lives as long as the session.
  return dev == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult Driver::cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  Runtime& r = rt();
  std::lock_guard lock(r.session_.mu());
  *flags = primary.flags;
  *active = r.session_.connected() ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult Driver::cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  primary.flags = flags;  // scheduling hints; the worker's context keeps its own
  return CUDA_SUCCESS;
}

CUresult Driver::cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().DeviceReset());
}

CUresult Driver::cuCtxGetCurrent(CUcontext* ctx) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!tl_ctx_stack.empty()) {
    *ctx = tl_ctx_stack.back();
    return CUDA_SUCCESS;
  }
  // Without an explicit choice on this thread, the primary context is
  // current once the session is up (the runtime made it so natively).
  Runtime& r = rt();
  std::lock_guard lock(r.session_.mu());
  *ctx = !tl_ctx_set && r.session_.connected() ? PrimaryHandle() : nullptr;
  return CUDA_SUCCESS;
}

CUresult Driver::cuCtxGetDevice(CUdevice* dev) {
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  SMOLVM_DRIVER_BEGIN(r);
  *dev = 0;
  return ToCuResult(r.Finish(cudaSuccess));
}

CUresult Driver::cuCtxSynchronize() {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().DeviceSynchronize());
}

CUresult Driver::cuCtxGetStreamPriorityRange(int* least, int* greatest) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().DeviceGetStreamPriorityRange(least, greatest));
}

// CUlimit values equal the cudaLimit ones.
CUresult Driver::cuCtxGetLimit(size_t* value, CUlimit limit) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().DeviceGetLimit(value, static_cast<cudaLimit>(limit)));
}

CUresult Driver::cuCtxSetLimit(CUlimit limit, size_t value) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().DeviceSetLimit(static_cast<cudaLimit>(limit), value));
}


CUresult Driver::cuCtxSetCurrent(CUcontext ctx) {
  Runtime& r = rt();
  std::lock_guard lock(r.session_.mu());
  if (ctx != nullptr && Find(ctx) == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (tl_ctx_stack.empty()) {
    if (ctx != nullptr) tl_ctx_stack.push_back(ctx);
  } else if (ctx == nullptr) {
    tl_ctx_stack.pop_back();
  } else {
    tl_ctx_stack.back() = ctx;
  }
  tl_ctx_set = ctx == nullptr;
  SyncThread();
  return CUDA_SUCCESS;
}

CUresult Driver::cuCtxPushCurrent_v2(CUcontext ctx) {
  Runtime& r = rt();
  std::lock_guard lock(r.session_.mu());
  if (ctx == nullptr || Find(ctx) == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  tl_ctx_stack.push_back(ctx);
  SyncThread();
  return CUDA_SUCCESS;
}

CUresult Driver::cuCtxPopCurrent_v2(CUcontext* ctx) {
  if (tl_ctx_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx != nullptr) *ctx = tl_ctx_stack.back();
  tl_ctx_stack.pop_back();
  SyncThread();
  return CUDA_SUCCESS;
}

CUresult Driver::cuCtxGetFlags(unsigned int* flags) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Runtime& r = rt();
  std::lock_guard lock(r.session_.mu());
  ContextRecord* c = Current(r);
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *flags = c->flags;
  return CUDA_SUCCESS;
}

// Scheduling hints and the like: kept for cuCtxGetFlags; the worker's
// context keeps its own.
CUresult Driver::cuCtxSetFlags(unsigned int flags) {
  if (flags & ~static_cast<unsigned>(CU_CTX_FLAGS_MASK)) return CUDA_ERROR_INVALID_VALUE;
  Runtime& r = rt();
  std::lock_guard lock(r.session_.mu());
  ContextRecord* c = Current(r);
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  c->flags = flags;
  return CUDA_SUCCESS;
}

// The version of the API the context was made with: what the driver
// answers for a context of cuCtxCreate_v2 and later, and the primary.
CUresult Driver::cuCtxGetApiVersion(CUcontext ctx, unsigned int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Runtime& r = rt();
  std::lock_guard lock(r.session_.mu());
  ContextRecord* c = ctx == nullptr ? Current(r) : Find(ctx);
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *version = 3020;
  return CUDA_SUCCESS;
}

// A number unique to the context in this process: the primary's is 1.
CUresult Driver::cuCtxGetId(CUcontext ctx, unsigned long long* id) {
  if (id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Runtime& r = rt();
  std::lock_guard lock(r.session_.mu());
  ContextRecord* c = ctx == nullptr ? Current(r) : Find(ctx);
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *id = c->id + 1;
  return CUDA_SUCCESS;
}

// CUDA 13's forms naming the context (NULL: the current one).
CUresult Driver::cuCtxGetDevice_v2(CUdevice* dev, CUcontext ctx) {
  if (ctx == nullptr) return cuCtxGetDevice(dev);
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Runtime& r = rt();
  std::lock_guard lock(r.session_.mu());
  if (Find(ctx) == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *dev = 0;
  return CUDA_SUCCESS;
}

// Synchronizes `ctx` whatever the thread has current: the call goes out
// under that context's id (the session names it to the worker).
CUresult Driver::cuCtxSynchronize_v2(CUcontext ctx) {
  if (ctx == nullptr) return cuCtxSynchronize();
  uint64_t id = 0;
  {
    Runtime& r = rt();
    std::lock_guard lock(r.session_.mu());
    ContextRecord* c = Find(ctx);
    if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    id = c->id;
  }
  const uint64_t mine = t_guest_context;
  t_guest_context = id;
  CUresult result = cuCtxSynchronize();
  t_guest_context = mine;
  return result;
}

// --- contexts the program creates --------------------------------------------

CUresult Driver::cuCtxCreate_v4(CUcontext* ctx, CUctxCreateParams* params, unsigned int flags, CUdevice dev) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ctx = nullptr;
  if (flags & ~static_cast<unsigned>(CU_CTX_FLAGS_MASK)) return CUDA_ERROR_INVALID_VALUE;
  if (params != nullptr && (params->numExecAffinityParams != 0 || params->cigParams != nullptr)) {
    static std::atomic<bool> reported{false};
    ReportNotSupportedOnce(&reported, "cuda", "cuCtxCreate with execution affinity or CIG parameters",
                           "CUDA_ERROR_NOT_SUPPORTED", "create the context without them (a session has one device)");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  SMOLVM_DRIVER_BEGIN(r);
  if (dev != 0) return SMOLVM_DRIVER_END(r, cudaErrorInvalidDevice);
  proto::CtxCreateRequest req;
  req.ctx = next_id;
  req.flags = flags;
  proto::CtxCreateReply rep;
  Status st = r.session_.Call(req, &rep);
  if (!st.ok()) return ToCuResult(r.FinishStatus(st));
  ++next_id;
  records.push_back(ContextRecord{req.ctx, flags, true});
  CUcontext handle = reinterpret_cast<CUcontext>(&records.back());
  live[handle] = &records.back();
  // The new context is pushed on the calling thread's stack (made current).
  tl_ctx_stack.push_back(handle);
  SyncThread();
  *ctx = handle;
  return ToCuResult(r.Finish(cudaSuccess));
}

CUresult Driver::cuCtxCreate_v2(CUcontext* ctx, unsigned int flags, CUdevice dev) {
  return cuCtxCreate_v4(ctx, nullptr, flags, dev);
}

CUresult Driver::cuCtxCreate_v3(CUcontext* ctx, CUexecAffinityParam* params, int n, unsigned int flags, CUdevice dev) {
  if (n < 0 || (n > 0 && params == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  CUctxCreateParams p{};
  p.execAffinityParams = params;
  p.numExecAffinityParams = n;
  return cuCtxCreate_v4(ctx, &p, flags, dev);
}

CUresult Driver::cuCtxDestroy_v2(CUcontext ctx) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  SMOLVM_DRIVER_BEGIN(r);
  if (ctx == PrimaryHandle()) return SMOLVM_DRIVER_END(r, static_cast<cudaError_t>(CUDA_ERROR_INVALID_CONTEXT));
  auto it = live.find(ctx);
  if (it == live.end()) return SMOLVM_DRIVER_END(r, static_cast<cudaError_t>(CUDA_ERROR_INVALID_CONTEXT));
  ContextRecord* c = it->second;
  proto::CtxDestroyRequest req;
  req.ctx = c->id;
  proto::CtxDestroyReply rep;
  Status st = r.session_.Call(req, &rep);
  r.session_.ForgetWireContext();  // the worker is back in the primary if it ran in this one
  if (!st.ok()) return ToCuResult(r.FinishStatus(st));
  live.erase(it);
  c->live = false;
  // What went with it, forgotten here too: its allocations, streams and
  // events, and the modules loaded in it (their handles now fail).
  for (uint64_t p : rep.freed) r.device_mem_.Remove(p);
  for (uint64_t s : rep.streams) r.streams_.erase(s);
  for (uint64_t e : rep.events) r.events_.erase(e);
  for (uint64_t id : rep.modules) {
    for (auto& m : r.modules_) {
      if (!m->driver || m->id != id) continue;
      m->id = 0;
      m->load_error = cudaErrorInvalidResourceHandle;
      for (auto& [key, k] : r.kernels_)
        if (k->module == m.get()) k->id = 0;
    }
  }
  // Popped from the calling thread's stack when current here, as the driver does.
  if (!tl_ctx_stack.empty() && tl_ctx_stack.back() == ctx) tl_ctx_stack.pop_back();
  SyncThread();
  return ToCuResult(r.Finish(cudaSuccess));
}

}  // namespace smolvm::shim
