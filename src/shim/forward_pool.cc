// Stream-ordered allocation and memory pools (cudaMallocAsync, cudaFreeAsync,
// cudaMemPool*): pools live in the guest (mem_pool.h) on segments of the
// session's arena, reserved with MemAlloc (charged to --gpu-mem, kept at
// their address in a clone) and released with MemFree; stream order travels
// as the pool's events (EventCreate / EventRecord / StreamWaitEvent, all
// queued). An allocation or a free costs no round trip unless a segment is
// reserved or released.
//
// Refused by name: pools of host memory, exportable pools (IPC), and
// stream-ordered allocation inside a stream capture.
#include <atomic>

#include "shim/runtime.h"
#include "shim/stub_report.h"

namespace smolvm::shim {

// The pools' way to the session (REQUIRES the session lock held).
class Runtime::PoolSession final : public PoolBacking {
 public:
  explicit PoolSession(Runtime& r) : r_(r) {}
  Result<uint64_t> Reserve(uint64_t bytes) override {
    proto::MemAllocRequest req;
    req.bytes = bytes;
    proto::MemAllocReply rep;
    RETURN_IF_ERROR(r_.session_.Call(req, &rep));
    r_.device_mem_.Add(rep.dptr, bytes);
    return rep.dptr;
  }
  Status Release(uint64_t addr) override {
    proto::MemFreeRequest req;
    req.dptr = addr;
    proto::MemFreeReply rep;
    Status st = r_.session_.Call(req, &rep);
    r_.device_mem_.Remove(addr);
    return st;
  }
  uint64_t NewEvent() override {
    proto::EventCreateRequest req;
    req.event = r_.NewHandle();
    req.flags = cudaEventDisableTiming;
    r_.session_.Enqueue(req);
    return req.event;
  }
  void Record(uint64_t event, uint64_t stream) override {
    proto::EventRecordRequest req;
    req.event = event;
    req.stream = stream;
    r_.session_.Enqueue(req);
  }
  void Wait(uint64_t stream, uint64_t event) override {
    proto::StreamWaitEventRequest req;
    req.stream = stream;
    req.event = event;
    r_.session_.Enqueue(req);
  }
  void DestroyEvent(uint64_t event) override {
    proto::EventDestroyRequest req;
    req.event = event;
    r_.session_.Enqueue(req);
  }

 private:
  Runtime& r_;
};

namespace {

cudaError_t PoolError(const Status& st) {
  if (st.code() == static_cast<int32_t>(Code::kNotFound) || st.code() == static_cast<int32_t>(Code::kInvalidArgument))
    return cudaErrorInvalidValue;
  return cudaErrorMemoryAllocation;
}

void Refuse(std::atomic<bool>* reported, const char* what, const char* hint = nullptr) {
  ReportNotSupportedOnce(reported, "cudart", what, "cudaErrorNotSupported", hint);
}

}  // namespace

MemPool* Runtime::DefaultPool() {
  if (!default_pool_) default_pool_ = std::make_unique<MemPool>();
  if (current_pool_ == nullptr) current_pool_ = default_pool_.get();
  return default_pool_.get();
}

MemPool* Runtime::PoolOf(cudaMemPool_t pool) {
  auto* p = reinterpret_cast<MemPool*>(pool);
  if (p != nullptr && p == DefaultPool()) return p;
  return pools_.count(p) == 1 ? p : nullptr;
}

cudaError_t Runtime::AllocFromPool(void** ptr, size_t bytes, MemPool* pool, cudaStream_t stream, bool per_thread) {
  uint64_t sid;
  if (cudaError_t e = StreamId(stream, per_thread, &sid); e != cudaSuccess) return Finish(e);
  if (ptr == nullptr || bytes == 0) return Finish(cudaErrorInvalidValue);
  if (CaptureTable::Capture* c = captures_.Of(sid)) {
    static std::atomic<bool> reported{false};
    Refuse(&reported, "cudaMallocAsync inside a stream capture", "a graph's memory comes from cudaGraphAddMemAllocNode");
    c->invalidated = true;
    return Finish(cudaErrorStreamCaptureUnsupported);
  }
  if (t_guest_context != 0) {  // pools are the device's; their events and segments live in the primary
    static std::atomic<bool> reported{false};
    Refuse(&reported, "cudaMallocAsync while a context the program created (cuCtxCreate) is current",
           "use the primary context for stream-ordered allocation, or cudaMalloc");
    return Finish(cudaErrorNotSupported);
  }
  PoolSession backing(*this);
  Result<uint64_t> p = pool->Alloc(backing, bytes, sid);
  if (!p.ok()) return Finish(p.status().code() > 0 && p.status().code() < 1000 ? ToCuda(p.status()) : PoolError(p.status()));
  *ptr = reinterpret_cast<void*>(*p);
  return Finish(cudaSuccess);
}

cudaError_t Runtime::MallocAsync(void** ptr, size_t bytes, cudaStream_t stream, bool per_thread) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  DefaultPool();
  return AllocFromPool(ptr, bytes, current_pool_, stream, per_thread);
}

