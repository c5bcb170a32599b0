// The worker's module and launch handlers (ops 50-56) and MarkFrozen (60),
// mirroring the shim's forward_module.cc: images through the daemon's module
// cache by content hash, guest-chosen module and function ids, launches
// with the parameter buffer the guest packed.
#include <cuda.h>

#include <cstring>

#include "base/hex.h"
#include "worker/cu_status.h"
#include "worker/worker.h"
#include "worker/worker_checks.h"

namespace smolvm {
namespace {

}  // namespace


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
  modules_[q.module] = ModuleInfo{h, std::string(q.hash), {}, contexts_.current()};
  SendChargedStats();
  return Status::Ok();
}

Status Worker::Handle(const proto::ModuleUnloadRequest& q, proto::ModuleUnloadReply*, Ctx*) {
  auto it = modules_.find(q.module);
  if (it == modules_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown module");
  const uint64_t here = contexts_.current();
  RETURN_IF_ERROR(SelectBackend(it->second.ctx));
  Status st = backend_->ModuleUnload(it->second.handle);
  for (auto [ctx, instance] : contexts_.DropModuleInstances(q.module))
    if (SelectBackend(ctx).ok()) (void)backend_->ModuleUnload(instance);
  RETURN_IF_ERROR(SelectBackend(here));
  modules_.erase(it);
  for (auto g = globals_.lower_bound({q.module, std::string()}); g != globals_.end() && g->first.first == q.module;) {
    global_moves_.erase(g->second.dptr);  // a clone's global at the golden's address: gone with it
    g = globals_.erase(g);
  }
  SendChargedStats();
  return st;
}

Status Worker::Handle(const proto::ModuleGetFunctionRequest& q, proto::ModuleGetFunctionReply* r, Ctx*) {
  auto m = modules_.find(q.module);
  if (m == modules_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown module");
  if (q.function == 0 || functions_.count(q.function)) return Cu(CUDA_ERROR_INVALID_VALUE, "function id in use");
  // Resolved in its module's context (the guest may have another current).
  const uint64_t here = contexts_.current();
  RETURN_IF_ERROR(SelectBackend(m->second.ctx));
  auto f = backend_->ModuleGetFunction(m->second.handle, q.name);
  std::vector<ParamInfo> params;
  Status st = f.status();
  if (st.ok()) {
    auto p = backend_->FuncGetParamInfo(*f);
    if (p.ok()) params = std::move(p).value();
    st = p.status();
  }
  if (st.ok()) {
    auto a = backend_->FuncGetAttributes(*f);
    if (a.ok()) r->attrs = std::move(a).value();
    st = a.status();
  }
  RETURN_IF_ERROR(SelectBackend(here));
  RETURN_IF_ERROR(st);
  int64_t need = 0;
  for (const ParamInfo& p : params) {
    r->params.push_back(p.offset);
    r->params.push_back(p.size);
    need = std::max<int64_t>(need, int64_t{p.offset} + p.size);
  }
  functions_[q.function] = FunctionInfo{*f, q.module, q.name, need, m->second.ctx};
  return Status::Ok();
}

Status Worker::Handle(const proto::ModuleGetGlobalRequest& q, proto::ModuleGetGlobalReply* r, Ctx*) {
  auto m = modules_.find(q.module);
  if (m == modules_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown module");
  const uint64_t here = contexts_.current();
  RETURN_IF_ERROR(SelectBackend(m->second.ctx));  // resolved in its module's context
  Status got = backend_->ModuleGetGlobal(m->second.handle, q.name, &r->dptr, &r->bytes);
  RETURN_IF_ERROR(SelectBackend(here));
  RETURN_IF_ERROR(got);
  r->dptr = GuestAddressOf(r->dptr);  // a clone's guest keeps one address per global: its golden's
  globals_[{q.module, q.name}] = GlobalInfo{r->dptr, r->bytes};  // a fork carries it
  return Status::Ok();
}

Status Worker::Handle(const proto::FuncSetAttributeRequest& q, proto::FuncSetAttributeReply*, Ctx*) {
  auto f = functions_.find(q.function);
  if (f == functions_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown function");
  // In a context the guest created: the kernel's instance there, as the
  // runtime sets it on the current context's function.
  uint64_t h = f->second.handle;
  if (f->second.ctx != contexts_.current()) {
    ASSIGN_OR_RETURN(h, InstanceFor(q.function));
    return backend_->FuncSetAttribute(h, q.attr, q.value);
  }
  RETURN_IF_ERROR(backend_->FuncSetAttribute(h, q.attr, q.value));
  // Kept for a fork: the guest's shim answers a repeated set from what it
  // inherited, so a clone's function must hold it already. Bounded: the
  // driver accepted it, so `attr` is one of CUfunction_attribute's few.
  f->second.attrs[q.attr] = q.value;
  return Status::Ok();
}

Status Worker::Handle(const proto::LaunchKernelRequest& q, proto::LaunchKernelReply*, Ctx*) {
  LaunchConfig c;
  c.grid[0] = q.grid_x, c.grid[1] = q.grid_y, c.grid[2] = q.grid_z;
  c.block[0] = q.block_x, c.block[1] = q.block_y, c.block[2] = q.block_z;
  c.shared_bytes = q.shared_bytes;
  return Launch(q.function, q.stream, c, q.params);
}

Result<uint64_t> Worker::KernelFor(uint64_t function, std::string_view params) {
  auto f = functions_.find(function);
  if (f == functions_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown function");
  // The driver reads the kernel's whole parameter layout from the buffer.
  if (f->second.param_bytes < 0) {
    ASSIGN_OR_RETURN(std::vector<ParamInfo> info, backend_->FuncGetParamInfo(f->second.handle));
    f->second.param_bytes = 0;
    for (const ParamInfo& p : info)
      f->second.param_bytes = std::max<int64_t>(f->second.param_bytes, int64_t{p.offset} + p.size);
  }
  if (static_cast<int64_t>(params.size()) < f->second.param_bytes)
    return Cu(CUDA_ERROR_INVALID_VALUE, "kernel parameter buffer is shorter than the kernel's parameters");
  if (f->second.ctx != contexts_.current()) return InstanceFor(function);
  return f->second.handle;
}

Status Worker::Launch(uint64_t function, uint64_t stream, const LaunchConfig& c, std::string_view params) {
  ASSIGN_OR_RETURN(uint64_t handle, KernelFor(function, params));
  ASSIGN_OR_RETURN(uint64_t s, Stream(stream));
  // Kept for fault reports: which shared chunks a faulting launch pointed into.
  constexpr size_t kRecent = 8;
  if (recent_launches_.size() < kRecent) recent_launches_.resize(kRecent);
  RecentLaunch& slot = recent_launches_[recent_next_++ % kRecent];
  slot.function = function;
  slot.params.assign(params.data(), params.size());
  return backend_->LaunchKernel(handle, c, s, params);
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

}  // namespace smolvm
