#include "daemon/worker.h"

#include <cuda.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <set>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "daemon/control.h"
#include "base/hex.h"
#include "daemon/module_cache.h"
#include "daemon/worker_checks.h"
#include "daemon/worker_host_guard.h"
#include "proto/frame.h"
#include "transport/unix_channel.h"

namespace smolvm {
namespace {

Status Cu(CUresult r, const std::string& what) { return Status(static_cast<int32_t>(r), what); }

// Errors after which a CUDA context is unusable (CUDA's sticky errors).
bool IsStickyCudaError(int32_t code) {
  switch (code) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
      return true;
    default:
      return false;
  }
}

// False for the ops that cannot change device memory or the session's
// chunks (queries, reads, synchronization): the others start a new epoch.
bool MayWriteDeviceMemory(uint16_t op) {
  using proto::Op;
  switch (static_cast<Op>(op)) {
    case Op::kPing:
    case Op::kDeviceGetCount:
    case Op::kDeviceGetInfo:
    case Op::kMemGetInfo:
    case Op::kCtxSynchronize:
    case Op::kCtxGetLimit:
    case Op::kStreamPriorityRange:
    case Op::kMemcpyDtoH:
    case Op::kMemcpyDtoHHost:
    case Op::kStreamSynchronize:
    case Op::kStreamQuery:
    case Op::kEventSynchronize:
    case Op::kEventQuery:
    case Op::kEventElapsedTime:
    case Op::kOccupancyMaxBlocks:
    case Op::kBlasGetVersion:
    case Op::kLtHeuristic:
    case Op::kNvmlDevice:
    case Op::kNvmlMemory:
    case Op::kNvmlUtilization:
      return false;
    default:
      return true;
  }
}


}  // namespace

Worker::Worker(std::unique_ptr<GpuBackend> backend, WorkerOptions options)
    : backend_(std::move(backend)),
      options_(std::move(options)),
      module_cache_(options_.module_cache_dir, options_.module_cache_bytes) {}

Worker::~Worker() { ReleaseAll(); }

void Worker::ReleaseAll() {
  // cuBLAS handles first: their workspaces live in the memory released next.
  if (blas_) {
    (void)backend_->CtxSynchronize();
    for (auto& [id, h] : blas_handles_) (void)blas_->Destroy(h.handle);
    for (auto& [id, h] : lt_handles_) (void)blas_->LtDestroy(h);
  }
  blas_handles_.clear();
  lt_handles_.clear();
  blas_.reset();
  DnnRelease();
  preload_.reset();
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
    InstallHostRangeGuard(options_.host_base, options_.host_bytes);
  }
  RETURN_IF_ERROR(backend_->Init(0));
  RETURN_IF_ERROR(backend_->ReserveArena(options_.arena_base, options_.arena_bytes));
  memory_ = std::make_unique<DeviceMemory>(backend_.get(), options_.arena_base, options_.arena_bytes,
                                           options_.memory_limit_bytes);
  preload_ = std::make_unique<ChunkPreload>(backend_.get());
  return Status::Ok();
}

