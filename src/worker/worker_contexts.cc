// The worker's context handlers (ops 190-192), mirroring the shim's
// forward_driver_context.cc: contexts the guest created are real contexts of
// the backend (cuCtxCreate on a GPU), charged like a worker's context
// (BudgetedBackend::CtxCreate) and capped per session
// (ContextTable::kMaxContexts); what was made in one goes with it.
#include <cuda.h>

#include "worker/cu_status.h"
#include "worker/worker.h"

namespace smolvm {
Status Worker::CheckContext(uint16_t op) const {
  // An op not in the table is the dispatcher's to refuse (kUnknownOp).
  const char* name = proto::OpName(op);
  if (name == nullptr || !ContextTable::NeedsContext(op)) return Status::Ok();
  if (!contexts_.valid())
    return Cu(CUDA_ERROR_INVALID_CONTEXT,
              std::string(name) + ": the current context was destroyed or never created in this session");
  if (contexts_.current() != 0 && !ContextTable::AllowedInCreated(op))
    return Cu(CUDA_ERROR_NOT_SUPPORTED, std::string(name) +
                                            " is not supported while a context the program created (cuCtxCreate) "
                                            "is current; use the primary context for it (docs/shim.md, Contexts)");
  return Status::Ok();
}

Status Worker::SelectBackend(uint64_t guest_ctx) {
  ASSIGN_OR_RETURN(uint64_t handle, contexts_.Backend(guest_ctx));
  return backend_->CtxSelect(handle);
}

Status Worker::InPrimary(const std::function<Status()>& f) {
  const uint64_t here = contexts_.current();
  if (here == 0) return f();
  RETURN_IF_ERROR(SelectBackend(0));
  Status st = f();
  Status back = SelectBackend(here);
  return st.ok() ? back : st;
}

Status Worker::SynchronizeAllContexts() {
  RETURN_IF_ERROR(backend_->CtxSynchronize());
  if (contexts_.empty()) return Status::Ok();
  const uint64_t here = contexts_.current();
  std::vector<uint64_t> others = contexts_.ids();
  others.push_back(0);  // the primary
  Status st;
  for (uint64_t id : others) {
    if (id == here) continue;
    st = SelectBackend(id);
    if (st.ok()) st = backend_->CtxSynchronize();
    if (!st.ok()) break;
  }
  Status back = SelectBackend(here);
  return st.ok() ? back : st;
}

Result<uint64_t> Worker::InstanceFor(uint64_t function) {
  auto f = functions_.find(function);
  if (f == functions_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown function");
  const uint64_t ctx = contexts_.current();
  if (f->second.ctx != 0)
    return Cu(CUDA_ERROR_INVALID_HANDLE, "a function of another context (cuCtxCreate) launched in this one");
  if (uint64_t h = contexts_.InstanceOf(ctx, function)) return h;
  auto m = modules_.find(f->second.module);
  if (m == modules_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "the function's module was unloaded");
  uint64_t module = contexts_.ModuleInstanceOf(ctx, f->second.module);
  if (module == 0) {
    auto image = module_cache_.Get(m->second.hash);
    if (!image.ok())
      return Cu(CUDA_ERROR_INVALID_IMAGE, "the module's image for this context is gone from the module cache: " +
                                              image.status().message());
    ASSIGN_OR_RETURN(module, backend_->ModuleLoad(*image));
  }
  auto fn = backend_->ModuleGetFunction(module, f->second.name);
  if (!fn.ok()) {
    if (contexts_.ModuleInstanceOf(ctx, f->second.module) == 0) (void)backend_->ModuleUnload(module);
    return fn.status();
  }
  contexts_.AddInstance(ctx, function, f->second.module, module, *fn);
  return *fn;
}

Status Worker::Handle(const proto::CtxCreateRequest& q, proto::CtxCreateReply*, Ctx*) {
  if (q.flags & ~static_cast<uint32_t>(CU_CTX_FLAGS_MASK)) return Cu(CUDA_ERROR_INVALID_VALUE, "cuCtxCreate: unknown flags");
  // Scheduling, MAP_HOST and SYNC_MEMOPS pass; what would hold device memory
  // nothing charges (LMEM_RESIZE_TO_MAX) or write core dumps from the worker
  // is refused by name.
  constexpr uint32_t kRefused = CU_CTX_LMEM_RESIZE_TO_MAX | CU_CTX_COREDUMP_ENABLE | CU_CTX_USER_COREDUMP_ENABLE;
  if (q.flags & kRefused)
    return Cu(CUDA_ERROR_NOT_SUPPORTED,
              "cuCtxCreate with CU_CTX_LMEM_RESIZE_TO_MAX or core dump flags is not supported (create the context "
              "without them)");
  RETURN_IF_ERROR(contexts_.CheckNew(q.ctx));
  ASSIGN_OR_RETURN(uint64_t handle, backend_->CtxCreate(q.flags));
  contexts_.Add(q.ctx, handle);
  SendChargedStats();
  return Status::Ok();
}

Status Worker::Handle(const proto::CtxSetCurrentRequest& q, proto::CtxSetCurrentReply*, Ctx*) {
  RETURN_IF_ERROR(contexts_.Select(q.ctx));
  return SelectBackend(q.ctx);
}

Status Worker::Handle(const proto::CtxDestroyRequest& q, proto::CtxDestroyReply* r, Ctx*) {
  if (q.ctx == 0) return Cu(CUDA_ERROR_INVALID_CONTEXT, "the primary context is not destroyed by cuCtxDestroy");
  ASSIGN_OR_RETURN(uint64_t handle, contexts_.Backend(q.ctx));
  // Its work first, as cuCtxDestroy waits for it; then what was made in it.
  RETURN_IF_ERROR(SelectBackend(q.ctx));
  (void)backend_->CtxSynchronize();  // a fault there is the session's sticky error already
  for (auto it = streams_.begin(); it != streams_.end();) {
    if (it->second.ctx != q.ctx) {
      ++it;
      continue;
    }
    (void)backend_->StreamDestroy(it->second.handle);
    r->streams.push_back(it->first);
    it = streams_.erase(it);
  }
  for (auto it = events_.begin(); it != events_.end();) {
    if (it->second.ctx != q.ctx) {
      ++it;
      continue;
    }
    (void)backend_->EventDestroy(it->second.handle);
    r->events.push_back(it->first);
    it = events_.erase(it);
  }
  for (auto it = functions_.begin(); it != functions_.end();)
    it = it->second.ctx == q.ctx ? functions_.erase(it) : std::next(it);
  for (auto it = modules_.begin(); it != modules_.end();) {
    if (it->second.ctx != q.ctx) {
      ++it;
      continue;
    }
    (void)backend_->ModuleUnload(it->second.handle);
    for (auto g = globals_.lower_bound({it->first, std::string()}); g != globals_.end() && g->first.first == it->first;)
      g = globals_.erase(g);
    r->modules.push_back(it->first);
    it = modules_.erase(it);
  }
  ContextTable::Taken taken = contexts_.Remove(q.ctx);
  for (uint64_t module : taken.instance_modules) (void)backend_->ModuleUnload(module);
  for (uint64_t dptr : taken.allocations)
    if (memory_->Free(dptr).ok()) r->freed.push_back(dptr);
  // Back to the context the guest has current (the primary if it was this one).
  RETURN_IF_ERROR(SelectBackend(contexts_.current()));
  RETURN_IF_ERROR(backend_->CtxDestroy(handle));
  SendStats();
  return Status::Ok();
}

}  // namespace smolvm
