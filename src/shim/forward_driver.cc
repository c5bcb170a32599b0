// The driver API, part 1: initialization, device queries, the primary
// context, modules, functions and launches (driver.h). Queries are answered
// from what the runtime already cached (device info, kernel attributes);
// launches are queued like the runtime's.
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "base/unique_fd.h"
#include "shim/driver.h"
#include "shim/module_image.h"
#include "shim/runtime.h"
#include "shim/stub_report.h"

namespace smolvm::shim {
namespace {

// Images of cuModuleLoadData, owned (the caller may free its copy) so a
// clone can reload them. Guarded by the session lock.
std::deque<std::string> loaded_images;
// cuModuleGetFunction answers one CUfunction per (module, name).
std::map<std::pair<const void*, std::string>, const void*> functions_by_name;

}  // namespace

CUresult ToCuResult(int e) {
  switch (e) {
    case cudaErrorInvalidConfiguration:
    case cudaErrorInvalidMemcpyDirection:
    case cudaErrorMissingConfiguration:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidHostPointer:
    case cudaErrorInvalidPitchValue:
      return CUDA_ERROR_INVALID_VALUE;
    case cudaErrorInvalidSymbol:
    case cudaErrorSymbolNotFound:
      return CUDA_ERROR_NOT_FOUND;
    case cudaErrorInvalidDeviceFunction:
      return CUDA_ERROR_INVALID_HANDLE;
    default:
      return static_cast<CUresult>(e);
  }
}

// --- initialization and devices -------------------------------------------

CUresult Driver::cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  SMOLVM_DRIVER_BEGIN(r);
  return ToCuResult(r.Finish(cudaSuccess));
}

CUresult Driver::cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Runtime::DriverCallScope scope;
  cudaError_t e = rt().DriverGetVersion(version);
  // As a host without a GPU: the installed driver's version all the same.
  if (e != cudaSuccess || *version == 0) *version = CUDA_VERSION;
  return CUDA_SUCCESS;
}

CUresult Driver::cuDeviceGet(CUdevice* device, int ordinal) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  SMOLVM_DRIVER_BEGIN(r);
  if (ordinal != 0) return ToCuResult(r.Finish(cudaErrorInvalidDevice));
  *device = 0;
  return ToCuResult(r.Finish(cudaSuccess));
}

CUresult Driver::cuDeviceGetCount(int* count) {
  Runtime::DriverCallScope scope;
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  cudaError_t e = rt().GetDeviceCount(count);
  return e == cudaErrorNoDevice ? CUDA_SUCCESS : ToCuResult(e);  // the driver answers 0 devices
}

CUresult Driver::cuDeviceGetName(char* name, int len, CUdevice dev) {
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  SMOLVM_DRIVER_BEGIN(r);
  if (dev != 0) return ToCuResult(r.Finish(cudaErrorInvalidDevice));
  if (cudaError_t e = r.EnsureDeviceInfo(); e != cudaSuccess) return ToCuResult(r.Finish(e));
  std::snprintf(name, static_cast<size_t>(len), "%.*s",
                static_cast<int>(r.device_info_.name.size()), r.device_info_.name.data());
  return ToCuResult(r.Finish(cudaSuccess));
}

CUresult Driver::cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  SMOLVM_DRIVER_BEGIN(r);
  if (dev != 0) return ToCuResult(r.Finish(cudaErrorInvalidDevice));
  if (cudaError_t e = r.EnsureDeviceInfo(); e != cudaSuccess) return ToCuResult(r.Finish(e));
  std::memset(uuid->bytes, 0, sizeof uuid->bytes);
  std::memcpy(uuid->bytes, r.device_uuid_.data(),
              std::min(sizeof uuid->bytes, r.device_uuid_.size()));
  return ToCuResult(r.Finish(cudaSuccess));
}

CUresult Driver::cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  SMOLVM_DRIVER_BEGIN(r);
  if (dev != 0) return ToCuResult(r.Finish(cudaErrorInvalidDevice));
  if (cudaError_t e = r.EnsureDeviceInfo(); e != cudaSuccess) return ToCuResult(r.Finish(e));
  *bytes = r.device_info_.total_mem;
  return ToCuResult(r.Finish(cudaSuccess));
}

CUresult Driver::cuDeviceGetAttribute(int* value, CUdevice_attribute attrib, CUdevice dev) {
  Runtime::DriverCallScope scope;
  // CUdevice_attribute and cudaDeviceAttr share their values.
  return ToCuResult(rt().DeviceGetAttribute(value, static_cast<cudaDeviceAttr>(attrib), dev));
}

CUresult Driver::cuDeviceGetPCIBusId(char* bus_id, int len, CUdevice dev) {
  if (bus_id == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  int domain = 0, bus = 0, device = 0;
  if (CUresult e = cuDeviceGetAttribute(&domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, dev);
      e != CUDA_SUCCESS)
    return e;
  if (CUresult e = cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, dev);
      e != CUDA_SUCCESS)
    return e;
  if (CUresult e = cuDeviceGetAttribute(&device, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, dev);
      e != CUDA_SUCCESS)
    return e;
  std::snprintf(bus_id, static_cast<size_t>(len), "%08X:%02X:%02X.0", domain, bus, device);
  return CUDA_SUCCESS;
}

