// Memory family: device allocations, pinned host memory, copies, memset.
//
// Copy paths (docs/shim.md has the table):
//   pageable -> device, <= kInlineBytes:  MemcpyHtoD with the bytes in the frame (ASYNC)
//   pageable -> device, larger:           through two pinned staging buffers in turn,
//                                         MemcpyHtoDHost + EventRecord per chunk, pipelined
//   pinned   -> device:                   MemcpyHtoDHost straight from the segment (zero-copy)
//   device   -> pageable, small:          MemcpyDtoH, the bytes in the reply (SYNC)
//   device   -> pageable, larger:         MemcpyDtoHHost into staging, drained chunk by chunk
//   device   -> pinned:                   MemcpyDtoHHost straight into the segment
//   device   -> device:                   MemcpyDtoD (ASYNC)
// Without descriptors (host_mirror.h) large pageable copies go inline in
// chunks, and a copy from pinned memory sends its bytes to the worker's
// mirror first (HostWrite).
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "shim/host_flags.h"
#include "shim/parallel_copy.h"
#include "shim/runtime.h"
#include "shim/stub_report.h"

namespace smolvm::shim {
namespace {

constexpr size_t kInlineBytes = 1u << 20;
constexpr size_t kStagingBytes = 8u << 20;

enum class MemClass { kDevice, kPinned, kPageable, kInvalid };

}  // namespace

cudaError_t Runtime::Malloc(void** ptr, size_t bytes) {
  if (ptr == nullptr) return Record(cudaErrorInvalidValue);
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  if (cudaError_t e = captures_.CheckUnsafeCall(); e != cudaSuccess) return Finish(e);
  if (bytes == 0) {
    *ptr = nullptr;
    return Finish(cudaSuccess);
  }
  proto::MemAllocRequest req;
  req.bytes = bytes;
  proto::MemAllocReply rep;
  Status st = session_.Call(req, &rep);
  if (!st.ok()) return FinishStatus(st);
  device_mem_.Add(rep.dptr, bytes);
  *ptr = reinterpret_cast<void*>(rep.dptr);
  return Finish(cudaSuccess);
}

cudaError_t Runtime::Free(void* ptr) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  if (cudaError_t e = captures_.CheckUnsafeCall(); e != cudaSuccess) return Finish(e);
  if (ptr == nullptr) return Finish(cudaSuccess);  // cudaFree(0): the "initialize" idiom
  uint64_t p = reinterpret_cast<uint64_t>(ptr);
  if (cudaError_t e; FreeFromPool(p, &e)) return Finish(e);
  if (!device_mem_.StartsAt(p)) return Finish(cudaErrorInvalidValue);
  proto::MemFreeRequest req;
  req.dptr = p;
  proto::MemFreeReply rep;
  Status st = session_.Call(req, &rep);
  device_mem_.Remove(p);
  return FinishStatus(st);
}

cudaError_t Runtime::MallocHost(void** ptr, size_t bytes, unsigned flags) {
  if (ptr == nullptr || flags > (cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined))
    return Record(cudaErrorInvalidValue);
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  if (cudaError_t e = captures_.CheckUnsafeCall(); e != cudaSuccess) return Finish(e);
  if (bytes == 0) {
    *ptr = nullptr;
    return Finish(cudaSuccess);
  }
  if ((flags & cudaHostAllocMapped) && session_.no_descriptors()) {
    static std::atomic<bool> reported{false};
    return Finish(RefuseWithoutDescriptors(&reported, "cudaHostAlloc with cudaHostAllocMapped"));
  }
  Result<uint64_t> addr = host_mem_.Alloc(session_, bytes, flags);
  if (!addr.ok()) {
    cudaError_t e = ToCuda(addr.status());
    if (e == cudaErrorOperatingSystem || e == cudaErrorInvalidValue) e = cudaErrorMemoryAllocation;
    return Finish(e);
  }
  *ptr = reinterpret_cast<void*>(*addr);
  return Finish(cudaSuccess);
}

