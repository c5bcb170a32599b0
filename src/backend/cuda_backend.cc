#include "backend/cuda_backend.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>

#include "base/hex.h"

namespace smolvm {
namespace {

// Which CudaBackend's context this thread last made current (0: none).
// Instances get distinct ids, so a destroyed backend's context is never
// mistaken for a live one that happens to reuse its handle value.
std::atomic<uint64_t> g_next_backend_id{1};
thread_local uint64_t t_current_backend = 0;
thread_local CUcontext t_current_context = nullptr;  // which of its contexts

CUevent ToEvent(uint64_t e) { return reinterpret_cast<CUevent>(static_cast<uintptr_t>(e)); }
CUmodule ToModule(uint64_t m) { return reinterpret_cast<CUmodule>(static_cast<uintptr_t>(m)); }
CUfunction ToFunction(uint64_t f) {
  return reinterpret_cast<CUfunction>(static_cast<uintptr_t>(f));
}
template <typename T>
uint64_t ToHandle(T* p) {
  return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p));
}

CUmemAllocationProp ChunkProp(CUdevice device) {
  CUmemAllocationProp prop;
  std::memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

}  // namespace

CudaBackend::CudaBackend(LibcudaSearch search)
    : search_(std::move(search)), id_(g_next_backend_id.fetch_add(1)) {
  static_assert(sizeof(CUmemGenericAllocationHandle) == sizeof(uint64_t));
  static_assert(sizeof(CUdeviceptr) == sizeof(uint64_t));
  // CUDA's own handle values for the default streams are the ones we carry.
}

CudaBackend::~CudaBackend() {
  if (ctx_ == nullptr) return;
  // Best effort: after a fault every call fails; the process exit frees the
  // rest, so failures here are ignored.
  if (!Enter().ok()) return;
  for (uint64_t c : created_) (void)driver_->cuCtxDestroy(reinterpret_cast<CUcontext>(static_cast<uintptr_t>(c)));
  created_.clear();
  current_ = ctx_;
  if (!Check(driver_->cuCtxSetCurrent(ctx_), "cuCtxSetCurrent").ok()) return;
  (void)driver_->cuCtxSynchronize();
  for (const auto& [addr, bytes] : mappings_) (void)driver_->cuMemUnmap(addr, bytes);
  for (uint64_t chunk : chunks_) (void)driver_->cuMemRelease(chunk);
  if (arena_bytes_ != 0) (void)driver_->cuMemAddressFree(arena_base_, arena_bytes_);
  (void)driver_->cuDevicePrimaryCtxRelease(cu_device_);
  t_current_backend = 0;
}

std::string CudaBackend::LibcudaPath() const { return driver_ ? driver_->path() : ""; }

Status CudaBackend::EnsureDriver() {
  if (driver_tried_) return driver_status_;
  driver_tried_ = true;
  auto loaded = CudaDriver::Load(search_);
  if (!loaded.ok()) {
    driver_status_ = loaded.status();
    return driver_status_;
  }
  driver_ = std::move(loaded).value();
  driver_status_ = driver_->Check(driver_->cuInit(0), "cuInit");
  return driver_status_;
}

Status CudaBackend::Enter() {
  if (ctx_ == nullptr) {
    return Status(CUDA_ERROR_NOT_INITIALIZED, "CudaBackend: no context (Init has not succeeded)");
  }
  if (t_current_backend != id_ || t_current_context != current_) {
    RETURN_IF_ERROR(Check(driver_->cuCtxSetCurrent(current_), "cuCtxSetCurrent"));
    t_current_backend = id_;
    t_current_context = current_;
  }
  return Status::Ok();
}

// --- Device and context ----------------------------------------------------