cudaError_t Runtime::MallocFromPoolAsync(void** ptr, size_t bytes, cudaMemPool_t pool, cudaStream_t stream,
                                         bool per_thread) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  MemPool* p = PoolOf(pool);
  if (p == nullptr) return Finish(cudaErrorInvalidValue);
  return AllocFromPool(ptr, bytes, p, stream, per_thread);
}

cudaError_t Runtime::FreeAsync(void* ptr, cudaStream_t stream, bool per_thread) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  uint64_t sid;
  if (cudaError_t e = StreamId(stream, per_thread, &sid); e != cudaSuccess) return Finish(e);
  if (ptr == nullptr) return Finish(cudaErrorInvalidValue);
  if (CaptureTable::Capture* c = captures_.Of(sid)) {
    static std::atomic<bool> reported{false};
    Refuse(&reported, "cudaFreeAsync inside a stream capture", "a graph's memory goes with cudaGraphAddMemFreeNode");
    c->invalidated = true;
    return Finish(cudaErrorStreamCaptureUnsupported);
  }
  if (t_guest_context != 0) {
    static std::atomic<bool> reported{false};
    Refuse(&reported, "cudaFreeAsync while a context the program created (cuCtxCreate) is current",
           "use the primary context for stream-ordered allocation, or cudaMalloc");
    return Finish(cudaErrorNotSupported);
  }
  uint64_t p = reinterpret_cast<uint64_t>(ptr);
  PoolSession backing(*this);
  for (MemPool* pool : AllPools()) {
    switch (pool->Classify(p)) {
      case MemPool::Holds::kAllocation:
        (void)pool->Free(backing, p, sid);
        return Finish(ReleaseIfDying(pool));
      case MemPool::Holds::kInside:
        return Finish(cudaErrorInvalidValue);
      case MemPool::Holds::kNothing:
        break;
    }
  }
  // cudaMalloc's memory: freed once the stream's work before it is done.
  if (!device_mem_.StartsAt(p)) return Finish(cudaErrorInvalidValue);
  proto::StreamSynchronizeRequest sync;
  sync.stream = sid;
  proto::StreamSynchronizeReply synced;
  if (Status st = session_.Call(sync, &synced); !st.ok()) return FinishStatus(st);
  proto::MemFreeRequest req;
  req.dptr = p;
  proto::MemFreeReply rep;
  Status st = session_.Call(req, &rep);
  device_mem_.Remove(p);
  return FinishStatus(st);
}

bool Runtime::FreeFromPool(uint64_t p, cudaError_t* result) {
  for (MemPool* pool : AllPools()) {
    switch (pool->Classify(p)) {
      case MemPool::Holds::kAllocation:
        // cudaFree of a pool's allocation: no implicit synchronization (the
        // caller ensures its accesses are done, cuda_runtime_api.h), and the
        // pool's used count keeps it, as natively (mem_pool.h).
        (void)pool->FreeUncounted(p);
        *result = ReleaseIfDying(pool);
        return true;
      case MemPool::Holds::kInside:
        *result = cudaErrorInvalidValue;
        return true;
      case MemPool::Holds::kNothing:
        break;
    }
  }
  return false;
}

std::vector<MemPool*> Runtime::AllPools() {
  std::vector<MemPool*> all;
  if (default_pool_) all.push_back(default_pool_.get());
  for (auto& [p, owned] : pools_) all.push_back(p);
  return all;
}

cudaError_t Runtime::ReleaseIfDying(MemPool* pool) {
  auto it = pools_.find(pool);
  if (it == pools_.end() || !it->second.dying || pool->allocations() != 0) return cudaSuccess;
  proto::CtxSynchronizeRequest req;
  proto::CtxSynchronizeReply rep;
  Status st = session_.Call(req, &rep);
  if (!st.ok()) return ToCuda(st);
  PoolSession backing(*this);
  st = pool->ReleaseAll(backing);
  pools_.erase(it);
  return st.ok() ? cudaSuccess : ToCuda(st);
}

void Runtime::PoolsSynchronized(const std::function<bool(uint64_t stream)>& done) {
  if (!default_pool_ && pools_.empty()) return;
  PoolSession backing(*this);
  for (MemPool* pool : AllPools()) {
    pool->Settle(done);
    (void)pool->Trim(backing, pool->release_threshold(), done);
  }
}

