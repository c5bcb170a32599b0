#include "daemon/worker.h"

#include <cuda.h>
#include <errno.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>

#include "backend/backend_factory.h"
#include "daemon/module_cache.h"
#include "proto/frame.h"
#include "transport/unix_channel.h"

namespace smolvm {
namespace {

Status Cu(CUresult r, const std::string& what) { return Status(static_cast<int32_t>(r), what); }

// Largest DtoH answered inline; bigger copies go through pinned staging.
constexpr uint64_t kMaxInlineDtoH = 64ull << 20;

}  // namespace

Worker::Worker(std::unique_ptr<GpuBackend> backend, WorkerOptions options)
    : backend_(std::move(backend)), options_(std::move(options)) {}

Worker::~Worker() { ReleaseAll(); }

void Worker::ReleaseAll() {
  memory_.reset();
  for (auto& [addr, seg] : host_) {
    (void)backend_->HostUnregister(reinterpret_cast<void*>(addr));
    ::mmap(reinterpret_cast<void*>(addr), seg.bytes, PROT_NONE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  }
  host_.clear();
  if (host_reserved_) {
    ::munmap(reinterpret_cast<void*>(options_.host_base), options_.host_bytes);
    host_reserved_ = false;
  }
}

Status Worker::Start() {
  // The host range first, before the driver can place anything there.
  if (options_.host_bytes) {
    void* p = ::mmap(reinterpret_cast<void*>(options_.host_base), options_.host_bytes, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED || reinterpret_cast<uint64_t>(p) != options_.host_base)
      return Internal("cannot reserve the pinned host range at its fixed address");
    host_reserved_ = true;
  }
  RETURN_IF_ERROR(backend_->Init(0));
  RETURN_IF_ERROR(backend_->ReserveArena(options_.arena_base, options_.arena_bytes));
  memory_ = std::make_unique<DeviceMemory>(backend_.get(), options_.arena_base, options_.arena_bytes,
                                           options_.memory_limit_bytes);
  return Status::Ok();
}

Status Worker::Serve(std::unique_ptr<Channel> guest, const proto::WorkerAdoptRequest& adopt,
                     Channel* control) {
  session_id_ = adopt.session_id;
  control_ = control;
  std::string out;
  proto::HelloReply hello;
  hello.session_id = adopt.session_id;
  hello.arena_base = options_.arena_base;
  hello.arena_bytes = options_.arena_bytes;
  hello.host_base = options_.host_base;
  hello.host_bytes = options_.host_bytes;
  hello.backend = std::string(backend_->Name());
  proto::AppendReply(&out, static_cast<uint16_t>(proto::Op::kHello), adopt.hello_seq, 0, hello);
  RETURN_IF_ERROR(guest->Write(out));

  int32_t deferred = 0;
  proto::FrameHeader h;
  std::string payload;
  std::vector<UniqueFd> fds;
  while (!goodbye_) {
    Status st = guest->ReadFrame(&h, &payload, &fds);
    if (!st.ok()) {
      if (st.code() == static_cast<int32_t>(Code::kUnavailable)) return Status::Ok();
      // A broken frame leaves the stream unsynchronised: say why, then end.
      out.clear();
      proto::AppendErrorReply(&out, h.op, h.seq, st.code(), deferred, st.message());
      (void)guest->Write(out);
      return st;
    }
    out.clear();
    proto::CallContext ctx;
    ctx.header = &h;
    ctx.fds_in = &fds;
    ctx.deferred = deferred;
    proto::DispatchOutcome o = proto::Dispatch(*this, h, payload, &ctx, &out);
    if (o.replied) {
      deferred = 0;
      RETURN_IF_ERROR(guest->Write(out, ctx.fds_out));
    } else if (!o.status.ok() && deferred == 0) {
      deferred = o.status.code();
    }
  }
  return Status::Ok();
}

void Worker::SendStats() {
  if (!control_) return;
  proto::WorkerStatsRequest s;
  s.session_id = session_id_;
  s.chunks = memory_->chunks().size();
  s.chunk_bytes = memory_->chunk_bytes();
  s.allocations = memory_->allocation_count();
  std::string out;
  proto::AppendRequest(&out, s, 0);
  (void)control_->Write(out);
}

Result<uint64_t> Worker::Stream(uint64_t guest_id) const {
  if (guest_id == 0 || guest_id == 1) return kDefaultStream;  // NULL, cudaStreamLegacy
  if (guest_id == 2) return uint64_t{2};  // per-thread default stream
  auto it = streams_.find(guest_id);
  if (it == streams_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown stream");
  return it->second;
}

Result<uint64_t> Worker::Event(uint64_t guest_id) const {
  auto it = events_.find(guest_id);
  if (it == events_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown event");
  return it->second;
}

Status Worker::CheckHost(uint64_t addr, uint64_t bytes) const {
  auto it = host_.upper_bound(addr);
  if (it != host_.begin()) {
    --it;
    if (addr + bytes >= addr && addr + bytes <= it->first + it->second.bytes) return Status::Ok();
  }
  return Cu(CUDA_ERROR_INVALID_VALUE, "host range is not a registered pinned segment");
}

// --- session and device -------------------------------------------------------

Status Worker::Handle(const proto::GoodbyeRequest&, proto::GoodbyeReply*, Ctx*) {
  goodbye_ = true;
  return backend_->CtxSynchronize();
}

Status Worker::Handle(const proto::PingRequest&, proto::PingReply*, Ctx*) { return Status::Ok(); }

Status Worker::Handle(const proto::DeviceGetCountRequest&, proto::DeviceGetCountReply* r, Ctx*) {
  // A session sees the one device its worker's context lives on.
  r->count = 1;
  return Status::Ok();
}

Status Worker::Handle(const proto::DeviceGetInfoRequest& q, proto::DeviceGetInfoReply* r, Ctx*) {
  if (q.device != 0) return Cu(CUDA_ERROR_INVALID_DEVICE, "a session has one device, 0");
  ASSIGN_OR_RETURN(DeviceInfo info, backend_->GetDeviceInfo(0));
  scratch_ = info.uuid;
  r->name = info.name;
  r->uuid = scratch_;
  r->total_mem = info.total_mem;
  r->driver_version = info.driver_version;
  r->attrs = std::move(info.attrs);
  return Status::Ok();
}

Status Worker::Handle(const proto::MemGetInfoRequest&, proto::MemGetInfoReply* r, Ctx*) {
  RETURN_IF_ERROR(backend_->MemGetInfo(&r->free_bytes, &r->total_bytes));
  if (options_.memory_limit_bytes) {
    uint64_t left = options_.memory_limit_bytes - std::min(options_.memory_limit_bytes, memory_->chunk_bytes());
    r->total_bytes = options_.memory_limit_bytes;
    r->free_bytes = std::min(r->free_bytes, left);
  }
  return Status::Ok();
}

Status Worker::Handle(const proto::CtxSynchronizeRequest&, proto::CtxSynchronizeReply*, Ctx*) {
  return backend_->CtxSynchronize();
}

Status Worker::Handle(const proto::CtxGetLimitRequest& q, proto::CtxGetLimitReply* r, Ctx*) {
  ASSIGN_OR_RETURN(r->value, backend_->CtxGetLimit(q.limit));
  return Status::Ok();
}

Status Worker::Handle(const proto::CtxSetLimitRequest& q, proto::CtxSetLimitReply*, Ctx*) {
  return backend_->CtxSetLimit(q.limit, q.value);
}

Status Worker::Handle(const proto::StreamPriorityRangeRequest&, proto::StreamPriorityRangeReply* r,
                      Ctx*) {
  int least = 0, greatest = 0;
  RETURN_IF_ERROR(backend_->StreamPriorityRange(&least, &greatest));
  r->least = least;
  r->greatest = greatest;
  return Status::Ok();
}

// --- memory -------------------------------------------------------------------

Status Worker::Handle(const proto::MemAllocRequest& q, proto::MemAllocReply* r, Ctx*) {
  ASSIGN_OR_RETURN(r->dptr, memory_->Alloc(q.bytes));
  SendStats();
  return Status::Ok();
}

Status Worker::Handle(const proto::MemFreeRequest& q, proto::MemFreeReply*, Ctx*) {
  RETURN_IF_ERROR(memory_->Free(q.dptr));
  SendStats();
  return Status::Ok();
}

Status Worker::Handle(const proto::HostRegisterRequest& q, proto::HostRegisterReply*, Ctx* ctx) {
  if (ctx->fds_in->size() != 1) return Cu(CUDA_ERROR_INVALID_VALUE, "HostRegister needs one memfd");
  uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  if (q.bytes == 0 || q.addr % page || q.bytes % page || q.addr < options_.host_base ||
      q.addr + q.bytes > options_.host_base + options_.host_bytes || q.addr + q.bytes < q.addr)
    return Cu(CUDA_ERROR_INVALID_VALUE, "host segment outside the pinned host range");
  auto next = host_.lower_bound(q.addr);
  if ((next != host_.end() && next->first < q.addr + q.bytes) ||
      (next != host_.begin() && std::prev(next)->first + std::prev(next)->second.bytes > q.addr))
    return Cu(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "host segment overlaps another");
  void* p = ::mmap(reinterpret_cast<void*>(q.addr), q.bytes, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_FIXED, (*ctx->fds_in)[0].get(), 0);
  if (p == MAP_FAILED) return Cu(CUDA_ERROR_INVALID_VALUE, std::string("mmap host segment: ") + strerror(errno));
  Status st = backend_->HostRegister(p, q.bytes);
  if (!st.ok()) {
    ::mmap(p, q.bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    return st;
  }
  host_[q.addr] = HostSegment{q.bytes};
  return Status::Ok();
}

Status Worker::Handle(const proto::HostUnregisterRequest& q, proto::HostUnregisterReply*, Ctx*) {
  auto it = host_.find(q.addr);
  if (it == host_.end()) return Cu(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "not a registered host segment");
  // DMA from or to the segment may still be in flight.
  RETURN_IF_ERROR(backend_->CtxSynchronize());
  Status st = backend_->HostUnregister(reinterpret_cast<void*>(q.addr));
  ::mmap(reinterpret_cast<void*>(q.addr), it->second.bytes, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  host_.erase(it);
  return st;
}

Status Worker::Handle(const proto::MemcpyHtoDRequest& q, proto::MemcpyHtoDReply*, Ctx*) {
  ASSIGN_OR_RETURN(uint64_t s, Stream(q.stream));
  // The bytes live in the frame buffer, which the next read reuses: copy
  // synchronously with respect to it, as pageable copies are.
  RETURN_IF_ERROR(backend_->MemcpyHtoD(q.dst, q.data.data(), q.data.size(), s));
  if (q.data.size() > 0) return backend_->StreamSynchronize(s);
  return Status::Ok();
}

Status Worker::Handle(const proto::MemcpyHtoDHostRequest& q, proto::MemcpyHtoDHostReply*, Ctx*) {
  RETURN_IF_ERROR(CheckHost(q.src, q.bytes));
  ASSIGN_OR_RETURN(uint64_t s, Stream(q.stream));
  return backend_->MemcpyHtoD(q.dst, reinterpret_cast<const void*>(q.src), q.bytes, s);
}

Status Worker::Handle(const proto::MemcpyDtoHRequest& q, proto::MemcpyDtoHReply* r, Ctx*) {
  if (q.bytes > kMaxInlineDtoH) return Cu(CUDA_ERROR_INVALID_VALUE, "inline copy too large");
  ASSIGN_OR_RETURN(uint64_t s, Stream(q.stream));
  scratch_.resize(q.bytes);
  RETURN_IF_ERROR(backend_->MemcpyDtoH(scratch_.data(), q.src, q.bytes, s));
  RETURN_IF_ERROR(backend_->StreamSynchronize(s));
  r->data = scratch_;
  return Status::Ok();
}

Status Worker::Handle(const proto::MemcpyDtoHHostRequest& q, proto::MemcpyDtoHHostReply*, Ctx*) {
  RETURN_IF_ERROR(CheckHost(q.dst, q.bytes));
  ASSIGN_OR_RETURN(uint64_t s, Stream(q.stream));
  return backend_->MemcpyDtoH(reinterpret_cast<void*>(q.dst), q.src, q.bytes, s);
}

Status Worker::Handle(const proto::MemcpyDtoDRequest& q, proto::MemcpyDtoDReply*, Ctx*) {
  ASSIGN_OR_RETURN(uint64_t s, Stream(q.stream));
  return backend_->MemcpyDtoD(q.dst, q.src, q.bytes, s);
}

Status Worker::Handle(const proto::MemsetRequest& q, proto::MemsetReply*, Ctx*) {
  ASSIGN_OR_RETURN(uint64_t s, Stream(q.stream));
  return backend_->Memset(q.dst, q.value, q.elem_bytes, q.count, s);
}

// --- streams and events ---------------------------------------------------------

Status Worker::Handle(const proto::StreamCreateRequest& q, proto::StreamCreateReply*, Ctx*) {
  if (q.stream <= 2 || streams_.count(q.stream))
    return Cu(CUDA_ERROR_INVALID_VALUE, "stream id is reserved or in use");
  ASSIGN_OR_RETURN(uint64_t h, backend_->StreamCreate(q.flags, q.priority));
  streams_[q.stream] = h;
  return Status::Ok();
}

Status Worker::Handle(const proto::StreamDestroyRequest& q, proto::StreamDestroyReply*, Ctx*) {
  auto it = streams_.find(q.stream);
  if (it == streams_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown stream");
  Status st = backend_->StreamDestroy(it->second);
  streams_.erase(it);
  return st;
}

Status Worker::Handle(const proto::StreamSynchronizeRequest& q, proto::StreamSynchronizeReply*, Ctx*) {
  ASSIGN_OR_RETURN(uint64_t s, Stream(q.stream));
  return backend_->StreamSynchronize(s);
}

Status Worker::Handle(const proto::StreamQueryRequest& q, proto::StreamQueryReply*, Ctx*) {
  ASSIGN_OR_RETURN(uint64_t s, Stream(q.stream));
  return backend_->StreamQuery(s);
}

Status Worker::Handle(const proto::StreamWaitEventRequest& q, proto::StreamWaitEventReply*, Ctx*) {
  ASSIGN_OR_RETURN(uint64_t s, Stream(q.stream));
  ASSIGN_OR_RETURN(uint64_t e, Event(q.event));
  return backend_->StreamWaitEvent(s, e, q.flags);
}

Status Worker::Handle(const proto::EventCreateRequest& q, proto::EventCreateReply*, Ctx*) {
  if (q.event == 0 || events_.count(q.event)) return Cu(CUDA_ERROR_INVALID_VALUE, "event id in use");
  ASSIGN_OR_RETURN(uint64_t h, backend_->EventCreate(q.flags));
  events_[q.event] = h;
  return Status::Ok();
}

Status Worker::Handle(const proto::EventDestroyRequest& q, proto::EventDestroyReply*, Ctx*) {
  auto it = events_.find(q.event);
  if (it == events_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown event");
  Status st = backend_->EventDestroy(it->second);
  events_.erase(it);
  return st;
}

Status Worker::Handle(const proto::EventRecordRequest& q, proto::EventRecordReply*, Ctx*) {
  ASSIGN_OR_RETURN(uint64_t e, Event(q.event));
  ASSIGN_OR_RETURN(uint64_t s, Stream(q.stream));
  return backend_->EventRecord(e, s);
}

Status Worker::Handle(const proto::EventSynchronizeRequest& q, proto::EventSynchronizeReply*, Ctx*) {
  ASSIGN_OR_RETURN(uint64_t e, Event(q.event));
  return backend_->EventSynchronize(e);
}

Status Worker::Handle(const proto::EventQueryRequest& q, proto::EventQueryReply*, Ctx*) {
  ASSIGN_OR_RETURN(uint64_t e, Event(q.event));
  return backend_->EventQuery(e);
}

Status Worker::Handle(const proto::EventElapsedTimeRequest& q, proto::EventElapsedTimeReply* r, Ctx*) {
  ASSIGN_OR_RETURN(uint64_t a, Event(q.start));
  ASSIGN_OR_RETURN(uint64_t b, Event(q.end));
  ASSIGN_OR_RETURN(r->ms, backend_->EventElapsedTime(a, b));
  return Status::Ok();
}

// --- modules and launches -------------------------------------------------------

Status Worker::Handle(const proto::ModuleLoadRequest& q, proto::ModuleLoadReply*, Ctx*) {
  if (q.module == 0 || modules_.count(q.module)) return Cu(CUDA_ERROR_INVALID_VALUE, "module id in use");
  ModuleCache cache(options_.module_cache_dir);
  std::string cached;
  std::string_view image = q.image;
  if (image.empty()) {
    auto got = cache.Get(q.hash);
    if (!got.ok()) return got.status();  // kNotFound: the guest resends with the bytes
    cached = std::move(got).value();
    image = cached;
  } else {
    RETURN_IF_ERROR(cache.Put(q.hash, image));
  }
  ASSIGN_OR_RETURN(uint64_t h, backend_->ModuleLoad(image));
  modules_[q.module] = h;
  return Status::Ok();
}

Status Worker::Handle(const proto::ModuleUnloadRequest& q, proto::ModuleUnloadReply*, Ctx*) {
  auto it = modules_.find(q.module);
  if (it == modules_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown module");
  Status st = backend_->ModuleUnload(it->second);
  modules_.erase(it);
  return st;
}

Status Worker::Handle(const proto::ModuleGetFunctionRequest& q, proto::ModuleGetFunctionReply* r, Ctx*) {
  auto m = modules_.find(q.module);
  if (m == modules_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown module");
  if (q.function == 0 || functions_.count(q.function)) return Cu(CUDA_ERROR_INVALID_VALUE, "function id in use");
  ASSIGN_OR_RETURN(uint64_t f, backend_->ModuleGetFunction(m->second, q.name));
  ASSIGN_OR_RETURN(std::vector<ParamInfo> params, backend_->FuncGetParamInfo(f));
  ASSIGN_OR_RETURN(r->attrs, backend_->FuncGetAttributes(f));
  for (const ParamInfo& p : params) {
    r->params.push_back(p.offset);
    r->params.push_back(p.size);
  }
  functions_[q.function] = f;
  return Status::Ok();
}

Status Worker::Handle(const proto::ModuleGetGlobalRequest& q, proto::ModuleGetGlobalReply* r, Ctx*) {
  auto m = modules_.find(q.module);
  if (m == modules_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown module");
  return backend_->ModuleGetGlobal(m->second, q.name, &r->dptr, &r->bytes);
}

Status Worker::Handle(const proto::FuncSetAttributeRequest& q, proto::FuncSetAttributeReply*, Ctx*) {
  auto f = functions_.find(q.function);
  if (f == functions_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown function");
  return backend_->FuncSetAttribute(f->second, q.attr, q.value);
}

Status Worker::Handle(const proto::LaunchKernelRequest& q, proto::LaunchKernelReply*, Ctx*) {
  auto f = functions_.find(q.function);
  if (f == functions_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown function");
  ASSIGN_OR_RETURN(uint64_t s, Stream(q.stream));
  LaunchConfig c;
  c.grid[0] = q.grid_x, c.grid[1] = q.grid_y, c.grid[2] = q.grid_z;
  c.block[0] = q.block_x, c.block[1] = q.block_y, c.block[2] = q.block_z;
  c.shared_bytes = q.shared_bytes;
  return backend_->LaunchKernel(f->second, c, s, q.params);
}

Status Worker::Handle(const proto::OccupancyMaxBlocksRequest& q, proto::OccupancyMaxBlocksReply* r, Ctx*) {
  auto f = functions_.find(q.function);
  if (f == functions_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown function");
  ASSIGN_OR_RETURN(r->blocks, backend_->OccupancyMaxBlocks(f->second, q.block_size, q.dynamic_smem, q.flags));
  return Status::Ok();
}

// --- the worker process ------------------------------------------------------------

int WorkerMain(int control_fd, const WorkerOptions& options) {
  // The daemon supervises us; if it dies, so do we (and our GPU memory goes).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() == 1) return 1;
  UnixChannel control{UniqueFd(control_fd)};
  auto backend = MakeBackend(options.backend);
  if (!backend.ok()) {
    std::fprintf(stderr, "smolvm worker: %s\n", backend.status().ToString().c_str());
    return 1;
  }
  Worker worker(std::move(backend).value(), options);
  Status st = worker.Start();
  if (!st.ok()) {
    std::fprintf(stderr, "smolvm worker %d: start failed: %s\n", ::getpid(), st.ToString().c_str());
    return 2;
  }
  uint64_t free0 = 0, total = 0;
  (void)worker.backend().MemGetInfo(&free0, &total);
  std::string out;
  proto::AppendRequest(&out, proto::WorkerReadyRequest{static_cast<uint32_t>(::getpid()), 0}, 0);
  if (!control.Write(out).ok()) return 3;

  proto::FrameHeader h;
  std::string payload;
  std::vector<UniqueFd> fds;
  st = control.ReadFrame(&h, &payload, &fds);
  if (!st.ok()) return 0;  // the daemon let us go unused
  proto::WorkerAdoptRequest adopt;
  proto::Decoder dec(payload);
  if (h.op != static_cast<uint16_t>(proto::Op::kWorkerAdopt) || !proto::Decode(dec, &adopt) ||
      fds.size() != 1) {
    std::fprintf(stderr, "smolvm worker %d: bad adopt message from the daemon\n", ::getpid());
    return 4;
  }
  auto guest = std::make_unique<UnixChannel>(std::move(fds[0]));
  st = worker.Serve(std::move(guest), adopt, &control);
  if (!st.ok())
    std::fprintf(stderr, "smolvm worker %d: session %llu ended: %s\n", ::getpid(),
                 static_cast<unsigned long long>(adopt.session_id), st.ToString().c_str());
  return 0;
}

}  // namespace smolvm