Status CudaBackend::Init(int device) {
  RETURN_IF_ERROR(EnsureDriver());
  if (ctx_ != nullptr) {
    return Status(CUDA_ERROR_INVALID_CONTEXT, "CudaBackend::Init: already initialised");
  }
  CUdevice dev = 0;
  RETURN_IF_ERROR(Check(driver_->cuDeviceGet(&dev, device), "cuDeviceGet"));
  CUcontext ctx = nullptr;
  RETURN_IF_ERROR(Check(driver_->cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain"));
  Status s = Check(driver_->cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  size_t granularity = 0;
  CUmemAllocationProp prop = ChunkProp(dev);
  if (s.ok()) {
    s = Check(driver_->cuMemGetAllocationGranularity(&granularity, &prop,
                                                     CU_MEM_ALLOC_GRANULARITY_MINIMUM),
              "cuMemGetAllocationGranularity");
  }
  if (!s.ok()) {
    (void)driver_->cuDevicePrimaryCtxRelease(dev);
    return s;
  }
  device_ = device;
  cu_device_ = dev;
  ctx_ = ctx;
  current_ = ctx;
  granularity_ = granularity;
  t_current_backend = id_;
  t_current_context = ctx;
  return Status::Ok();
}

Result<int> CudaBackend::DeviceCount() {
  RETURN_IF_ERROR(EnsureDriver());
  int n = 0;
  RETURN_IF_ERROR(Check(driver_->cuDeviceGetCount(&n), "cuDeviceGetCount"));
  return n;
}

Result<DeviceInfo> CudaBackend::GetDeviceInfo(int device) {
  RETURN_IF_ERROR(EnsureDriver());
  CUdevice dev = 0;
  RETURN_IF_ERROR(Check(driver_->cuDeviceGet(&dev, device), "cuDeviceGet"));
  DeviceInfo info;
  char name[256] = {};
  RETURN_IF_ERROR(Check(driver_->cuDeviceGetName(name, sizeof name - 1, dev), "cuDeviceGetName"));
  info.name = name;
  CUuuid uuid;
  RETURN_IF_ERROR(Check(driver_->cuDeviceGetUuid(&uuid, dev), "cuDeviceGetUuid"));
  info.uuid.assign(uuid.bytes, sizeof uuid.bytes);
  size_t total = 0;
  RETURN_IF_ERROR(Check(driver_->cuDeviceTotalMem(&total, dev), "cuDeviceTotalMem"));
  info.total_mem = total;
  RETURN_IF_ERROR(Check(driver_->cuDriverGetVersion(&info.driver_version), "cuDriverGetVersion"));
  info.attrs.assign(CU_DEVICE_ATTRIBUTE_MAX, 0);
  for (int a = 1; a < CU_DEVICE_ATTRIBUTE_MAX; ++a) {
    int v = 0;
    // Attributes this driver does not know (or that are not valid) read as
    // 0 and are listed, so the guest refuses them as the driver does.
    if (driver_->cuDeviceGetAttribute(&v, static_cast<CUdevice_attribute>(a), dev) ==
        CUDA_SUCCESS) {
      info.attrs[a] = v;
    } else {
      info.unsupported.push_back(static_cast<uint32_t>(a));
    }
  }
  return info;
}

Status CudaBackend::MemGetInfo(uint64_t* free_bytes, uint64_t* total_bytes) {
  RETURN_IF_ERROR(Enter());
  size_t f = 0, t = 0;
  RETURN_IF_ERROR(Check(driver_->cuMemGetInfo(&f, &t), "cuMemGetInfo"));
  *free_bytes = f;
  *total_bytes = t;
  return Status::Ok();
}

Status CudaBackend::CtxSynchronize() {
  RETURN_IF_ERROR(Enter());
  return Check(driver_->cuCtxSynchronize(), "cuCtxSynchronize");
}

Result<uint64_t> CudaBackend::CtxGetLimit(int limit) {
  RETURN_IF_ERROR(Enter());
  size_t v = 0;
  RETURN_IF_ERROR(Check(driver_->cuCtxGetLimit(&v, static_cast<CUlimit>(limit)), "cuCtxGetLimit"));
  return static_cast<uint64_t>(v);
}

Status CudaBackend::CtxSetLimit(int limit, uint64_t value) {
  RETURN_IF_ERROR(Enter());
  return Check(driver_->cuCtxSetLimit(static_cast<CUlimit>(limit), value), "cuCtxSetLimit");
}

Status CudaBackend::StreamPriorityRange(int* least, int* greatest) {
  RETURN_IF_ERROR(Enter());
  return Check(driver_->cuCtxGetStreamPriorityRange(least, greatest),
               "cuCtxGetStreamPriorityRange");
}

// --- Virtual memory -----------------------------------------------------------

Status CudaBackend::ReserveArena(uint64_t base, uint64_t bytes) {
  RETURN_IF_ERROR(Enter());
  if (arena_bytes_ != 0) {
    return Status(CUDA_ERROR_INVALID_VALUE,
                  "ReserveArena: an arena is already reserved at " + HexOfAddress(arena_base_));
  }
  CUdeviceptr got = 0;
  RETURN_IF_ERROR(
      Check(driver_->cuMemAddressReserve(&got, bytes, 0, base, 0), "cuMemAddressReserve"));
  if (got != base) {
    (void)driver_->cuMemAddressFree(got, bytes);
    // Never translate pointers: a worker whose arena is elsewhere cannot run
    // this guest (or its clones) at all.
    return Unavailable("cuMemAddressReserve: asked for the arena at " + HexOfAddress(base) + " (" +
                       std::to_string(bytes) + " bytes), the driver granted " + HexOfAddress(got) +
                       "; the range is taken in this process");
  }
  arena_base_ = base;
  arena_bytes_ = bytes;
  return Status::Ok();
}

Result<uint64_t> CudaBackend::ChunkCreate(uint64_t bytes) {
  RETURN_IF_ERROR(Enter());
  CUmemAllocationProp prop = ChunkProp(cu_device_);
  CUmemGenericAllocationHandle h = 0;
  RETURN_IF_ERROR(Check(driver_->cuMemCreate(&h, bytes, &prop, 0), "cuMemCreate"));
  chunks_.insert(h);
  return static_cast<uint64_t>(h);
}

Result<UniqueFd> CudaBackend::ChunkExport(uint64_t chunk) {
  RETURN_IF_ERROR(Enter());
  int fd = -1;
  RETURN_IF_ERROR(Check(driver_->cuMemExportToShareableHandle(
                            &fd, chunk, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                        "cuMemExportToShareableHandle"));
  return UniqueFd(fd);
}

Result<uint64_t> CudaBackend::ChunkImport(int fd, uint64_t bytes) {
  RETURN_IF_ERROR(Enter());
  CUmemGenericAllocationHandle h = 0;
  void* os_handle = reinterpret_cast<void*>(static_cast<intptr_t>(fd));
  RETURN_IF_ERROR(Check(driver_->cuMemImportFromShareableHandle(
                            &h, os_handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                        "cuMemImportFromShareableHandle"));
  chunks_.insert(h);
  return static_cast<uint64_t>(h);
}

Status CudaBackend::ChunkRelease(uint64_t chunk) {
  RETURN_IF_ERROR(Enter());
  RETURN_IF_ERROR(Check(driver_->cuMemRelease(chunk), "cuMemRelease"));
  if (auto it = chunks_.find(chunk); it != chunks_.end()) chunks_.erase(it);
  return Status::Ok();
}

Status CudaBackend::ChunkMap(uint64_t addr, uint64_t chunk, uint64_t bytes, bool writable) {
  RETURN_IF_ERROR(Enter());
  RETURN_IF_ERROR(Check(driver_->cuMemMap(addr, bytes, 0, chunk, 0), "cuMemMap"));
  Status s = ChunkSetAccess(addr, bytes, writable);
  if (!s.ok()) {
    (void)driver_->cuMemUnmap(addr, bytes);
    return s;
  }
  mappings_[addr] = bytes;
  return Status::Ok();
}

Status CudaBackend::ChunkMapRun(uint64_t addr, std::span<const ChunkPiece> pieces, bool writable) {
  RETURN_IF_ERROR(Enter());
  uint64_t at = addr;
  Status st;
  size_t mapped = 0;
  for (const ChunkPiece& p : pieces) {
    st = Check(driver_->cuMemMap(at, p.bytes, 0, p.chunk, 0), "cuMemMap");
    if (!st.ok()) break;
    at += p.bytes;
    ++mapped;
  }
  // One access call for the whole run (cuMemSetAccess spans mappings).
  if (st.ok() && at > addr) st = ChunkSetAccess(addr, at - addr, writable);
  at = addr;
  for (size_t i = 0; i < mapped; ++i) {
    if (st.ok()) {
      mappings_[at] = pieces[i].bytes;
    } else {
      (void)driver_->cuMemUnmap(at, pieces[i].bytes);
    }
    at += pieces[i].bytes;
  }
  return st;
}

Status CudaBackend::ChunkSetAccess(uint64_t addr, uint64_t bytes, bool writable) {
  RETURN_IF_ERROR(Enter());
  CUmemAccessDesc desc;
  std::memset(&desc, 0, sizeof desc);
  desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc.location.id = cu_device_;
  desc.flags = writable ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_READ;
  return Check(driver_->cuMemSetAccess(addr, bytes, &desc, 1), "cuMemSetAccess");
}

Status CudaBackend::ChunkUnmap(uint64_t addr, uint64_t bytes) {
  RETURN_IF_ERROR(Enter());
  // See the header: unmapping under an in-flight copy poisons the context.
  // A failure here is a fault that already happened; the unmap still runs.
  (void)driver_->cuCtxSynchronize();
  RETURN_IF_ERROR(Check(driver_->cuMemUnmap(addr, bytes), "cuMemUnmap"));
  mappings_.erase(mappings_.lower_bound(addr), mappings_.lower_bound(addr + bytes));
  return Status::Ok();
}

// --- Host memory ----------------------------------------------------------------

Status CudaBackend::HostRegister(void* p, uint64_t bytes) {
  RETURN_IF_ERROR(Enter());
  return Check(driver_->cuMemHostRegister(p, bytes, CU_MEMHOSTREGISTER_PORTABLE),
               "cuMemHostRegister");
}

Status CudaBackend::HostUnregister(void* p) {
  RETURN_IF_ERROR(Enter());
  return Check(driver_->cuMemHostUnregister(p), "cuMemHostUnregister");
}

// --- Copies ----------------------------------------------------------------------

Status CudaBackend::MemcpyHtoD(uint64_t dst, const void* src, uint64_t bytes, uint64_t stream) {
  RETURN_IF_ERROR(Enter());
  return Check(driver_->cuMemcpyHtoDAsync(dst, src, bytes, ToStream(stream)), "cuMemcpyHtoDAsync");
}

Status CudaBackend::MemcpyDtoH(void* dst, uint64_t src, uint64_t bytes, uint64_t stream) {
  RETURN_IF_ERROR(Enter());
  return Check(driver_->cuMemcpyDtoHAsync(dst, src, bytes, ToStream(stream)), "cuMemcpyDtoHAsync");
}

Status CudaBackend::MemcpyDtoD(uint64_t dst, uint64_t src, uint64_t bytes, uint64_t stream) {
  RETURN_IF_ERROR(Enter());
  return Check(driver_->cuMemcpyDtoDAsync(dst, src, bytes, ToStream(stream)), "cuMemcpyDtoDAsync");
}

Status CudaBackend::Memset(uint64_t dst, uint32_t value, uint32_t elem_bytes, uint64_t count,
                           uint64_t stream) {
  RETURN_IF_ERROR(Enter());
  CUstream s = ToStream(stream);
  switch (elem_bytes) {
    case 1:
      return Check(driver_->cuMemsetD8Async(dst, static_cast<unsigned char>(value), count, s),
                   "cuMemsetD8Async");
    case 2:
      return Check(driver_->cuMemsetD16Async(dst, static_cast<unsigned short>(value), count, s),
                   "cuMemsetD16Async");
    case 4:
      return Check(driver_->cuMemsetD32Async(dst, value, count, s), "cuMemsetD32Async");
    default:
      return Status(CUDA_ERROR_INVALID_VALUE,
                    "Memset: element size " + std::to_string(elem_bytes) + " is not 1, 2 or 4");
  }
}

// --- Streams and events ---------------------------------------------------------

Result<uint64_t> CudaBackend::StreamCreate(uint32_t flags, int32_t priority) {
  RETURN_IF_ERROR(Enter());
  CUstream s = nullptr;
  RETURN_IF_ERROR(Check(driver_->cuStreamCreateWithPriority(&s, flags, priority),
                        "cuStreamCreateWithPriority"));
  return ToHandle(s);
}

Status CudaBackend::StreamDestroy(uint64_t stream) {
  RETURN_IF_ERROR(Enter());
  return Check(driver_->cuStreamDestroy(ToStream(stream)), "cuStreamDestroy");
}

Status CudaBackend::StreamSynchronize(uint64_t stream) {
  RETURN_IF_ERROR(Enter());
  return Check(driver_->cuStreamSynchronize(ToStream(stream)), "cuStreamSynchronize");
}

Status CudaBackend::StreamQuery(uint64_t stream) {
  RETURN_IF_ERROR(Enter());
  return Check(driver_->cuStreamQuery(ToStream(stream)), "cuStreamQuery");
}

Status CudaBackend::StreamWaitEvent(uint64_t stream, uint64_t event, uint32_t flags) {
  RETURN_IF_ERROR(Enter());
  return Check(driver_->cuStreamWaitEvent(ToStream(stream), ToEvent(event), flags),
               "cuStreamWaitEvent");
}

Status CudaBackend::LaunchHostFunc(uint64_t stream, HostFn fn, void* user) {
  RETURN_IF_ERROR(Enter());
  return Check(driver_->cuLaunchHostFunc(ToStream(stream), fn, user), "cuLaunchHostFunc");
}

Result<uint64_t> CudaBackend::EventCreate(uint32_t flags) {
  RETURN_IF_ERROR(Enter());
  CUevent e = nullptr;
  RETURN_IF_ERROR(Check(driver_->cuEventCreate(&e, flags), "cuEventCreate"));
  return ToHandle(e);
}

Status CudaBackend::EventDestroy(uint64_t event) {
  RETURN_IF_ERROR(Enter());
  return Check(driver_->cuEventDestroy(ToEvent(event)), "cuEventDestroy");
}

Status CudaBackend::EventRecord(uint64_t event, uint64_t stream) {
  RETURN_IF_ERROR(Enter());
  return Check(driver_->cuEventRecord(ToEvent(event), ToStream(stream)), "cuEventRecord");
}

Status CudaBackend::EventSynchronize(uint64_t event) {
  RETURN_IF_ERROR(Enter());
  return Check(driver_->cuEventSynchronize(ToEvent(event)), "cuEventSynchronize");
}

Status CudaBackend::EventQuery(uint64_t event) {
  RETURN_IF_ERROR(Enter());
  return Check(driver_->cuEventQuery(ToEvent(event)), "cuEventQuery");
}

Result<float> CudaBackend::EventElapsedTime(uint64_t start, uint64_t end) {
  RETURN_IF_ERROR(Enter());
  float ms = 0;
  RETURN_IF_ERROR(
      Check(driver_->cuEventElapsedTime(&ms, ToEvent(start), ToEvent(end)), "cuEventElapsedTime"));
  return ms;
}

// --- Modules and launches -------------------------------------------------------

Result<uint64_t> CudaBackend::ModuleLoad(std::string_view image) {
  RETURN_IF_ERROR(Enter());
  // 8-byte aligned copy with at least one trailing NUL (PTX is a C string).
  std::vector<uint64_t> buf(image.size() / sizeof(uint64_t) + 1, 0);
  std::memcpy(buf.data(), image.data(), image.size());
  CUmodule m = nullptr;
  RETURN_IF_ERROR(Check(driver_->cuModuleLoadData(&m, buf.data()), "cuModuleLoadData"));
  return ToHandle(m);
}

Status CudaBackend::ModuleUnload(uint64_t module) {
  RETURN_IF_ERROR(Enter());
  return Check(driver_->cuModuleUnload(ToModule(module)), "cuModuleUnload");
}

Result<uint64_t> CudaBackend::ModuleGetFunction(uint64_t module, const std::string& name) {
  RETURN_IF_ERROR(Enter());
  CUfunction f = nullptr;
  RETURN_IF_ERROR(Check(driver_->cuModuleGetFunction(&f, ToModule(module), name.c_str()),
                        "cuModuleGetFunction"));
  return ToHandle(f);
}

Status CudaBackend::ModuleGetGlobal(uint64_t module, const std::string& name, uint64_t* dptr,
                                    uint64_t* bytes) {
  RETURN_IF_ERROR(Enter());
  CUdeviceptr p = 0;
  size_t n = 0;
  RETURN_IF_ERROR(Check(driver_->cuModuleGetGlobal(&p, &n, ToModule(module), name.c_str()),
                        "cuModuleGetGlobal"));
  *dptr = p;
  *bytes = n;
  return Status::Ok();
}

Result<std::vector<ParamInfo>> CudaBackend::FuncGetParamInfo(uint64_t function) {
  RETURN_IF_ERROR(Enter());
  CUfunction f = ToFunction(function);
  // cuFuncGetParamInfo answers INVALID_VALUE both past the last parameter and
  // for a bad handle; ask an attribute first so a bad handle is reported.
  int unused = 0;
  RETURN_IF_ERROR(Check(driver_->cuFuncGetAttribute(&unused, CU_FUNC_ATTRIBUTE_NUM_REGS, f),
                        "cuFuncGetAttribute"));
  std::vector<ParamInfo> params;
  constexpr size_t kMaxParams = 32768;  // parameter space is < 32 KiB
  for (size_t i = 0; i < kMaxParams; ++i) {
    size_t offset = 0, size = 0;
    CUresult r = driver_->cuFuncGetParamInfo(f, i, &offset, &size);
    if (r == CUDA_ERROR_INVALID_VALUE) break;
    RETURN_IF_ERROR(Check(r, "cuFuncGetParamInfo"));
    params.push_back(ParamInfo{static_cast<uint32_t>(offset), static_cast<uint32_t>(size)});
  }
  return params;
}

Result<std::vector<int32_t>> CudaBackend::FuncGetAttributes(uint64_t function) {
  RETURN_IF_ERROR(Enter());
  CUfunction f = ToFunction(function);
  std::vector<int32_t> attrs(CU_FUNC_ATTRIBUTE_MAX, 0);
  for (int a = 0; a < CU_FUNC_ATTRIBUTE_MAX; ++a) {
    int v = 0;
    CUresult r = driver_->cuFuncGetAttribute(&v, static_cast<CUfunction_attribute>(a), f);
    // Attribute 0 (max threads per block) exists for every function, so its
    // failure means the handle is bad; later ones may be unsupported.
    if (a == 0) RETURN_IF_ERROR(Check(r, "cuFuncGetAttribute"));
    if (r == CUDA_SUCCESS) attrs[a] = v;
  }
  return attrs;
}

Status CudaBackend::FuncSetAttribute(uint64_t function, int32_t attr, int32_t value) {
  RETURN_IF_ERROR(Enter());
  return Check(driver_->cuFuncSetAttribute(ToFunction(function),
                                           static_cast<CUfunction_attribute>(attr), value),
               "cuFuncSetAttribute");
}

Status CudaBackend::LaunchKernel(uint64_t function, const LaunchConfig& c, uint64_t stream,
                                 std::string_view params) {
  RETURN_IF_ERROR(Enter());
  size_t size = params.size();
  // Kernel parameters are read in place; keep them 8-byte aligned like the
  // buffer the runtime itself builds.
  thread_local std::vector<uint64_t> aligned;
  const void* data = params.data();
  if (reinterpret_cast<uintptr_t>(data) % alignof(uint64_t) != 0) {
    aligned.assign(size / sizeof(uint64_t) + 1, 0);
    std::memcpy(aligned.data(), params.data(), size);
    data = aligned.data();
  }
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, const_cast<void*>(data),
                   CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
  if (c.num_attrs > 0) {
    // The worker checked ids and ranges (worker_driver_launch.cc); each value
    // goes where cuda.h's union keeps it.
    CUlaunchAttribute attrs[kMaxLaunchAttrs] = {};
    uint32_t n = std::min(c.num_attrs, kMaxLaunchAttrs);
    for (uint32_t i = 0; i < n; ++i) {
      const LaunchAttr& a = c.attrs[i];
      CUlaunchAttributeValue& v = attrs[i].value;
      attrs[i].id = static_cast<CUlaunchAttributeID>(a.id);
      switch (a.id) {
        case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
          v.clusterDim.x = a.value[0], v.clusterDim.y = a.value[1], v.clusterDim.z = a.value[2];
          break;
        case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
          v.preferredClusterDim.x = a.value[0], v.preferredClusterDim.y = a.value[1];
          v.preferredClusterDim.z = a.value[2];
          break;
        case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
          v.memSyncDomainMap.default_ = static_cast<unsigned char>(a.value[0]);
          v.memSyncDomainMap.remote = static_cast<unsigned char>(a.value[1]);
          break;
        default:  // one 32-bit value at the union's start: int, unsigned or enum
          std::memcpy(v.pad, &a.value[0], sizeof a.value[0]);
          break;
      }
    }
    CUlaunchConfig config = {};
    config.gridDimX = c.grid[0], config.gridDimY = c.grid[1], config.gridDimZ = c.grid[2];
    config.blockDimX = c.block[0], config.blockDimY = c.block[1], config.blockDimZ = c.block[2];
    config.sharedMemBytes = c.shared_bytes;
    config.hStream = ToStream(stream);
    config.attrs = attrs;
    config.numAttrs = n;
    return Check(driver_->cuLaunchKernelEx(&config, ToFunction(function), nullptr,
                                           size == 0 ? nullptr : extra),
                 "cuLaunchKernelEx");
  }
  return Check(driver_->cuLaunchKernel(ToFunction(function), c.grid[0], c.grid[1], c.grid[2],
                                       c.block[0], c.block[1], c.block[2], c.shared_bytes,
                                       ToStream(stream), nullptr, size == 0 ? nullptr : extra),
               "cuLaunchKernel");
}

Result<int32_t> CudaBackend::OccupancyMaxBlocks(uint64_t function, int32_t block_size,
                                                uint64_t dynamic_smem, uint32_t flags) {
  RETURN_IF_ERROR(Enter());
  int n = 0;
  RETURN_IF_ERROR(Check(driver_->cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
                            &n, ToFunction(function), block_size, dynamic_smem, flags),
                        "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags"));
  return static_cast<int32_t>(n);
}

}  // namespace smolvm