cudaError_t Runtime::MemPoolCreate(cudaMemPool_t* pool, const cudaMemPoolProps* props) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  if (pool == nullptr || props == nullptr || props->allocType != cudaMemAllocationTypePinned ||
      props->win32SecurityAttributes != nullptr)
    return Finish(cudaErrorInvalidValue);
  if (props->location.type != cudaMemLocationTypeDevice) {
    static std::atomic<bool> reported{false};
    Refuse(&reported, "a memory pool of host memory (cudaMemPoolCreate with a host location)");
    return Finish(cudaErrorNotSupported);
  }
  if (props->location.id != 0) return Finish(cudaErrorInvalidDevice);
  if (props->handleTypes != cudaMemHandleTypeNone) {
    static std::atomic<bool> reported{false};
    Refuse(&reported, "an exportable memory pool (cudaMemPoolProps::handleTypes, IPC)");
    return Finish(cudaErrorNotSupported);
  }
  auto owned = std::make_unique<MemPool>(props->maxSize);
  MemPool* p = owned.get();
  pools_.emplace(p, PoolRecord{std::move(owned), false});
  *pool = reinterpret_cast<cudaMemPool_t>(p);
  return Finish(cudaSuccess);
}

cudaError_t Runtime::MemPoolDestroy(cudaMemPool_t pool) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  MemPool* p = PoolOf(pool);
  if (p == nullptr || p == default_pool_.get()) return Finish(cudaErrorInvalidValue);
  if (current_pool_ == p) current_pool_ = default_pool_.get();
  auto it = pools_.find(p);
  if (it->second.dying) return Finish(cudaErrorInvalidValue);
  // Outstanding allocations keep it until they are freed, as natively.
  it->second.dying = true;
  return Finish(ReleaseIfDying(p));
}

cudaError_t Runtime::DeviceMemPool(cudaMemPool_t* pool, int device, bool current) {
  if (pool == nullptr) return Record(cudaErrorInvalidValue);
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  if (device != 0) return Finish(cudaErrorInvalidDevice);
  MemPool* def = DefaultPool();
  *pool = reinterpret_cast<cudaMemPool_t>(current ? current_pool_ : def);
  return Finish(cudaSuccess);
}

cudaError_t Runtime::DeviceSetMemPool(int device, cudaMemPool_t pool) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  if (device != 0) return Finish(cudaErrorInvalidDevice);
  MemPool* p = PoolOf(pool);
  if (p == nullptr) return Finish(cudaErrorInvalidValue);
  current_pool_ = p;
  return Finish(cudaSuccess);
}

cudaError_t Runtime::MemPoolAttribute(cudaMemPool_t pool, int attr, void* value, bool set) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  MemPool* p = PoolOf(pool);
  if (p == nullptr) return Finish(cudaErrorInvalidValue);
  Status st = set ? p->SetAttribute(attr, value) : p->GetAttribute(attr, value);
  return Finish(st.ok() ? cudaSuccess : cudaErrorInvalidValue);
}

cudaError_t Runtime::MemPoolTrimTo(cudaMemPool_t pool, size_t keep) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  MemPool* p = PoolOf(pool);
  if (p == nullptr) return Finish(cudaErrorInvalidValue);
  // Only frees known complete (a synchronization since) are released.
  PoolSession backing(*this);
  Status st = p->Trim(backing, keep, [](uint64_t) { return false; });
  return FinishStatus(st);
}

cudaError_t Runtime::MemPoolAccess(cudaMemPool_t pool, const cudaMemAccessDesc* descs, size_t count,
                                   cudaMemAccessFlags* flags, const cudaMemLocation* location) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  if (PoolOf(pool) == nullptr) return Finish(cudaErrorInvalidValue);
  if (flags != nullptr) {  // get: the pool's device reads and writes it
    if (location == nullptr || location->type != cudaMemLocationTypeDevice) return Finish(cudaErrorInvalidValue);
    if (location->id != 0) return Finish(cudaErrorInvalidDevice);
    *flags = cudaMemAccessFlagsProtReadWrite;
    return Finish(cudaSuccess);
  }
  if (descs == nullptr && count != 0) return Finish(cudaErrorInvalidValue);
  for (size_t i = 0; i < count; ++i) {
    if (descs[i].location.type != cudaMemLocationTypeDevice) return Finish(cudaErrorInvalidValue);
    if (descs[i].location.id != 0) return Finish(cudaErrorInvalidDevice);
    // The owning device's access is read-write and stays so.
    if (descs[i].flags != cudaMemAccessFlagsProtReadWrite) return Finish(cudaErrorInvalidValue);
  }
  return Finish(cudaSuccess);
}

cudaError_t Runtime::LocationMemPool(cudaMemPool_t* pool, const cudaMemLocation* location, cudaMemAllocationType type,
                                     cudaMemPool_t set_to, bool current, bool set) {
  if (location == nullptr || (!set && pool == nullptr)) return Record(cudaErrorInvalidValue);
  if (location->type != cudaMemLocationTypeDevice) {
    static std::atomic<bool> reported{false};
    Refuse(&reported, "a memory pool of host memory (cudaMem{Get,Set}[Default]MemPool with a host location)");
    return Record(cudaErrorNotSupported);
  }
  if (type != cudaMemAllocationTypePinned) return Record(cudaErrorInvalidValue);
  if (set) return DeviceSetMemPool(location->id, set_to);
  return DeviceMemPool(pool, location->id, current);
}

}  // namespace smolvm::shim
