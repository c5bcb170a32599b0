// libcuda.so.1's exports that are implemented: each driver_api.h entry is a
// call through the table libcudart.so.13 lends (the process's one session);
// cuGetProcAddress resolves names and ABI versions to this library's own
// exports; the error strings are answered here. Every other symbol of
// cuda_symbols.txt is a generated stub naming itself once
// (CUDA_ERROR_NOT_SUPPORTED), cuGetExportTable (NVIDIA's private tables)
// among them.
#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <string_view>

#include "shim/driver_api.h"

#define SMOLVM_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

const smolvm_shim_driver& Api() {
  static const smolvm_shim_driver* api = smolvm_shim_driver_api();
  return *api;
}

}  // namespace

#define SMOLVM_DRIVER_EXPORT(name, params, args) \
  SMOLVM_EXPORT CUresult name params { return Api().name args; }
SMOLVM_DRIVER_API(SMOLVM_DRIVER_EXPORT)
#undef SMOLVM_DRIVER_EXPORT

// --- cuGetProcAddress ---------------------------------------------------------

namespace {

struct Proc {
  const char* name;
  int version;        // the CUDA version this ABI of `name` appeared in
  const char* sym;    // the export serving it
  const char* ptsym;  // its per-thread-default-stream export, or ""
};
const Proc kProcs[] = {
#include "shim/cuda_procs.gen.inc"
};

// This library, for dlsym of its own exports (implemented or stub).
void* Self() {
  static void* self = [] {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&Self), &info) == 0 || info.dli_fname == nullptr)
      return (void*)nullptr;
    return dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  }();
  return self;
}

}  // namespace

SMOLVM_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version,
                                           cuuint64_t flags,
                                           CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || pfn == nullptr || flags > CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
    return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  auto set_status = [&](CUdriverProcAddressQueryResult s) {
    if (status != nullptr) *status = s;
  };
  std::string_view name = symbol;
  auto [lo, hi] = std::equal_range(
      std::begin(kProcs), std::end(kProcs), Proc{symbol, 0, nullptr, nullptr},
      [](const Proc& a, const Proc& b) { return std::strcmp(a.name, b.name) < 0; });
  const char* sym = nullptr;
  if (lo != hi) {
    for (const Proc* p = lo; p != hi; ++p)
      if (p->version <= version)
        sym = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && *p->ptsym ? p->ptsym
                                                                                   : p->sym;
    if (sym == nullptr) {  // as the driver (580): CUDA_SUCCESS, a null pointer, and why
      *pfn = nullptr;
      set_status(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
      return CUDA_SUCCESS;
    }
  } else {
    sym = symbol;  // no ABI history: the name itself, when this library exports it
  }
  void* self = Self();
  void* fn = self != nullptr && name.substr(0, 2) == "cu" ? dlsym(self, sym) : nullptr;
  if (fn == nullptr) {  // as the driver (580; cuda.h): CUDA_SUCCESS and a null pointer
    *pfn = nullptr;
    set_status(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    return CUDA_SUCCESS;
  }
  *pfn = fn;
  set_status(CU_GET_PROC_ADDRESS_SUCCESS);
  return CUDA_SUCCESS;
}

#undef cuGetProcAddress
SMOLVM_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version,
                                        cuuint64_t flags) {
  return cuGetProcAddress_v2(symbol, pfn, version, flags, nullptr);
}

// --- errors -------------------------------------------------------------------------

namespace {

#include "shim/cu_results.inc"

const char* CuResultName(int r) {
  switch (r) {
#define SMOLVM_CU_RESULT_CASE(name, value) \
  case value:                              \
    return #name;
    SMOLVM_CU_RESULTS(SMOLVM_CU_RESULT_CASE)
#undef SMOLVM_CU_RESULT_CASE
    default:
      return nullptr;
  }
}

}  // namespace

SMOLVM_EXPORT CUresult cuGetErrorName(CUresult error, const char** str) {
  if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *str = CuResultName(error);
  return *str != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

extern "C" const char* cudaGetErrorString(
    int error);  // the cudart shim's (same values, same texts)

SMOLVM_EXPORT CUresult cuGetErrorString(CUresult error, const char** str) {
  if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const char* name = CuResultName(error);
  if (name == nullptr) {
    *str = nullptr;
    return CUDA_ERROR_INVALID_VALUE;
  }
  switch (error) {
    case CUDA_ERROR_NOT_INITIALIZED:
      *str = "initialization error";
      return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_CONTEXT:
      *str = "invalid device context";
      return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_HANDLE:
      *str = "invalid resource handle";
      return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_FOUND:
      *str = "named symbol not found";
      return CUDA_SUCCESS;
    default:
      break;
  }
  const char* text = cudaGetErrorString(static_cast<int>(error));
  *str = text != nullptr && std::strcmp(text, "unrecognized error code") != 0 ? text : name;
  return CUDA_SUCCESS;
}
