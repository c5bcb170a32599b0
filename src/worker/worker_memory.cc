// The worker's memory handlers (ops 20-29), mirroring the shim's
// forward_memory.cc: allocations and copies against the session's
// DeviceMemory (copy-on-write of shared chunks first) and pinned host
// segments. Every guest size is checked before arithmetic (worker_checks.h).
#include <cuda.h>
#include <errno.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "worker/cu_status.h"
#include "worker/worker.h"
#include "worker/worker_checks.h"

namespace smolvm {
namespace {

// Largest DtoH answered inline; bigger copies go through pinned staging.
constexpr uint64_t kMaxInlineDtoH = 64ull << 20;

}  // namespace

// --- memory -------------------------------------------------------------------

Status Worker::Handle(const proto::MemAllocRequest& q, proto::MemAllocReply* r, Ctx*) {
  ASSIGN_OR_RETURN(r->dptr, memory_->Alloc(q.bytes));
  contexts_.OwnAllocation(r->dptr);
  SendStats();
  return Status::Ok();
}

Status Worker::Handle(const proto::MemFreeRequest& q, proto::MemFreeReply*, Ctx*) {
  RETURN_IF_ERROR(memory_->Free(q.dptr));
  contexts_.DropAllocation(q.dptr);
  SendStats();
  return Status::Ok();
}

Status Worker::Handle(const proto::HostRegisterRequest& q, proto::HostRegisterReply*, Ctx* ctx) {
  // No memfd: the guest passes no descriptors (kHelloNoDescriptors), and the
  // segment is a mirror of its memory, private to the worker (host_mirrors.h).
  const bool mirror = ctx->fds_in->empty();
  if (ctx->fds_in->size() > 1) return Cu(CUDA_ERROR_INVALID_VALUE, "HostRegister takes one memfd or none");
  uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  if (q.bytes == 0 || q.addr % page || q.bytes % page || q.addr < options_.host_base ||
      q.addr + q.bytes > options_.host_base + options_.host_bytes || q.addr + q.bytes < q.addr)
    return Cu(CUDA_ERROR_INVALID_VALUE, "host segment outside the pinned host range");
  // The whole segment must be backed when it is registered (a file shrunk
  // later is the host guard's business).
  struct stat file;
  if (!mirror && (::fstat((*ctx->fds_in)[0].get(), &file) < 0 || !S_ISREG(file.st_mode) ||
                  static_cast<uint64_t>(file.st_size) < q.bytes))
    return Cu(CUDA_ERROR_INVALID_VALUE, "HostRegister: the memfd is not a file of at least the segment's size");
  auto next = host_.lower_bound(q.addr);
  if ((next != host_.end() && next->first < q.addr + q.bytes) ||
      (next != host_.begin() && std::prev(next)->first + std::prev(next)->second.bytes > q.addr))
    return Cu(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "host segment overlaps another");
  void* p = mirror ? ::mmap(reinterpret_cast<void*>(q.addr), q.bytes, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0)
                   : ::mmap(reinterpret_cast<void*>(q.addr), q.bytes, PROT_READ | PROT_WRITE,
                            MAP_SHARED | MAP_FIXED, (*ctx->fds_in)[0].get(), 0);
  if (p == MAP_FAILED) return Cu(CUDA_ERROR_INVALID_VALUE, std::string("mmap host segment: ") + strerror(errno));
  // The session's, not a context's (it outlives any the guest destroys).
  Status st = InPrimary([&] { return backend_->HostRegister(p, q.bytes); });
  if (!st.ok()) {
    ::mmap(p, q.bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    return st;
  }
  host_[q.addr] = HostSegment{q.bytes};
  if (mirror) mirrors_->AddSegment(q.addr, q.bytes);
  return Status::Ok();
}

Status Worker::Handle(const proto::HostUnregisterRequest& q, proto::HostUnregisterReply*, Ctx*) {
  auto it = host_.find(q.addr);
  if (it == host_.end()) return Cu(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "not a registered host segment");
  // DMA from or to the segment may still be in flight, in any context.
  RETURN_IF_ERROR(SynchronizeAllContexts());
  mirrors_->RemoveSegment(q.addr);  // with its landings: the guest frees what they would land in
  Status st = InPrimary([&] { return backend_->HostUnregister(reinterpret_cast<void*>(q.addr)); });
  ::mmap(reinterpret_cast<void*>(q.addr), it->second.bytes, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  host_.erase(it);
  return st;
}

Status Worker::Handle(const proto::MemcpyHtoDRequest& q, proto::MemcpyHtoDReply*, Ctx*) {
  RETURN_IF_ERROR(CheckRange(q.dst, q.data.size(), "MemcpyHtoD destination"));
  ASSIGN_OR_RETURN(uint64_t s, Stream(q.stream));
  RETURN_IF_ERROR(RefuseInCapture(s, "a copy from pageable memory"));
  RETURN_IF_ERROR(memory_->PrepareWrite(q.dst, q.data.size()).status());
  // The bytes live in the frame buffer, which the next read reuses: copy
  // synchronously with respect to it, as pageable copies are.
  RETURN_IF_ERROR(backend_->MemcpyHtoD(Moved(q.dst, q.data.size()), q.data.data(), q.data.size(), s));
  memory_->NoteUpload(q.dst, q.data.data(), q.data.size());
  if (q.data.size() > 0) return backend_->StreamSynchronize(s);
  return Status::Ok();
}

Status Worker::Handle(const proto::MemcpyHtoDHostRequest& q, proto::MemcpyHtoDHostReply*, Ctx*) {
  RETURN_IF_ERROR(CheckHost(q.src, q.bytes));
  RETURN_IF_ERROR(CheckRange(q.dst, q.bytes, "MemcpyHtoDHost destination"));
  ASSIGN_OR_RETURN(uint64_t s, Stream(q.stream));
  if (mirrors_->Contains(q.src, q.bytes)) RETURN_IF_ERROR(RefuseMirrorInCapture(s));
  RETURN_IF_ERROR(memory_->PrepareWrite(q.dst, q.bytes).status());
  RETURN_IF_ERROR(backend_->MemcpyHtoD(Moved(q.dst, q.bytes), reinterpret_cast<const void*>(q.src), q.bytes, s));
  // The segment is mapped here at the guest's address; the guest may not
  // change it before the copy completes, so this is what the copy writes.
  memory_->NoteUpload(q.dst, reinterpret_cast<const void*>(q.src), q.bytes);
  return Status::Ok();
}

Status Worker::Handle(const proto::MemcpyDtoHRequest& q, proto::MemcpyDtoHReply* r, Ctx*) {
  if (q.bytes > kMaxInlineDtoH) return Cu(CUDA_ERROR_INVALID_VALUE, "inline copy too large");
  RETURN_IF_ERROR(CheckRange(q.src, q.bytes, "MemcpyDtoH source"));
  ASSIGN_OR_RETURN(uint64_t s, Stream(q.stream));
  RETURN_IF_ERROR(RefuseInCapture(s, "a copy to pageable memory"));
  scratch_.resize(q.bytes);
  RETURN_IF_ERROR(backend_->MemcpyDtoH(scratch_.data(), Moved(q.src, q.bytes), q.bytes, s));
  RETURN_IF_ERROR(backend_->StreamSynchronize(s));
  r->data = scratch_;
  return Status::Ok();
}

Status Worker::Handle(const proto::MemcpyDtoHHostRequest& q, proto::MemcpyDtoHHostReply*, Ctx*) {
  RETURN_IF_ERROR(CheckHost(q.dst, q.bytes));
  RETURN_IF_ERROR(CheckRange(q.src, q.bytes, "MemcpyDtoHHost source"));
  ASSIGN_OR_RETURN(uint64_t s, Stream(q.stream));
  const bool mirror = mirrors_->Contains(q.dst, q.bytes);
  if (mirror) RETURN_IF_ERROR(RefuseMirrorInCapture(s));
  // A landing's event is the primary's, reused across copies.
  if (mirror && contexts_.current() != 0)
    return Cu(CUDA_ERROR_NOT_SUPPORTED,
              "a device-to-host copy into pinned memory of a session without descriptors while a context the program "
              "created (cuCtxCreate) is current is not supported: copy in the primary context (docs/shim.md, Contexts)");
  RETURN_IF_ERROR(backend_->MemcpyDtoH(reinterpret_cast<void*>(q.dst), Moved(q.src, q.bytes), q.bytes, s));
  // Into a mirror: the guest's memory gets the bytes once the copy is done.
  if (mirror && q.bytes != 0) return mirrors_->AddLanding(q.dst, q.bytes, s, q.stream);
  return Status::Ok();
}

// --- pinned memory without descriptors (host_mirrors.h) ----------------------

Status Worker::RefuseMirrorInCapture(uint64_t stream) {
  if (captures_.empty()) return Status::Ok();
  Result<bool> capturing = backend_->StreamIsCapturing(stream);
  if (capturing.ok() && *capturing)
    return Cu(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
              "a copy with pinned memory on a capturing stream, in a session without descriptors (a graph would "
              "copy the worker's mirror of that memory, not the program's)");
  return Status::Ok();
}

Status Worker::Handle(const proto::HostWriteRequest& q, proto::HostWriteReply*, Ctx*) {
  return mirrors_->WriteGuestBytes(q.addr, q.data);
}

Status Worker::Handle(const proto::HostFetchDataRequest& q, proto::HostFetchDataReply*, Ctx*) {
  // Read by the serve loop rather than by the callback waiting for it: the
  // same, before its HostFuncDone (host_mirrors.h).
  return mirrors_->WriteGuestBytes(q.addr, q.data);
}

Status Worker::Handle(const proto::HostFetchRequest& q, proto::HostFetchReply*, Ctx*) {
  if (!mirrors_->Contains(q.addr, q.bytes))
    return Cu(CUDA_ERROR_INVALID_VALUE, "HostFetch: not inside a pinned segment registered without a memfd");
  ASSIGN_OR_RETURN(uint64_t s, Stream(q.stream));
  RETURN_IF_ERROR(RefuseMirrorInCapture(s));
  // A host function of kind 2: the guest answers with the bytes.
  auto call = std::make_unique<HostCall>();
  call->link = link_.get();
  call->fn = q.addr;
  call->user = q.bytes;
  call->stream = q.stream;
  call->kind = 2;
  call->status = &callback_status_;
  if (mirrors_->pending() != 0) {
    call->mirrors = mirrors_.get();
    call->landings_before = mirrors_->next();
  }
  HostCall* kept = link_->Keep(std::move(call));
  Status st = backend_->LaunchHostFunc(s, HostCallTrampoline, kept);
  if (!st.ok()) link_->Forget(kept);
  return st;
}

Status Worker::Handle(const proto::MemcpyDtoDRequest& q, proto::MemcpyDtoDReply*, Ctx*) {
  RETURN_IF_ERROR(CheckRange(q.src, q.bytes, "MemcpyDtoD source"));
  RETURN_IF_ERROR(CheckRange(q.dst, q.bytes, "MemcpyDtoD destination"));
  ASSIGN_OR_RETURN(uint64_t s, Stream(q.stream));
  RETURN_IF_ERROR(memory_->PrepareWrite(q.dst, q.bytes).status());
  memory_->NoteOtherWrite(q.dst, q.bytes);
  return backend_->MemcpyDtoD(Moved(q.dst, q.bytes), Moved(q.src, q.bytes), q.bytes, s);
}

Status Worker::Handle(const proto::MemsetRequest& q, proto::MemsetReply*, Ctx*) {
  uint64_t bytes = 0;
  RETURN_IF_ERROR(CheckMemset(q.dst, q.elem_bytes, q.count, &bytes));
  ASSIGN_OR_RETURN(uint64_t s, Stream(q.stream));
  RETURN_IF_ERROR(memory_->PrepareWrite(q.dst, bytes).status());
  memory_->NoteOtherWrite(q.dst, bytes);
  return backend_->Memset(Moved(q.dst, bytes), q.value, q.elem_bytes, q.count, s);
}

}  // namespace smolvm
