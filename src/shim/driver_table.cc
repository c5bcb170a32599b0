// The driver API's home in libcudart.so.13: the table lent to libcuda.so.1
// (smolvm_shim_driver_api@SMOLVM_SHIM_1) and cudaGetDriverEntryPoint
// [ByVersion], which answers with libcuda.so.1's cuGetProcAddress. Linked
// into the shared library itself (not the core archive) so the exports
// survive --exclude-libs.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>

#include "shim/driver.h"
#include "shim/runtime.h"
#include "shim/stub_report.h"

namespace smolvm::shim {

const smolvm_shim_driver& Driver::Table() {
  static const smolvm_shim_driver table = {sizeof(smolvm_shim_driver),
#define SMOLVM_DRIVER_ENTRY(name, params, args) &Driver::name,
                                           SMOLVM_DRIVER_API(SMOLVM_DRIVER_ENTRY)
#undef SMOLVM_DRIVER_ENTRY
  };
  return table;
}

namespace {

using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t,
                                    CUdriverProcAddressQueryResult*);

// cuGetProcAddress_v2 of the libcuda.so.1 beside this library, loaded by
// absolute path: never a host driver that happens to carry the soname.
GetProcAddress DriverProcLookup() {
  static GetProcAddress fn = [] {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&DriverProcLookup), &info) == 0 || info.dli_fname == nullptr)
      return GetProcAddress{nullptr};
    std::string path = info.dli_fname;
    path = path.substr(0, path.rfind('/') + 1) + "libcuda.so.1";
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (h == nullptr) {
      std::fprintf(stderr, "smolvm cudart: cannot load the driver shim %s: %s\n", path.c_str(),
                   dlerror());
      return GetProcAddress{nullptr};
    }
    return reinterpret_cast<GetProcAddress>(dlsym(h, "cuGetProcAddress_v2"));
  }();
  return fn;
}

cudaError_t EntryPoint(const char* symbol, void** fn, int version, unsigned long long flags,
                       cudaDriverEntryPointQueryResult* status, bool per_thread) {
  if (symbol == nullptr || fn == nullptr) return Runtime::Get().Record(cudaErrorInvalidValue);
  GetProcAddress lookup = DriverProcLookup();
  if (lookup == nullptr) {
    static std::atomic<bool> reported{false};
    ReportNotSupportedOnce(&reported, "cudart",
                           "cudaGetDriverEntryPoint without the driver shim (libcuda.so.1 beside "
                           "libcudart.so.13)",
                           "cudaErrorNotSupported");
    return Runtime::Get().Record(cudaErrorNotSupported);
  }
  // cudaEnableDefault follows how the caller was built: the _ptsz entry points
  // are what --default-stream per-thread code calls.
  cuuint64_t cu_flags = flags;
  if (flags == cudaEnableDefault && per_thread)
    cu_flags = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  CUdriverProcAddressQueryResult q = CU_GET_PROC_ADDRESS_SUCCESS;
  CUresult r = lookup(symbol, fn, version, cu_flags, &q);
  if (status != nullptr) *status = static_cast<cudaDriverEntryPointQueryResult>(q);
  // Not found (a null pointer and why in q): said through `status` when the
  // caller passed one, else as cudaErrorSymbolNotFound.
  if (r == CUDA_SUCCESS && (q == CU_GET_PROC_ADDRESS_SUCCESS || status != nullptr)) return cudaSuccess;
  if (r == CUDA_SUCCESS) r = CUDA_ERROR_NOT_FOUND;
  return Runtime::Get().Record(r == CUDA_ERROR_NOT_FOUND ? cudaErrorSymbolNotFound
                                                         : cudaErrorInvalidValue);
}

}  // namespace
}  // namespace smolvm::shim

#define SMOLVM_EXPORT extern "C" __attribute__((visibility("default")))

SMOLVM_EXPORT const smolvm_shim_driver* smolvm_shim_driver_api(void) {
  return &smolvm::shim::Driver::Table();
}

SMOLVM_EXPORT cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** fn,
                                                  unsigned long long flags,
                                                  cudaDriverEntryPointQueryResult* status) {
  return smolvm::shim::EntryPoint(symbol, fn, CUDART_VERSION, flags, status, false);
}
SMOLVM_EXPORT cudaError_t cudaGetDriverEntryPoint_ptsz(const char* symbol, void** fn,
                                                       unsigned long long flags,
                                                       cudaDriverEntryPointQueryResult* status) {
  return smolvm::shim::EntryPoint(symbol, fn, CUDART_VERSION, flags, status, true);
}
SMOLVM_EXPORT cudaError_t cudaGetDriverEntryPointByVersion(
    const char* symbol, void** fn, unsigned int version, unsigned long long flags,
    cudaDriverEntryPointQueryResult* status) {
  return smolvm::shim::EntryPoint(symbol, fn, static_cast<int>(version), flags, status, false);
}
SMOLVM_EXPORT cudaError_t cudaGetDriverEntryPointByVersion_ptsz(
    const char* symbol, void** fn, unsigned int version, unsigned long long flags,
    cudaDriverEntryPointQueryResult* status) {
  return smolvm::shim::EntryPoint(symbol, fn, static_cast<int>(version), flags, status, true);
}