cudaError_t Runtime::FreeHost(void* ptr) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  if (cudaError_t e = captures_.CheckUnsafeCall(); e != cudaSuccess) return Finish(e);
  if (ptr == nullptr) return Finish(cudaSuccess);
  Status st = host_mem_.Free(session_, reinterpret_cast<uint64_t>(ptr));
  if (st.code() == static_cast<int32_t>(Code::kInvalidArgument)) return Finish(cudaErrorInvalidValue);
  return FinishStatus(st);
}

cudaError_t Runtime::HostGetDevicePointer(void** dptr, void* hptr, unsigned flags) {
  if (dptr == nullptr || flags != 0) return Record(cudaErrorInvalidValue);
  std::lock_guard lock(session_.mu());
  uint64_t base;
  if (host_mem_.Find(reinterpret_cast<uint64_t>(hptr), 0, &base) == nullptr) {
    if (registered_.Find(reinterpret_cast<uint64_t>(hptr), &base) != nullptr) {
      static std::atomic<bool> reported{false};
      ReportNotSupportedOnce(&reported, "cudart", "cudaHostGetDevicePointer of memory registered with cudaHostRegister",
                             "cudaErrorNotSupported",
                             "the device cannot reach this process's own pages; cudaHostAlloc(cudaHostAllocMapped) "
                             "gives memory a kernel can read");
      return Record(cudaErrorNotSupported);
    }
    return Record(cudaErrorInvalidValue);
  }
  if (session_.no_descriptors()) {
    static std::atomic<bool> reported{false};
    return Record(RefuseWithoutDescriptors(&reported, "cudaHostGetDevicePointer"));
  }
  *dptr = hptr;  // unified addressing: the worker maps the segment at the same address
  return cudaSuccess;
}

cudaError_t Runtime::HostGetFlags(unsigned* flags, void* hptr) {
  if (flags == nullptr) return Record(cudaErrorInvalidValue);
  std::lock_guard lock(session_.mu());
  uint64_t base;
  const HostSegment* seg = host_mem_.Find(reinterpret_cast<uint64_t>(hptr), 0, &base);
  if (seg == nullptr) {
    const HostRegistration* r = registered_.Find(reinterpret_cast<uint64_t>(hptr), &base);
    if (r == nullptr) return Record(cudaErrorInvalidValue);
    *flags = RegisteredHostFlags(r->flags);
    return cudaSuccess;
  }
  *flags = PinnedHostFlags(seg->flags);
  return cudaSuccess;
}

cudaError_t Runtime::RefuseWithoutDescriptors(std::atomic<bool>* reported, const char* what) {
  std::string text = std::string(what) +
                     " in a session without descriptors (a gVisor machine: the device would reach the worker's copy "
                     "of this pinned memory, never the program's; copies to and from it work)";
  ReportNotSupportedOnce(reported, "cudart", text.c_str(), "cudaErrorNotSupported");
  return cudaErrorNotSupported;
}

cudaError_t Runtime::WaitStaging(Staging& s) {
  if (!s.in_use) return cudaSuccess;
  proto::EventSynchronizeRequest req;
  req.event = s.event;
  proto::EventSynchronizeReply rep;
  Status st = session_.Call(req, &rep);
  s.in_use = false;
  return ToCuda(st);
}

cudaError_t Runtime::EnsureStaging() {
  if (staging_[0].buf != nullptr) return cudaSuccess;
  for (Staging& s : staging_) {
    Result<uint64_t> addr = host_mem_.Alloc(session_, kStagingBytes, 0, /*scratch=*/true);
    if (!addr.ok()) return ToCuda(addr.status());
    s.buf = reinterpret_cast<char*>(*addr);
    s.event = NewHandle();
    proto::EventCreateRequest ev;
    ev.event = s.event;
    ev.flags = cudaEventDisableTiming;
    session_.Enqueue(ev);
  }
  return cudaSuccess;
}

