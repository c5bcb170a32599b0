// The worker's cuBLAS, cuBLASLt and NVML handlers (ops 70-119). cuBLAS runs
// through the BlasBackend on the session's context and streams; NVML is
// answered for the session from the GpuBackend and the session's memory.
#include <cublas_api.h>
#include <cuda.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "base/diagnostics.h"
#include "worker/context_size.h"
#include "worker/library_charges.h"
#include "worker/nvml_text.h"
#include "worker/worker.h"
#include "worker/worker_checks.h"
#include "proto/lib_status.h"

namespace smolvm {
namespace {

Status BlasNotInitialized(const std::string& what) { return BlasError(CUBLAS_STATUS_NOT_INITIALIZED, what); }
Status BlasInvalidValue(const std::string& what) { return BlasError(CUBLAS_STATUS_INVALID_VALUE, what); }

constexpr int32_t kNvmlErrorNotSupported = 3;

BlasScalars Scalars(std::string_view alpha, std::string_view beta, uint64_t alpha_ptr, uint64_t beta_ptr) {
  BlasScalars s;
  s.alpha = alpha;
  s.beta = beta;
  s.alpha_ptr = alpha_ptr;
  s.beta_ptr = beta_ptr;
  return s;
}

}  // namespace

Result<BlasBackend*> Worker::Blas() {
  if (blas_) return blas_.get();
  if (!blas_status_.ok()) return blas_status_;
  auto made = MakeBlasBackend(backend_.get());
  if (!made.ok()) {
    // The guest sees CUBLAS_STATUS_NOT_INITIALIZED; the daemon log says why.
    std::fprintf(Diagnostics(), "smolvm worker %d: cuBLAS unavailable: %s\n", ::getpid(), made.status().ToString().c_str());
    blas_status_ = BlasNotInitialized(made.status().message());
    return blas_status_;
  }
  // Its handles are charged to the session (library_charges.h).
  auto info = backend_->GetDeviceInfo(0);
  if (!info.ok()) return BlasNotInitialized(info.status().message());
  blas_ = std::move(made).value();
  if (auto* budgeted = dynamic_cast<BudgetedBackend*>(backend_.get()))
    blas_ = std::make_unique<ChargedBlasBackend>(std::move(blas_), budgeted,
                                                 LibraryDeviceFootprint(backend_->Name(), *info),
                                                 [this] { SendChargedStats(); });
  return blas_.get();
}

Result<uint64_t> Worker::BlasHandle(uint64_t guest_id) const {
  auto it = blas_handles_.find(guest_id);
  if (it == blas_handles_.end()) return BlasNotInitialized("unknown cuBLAS handle");
  return it->second.handle;
}

Result<Worker::BlasHandleInfo*> Worker::BlasHandleRecord(uint64_t guest_id) {
  auto it = blas_handles_.find(guest_id);
  if (it == blas_handles_.end()) return BlasNotInitialized("unknown cuBLAS handle");
  return &it->second;
}

Result<uint64_t> Worker::LtHandle(uint64_t guest_id) const {
  auto it = lt_handles_.find(guest_id);
  if (it == lt_handles_.end()) return BlasNotInitialized("unknown cuBLASLt handle");
  return it->second;
}

// --- cuBLAS ---------------------------------------------------------------------

Status Worker::Handle(const proto::BlasCreateRequest& q, proto::BlasCreateReply*, Ctx*) {
  if (q.handle == 0 || blas_handles_.count(q.handle)) return BlasInvalidValue("cuBLAS handle id in use");
  ASSIGN_OR_RETURN(BlasBackend * blas, Blas());
  ASSIGN_OR_RETURN(uint64_t h, blas->Create());
  blas_handles_[q.handle] = BlasHandleInfo{h, 0, {}, 0, 0};
  return Status::Ok();
}

Status Worker::Handle(const proto::BlasDestroyRequest& q, proto::BlasDestroyReply*, Ctx*) {
  auto it = blas_handles_.find(q.handle);
  if (it == blas_handles_.end()) return BlasNotInitialized("unknown cuBLAS handle");
  Status st = blas_->Destroy(it->second.handle);
  blas_handles_.erase(it);
  return st;
}

Status Worker::Handle(const proto::BlasSetStreamRequest& q, proto::BlasSetStreamReply*, Ctx*) {
  ASSIGN_OR_RETURN(BlasHandleInfo * rec, BlasHandleRecord(q.handle));
  auto s = Stream(q.stream);
  if (!s.ok()) return BlasInvalidValue("unknown stream");
  RETURN_IF_ERROR(blas_->SetStream(rec->handle, *s));
  rec->stream = q.stream;
  return Status::Ok();
}

Status Worker::Handle(const proto::BlasSetModeRequest& q, proto::BlasSetModeReply*, Ctx*) {
  ASSIGN_OR_RETURN(BlasHandleInfo * rec, BlasHandleRecord(q.handle));
  if (q.what > static_cast<uint32_t>(BlasMode::kAtomics)) return BlasInvalidValue("unknown mode");
  RETURN_IF_ERROR(blas_->SetMode(rec->handle, static_cast<BlasMode>(q.what), q.value));
  rec->modes[q.what] = q.value;
  return Status::Ok();
}

Status Worker::Handle(const proto::BlasSetWorkspaceRequest& q, proto::BlasSetWorkspaceReply*, Ctx*) {
  ASSIGN_OR_RETURN(BlasHandleInfo * rec, BlasHandleRecord(q.handle));
  if (!CheckRange(q.dptr, q.bytes, "workspace").ok()) return BlasInvalidValue("workspace range wraps");
  RETURN_IF_ERROR(blas_->SetWorkspace(rec->handle, q.dptr, q.bytes));
  rec->workspace = q.dptr;
  rec->workspace_bytes = q.bytes;
  return Status::Ok();
}

Status Worker::Handle(const proto::BlasGetVersionRequest&, proto::BlasGetVersionReply* r, Ctx*) {
  ASSIGN_OR_RETURN(BlasBackend * blas, Blas());
  return blas->GetVersion(&r->version, &r->lt_version);
}

Status Worker::Handle(const proto::BlasGemmRequest& q, proto::BlasGemmReply*, Ctx*) {
  ASSIGN_OR_RETURN(uint64_t h, BlasHandle(q.handle));
  if (q.fn > static_cast<uint32_t>(BlasGemmFn::kSgemmStridedBatched)) return BlasInvalidValue("unknown gemm function");
  BlasGemmArgs g;
  g.fn = static_cast<BlasGemmFn>(q.fn);
  g.transa = q.transa, g.transb = q.transb, g.m = q.m, g.n = q.n, g.k = q.k;
  g.a = q.a, g.atype = q.atype, g.lda = q.lda, g.stride_a = q.stride_a;
  g.b = q.b, g.btype = q.btype, g.ldb = q.ldb, g.stride_b = q.stride_b;
  g.c = q.c, g.ctype = q.ctype, g.ldc = q.ldc, g.stride_c = q.stride_c;
  g.batch = q.batch, g.compute = q.compute, g.algo = q.algo;
  g.scalars = Scalars(q.alpha, q.beta, q.alpha_ptr, q.beta_ptr);
  RETURN_IF_ERROR(CheckGemm(g));
  return blas_->Gemm(h, g);
}

Status Worker::Handle(const proto::BlasLevel1Request& q, proto::BlasLevel1Reply*, Ctx*) {
  ASSIGN_OR_RETURN(uint64_t h, BlasHandle(q.handle));
  if (q.fn > static_cast<uint32_t>(BlasLevel1Fn::kSnrm2)) return BlasInvalidValue("unknown level-1 function");
  BlasLevel1Args l;
  l.fn = static_cast<BlasLevel1Fn>(q.fn);
  l.n = q.n;
  l.alpha = Scalars(q.alpha, {}, q.alpha_ptr, 0);
  l.x = q.x, l.incx = q.incx, l.y = q.y, l.incy = q.incy, l.result = q.result;
  if ((l.fn == BlasLevel1Fn::kSdot || l.fn == BlasLevel1Fn::kSnrm2) && l.result == 0)
    return BlasInvalidValue("device result at address 0");
  RETURN_IF_ERROR(CheckLevel1(l));
  return blas_->Level1(h, l, nullptr);
}

Status Worker::Handle(const proto::BlasLevel1HostRequest& q, proto::BlasLevel1HostReply* r, Ctx*) {
  ASSIGN_OR_RETURN(uint64_t h, BlasHandle(q.handle));
  if (q.fn != static_cast<uint32_t>(BlasLevel1Fn::kSdot) && q.fn != static_cast<uint32_t>(BlasLevel1Fn::kSnrm2))
    return BlasInvalidValue("only dot and nrm2 have a host result");
  BlasLevel1Args l;
  l.fn = static_cast<BlasLevel1Fn>(q.fn);
  l.n = q.n, l.x = q.x, l.incx = q.incx, l.y = q.y, l.incy = q.incy;
  RETURN_IF_ERROR(CheckLevel1(l));
  return blas_->Level1(h, l, &r->result);
}

// --- cuBLASLt -------------------------------------------------------------------

Status Worker::Handle(const proto::LtCreateRequest& q, proto::LtCreateReply*, Ctx*) {
  if (q.handle == 0 || lt_handles_.count(q.handle)) return BlasInvalidValue("cuBLASLt handle id in use");
  ASSIGN_OR_RETURN(BlasBackend * blas, Blas());
  ASSIGN_OR_RETURN(uint64_t h, blas->LtCreate());
  lt_handles_[q.handle] = h;
  return Status::Ok();
}

Status Worker::Handle(const proto::LtDestroyRequest& q, proto::LtDestroyReply*, Ctx*) {
  auto it = lt_handles_.find(q.handle);
  if (it == lt_handles_.end()) return BlasNotInitialized("unknown cuBLASLt handle");
  Status st = blas_->LtDestroy(it->second);
  lt_handles_.erase(it);
  return st;
}

Status Worker::Handle(const proto::LtMatmulRequest& q, proto::LtMatmulReply*, Ctx*) {
  ASSIGN_OR_RETURN(uint64_t h, LtHandle(q.handle));
  auto s = Stream(q.stream);
  if (!s.ok()) return BlasInvalidValue("unknown stream");
  LtMatmulArgs m;
  m.p = LtProblem{q.desc, q.adesc, q.bdesc, q.cdesc, q.ddesc};
  m.scalars = Scalars(q.alpha, q.beta, q.alpha_ptr, q.beta_ptr);
  m.a = q.a, m.b = q.b, m.c = q.c, m.d = q.d;
  m.algo = q.algo;
  m.workspace = q.workspace, m.workspace_bytes = q.workspace_bytes;
  m.stream = *s;
  RETURN_IF_ERROR(CheckLtMatmul(m));
  return blas_->LtMatmul(h, m);
}

Status Worker::Handle(const proto::LtHeuristicRequest& q, proto::LtHeuristicReply* r, Ctx*) {
  ASSIGN_OR_RETURN(uint64_t h, LtHandle(q.handle));
  blas_scratch_.clear();
  RETURN_IF_ERROR(blas_->LtHeuristic(h, LtProblem{q.desc, q.adesc, q.bdesc, q.cdesc, q.ddesc}, q.pref, q.requested,
                                     &r->count, &blas_scratch_));
  r->results = blas_scratch_;
  return Status::Ok();
}

// --- NVML -----------------------------------------------------------------------

Status Worker::Handle(const proto::NvmlDeviceRequest&, proto::NvmlDeviceReply* r, Ctx*) {
  ASSIGN_OR_RETURN(DeviceInfo info, backend_->GetDeviceInfo(0));
  auto attr = [&](int a) { return a < static_cast<int>(info.attrs.size()) ? info.attrs[a] : 0; };
  r->name = info.name;
  r->uuid = NvmlUuidText(info.uuid);
  r->cc_major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  r->cc_minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  r->multiprocessors = static_cast<uint32_t>(attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT));
  r->cuda_version = info.driver_version;
  r->driver = backend_->Name() == "fake" ? "0.0.fake" : KernelDriverVersion();
  return Status::Ok();
}

