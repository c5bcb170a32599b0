// Modules and launches: what nvcc's host stubs register at start-up, loaded
// lazily into the worker on first use, and kernel launches packed from the
// parameter layout the worker reports once per function.
#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "shim/launch_config.h"
#include "shim/module_image.h"
#include "shim/runtime.h"

namespace smolvm::shim {
namespace {

// CUfunction_attribute indices (cuda.h) the shim reads.
enum FuncAttr : size_t {
  kMaxThreadsPerBlock = 0,
  kSharedSizeBytes = 1,
  kConstSizeBytes = 2,
  kLocalSizeBytes = 3,
  kNumRegs = 4,
  kPtxVersion = 5,
  kBinaryVersion = 6,
  kCacheModeCa = 7,
  kMaxDynamicSharedSizeBytes = 8,
  kPreferredSharedMemoryCarveout = 9,
  kClusterSizeMustBeSet = 10,
  kRequiredClusterWidth = 11,
  kRequiredClusterHeight = 12,
  kRequiredClusterDepth = 13,
  kNonPortableClusterSizeAllowed = 14,
  kClusterSchedulingPolicyPreference = 15,
};

// CUdevice_attribute indices the launch check reads.
enum DevAttr : size_t {
  kDevMaxThreadsPerBlock = 1,
  kDevMaxBlockDimX = 2,
  kDevMaxGridDimX = 5,
};

struct CallConfig {
  dim3 grid, block;
  size_t shared_bytes;
  void* stream;
};
thread_local std::vector<CallConfig> tl_call_configs;

int32_t At(const std::vector<int32_t>& v, size_t i) { return i < v.size() ? v[i] : 0; }

}  // namespace

void** Runtime::RegisterFatBinary(void* fat_cubin) {
  std::lock_guard lock(session_.mu());
  auto m = std::make_unique<ModuleRecord>();
  auto* w = static_cast<const FatbinWrapper*>(fat_cubin);
  if (w != nullptr && w->magic == kFatbinWrapperMagic && w->data != nullptr) {
    auto* h = reinterpret_cast<const FatbinHeader*>(w->data);
    if (h->magic == kFatbinMagic)
      m->image = std::string_view(reinterpret_cast<const char*>(h), h->header_size + h->fat_size);
  }
  if (m->image.empty()) m->load_error = cudaErrorInvalidKernelImage;
  modules_.push_back(std::move(m));
  return reinterpret_cast<void**>(modules_.back().get());
}

void Runtime::UnregisterFatBinary(void** handle) {
  std::lock_guard lock(session_.mu());
  auto* m = reinterpret_cast<ModuleRecord*>(handle);
  if (m == nullptr || m->id == 0 || !session_.connected()) return;
  proto::ModuleUnloadRequest req;
  req.module = m->id;
  session_.Enqueue(req);
  m->id = 0;
  for (auto& [fn, k] : kernels_)
    if (k->module == m) {
      k->id = 0;
      k->occupancy.clear();
    }
  for (auto& [var, v] : vars_)
    if (v->module == m) v->dptr = 0;
}

void Runtime::RegisterFunction(void** handle, const char* host_fun, const char* device_name) {
  std::lock_guard lock(session_.mu());
  auto k = std::make_unique<KernelRecord>();
  k->module = reinterpret_cast<ModuleRecord*>(handle);
  k->name = device_name != nullptr ? device_name : "";
  kernel_handles_[k.get()] = k.get();
  kernels_[host_fun] = std::move(k);
}

void Runtime::RegisterVar(void** handle, char* host_var, const char* device_name, size_t bytes) {
  std::lock_guard lock(session_.mu());
  auto v = std::make_unique<VarRecord>();
  v->module = reinterpret_cast<ModuleRecord*>(handle);
  v->name = device_name != nullptr ? device_name : "";
  v->bytes = bytes;
  vars_[host_var] = std::move(v);
}

unsigned Runtime::PushCallConfiguration(dim3 grid, dim3 block, size_t shared_bytes, void* stream) {
  tl_call_configs.push_back(CallConfig{grid, block, shared_bytes, stream});
  return 0;
}

cudaError_t Runtime::PopCallConfiguration(dim3* grid, dim3* block, size_t* shared_bytes, void* stream) {
  if (tl_call_configs.empty()) return Record(cudaErrorMissingConfiguration);
  CallConfig c = tl_call_configs.back();
  tl_call_configs.pop_back();
  if (grid != nullptr) *grid = c.grid;
  if (block != nullptr) *block = c.block;
  if (shared_bytes != nullptr) *shared_bytes = c.shared_bytes;
  if (stream != nullptr) *static_cast<void**>(stream) = c.stream;
  return cudaSuccess;
}

Runtime::KernelRecord* Runtime::FindKernel(const void* func, bool by_kernel) {
  if (by_kernel) {
    auto it = kernel_handles_.find(func);
    if (it != kernel_handles_.end()) return it->second;
  }
  auto it = kernels_.find(func);
  if (it != kernels_.end()) return it->second.get();
  // A cudaKernel_t passed where a host function is expected works natively too.
  auto kt = kernel_handles_.find(func);
  return kt != kernel_handles_.end() ? kt->second : nullptr;
}

cudaError_t Runtime::GetKernel(cudaKernel_t* kernel, const void* host_fun) {
  if (kernel == nullptr) return Record(cudaErrorInvalidValue);
  std::lock_guard lock(session_.mu());
  KernelRecord* k = FindKernel(host_fun, false);
  if (k == nullptr) return Record(cudaErrorInvalidDeviceFunction);
  *kernel = reinterpret_cast<cudaKernel_t>(k);
  return cudaSuccess;
}

cudaError_t Runtime::EnsureDeviceInfo() {
  if (have_device_info_) return cudaSuccess;
  proto::DeviceGetInfoRequest req;
  req.device = 0;
  Status st = session_.Call(req, &device_info_);
  if (!st.ok()) return ToCuda(st);
  device_uuid_.assign(device_info_.uuid.data(), device_info_.uuid.size());  // the view dies with the frame
  device_info_.uuid = {};
  have_device_info_ = true;
  return cudaSuccess;
}

cudaError_t Runtime::EnsureModule(ModuleRecord* m) {
  if (m->id != 0) return cudaSuccess;
  if (m->load_error != cudaSuccess) return m->load_error;
  std::optional<PrimaryContextScope> primary;
  if (!m->driver) primary.emplace();
  if (m->image.size() > proto::kMaxPayloadBytes - 4096) return cudaErrorInvalidKernelImage;
  XXH128_canonical_t hash;
  XXH128_canonicalFromHash(&hash, XXH3_128bits(m->image.data(), m->image.size()));
  uint64_t id = NewHandle();
  proto::ModuleLoadRequest req;
  req.module = id;
  req.hash = std::string_view(reinterpret_cast<const char*>(hash.digest), sizeof hash.digest);
  proto::ModuleLoadReply rep;
  Status st = session_.Call(req, &rep);
  if (st.code() == static_cast<int32_t>(Code::kNotFound)) {
    // The daemon's cache does not hold this image yet: send the bytes.
    req.image = m->image;
    st = session_.Call(req, &rep);
  }
  if (!st.ok()) return ToCuda(st);
  m->id = id;
  return cudaSuccess;
}

cudaError_t Runtime::EnsureKernel(KernelRecord* k) {
  if (k->id != 0) return cudaSuccess;
  if (cudaError_t e = EnsureModule(k->module); e != cudaSuccess) return e;
  std::optional<PrimaryContextScope> primary;
  if (!k->module->driver) primary.emplace();
  uint64_t id = NewHandle();
  proto::ModuleGetFunctionRequest req;
  req.module = k->module->id;
  req.function = id;
  req.name = k->name;
  proto::ModuleGetFunctionReply rep;
  Status st = session_.Call(req, &rep);
  if (!st.ok()) {
    cudaError_t e = ToCuda(st);
    return e == cudaErrorSymbolNotFound || e == cudaErrorInvalidResourceHandle ? cudaErrorInvalidDeviceFunction : e;
  }
  if (rep.params.size() % 2 != 0) return cudaErrorUnknown;
  uint32_t end = 0;
  for (size_t i = 0; i < rep.params.size(); i += 2) end = std::max(end, rep.params[i] + rep.params[i + 1]);
  k->params = std::move(rep.params);
  k->attrs = std::move(rep.attrs);
  k->params_bytes = end;
  k->id = id;
  return cudaSuccess;
}

cudaError_t Runtime::EnsureVar(VarRecord* v) {
  if (v->dptr != 0) return cudaSuccess;
  if (cudaError_t e = EnsureModule(v->module); e != cudaSuccess) return e;
  std::optional<PrimaryContextScope> primary;
  if (!v->module->driver) primary.emplace();
  proto::ModuleGetGlobalRequest req;
  req.module = v->module->id;
  req.name = v->name;
  proto::ModuleGetGlobalReply rep;
  Status st = session_.Call(req, &rep);
  if (!st.ok()) {
    cudaError_t e = ToCuda(st);
    return e == cudaErrorSymbolNotFound || e == cudaErrorInvalidResourceHandle ? cudaErrorInvalidSymbol : e;
  }
  v->dptr = rep.dptr;
  if (rep.bytes != 0) v->bytes = rep.bytes;
  device_mem_.Add(rep.dptr, v->bytes);  // so copies and pointer checks know it
  return cudaSuccess;
}

cudaError_t Runtime::CheckLaunch(const KernelRecord& k, dim3 grid, dim3 block, size_t shared_bytes) const {
  const std::vector<int32_t>& dev = device_info_.attrs;
  auto limit = [](int32_t v) { return v > 0 ? static_cast<uint32_t>(v) : 0u; };
  LaunchLimits l;
  for (size_t i = 0; i < 3; ++i) {
    l.max_block[i] = limit(At(dev, kDevMaxBlockDimX + i));
    l.max_grid[i] = limit(At(dev, kDevMaxGridDimX + i));
  }
  l.device_threads = limit(At(dev, kDevMaxThreadsPerBlock));
  l.function_threads = limit(At(k.attrs, kMaxThreadsPerBlock));
  l.has_shared_limit = k.attrs.size() > kMaxDynamicSharedSizeBytes;
  l.max_dynamic_shared = static_cast<uint64_t>(std::max(0, At(k.attrs, kMaxDynamicSharedSizeBytes)));
  return CheckLaunchConfig(l, grid, block, shared_bytes);
}

cudaError_t Runtime::LaunchKernel(const void* func, bool by_kernel, dim3 grid, dim3 block, void** args,
                                  size_t shared_bytes, cudaStream_t stream, bool per_thread,
                                  const std::vector<uint32_t>& attrs) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  KernelRecord* k = FindKernel(func, by_kernel);
  // A pointer that is no registered kernel (a host function, say) is an
  // invalid handle to CUDA 13's launch (the H100 of 2026-12-07, prog_kernels).
  if (k == nullptr) return Finish(cudaErrorInvalidResourceHandle);
  uint64_t sid;
  if (cudaError_t e = StreamId(stream, per_thread, &sid); e != cudaSuccess) return Finish(e);
  if (cudaError_t e = EnsureDeviceInfo(); e != cudaSuccess) return Finish(e);
  if (cudaError_t e = EnsureKernel(k); e != cudaSuccess) return Finish(e);
  if (cudaError_t e = CheckLaunch(*k, grid, block, shared_bytes); e != cudaSuccess) return Finish(e);
  if (!k->params.empty() && args == nullptr) return Finish(cudaErrorInvalidValue);
  std::string packed(k->params_bytes, '\0');
  for (size_t i = 0, n = k->params.size() / 2; i < n; ++i)
    std::memcpy(packed.data() + k->params[2 * i], args[i], k->params[2 * i + 1]);
  proto::LaunchKernelRequest req;
  req.function = k->id;
  req.grid_x = grid.x;
  req.grid_y = grid.y;
  req.grid_z = grid.z;
  req.block_x = block.x;
  req.block_y = block.y;
  req.block_z = block.z;
  req.shared_bytes = static_cast<uint32_t>(shared_bytes);
  req.stream = sid;
  req.params = packed;
  if (attrs.empty()) {
    session_.Enqueue(req);
    return Finish(cudaSuccess);
  }
  proto::LaunchKernelExRequest ex;
  ex.function = req.function;
  ex.grid_x = req.grid_x, ex.grid_y = req.grid_y, ex.grid_z = req.grid_z;
  ex.block_x = req.block_x, ex.block_y = req.block_y, ex.block_z = req.block_z;
  ex.shared_bytes = req.shared_bytes;
  ex.stream = req.stream;
  ex.params = req.params;
  ex.attrs = attrs;
  session_.Enqueue(ex);
  return Finish(cudaSuccess);
}