Status Worker::Serve(std::unique_ptr<Channel> guest, const proto::WorkerAdoptRequest& adopt,
                     Channel* control) {
  session_id_ = adopt.session_id;
  control_ = control;
  struct FlushOps {
    Worker* w;
    ~FlushOps() { w->SendOps(); }
  } flush_ops{this};  // the final counts, however the session ends
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
  SendStats();  // a clone starts with the golden's chunks

  proto::FrameHeader h;
  std::string payload;
  std::vector<UniqueFd> fds;
  while (!goodbye_) {
    if (control_ && control_->HasBufferedFrame()) {
      RETURN_IF_ERROR(OnControl(*guest));
      continue;
    }
    // A guest in a call loop sends its next request within microseconds:
    // catch it spinning rather than through a poll wakeup.
    if (!guest->HasBufferedFrame() && !SpinUntilReadable(guest->fd(), spin_us_)) {
      struct pollfd p[2] = {{guest->fd(), POLLIN, 0}, {control_ ? control_->fd() : -1, POLLIN, 0}};
      int n = ::poll(p, control_ ? 2 : 1, -1);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoStatus("poll", errno);
      if (control_ && p[1].revents) {
        Status st = OnControl(*guest);
        if (!st.ok()) return st;
        continue;
      }
    }
    Status st = guest->ReadFrame(&h, &payload, &fds);
    if (!st.ok()) {
      if (st.code() == static_cast<int32_t>(Code::kUnavailable)) return Status::Ok();
      // A broken frame leaves the stream unsynchronised: say why, then end.
      out.clear();
      proto::AppendErrorReply(&out, h.op, h.seq, st.code(), deferred_, st.message());
      (void)guest->Write(out);
      return st;
    }
    RETURN_IF_ERROR(ServeFrame(*guest, h, payload, &fds));
    if (!(h.flags & proto::kFlagAsync) && ops_.Due(std::chrono::steady_clock::now())) SendOps();
  }
  return Status::Ok();
}

Status Worker::ServeFrame(Channel& guest, const proto::FrameHeader& h, std::string_view payload,
                          std::vector<UniqueFd>* fds) {
  if (h.op == static_cast<uint16_t>(proto::Op::kForkpointWait) && !(h.flags & proto::kFlagAsync)) {
    // Answered later, when the daemon orders a fork or a release.
    RETURN_IF_ERROR(backend_->CtxSynchronize());
    forkpoint_waiting_ = true;
    forkpoint_seq_ = h.seq;
    if (fork_orders_.empty() && control_) {
      std::string note;
      proto::AppendRequest(&note, proto::WorkerStateRequest{session_id_, "forkpoint"}, 0);
      (void)control_->Write(note);
      if (ahead_epoch_ != epoch_) SendAhead();
    }
    return AnswerForkpoint(guest);
  }
  if (MayWriteDeviceMemory(h.op)) ++epoch_;
  ops_.Add(h.op);
  std::string out;
  proto::CallContext ctx;
  ctx.header = &h;
  ctx.fds_in = fds;
  ctx.deferred = deferred_;
  proto::DispatchOutcome o;
  if (sticky_ != 0 && proto::IsKnownOp(h.op)) {
    o.status = Status(sticky_, "the context was poisoned by an earlier fault");
    if (!(h.flags & proto::kFlagAsync)) {
      proto::AppendErrorReply(&out, h.op, h.seq, sticky_, ctx.deferred, o.status.message());
      o.replied = true;
    }
  } else {
    o = proto::Dispatch(*this, h, payload, &ctx, &out);
  }
  if (IsStickyCudaError(o.status.code()) && sticky_ == 0) {
    sticky_ = o.status.code();
    ReportFault();
  }
  if (o.replied) {
    deferred_ = 0;
    return guest.Write(out, ctx.fds_out);
  }
  if (!o.status.ok() && deferred_ == 0) deferred_ = o.status.code();
  return Status::Ok();
}

Status Worker::AnswerForkpoint(Channel& guest) {
  if (!forkpoint_waiting_ || fork_orders_.empty()) return Status::Ok();
  proto::ForkGoRequest go = fork_orders_.front();
  fork_orders_.erase(fork_orders_.begin());
  forkpoint_waiting_ = false;
  std::string reply;
  proto::AppendReply(&reply, static_cast<uint16_t>(proto::Op::kForkpointWait), forkpoint_seq_, deferred_,
                     proto::ForkpointWaitReply{go.clone_index, go.token});
  deferred_ = 0;
  RETURN_IF_ERROR(guest.Write(reply));
  if (go.clone_index < 0) ahead_epoch_ = 0;  // the daemon lets go of the ahead export on release
  if (go.clone_index < 0 && control_) {
    std::string note;
    proto::AppendRequest(&note, proto::WorkerStateRequest{session_id_, "running"}, 0);
    (void)control_->Write(note);
  }
  return Status::Ok();
}