Status Worker::Handle(const proto::NvmlMemoryRequest&, proto::NvmlMemoryReply* r, Ctx*) {
  uint64_t free_bytes = 0, total = 0;
  RETURN_IF_ERROR(backend_->MemGetInfo(&free_bytes, &total));
  uint64_t used = memory_->chunk_bytes() + (1 + contexts_.size()) * EstimatedContextBytes(backend_->Name());
  if (options_.memory_limit_bytes) total = options_.memory_limit_bytes;
  r->total = total;
  r->used = std::min(used, total);
  r->free_bytes = std::min(free_bytes, total - r->used);
  r->reserved = 0;
  r->worker_pid = static_cast<uint32_t>(::getpid());
  return Status::Ok();
}

// Utilization is the whole device's, so a session would see its neighbours'
// activity; and the host's NVML cannot run in the worker: its nvmlInit makes
// system calls outside the worker's seccomp table (symlink: on the H200,
// 2026-12-04, the worker ended there under enforce and the program lost its
// session). Every session gets NVML_ERROR_NOT_SUPPORTED, as a MIG instance
// answers, on every backend.
Status Worker::Handle(const proto::NvmlUtilizationRequest&, proto::NvmlUtilizationReply*, Ctx*) {
  return Status(proto::kNvmlStatusBase + kNvmlErrorNotSupported,
                "nvmlDeviceGetUtilizationRates: not supported (the device's utilization would show other sessions')");
}

}  // namespace smolvm