cudaError_t Runtime::FuncGetAttributes(cudaFuncAttributes* attrs, const void* func) {
  if (attrs == nullptr) return Record(cudaErrorInvalidValue);
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  KernelRecord* k = FindKernel(func, false);
  if (k == nullptr) return Finish(cudaErrorInvalidDeviceFunction);
  if (cudaError_t e = EnsureKernel(k); e != cudaSuccess) return Finish(e);
  const std::vector<int32_t>& a = k->attrs;
  std::memset(attrs, 0, sizeof *attrs);
  attrs->sharedSizeBytes = static_cast<size_t>(At(a, kSharedSizeBytes));
  attrs->constSizeBytes = static_cast<size_t>(At(a, kConstSizeBytes));
  attrs->localSizeBytes = static_cast<size_t>(At(a, kLocalSizeBytes));
  attrs->maxThreadsPerBlock = At(a, kMaxThreadsPerBlock);
  attrs->numRegs = At(a, kNumRegs);
  attrs->ptxVersion = At(a, kPtxVersion);
  attrs->binaryVersion = At(a, kBinaryVersion);
  attrs->cacheModeCA = At(a, kCacheModeCa);
  attrs->maxDynamicSharedSizeBytes = At(a, kMaxDynamicSharedSizeBytes);
  attrs->preferredShmemCarveout = At(a, kPreferredSharedMemoryCarveout);
  attrs->clusterDimMustBeSet = At(a, kClusterSizeMustBeSet);
  attrs->requiredClusterWidth = At(a, kRequiredClusterWidth);
  attrs->requiredClusterHeight = At(a, kRequiredClusterHeight);
  attrs->requiredClusterDepth = At(a, kRequiredClusterDepth);
  attrs->clusterSchedulingPolicyPreference = At(a, kClusterSchedulingPolicyPreference);
  attrs->nonPortableClusterSizeAllowed = At(a, kNonPortableClusterSizeAllowed);
  return Finish(cudaSuccess);
}