cudaError_t Runtime::CopyToDevice(uint64_t dst, const void* src, size_t bytes, uint64_t stream) {
  uint64_t seg_base;
  if (host_mem_.Find(reinterpret_cast<uint64_t>(src), bytes, &seg_base) != nullptr) {
    if (host_mem_.mirror() != nullptr)
      if (Status st = HostMirror::Push(session_, reinterpret_cast<uint64_t>(src), bytes, stream); !st.ok())
        return ToCuda(st);
    proto::MemcpyHtoDHostRequest req;
    req.dst = dst;
    req.src = reinterpret_cast<uint64_t>(src);
    req.bytes = bytes;
    req.stream = stream;
    session_.Enqueue(req);
    return cudaSuccess;
  }
  if (bytes <= kInlineBytes) {
    proto::MemcpyHtoDRequest req;
    req.dst = dst;
    req.stream = stream;
    req.data = std::string_view(static_cast<const char*>(src), bytes);
    session_.Enqueue(req);
    return cudaSuccess;
  }
  if (host_mem_.mirror() != nullptr) return ToCuda(HostMirror::CopyToDevice(session_, dst, src, bytes, stream));
  if (cudaError_t e = EnsureStaging(); e != cudaSuccess) return e;
  const char* from = static_cast<const char*>(src);
  for (size_t off = 0, i = 0; off < bytes; off += kStagingBytes, ++i) {
    Staging& s = staging_[i % 2];
    size_t n = std::min(kStagingBytes, bytes - off);
    if (cudaError_t e = WaitStaging(s); e != cudaSuccess) return e;
    ParallelCopy(s.buf, from + off, n);
    proto::MemcpyHtoDHostRequest copy;
    copy.dst = dst + off;
    copy.src = reinterpret_cast<uint64_t>(s.buf);
    copy.bytes = n;
    copy.stream = stream;
    session_.Enqueue(copy);
    proto::EventRecordRequest rec;
    rec.event = s.event;
    rec.stream = stream;
    session_.Enqueue(rec);
    s.in_use = true;
    Status st = session_.Flush();  // start the worker on this chunk while we fill the next
    if (!st.ok()) return ToCuda(st);
  }
  return cudaSuccess;
}

cudaError_t Runtime::CopyFromDevice(void* dst, uint64_t src, size_t bytes, uint64_t stream) {
  uint64_t seg_base;
  if (host_mem_.Find(reinterpret_cast<uint64_t>(dst), bytes, &seg_base) != nullptr) {
    proto::MemcpyDtoHHostRequest req;
    req.dst = reinterpret_cast<uint64_t>(dst);
    req.src = src;
    req.bytes = bytes;
    req.stream = stream;
    session_.Enqueue(req);
    return cudaSuccess;
  }
  if (bytes <= kInlineBytes) {
    proto::MemcpyDtoHRequest req;
    req.src = src;
    req.bytes = bytes;
    req.stream = stream;
    proto::MemcpyDtoHReply rep;
    Status st = session_.Call(req, &rep);
    if (!st.ok()) return ToCuda(st);
    if (rep.data.size() != bytes) return cudaErrorUnknown;
    std::memcpy(dst, rep.data.data(), bytes);
    return cudaSuccess;
  }
  if (host_mem_.mirror() != nullptr) return ToCuda(HostMirror::CopyFromDevice(session_, dst, src, bytes, stream));
  if (cudaError_t e = EnsureStaging(); e != cudaSuccess) return e;
  char* to = static_cast<char*>(dst);
  auto drain = [&](Staging& s, size_t off, size_t n) -> cudaError_t {
    if (cudaError_t e = WaitStaging(s); e != cudaSuccess) return e;
    ParallelCopy(to + off, s.buf, n);
    return cudaSuccess;
  };
  Staging* prev = nullptr;
  size_t prev_off = 0, prev_n = 0;
  for (size_t off = 0, i = 0; off < bytes; off += kStagingBytes, ++i) {
    Staging& s = staging_[i % 2];
    size_t n = std::min(kStagingBytes, bytes - off);
    // Left over from an earlier host-to-device copy.
    if (cudaError_t e = WaitStaging(s); e != cudaSuccess) return e;
    proto::MemcpyDtoHHostRequest copy;
    copy.dst = reinterpret_cast<uint64_t>(s.buf);
    copy.src = src + off;
    copy.bytes = n;
    copy.stream = stream;
    session_.Enqueue(copy);
    proto::EventRecordRequest rec;
    rec.event = s.event;
    rec.stream = stream;
    session_.Enqueue(rec);
    s.in_use = true;
    Status st = session_.Flush();
    if (!st.ok()) return ToCuda(st);
    if (prev != nullptr)
      if (cudaError_t e = drain(*prev, prev_off, prev_n); e != cudaSuccess) return e;
    prev = &s;
    prev_off = off;
    prev_n = n;
  }
  return drain(*prev, prev_off, prev_n);
}