void Worker::ReportFault() {
  if (fault_reported_) return;
  fault_reported_ = true;
  std::string where;
  for (const RecentLaunch& l : recent_launches_) {
    auto f = functions_.find(l.function);
    for (size_t off = 0; off + 8 <= l.params.size(); off += 8) {
      uint64_t v;
      std::memcpy(&v, l.params.data() + off, 8);
      for (uint64_t chunk : memory_->SharedChunksIn(v, 1)) {
        char b[96];
        std::snprintf(b, sizeof b, " %s->0x%llx", f == functions_.end() ? "?" : f->second.name.c_str(),
                      static_cast<unsigned long long>(chunk));
        where += b;
      }
    }
  }
  std::fprintf(stderr, "smolvm worker %d: session %llu: an illegal memory access was encountered%s%s\n",
               ::getpid(), static_cast<unsigned long long>(session_id_),
               where.empty() ? "" : "; recent launches pointed into shared (read-only) chunks:",
               where.c_str());
}

void Worker::SendStats() {
  if (!control_) return;
  proto::WorkerStatsRequest s;
  s.session_id = session_id_;
  for (const auto& [addr, c] : memory_->chunks()) {
    if (c.shared) {
      ++s.shared_chunks;
      s.shared_bytes += c.bytes;
    } else {
      ++s.private_chunks;
      s.private_bytes += c.bytes;
    }
  }
  s.allocations = memory_->allocation_count();
  std::string out;
  proto::AppendRequest(&out, s, 0);
  (void)control_->Write(out);
}

void Worker::SendOps() {
  if (!control_) return;
  std::string out;
  proto::AppendRequest(&out, ops_.Take(session_id_, std::chrono::steady_clock::now()), 0);
  (void)control_->Write(out);
}

