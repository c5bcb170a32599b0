// What a not-implemented export of a library shim does: name itself once on
// stderr and return the library's not-supported status. Included by the
// generated stubs (gen_stubs.cmake), which define every export as `int f()`,
// so this header must not pull in the libraries' own declarations.
#pragma once

#include <atomic>

namespace smolvm::shim {

int BlasStubNotSupported(std::atomic<bool>* reported, const char* name);  // CUBLAS_STATUS_NOT_SUPPORTED
int LtStubNotSupported(std::atomic<bool>* reported, const char* name);    // CUBLAS_STATUS_NOT_SUPPORTED
int NvmlStubNotSupported(std::atomic<bool>* reported, const char* name);  // NVML_ERROR_NOT_SUPPORTED
int DriverStubNotSupported(std::atomic<bool>* reported, const char* name);  // CUDA_ERROR_NOT_SUPPORTED

}  // namespace smolvm::shim
