#include "worker/cu_status.h"
#include "worker/worker.h"

#include "base/diagnostics.h"
#include "daemon/machine_budget.h"

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

#include "worker/control.h"
#include "base/hex.h"
#include "worker/module_cache.h"
#include "worker/worker_checks.h"
#include "worker/worker_host_guard.h"
#include "proto/frame.h"
#include "transport/unix_channel.h"

namespace smolvm {
namespace {

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
    case CUDA_ERROR_ASSERT:
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
    : link_(std::make_unique<GuestLink>()),
      backend_(std::move(backend)),
      options_(std::move(options)),
      module_cache_(options_.module_cache_dir, options_.module_cache_bytes) {}

Worker::~Worker() { ReleaseAll(); }

void Worker::ReleaseAll() {
  // In the primary context: what follows is its (contexts the guest created
  // die with the backend, CudaBackend::~CudaBackend).
  if (contexts_.in_created()) (void)backend_->CtxSelect(0);
  // Graphs first, once nothing runs: their executables may use host-node
  // records and graph memory that go with them.
  if (graphs_ || !capture_calls_.empty()) {
    (void)backend_->CtxSynchronize();
    graphs_.reset();
    capture_calls_.clear();
  }
  // Texture and surface objects, then arrays, once nothing reads them.
  if (arrays_) {
    (void)backend_->CtxSynchronize();
    arrays_.reset();
  }
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
  link_->set_mirrors(nullptr);
  mirrors_.reset();  // its events, while the context lives
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
  mirrors_ = std::make_unique<HostMirrors>(backend_.get());
  link_->set_mirrors(mirrors_.get());
  return Status::Ok();
}

Status Worker::Serve(std::unique_ptr<Channel> guest, const proto::WorkerAdoptRequest& adopt,
                     Channel* control) {
  session_id_ = adopt.session_id;
  control_ = control;
  link_->Attach(std::move(guest));
  GuestLink& link = *link_;
  struct CloseLink {
    GuestLink& l;
    ~CloseLink() { l.Close(); }  // host functions still queued on the device return at once
  } close_link{link};
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
  // The daemon set it for an endpoint that cannot pass descriptors (a gVisor
  // machine's), or the guest asked for it.
  hello.flags = adopt.flags & proto::kHelloNoDescriptors;
  proto::AppendReply(&out, proto::HelloRequest::kNumber, adopt.hello_seq, 0, hello);
  RETURN_IF_ERROR(link.Write(out));
  SendStats();  // a clone starts with the golden's chunks

  proto::FrameHeader h;
  std::string payload;
  std::vector<UniqueFd> fds;
  while (!goodbye_) {
    if (control_ && control_->HasBufferedFrame()) {
      RETURN_IF_ERROR(OnControl(link));
      continue;
    }
    // A guest in a call loop sends its next request within microseconds:
    // catch it spinning rather than through a poll wakeup.
    if (!link.HasBufferedFrame() && !SpinUntilReadable(link.fd(), spin_us_)) {
      struct pollfd p[2] = {{link.fd(), POLLIN, 0}, {control_ ? control_->fd() : -1, POLLIN, 0}};
      int n = ::poll(p, control_ ? 2 : 1, -1);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoStatus("poll", errno);
      if (control_ && p[1].revents) {
        Status st = OnControl(link);
        if (!st.ok()) return st;
        continue;
      }
    }
    if (!link.ReadyToRead()) continue;  // a host function's wait took the frame
    Status st = link.ReadFrame(&h, &payload, &fds);
    if (!st.ok()) {
      if (st.code() == static_cast<int32_t>(Code::kUnavailable)) return Status::Ok();
      // A broken frame leaves the stream unsynchronised: say why, then end.
      out.clear();
      proto::AppendErrorReply(&out, h.op, h.seq, st.code(), deferred_, st.message());
      (void)link.Write(out);
      return st;
    }
    RETURN_IF_ERROR(ServeFrame(link, h, payload, &fds));
    if (!(h.flags & proto::kFlagAsync) && ops_.Due(std::chrono::steady_clock::now())) SendOps();
  }
  return Status::Ok();
}

Status Worker::ServeFrame(Channel& guest, const proto::FrameHeader& h, std::string_view payload,
                          std::vector<UniqueFd>* fds) {
  if (contexts_.in_created()) {
    // An op the current created context cannot take: refused by name.
    if (Status st = CheckContext(h.op); !st.ok()) {
      ops_.Add(h.op);
      if (h.flags & proto::kFlagAsync) {
        if (deferred_ == 0) deferred_ = st.code();
        return Status::Ok();
      }
      std::string out;
      proto::AppendErrorReply(&out, h.op, h.seq, st.code(), deferred_, st.message());
      deferred_ = 0;
      return WriteReply(guest, out);
    }
  }
  if (h.op == proto::ForkpointWaitRequest::kNumber && !(h.flags & proto::kFlagAsync)) {
    // Answered later, when the daemon orders a fork or a release.
    RETURN_IF_ERROR(backend_->CtxSynchronize());
    forkpoint_waiting_ = true;
    forkpoint_seq_ = h.seq;
    if (fork_orders_.empty() && control_) {
      std::string note;
      proto::AppendRequest(&note, proto::WorkerStateRequest{session_id_, "forkpoint"}, 0);
      (void)control_->Write(note);
      if (ahead_epoch_ != epoch_) SendAhead();
      SendStats();  // with what its clones would copy in use
    }
    return AnswerForkpoint(guest);
  }
  ReplayGraphsIfDue(h.op);
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
    callback_status_.store(sticky_, std::memory_order_relaxed);
    ReportFault();
  }
  LogForGraphs(h, payload, o.status);
  if (o.replied) {
    deferred_ = 0;
    if (device_output_ != nullptr) {
      std::string text;
      AppendDeviceOutput(&text);
      if (!text.empty()) out.insert(0, text);
    }
    return WriteReply(guest, out, ctx.fds_out);
  }
  if (!o.status.ok() && deferred_ == 0) deferred_ = o.status.code();
  return Status::Ok();
}

void Worker::AppendDeviceOutput(std::string* out) {
  if (device_output_ == nullptr) return;
  constexpr size_t kFrameText = 1u << 20;
  for (DeviceOutput::Piece& p : device_output_->Take()) {
    for (size_t off = 0; off < p.text.size(); off += kFrameText) {
      proto::DeviceOutputRequest m;
      m.fd = static_cast<uint32_t>(p.fd);
      m.text = std::string_view(p.text).substr(off, kFrameText);
      proto::AppendRequest(out, m, 0);
    }
  }
}

Status Worker::WriteReply(Channel& guest, const std::string& reply, std::span<const int> fds) {
  if (mirrors_ == nullptr || mirrors_->pending() == 0) return guest.Write(reply, fds);
  // The landings first, each frame its own write: a descriptor rides with
  // the first byte written, which must be the reply's.
  RETURN_IF_ERROR(mirrors_->TakeFinished([&](const std::string& frame) { return guest.Write(frame); }));
  return guest.Write(reply, fds);
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
  const char* what = sticky_ == CUDA_ERROR_ASSERT ? "a device-side assert failed"
                     : sticky_ == CUDA_ERROR_ILLEGAL_ADDRESS ? "an illegal memory access was encountered"
                                                             : "a kernel fault poisoned the context";
  std::fprintf(Diagnostics(), "smolvm worker %d: session %llu: %s (CUresult %d)%s%s\n", ::getpid(),
               static_cast<unsigned long long>(session_id_), what, sticky_,
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
  // Counted only while its memory holds still (a golden at its forkpoint).
  s.private_live_bytes = forkpoint_waiting_ ? memory_->PrivateSummary().live_bytes : ~0ull;
  s.created_contexts = contexts_.size();
  if (const auto* b = dynamic_cast<const BudgetedBackend*>(backend_.get())) {
    s.module_bytes = b->module_bytes();
    s.limit_bytes = b->limit_bytes();
    s.workspace_bytes = b->workspace_bytes();
  }
  std::string out;
  proto::AppendRequest(&out, s, 0);
  (void)control_->Write(out);
}

void Worker::SendChargedStats() {
  if (dynamic_cast<const BudgetedBackend*>(backend_.get()) != nullptr) SendStats();
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

}  // namespace smolvm