cudaError_t Runtime::Memcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream,
                            bool async, bool per_thread) {
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return Record(cudaErrorInvalidMemcpyDirection);
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  uint64_t sid;
  if (cudaError_t e = StreamId(stream, per_thread, &sid); e != cudaSuccess) return Finish(e);
  if (bytes == 0) return Finish(cudaSuccess);
  if (dst == nullptr || src == nullptr) return Finish(cudaErrorInvalidValue);

  auto classify = [&](const void* p) {
    uint64_t a = reinterpret_cast<uint64_t>(p), base;
    if (device_mem_.Contains(a, bytes)) return MemClass::kDevice;
    if (host_mem_.Find(a, bytes, &base) != nullptr) return MemClass::kPinned;
    const proto::HelloReply& h = session_.hello();
    if (a - h.arena_base < h.arena_bytes || host_mem_.InRange(a)) return MemClass::kInvalid;
    if (uint64_t g; device_mem_.Find(a, &g, &base)) return MemClass::kInvalid;  // overruns an allocation
    return MemClass::kPageable;
  };
  MemClass dc = classify(dst), sc = classify(src);
  if (dc == MemClass::kInvalid || sc == MemClass::kInvalid) return Finish(cudaErrorInvalidValue);
  bool dst_dev = dc == MemClass::kDevice, src_dev = sc == MemClass::kDevice;
  if (CaptureTable::Capture* c = captures_.Of(sid)) {
    // A capture holds copies between device and pinned memory only; a
    // synchronous copy would wait for work that does not run.
    if (!async || dc == MemClass::kPageable || sc == MemClass::kPageable) {
      c->invalidated = true;
      return Finish(cudaErrorStreamCaptureUnsupported);
    }
    // Without descriptors a graph would copy the worker's mirror.
    if (session_.no_descriptors() && (dc == MemClass::kPinned || sc == MemClass::kPinned)) {
      c->invalidated = true;
      static std::atomic<bool> reported{false};
      (void)RefuseWithoutDescriptors(&reported, "a copy with pinned memory on a capturing stream");
      return Finish(cudaErrorStreamCaptureUnsupported);
    }
  }
  switch (kind) {
    case cudaMemcpyHostToHost:
      if (dst_dev || src_dev) return Finish(cudaErrorInvalidValue);
      break;
    case cudaMemcpyHostToDevice:
      if (!dst_dev || src_dev) return Finish(cudaErrorInvalidValue);
      break;
    case cudaMemcpyDeviceToHost:
      if (dst_dev || !src_dev) return Finish(cudaErrorInvalidValue);
      break;
    case cudaMemcpyDeviceToDevice:
      if (!dst_dev || !src_dev) return Finish(cudaErrorInvalidValue);
      break;
    default:
      break;
  }

  cudaError_t err = cudaSuccess;
  bool wait_stream = false;
  if (dst_dev && src_dev) {
    proto::MemcpyDtoDRequest req;
    req.dst = reinterpret_cast<uint64_t>(dst);
    req.src = reinterpret_cast<uint64_t>(src);
    req.bytes = bytes;
    req.stream = sid;
    session_.Enqueue(req);
  } else if (dst_dev) {
    err = CopyToDevice(reinterpret_cast<uint64_t>(dst), src, bytes, sid);
    // From pinned memory cudaMemcpy returns when the copy is done; from
    // pageable memory once the source was consumed (inline or staged).
    wait_stream = !async && sc == MemClass::kPinned;
  } else if (src_dev) {
    err = CopyFromDevice(dst, reinterpret_cast<uint64_t>(src), bytes, sid);
    wait_stream = !async && dc == MemClass::kPinned;
  } else {
    // Host to host: stream-ordered in CUDA, so drain the stream first.
    proto::StreamSynchronizeRequest req;
    req.stream = sid;
    proto::StreamSynchronizeReply rep;
    Status st = session_.Call(req, &rep);
    if (!st.ok()) return FinishStatus(st);
    std::memmove(dst, src, bytes);
  }
  if (err == cudaSuccess && wait_stream) {
    proto::StreamSynchronizeRequest req;
    req.stream = sid;
    proto::StreamSynchronizeReply rep;
    err = ToCuda(session_.Call(req, &rep));
  }
  return Finish(err);
}