cudaError_t Runtime::FuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  KernelRecord* k = FindKernel(func, false);
  if (k == nullptr) return Finish(cudaErrorInvalidDeviceFunction);
  if (cudaError_t e = EnsureKernel(k); e != cudaSuccess) return Finish(e);
  // cudaFuncAttribute values equal the CUfunction_attribute ones they set.
  // Setting the value the function already has changes nothing and cannot
  // fail: answered here (torch sets the dynamic shared size before every
  // launch of its attention kernels).
  size_t i = static_cast<size_t>(attr);
  if (i < k->attrs.size() && k->attrs[i] == value) return Finish(cudaSuccess);
  proto::FuncSetAttributeRequest req;
  req.function = k->id;
  req.attr = static_cast<int32_t>(attr);
  req.value = value;
  proto::FuncSetAttributeReply rep;
  Status st = session_.Call(req, &rep);
  if (!st.ok()) return FinishStatus(st);
  if (i >= k->attrs.size()) k->attrs.resize(i + 1);
  k->attrs[i] = value;
  k->occupancy.clear();
  return Finish(cudaSuccess);
}

cudaError_t Runtime::OccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void* func, int block_size,
                                                               size_t dynamic_smem, unsigned flags) {
  if (blocks == nullptr) return Record(cudaErrorInvalidValue);
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  KernelRecord* k = FindKernel(func, false);
  if (k == nullptr) return Finish(cudaErrorInvalidDeviceFunction);
  if (cudaError_t e = EnsureKernel(k); e != cudaSuccess) return Finish(e);
  auto key = std::make_tuple(block_size, dynamic_smem, flags);
  if (auto hit = k->occupancy.find(key); hit != k->occupancy.end()) {
    *blocks = hit->second;
    return Finish(cudaSuccess);
  }
  proto::OccupancyMaxBlocksRequest req;
  req.function = k->id;
  req.block_size = block_size;
  req.dynamic_smem = dynamic_smem;
  req.flags = flags;
  proto::OccupancyMaxBlocksReply rep;
  Status st = session_.Call(req, &rep);
  if (!st.ok()) return FinishStatus(st);
  *blocks = rep.blocks;
  k->occupancy[key] = rep.blocks;
  return Finish(cudaSuccess);
}