Result<uint64_t> Worker::Stream(uint64_t guest_id) const {
  if (guest_id == 0 || guest_id == 1) return kDefaultStream;  // NULL, cudaStreamLegacy
  if (guest_id == 2) return uint64_t{2};  // per-thread default stream
  auto it = streams_.find(guest_id);
  if (it == streams_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown stream");
  return it->second.handle;
}

Result<uint64_t> Worker::Event(uint64_t guest_id) const {
  auto it = events_.find(guest_id);
  if (it == events_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown event");
  return it->second.handle;
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

Status Worker::Handle(const proto::PingRequest&, proto::PingReply*, Ctx*) {
  if (options_.test_syscall) ::syscall(options_.test_syscall, 0, 0, 0);
  return Status::Ok();
}

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

// --- modules and launches -------------------------------------------------------

Status Worker::Handle(const proto::ModuleLoadRequest& q, proto::ModuleLoadReply*, Ctx*) {
  if (q.module == 0 || modules_.count(q.module)) return Cu(CUDA_ERROR_INVALID_VALUE, "module id in use");
  std::string cached;
  std::string_view image = q.image;
  if (image.empty()) {
    auto got = module_cache_.Get(q.hash);
    if (!got.ok()) return got.status();  // kNotFound: the guest resends with the bytes
    cached = std::move(got).value();
    image = cached;
  } else {
    RETURN_IF_ERROR(module_cache_.Put(q.hash, image));
  }
  ASSIGN_OR_RETURN(uint64_t h, backend_->ModuleLoad(image));
  modules_[q.module] = ModuleInfo{h, std::string(q.hash)};
  return Status::Ok();
}

Status Worker::Handle(const proto::ModuleUnloadRequest& q, proto::ModuleUnloadReply*, Ctx*) {
  auto it = modules_.find(q.module);
  if (it == modules_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown module");
  Status st = backend_->ModuleUnload(it->second.handle);
  modules_.erase(it);
  return st;
}

Status Worker::Handle(const proto::ModuleGetFunctionRequest& q, proto::ModuleGetFunctionReply* r, Ctx*) {
  auto m = modules_.find(q.module);
  if (m == modules_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown module");
  if (q.function == 0 || functions_.count(q.function)) return Cu(CUDA_ERROR_INVALID_VALUE, "function id in use");
  ASSIGN_OR_RETURN(uint64_t f, backend_->ModuleGetFunction(m->second.handle, q.name));
  ASSIGN_OR_RETURN(std::vector<ParamInfo> params, backend_->FuncGetParamInfo(f));
  ASSIGN_OR_RETURN(r->attrs, backend_->FuncGetAttributes(f));
  int64_t need = 0;
  for (const ParamInfo& p : params) {
    r->params.push_back(p.offset);
    r->params.push_back(p.size);
    need = std::max<int64_t>(need, int64_t{p.offset} + p.size);
  }
  functions_[q.function] = FunctionInfo{f, q.module, q.name, need};
  return Status::Ok();
}

Status Worker::Handle(const proto::ModuleGetGlobalRequest& q, proto::ModuleGetGlobalReply* r, Ctx*) {
  auto m = modules_.find(q.module);
  if (m == modules_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown module");
  return backend_->ModuleGetGlobal(m->second.handle, q.name, &r->dptr, &r->bytes);
}

Status Worker::Handle(const proto::FuncSetAttributeRequest& q, proto::FuncSetAttributeReply*, Ctx*) {
  auto f = functions_.find(q.function);
  if (f == functions_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown function");
  return backend_->FuncSetAttribute(f->second.handle, q.attr, q.value);
}

Status Worker::Handle(const proto::LaunchKernelRequest& q, proto::LaunchKernelReply*, Ctx*) {
  auto f = functions_.find(q.function);
  if (f == functions_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown function");
  ASSIGN_OR_RETURN(uint64_t s, Stream(q.stream));
  // The driver reads the kernel's whole parameter layout from the buffer.
  if (f->second.param_bytes < 0) {
    ASSIGN_OR_RETURN(std::vector<ParamInfo> params, backend_->FuncGetParamInfo(f->second.handle));
    f->second.param_bytes = 0;
    for (const ParamInfo& p : params)
      f->second.param_bytes = std::max<int64_t>(f->second.param_bytes, int64_t{p.offset} + p.size);
  }
  if (static_cast<int64_t>(q.params.size()) < f->second.param_bytes)
    return Cu(CUDA_ERROR_INVALID_VALUE, "kernel parameter buffer is shorter than the kernel's parameters");
  LaunchConfig c;
  c.grid[0] = q.grid_x, c.grid[1] = q.grid_y, c.grid[2] = q.grid_z;
  c.block[0] = q.block_x, c.block[1] = q.block_y, c.block[2] = q.block_z;
  c.shared_bytes = q.shared_bytes;
  // Kept for fault reports: which shared chunks a faulting launch pointed into.
  constexpr size_t kRecent = 8;
  if (recent_launches_.size() < kRecent) recent_launches_.resize(kRecent);
  RecentLaunch& slot = recent_launches_[recent_next_++ % kRecent];
  slot.function = q.function;
  slot.params.assign(q.params.data(), q.params.size());
  return backend_->LaunchKernel(f->second.handle, c, s, q.params);
}

Status Worker::Handle(const proto::OccupancyMaxBlocksRequest& q, proto::OccupancyMaxBlocksReply* r, Ctx*) {
  auto f = functions_.find(q.function);
  if (f == functions_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown function");
  ASSIGN_OR_RETURN(r->blocks, backend_->OccupancyMaxBlocks(f->second.handle, q.block_size, q.dynamic_smem, q.flags));
  return Status::Ok();
}

Status Worker::Handle(const proto::MarkFrozenRequest& q, proto::MarkFrozenReply*, Ctx*) {
  return memory_->MarkFrozen(q.dptr, q.bytes);
}

// --- fork ---------------------------------------------------------------------

namespace {


}  // namespace

Status Worker::OnControl(Channel& guest) {
  proto::FrameHeader h;
  std::string payload;
  std::vector<UniqueFd> fds;
  Status st = control_->ReadFrame(&h, &payload, &fds);
  if (!st.ok()) {
    // The daemon is gone; PR_SET_PDEATHSIG ends us too, but do not spin.
    control_ = nullptr;
    return Status::Ok();
  }
  proto::Decoder dec(payload);
  if (h.op == static_cast<uint16_t>(proto::Op::kForkPrepare)) {
    proto::ForkPrepareRequest r;
    if (!proto::Decode(dec, &r)) return Malformed("ForkPrepare does not decode");
    return PrepareFork(r);
  }
  if (h.op == static_cast<uint16_t>(proto::Op::kForkGo)) {
    proto::ForkGoRequest r;
    if (!proto::Decode(dec, &r)) return Malformed("ForkGo does not decode");
    fork_orders_.push_back(r);
    return AnswerForkpoint(guest);
  }
  return Malformed("unexpected control op " + std::to_string(h.op));
}

Result<std::vector<uint64_t>> Worker::ShareCandidates(const std::string& share) {
  std::vector<uint64_t> out;
  if (share == "on") {
    for (const auto& [addr, c] : memory_->chunks())
      if (memory_->ChunkIsFrozen(addr)) out.push_back(addr);
    return out;
  }
  // auto: verified against the device once per epoch (the golden is
  // synchronized and blocked at its forkpoint, so its memory holds still).
  if (auto_epoch_ != epoch_) {
    RETURN_IF_ERROR(backend_->CtxSynchronize());
    ASSIGN_OR_RETURN(auto_chunks_, memory_->AutoShareChunks());
    auto_epoch_ = epoch_;
  }
  return auto_chunks_;
}

void Worker::SendAhead() {
  auto t0 = std::chrono::steady_clock::now();
  // What a fork will likely share: the frozen chunks, or when nothing is
  // marked frozen, what --share auto would pick.
  auto frozen = ShareCandidates("on");
  std::vector<uint64_t> candidates = frozen.ok() ? *frozen : std::vector<uint64_t>{};
  if (candidates.empty()) {
    auto guessed = ShareCandidates("auto");
    if (guessed.ok()) {
      candidates = *guessed;
    } else {
      std::fprintf(stderr, "smolvm worker %d: --share auto check failed: %s\n", ::getpid(),
                   guessed.status().ToString().c_str());
    }
  }
  std::set<uint64_t> pick(candidates.begin(), candidates.end());
  std::vector<UniqueFd> owned;
  std::vector<int> fds;
  nlohmann::json chunks = nlohmann::json::array();
  for (const auto& [addr, c] : memory_->chunks()) {
    auto fd = backend_->ChunkExport(c.handle);
    if (!fd.ok()) {
      std::fprintf(stderr, "smolvm worker %d: ahead export failed: %s\n", ::getpid(), fd.status().ToString().c_str());
      return;  // forks export at fork time instead
    }
    fds.push_back(fd->get());
    owned.push_back(std::move(fd).value());
    chunks.push_back({addr, c.bytes, c.id, pick.count(addr) ? 1 : 0});
  }
  std::string out;
  proto::AppendRequest(&out, proto::ForkAheadRequest{session_id_, epoch_, chunks.dump(), static_cast<uint32_t>(fds.size())}, 0);
  if (!control_->Write(out).ok() || !SendChunkFds(*control_, fds).ok()) return;
  ahead_epoch_ = epoch_;
  std::fprintf(stderr, "smolvm worker %d: fork ahead: %zu chunks exported, %zu to preload, %.1f ms\n", ::getpid(),
               fds.size(), pick.size(),
               std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
}

Status Worker::PrepareFork(const proto::ForkPrepareRequest& req) {
  proto::ForkManifestRequest m;
  auto fail = [&](const Status& why) {
    m.result = why.code() ? why.code() : static_cast<int32_t>(Code::kInternal);
    m.message = why.message();
    std::string out;
    proto::AppendRequest(&out, m, 0);
    return control_->Write(out);
  };
  if (!forkpoint_waiting_) return fail(Status(Code::kInvalidArgument, "the session is not at its forkpoint"));
  if (VmmInUse())
    return fail(Status(static_cast<int32_t>(CUDA_ERROR_NOT_SUPPORTED),
                       "a fork of a session holding cuMemMap mappings (expandable segments) is not supported yet"));
  if (req.share != "on" && req.share != "off" && req.share != "auto")
    return fail(InvalidArgument("share must be on, off or auto"));
  auto t0 = std::chrono::steady_clock::now();
  auto ms_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
  };
  Status st = backend_->CtxSynchronize();
  if (!st.ok()) return fail(st);
  bool share = req.share != "off";
  if (share) {
    auto picked = ShareCandidates(req.share);
    if (!picked.ok()) return fail(picked.status());
    if (picked->empty() && req.share == "on") return fail(InvalidArgument("no memory marked frozen; use --share auto"));
    if (picked->empty())
      return fail(InvalidArgument(
          "--share auto found no chunk that still holds what host-to-device copies wrote (weights computed on the "
          "device are not found); mark them with smolvmMarkFrozen and use --share on, or use --share off"));
    // Shared memory is read-only for everyone from now on, the golden too.
    st = memory_->ShareChunks(*picked);
    if (!st.ok()) return fail(st);
  }
  double share_ms = ms_since(t0);
  auto t1 = std::chrono::steady_clock::now();
  std::vector<UniqueFd> owned;
  std::vector<int> fds;
  const bool reuse_ahead = ahead_epoch_ == epoch_;
  for (const auto& [addr, c] : memory_->chunks()) {
    if (!reuse_ahead) {
      auto fd = backend_->ChunkExport(c.handle);
      if (!fd.ok()) return fail(fd.status());
      fds.push_back(fd->get());
      owned.push_back(std::move(fd).value());
    }
    if (share && c.shared) {
      m.shared_bytes += c.bytes;
    } else {
      m.private_bytes += c.bytes;
    }
  }
  // The chunks are the ones the ForkAhead of this epoch exported, in the
  // same order: the daemon still holds their descriptors.
  if (reuse_ahead) m.ahead_generation = ahead_epoch_;
  nlohmann::json j;
  j["layout"] = memory_->ExportLayout();
  if (!share) {
    // The control arm: nothing is shared, whatever was shared before.
    for (auto& c : j["layout"]["chunks"]) c[2] = 0;
  }
  j["modules"] = nlohmann::json::array();
  for (const auto& [id, mod] : modules_)
    j["modules"].push_back({id, HexOfBytes(mod.hash), HexOfBytes(module_cache_.Sha256Of(mod.hash))});
  j["functions"] = nlohmann::json::array();
  for (const auto& [id, f] : functions_) j["functions"].push_back({id, f.module, f.name});
  j["streams"] = nlohmann::json::array();
  for (const auto& [id, si] : streams_) j["streams"].push_back({id, si.flags, si.priority});
  j["events"] = nlohmann::json::array();
  for (const auto& [id, ei] : events_) j["events"].push_back({id, ei.flags});
  j["blas"] = nlohmann::json::array();
  for (const auto& [id, b] : blas_handles_) {
    nlohmann::json modes = nlohmann::json::array();
    for (const auto& [what, value] : b.modes) modes.push_back({what, value});
    j["blas"].push_back({id, b.stream, modes, b.workspace, b.workspace_bytes});
  }
  j["lt"] = nlohmann::json::array();
  for (const auto& [id, h] : lt_handles_) j["lt"].push_back(id);
  j["dnn"] = DnnManifest();
  uint64_t total = 0;
  (void)backend_->DeviceMemGetInfo(&m.free_bytes, &total);
  m.manifest = j.dump();
  m.num_chunks = static_cast<uint32_t>(fds.size());
  std::fprintf(stderr, "smolvm worker %d: fork prepare: sync+share %.1f ms, %s %.1f ms\n", ::getpid(), share_ms,
               reuse_ahead ? "descriptors exported ahead" : ("export " + std::to_string(fds.size()) + " chunks").c_str(),
               ms_since(t1));
  std::string out;
  proto::AppendRequest(&out, m, 0);
  RETURN_IF_ERROR(control_->Write(out));
  RETURN_IF_ERROR(SendChunkFds(*control_, fds));
  SendStats();  // its shared chunks changed
  return Status::Ok();
}

Result<proto::CloneBuiltRequest> Worker::BuildClone(const proto::CloneBuildRequest& req,
                                                    const std::vector<UniqueFd>& chunk_fds) {
  auto t0 = std::chrono::steady_clock::now();
  nlohmann::json j = nlohmann::json::parse(req.manifest, nullptr, false);
  if (j.is_discarded()) return Malformed("clone manifest is not JSON");
  std::vector<int> fds;
  for (const auto& fd : chunk_fds) fds.push_back(fd.get());
  double layout_ms = 0;
  uint32_t preloaded = 0;
  try {
    // The golden's chunks this worker imported ahead, if they are that golden's.
    std::map<uint64_t, MappedImport> ahead;
    if (preload_->golden() == req.golden && req.golden != 0) {
      ahead = preload_->Take();
      for (const auto& c : j.at("layout").at("chunks")) {
        auto it = ahead.find(c.at(0).get<uint64_t>());
        preloaded += it != ahead.end() && c.at(2) != 0 && c.size() > 3 && it->second.id == c.at(3).get<uint64_t>();
      }
    } else {
      preload_->Drop();
    }
    RETURN_IF_ERROR(memory_->ImportLayout(j.at("layout"), fds, std::move(ahead)));
    layout_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    for (const auto& m : j.at("modules")) {
      uint64_t id = m.at(0);
      std::string hash = BytesOfHex(m.at(1).get<std::string>());
      // The golden's index entry: the clone is the same tenant.
      RETURN_IF_ERROR(module_cache_.Remember(hash, BytesOfHex(m.at(2).get<std::string>())));
      ASSIGN_OR_RETURN(std::string image, module_cache_.Get(hash));
      ASSIGN_OR_RETURN(uint64_t h, backend_->ModuleLoad(image));
      modules_[id] = ModuleInfo{h, hash};
    }
    for (const auto& f : j.at("functions")) {
      uint64_t id = f.at(0), module = f.at(1);
      std::string name = f.at(2);
      auto mod = modules_.find(module);
      if (mod == modules_.end()) return Malformed("clone manifest names an unknown module");
      ASSIGN_OR_RETURN(uint64_t h, backend_->ModuleGetFunction(mod->second.handle, name));
      functions_[id] = FunctionInfo{h, module, name};
    }
    for (const auto& st : j.at("streams")) {
      uint64_t id = st.at(0);
      uint32_t flags = st.at(1);
      int32_t prio = st.at(2);
      ASSIGN_OR_RETURN(uint64_t h, backend_->StreamCreate(flags, prio));
      streams_[id] = StreamInfo{h, flags, prio};
    }
    for (const auto& ev : j.at("events")) {
      uint64_t id = ev.at(0);
      uint32_t flags = ev.at(1);
      ASSIGN_OR_RETURN(uint64_t h, backend_->EventCreate(flags));
      events_[id] = EventInfo{h, flags};
    }
    // cuBLAS and cuBLASLt handles under the same guest ids, with their stream,
    // modes and workspace (same addresses: the workspace is golden memory).
    if (!j.value("blas", nlohmann::json::array()).empty() || !j.value("lt", nlohmann::json::array()).empty()) {
      ASSIGN_OR_RETURN(BlasBackend * blas, Blas());
      for (const auto& b : j.value("blas", nlohmann::json::array())) {
        BlasHandleInfo info;
        uint64_t id = b.at(0);
        info.stream = b.at(1);
        ASSIGN_OR_RETURN(info.handle, blas->Create());
        blas_handles_[id] = info;
        BlasHandleInfo& rec = blas_handles_[id];
        if (info.stream != 0) {
          ASSIGN_OR_RETURN(uint64_t s, Stream(info.stream));
          RETURN_IF_ERROR(blas->SetStream(rec.handle, s));
        }
        for (const auto& m : b.at(2)) {
          uint32_t what = m.at(0);
          int32_t value = m.at(1);
          RETURN_IF_ERROR(blas->SetMode(rec.handle, static_cast<BlasMode>(what), value));
          rec.modes[what] = value;
        }
        rec.workspace = b.at(3);
        rec.workspace_bytes = b.at(4);
        if (rec.workspace_bytes) RETURN_IF_ERROR(blas->SetWorkspace(rec.handle, rec.workspace, rec.workspace_bytes));
      }
      for (const auto& l : j.value("lt", nlohmann::json::array())) {
        ASSIGN_OR_RETURN(uint64_t h, blas->LtCreate());
        lt_handles_[l.get<uint64_t>()] = h;
      }
    }
    // cuDNN handles and finalized descriptors (plans too) under the same ids.
    if (j.contains("dnn")) RETURN_IF_ERROR(DnnRebuild(j.at("dnn")));
  } catch (const nlohmann::json::exception& e) {
    return Malformed(std::string("clone manifest: ") + e.what());
  }
  proto::CloneBuiltRequest built;
  for (const auto& [addr, c] : memory_->chunks()) {
    if (c.shared) {
      ++built.shared_chunks;
      built.shared_bytes += c.bytes;
    } else {
      ++built.private_chunks;
      built.private_bytes += c.bytes;
    }
  }
  built.ms = std::chrono::duration<float, std::milli>(std::chrono::steady_clock::now() - t0).count();
  built.preloaded = preloaded;
  std::fprintf(stderr, "smolvm worker %d: clone build: memory %.1f ms (%u shared chunks preloaded), total %.1f ms\n",
               ::getpid(), layout_ms, preloaded, static_cast<double>(built.ms));
  return built;
}

proto::PreloadDoneRequest Worker::Preload(const proto::ForkPreloadRequest& req, const std::vector<UniqueFd>& chunk_fds) {
  auto t0 = std::chrono::steady_clock::now();
  proto::PreloadDoneRequest done;
  done.golden = req.golden;
  done.generation = req.generation;
  std::vector<PreloadChunk> want;
  nlohmann::json j = nlohmann::json::parse(req.chunks, nullptr, false);
  Status st;
  try {
    if (j.is_discarded() || !j.is_array()) throw std::invalid_argument("not a JSON array");
    for (const auto& c : j) want.push_back({c.at(0), c.at(1), c.at(2)});
  } catch (const std::exception& e) {
    st = Malformed(std::string("preload chunk list: ") + e.what());
  }
  std::vector<int> fds;
  for (const auto& fd : chunk_fds) fds.push_back(fd.get());
  if (st.ok()) st = preload_->Update(req.golden, want, fds);
  if (!st.ok()) {
    done.result = st.code() ? st.code() : static_cast<int32_t>(Code::kInternal);
    done.message = st.message();
  }
  done.chunks = static_cast<uint32_t>(preload_->size());
  done.ms = std::chrono::duration<float, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return done;
}

}  // namespace smolvm