cudaError_t Runtime::Memset(void* dst, int value, size_t bytes, cudaStream_t stream, bool per_thread) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  uint64_t sid;
  if (cudaError_t e = StreamId(stream, per_thread, &sid); e != cudaSuccess) return Finish(e);
  if (bytes == 0) return Finish(cudaSuccess);
  if (!device_mem_.Contains(reinterpret_cast<uint64_t>(dst), bytes)) return Finish(cudaErrorInvalidValue);
  proto::MemsetRequest req;
  req.dst = reinterpret_cast<uint64_t>(dst);
  req.value = static_cast<uint32_t>(value) & 0xffu;
  req.elem_bytes = 1;
  req.count = bytes;
  req.stream = sid;
  session_.Enqueue(req);
  return Finish(cudaSuccess);
}

cudaError_t Runtime::MemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  proto::MemGetInfoRequest req;
  proto::MemGetInfoReply rep;
  Status st = session_.Call(req, &rep);
  if (!st.ok()) return FinishStatus(st);
  if (free_bytes != nullptr) *free_bytes = rep.free_bytes;
  if (total_bytes != nullptr) *total_bytes = rep.total_bytes;
  return Finish(cudaSuccess);
}

cudaError_t Runtime::PointerGetAttributes(cudaPointerAttributes* attrs, const void* ptr) {
  if (attrs == nullptr) return Record(cudaErrorInvalidValue);
  std::lock_guard lock(session_.mu());
  uint64_t a = reinterpret_cast<uint64_t>(ptr), base, bytes;
  std::memset(attrs, 0, sizeof *attrs);
  attrs->device = 0;
  if (device_mem_.Find(a, &base, &bytes)) {
    attrs->type = cudaMemoryTypeDevice;
    attrs->devicePointer = const_cast<void*>(ptr);
  } else if (host_mem_.Find(a, 0, &base) != nullptr) {
    attrs->type = cudaMemoryTypeHost;
    attrs->devicePointer = const_cast<void*>(ptr);
    attrs->hostPointer = const_cast<void*>(ptr);
  } else if (registered_.Find(a, &base) != nullptr) {
    attrs->type = cudaMemoryTypeHost;  // registered; no device pointer: the device cannot reach it
    attrs->hostPointer = const_cast<void*>(ptr);
  } else {
    attrs->type = cudaMemoryTypeUnregistered;
  }
  return cudaSuccess;
}

}  // namespace smolvm::shim