cudaError_t Runtime::MemcpySymbol(const void* symbol, void* host, size_t bytes, size_t offset, cudaMemcpyKind kind,
                                  bool to_symbol, cudaStream_t stream, bool async, bool per_thread) {
  uint64_t dptr;
  {
    std::lock_guard lock(session_.mu());
    if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
    auto it = vars_.find(symbol);
    if (it == vars_.end()) return Finish(cudaErrorInvalidSymbol);
    if (cudaError_t e = EnsureVar(it->second.get()); e != cudaSuccess) return Finish(e);
    if (offset > it->second->bytes || bytes > it->second->bytes - offset) return Finish(cudaErrorInvalidValue);
    dptr = it->second->dptr + offset;
  }
  if (to_symbol) {
    if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault)
      return Record(cudaErrorInvalidMemcpyDirection);
    return Memcpy(reinterpret_cast<void*>(dptr), host, bytes, kind, stream, async, per_thread);
  }
  if (kind != cudaMemcpyDeviceToHost && kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault)
    return Record(cudaErrorInvalidMemcpyDirection);
  return Memcpy(host, reinterpret_cast<const void*>(dptr), bytes, kind, stream, async, per_thread);
}

cudaError_t Runtime::GetSymbolAddress(void** dptr, const void* symbol) {
  if (dptr == nullptr) return Record(cudaErrorInvalidValue);
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  auto it = vars_.find(symbol);
  if (it == vars_.end()) return Finish(cudaErrorInvalidSymbol);
  if (cudaError_t e = EnsureVar(it->second.get()); e != cudaSuccess) return Finish(e);
  *dptr = reinterpret_cast<void*>(it->second->dptr);
  return Finish(cudaSuccess);
}

cudaError_t Runtime::GetSymbolSize(size_t* bytes, const void* symbol) {
  if (bytes == nullptr) return Record(cudaErrorInvalidValue);
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  auto it = vars_.find(symbol);
  if (it == vars_.end()) return Finish(cudaErrorInvalidSymbol);
  if (cudaError_t e = EnsureVar(it->second.get()); e != cudaSuccess) return Finish(e);
  *bytes = it->second->bytes;
  return Finish(cudaSuccess);
}

}  // namespace smolvm::shim