CUresult Driver::cuDeviceCanAccessPeer(int* can, CUdevice dev, CUdevice peer) {
  if (can == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (dev != 0 || peer != 0) return CUDA_ERROR_INVALID_DEVICE;
  *can = 0;  // one device per session
  return CUDA_SUCCESS;
}

// No profiler is attached to the guest: they check the calling thread's
// context and the session, as the driver does.
CUresult Driver::cuProfilerStart() {
  CUcontext current = nullptr;
  (void)cuCtxGetCurrent(&current);
  if (current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  SMOLVM_DRIVER_BEGIN(r);
  return SMOLVM_DRIVER_END(r, cudaSuccess);
}

CUresult Driver::cuProfilerStop() { return cuProfilerStart(); }

// --- modules and functions --------------------------------------------------

CUresult Driver::LoadOwnedImage(Runtime& r, CUmodule* module, std::string image) {
  loaded_images.push_back(std::move(image));
  auto m = std::make_unique<Runtime::ModuleRecord>();
  m->image = loaded_images.back();
  m->driver = true;
  if (cudaError_t e = r.EnsureModule(m.get()); e != cudaSuccess) {
    loaded_images.pop_back();
    return ToCuResult(r.Finish(e));
  }
  *module = reinterpret_cast<CUmodule>(m.get());
  r.modules_.push_back(std::move(m));
  return ToCuResult(r.Finish(cudaSuccess));
}

CUresult Driver::cuModuleLoadData(CUmodule* module, const void* image) {
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  SMOLVM_DRIVER_BEGIN(r);
  std::string_view view = ModuleImage(image);
  if (view.empty()) return ToCuResult(r.Finish(cudaErrorInvalidKernelImage));
  return LoadOwnedImage(r, module, std::string(view));
}

CUresult Driver::cuModuleLoadFatBinary(CUmodule* module, const void* fatbin) {
  return cuModuleLoadData(module, fatbin);
}

// A cubin, fatbin or PTX file, read here (the guest's file system) and loaded
// as its bytes: what inductor's static launcher does with the cubins Triton
// writes to its cache.
CUresult Driver::cuModuleLoad(CUmodule* module, const char* path) {
  if (module == nullptr || path == nullptr) return CUDA_ERROR_INVALID_VALUE;
  SMOLVM_DRIVER_BEGIN(r);
  UniqueFd fd(::open(path, O_RDONLY | O_CLOEXEC));
  struct stat st {};
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
    return SMOLVM_DRIVER_END(r, static_cast<cudaError_t>(CUDA_ERROR_FILE_NOT_FOUND));
  if (st.st_size <= 0 || static_cast<uint64_t>(st.st_size) > proto::kMaxPayloadBytes - 4096)
    return SMOLVM_DRIVER_END(r, cudaErrorInvalidKernelImage);
  std::string image(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < image.size()) {
    ssize_t n = ::read(fd.get(), image.data() + got, image.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return SMOLVM_DRIVER_END(r, static_cast<cudaError_t>(CUDA_ERROR_FILE_NOT_FOUND));
    got += static_cast<size_t>(n);
  }
  // PTX is text: loaded as cuModuleLoadData sees it, up to and including a NUL.
  constexpr char kElf[4] = {0x7f, 'E', 'L', 'F'};
  uint32_t magic = 0;
  std::memcpy(&magic, image.data(), std::min(image.size(), sizeof magic));
  bool binary = image.compare(0, 4, kElf, 4) == 0 || magic == kFatbinMagic;
  if (!binary) image.resize(std::strlen(image.c_str()) + 1);
  return LoadOwnedImage(r, module, std::move(image));
}

// JIT options tune the worker's compile of PTX; its defaults serve. The
// options that are outputs are answered: no log was written (an empty
// string, size 0) and no JIT time was spent here.
CUresult Driver::cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int n,
                                    CUjit_option* options, void** values) {
  if (n > 0 && (options == nullptr || values == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  if (n > 4 * CU_JIT_NUM_OPTIONS) return CUDA_ERROR_INVALID_VALUE;
  char* logs[2] = {nullptr, nullptr};  // info, error
  for (unsigned i = 0; i < n; ++i) {
    if (options[i] < 0 || options[i] >= CU_JIT_NUM_OPTIONS) return CUDA_ERROR_INVALID_VALUE;
    if (options[i] == CU_JIT_INFO_LOG_BUFFER) logs[0] = static_cast<char*>(values[i]);
    if (options[i] == CU_JIT_ERROR_LOG_BUFFER) logs[1] = static_cast<char*>(values[i]);
  }
  CUresult e = cuModuleLoadData(module, image);
  for (unsigned i = 0; i < n; ++i) {
    bool info = options[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES;
    if (info || options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) {
      char* log = logs[info ? 0 : 1];
      if (log != nullptr && reinterpret_cast<uintptr_t>(values[i]) > 0) log[0] = '\0';
      values[i] = nullptr;  // bytes of log written
    } else if (options[i] == CU_JIT_WALL_TIME) {
      float ms = 0;
      std::memcpy(&values[i], &ms, sizeof ms);
    }
  }
  return e;
}

CUresult Driver::cuModuleUnload(CUmodule module) {
  if (module == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  Runtime::DriverCallScope scope;
  rt().UnregisterFatBinary(reinterpret_cast<void**>(module));
  return CUDA_SUCCESS;
}

CUresult Driver::cuModuleGetFunction(CUfunction* fn, CUmodule module, const char* name) {
  if (fn == nullptr || module == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  SMOLVM_DRIVER_BEGIN(r);
  auto* m = reinterpret_cast<Runtime::ModuleRecord*>(module);
  auto key = std::make_pair(static_cast<const void*>(m), std::string(name));
  if (auto it = functions_by_name.find(key); it != functions_by_name.end()) {
    *fn = reinterpret_cast<CUfunction>(const_cast<void*>(it->second));
    return ToCuResult(r.Finish(cudaSuccess));
  }
  auto k = std::make_unique<Runtime::KernelRecord>();
  k->module = m;
  k->name = name;
  if (cudaError_t e = r.EnsureKernel(k.get()); e != cudaSuccess)
    return ToCuResult(r.Finish(e == cudaErrorInvalidDeviceFunction ? cudaErrorSymbolNotFound : e));
  Runtime::KernelRecord* rec = k.get();
  r.kernel_handles_[rec] = rec;
  r.kernels_[rec] =
      std::move(k);  // keyed by itself: a CUfunction works as a cudaKernel_t and a host function
  functions_by_name[key] = rec;
  *fn = reinterpret_cast<CUfunction>(rec);
  return ToCuResult(r.Finish(cudaSuccess));
}

CUresult Driver::cuModuleGetGlobal_v2(CUdeviceptr* dptr, size_t* bytes, CUmodule module,
                                      const char* name) {
  if (module == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  SMOLVM_DRIVER_BEGIN(r);
  auto* m = reinterpret_cast<Runtime::ModuleRecord*>(module);
  if (cudaError_t e = r.EnsureModule(m); e != cudaSuccess) return ToCuResult(r.Finish(e));
  proto::ModuleGetGlobalRequest req;
  req.module = m->id;
  req.name = name;
  proto::ModuleGetGlobalReply rep;
  Status st = r.session_.Call(req, &rep);
  if (!st.ok()) return ToCuResult(r.FinishStatus(st));
  r.device_mem_.Add(rep.dptr, rep.bytes);
  if (dptr != nullptr) *dptr = rep.dptr;
  if (bytes != nullptr) *bytes = rep.bytes;
  return ToCuResult(r.Finish(cudaSuccess));
}

CUresult Driver::cuFuncGetAttribute(int* value, CUfunction_attribute attrib, CUfunction fn) {
  if (value == nullptr || fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  SMOLVM_DRIVER_BEGIN(r);
  Runtime::KernelRecord* k = r.FindKernel(fn, true);
  if (k == nullptr) return ToCuResult(r.Finish(cudaErrorInvalidDeviceFunction));
  if (cudaError_t e = r.EnsureKernel(k); e != cudaSuccess) return ToCuResult(r.Finish(e));
  size_t i = static_cast<size_t>(attrib);
  if (i >= k->attrs.size()) return ToCuResult(r.Finish(cudaErrorInvalidValue));
  *value = k->attrs[i];
  return ToCuResult(r.Finish(cudaSuccess));
}

CUresult Driver::cuFuncSetAttribute(CUfunction fn, CUfunction_attribute attrib, int value) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().FuncSetAttribute(fn, static_cast<cudaFuncAttribute>(attrib), value));
}

CUresult Driver::cuFuncSetCacheConfig(CUfunction fn, CUfunc_cache) {
  return fn != nullptr ? CUDA_SUCCESS
                       : CUDA_ERROR_INVALID_HANDLE;  // a hint, as cudaFuncSetCacheConfig
}

CUresult Driver::cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *mode = CU_MODULE_LAZY_LOADING;  // modules load on first use of one of their functions or globals
  return CUDA_SUCCESS;
}

CUresult Driver::cuOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, CUfunction f, int block_size,
                                                             size_t smem) {
  return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, f, block_size, smem, 0);
}

CUresult Driver::cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, CUfunction f, int block_size,
                                                                      size_t smem, unsigned int flags) {
  Runtime::DriverCallScope scope;
  // A CUfunction is keyed by itself in the runtime's kernel table.
  return ToCuResult(rt().OccupancyMaxActiveBlocksPerMultiprocessor(blocks, f, block_size, smem, flags));
}

}  // namespace smolvm::shim
