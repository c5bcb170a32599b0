#include "shim/errors.h"

#include "base/status.h"
#include "shim/cuda_errors.inc"

namespace smolvm::shim {

bool IsKnownCudaError(int v) {
  switch (v) {
#define SMOLVM_CASE(name, value) case value:
    SMOLVM_CUDA_ERRORS(SMOLVM_CASE)
#undef SMOLVM_CASE
    return true;
  }
  return false;
}

cudaError_t WireResultToCuda(int32_t result) {
  if (result == 0) return cudaSuccess;
  if (result > 0 && result < 1000) {
    // The runtime's enum mirrors CUresult value for value; the driver codes
    // without a runtime twin become cudaErrorUnknown (as libcudart does).
    if (IsKnownCudaError(result)) return static_cast<cudaError_t>(result);
    return cudaErrorUnknown;
  }
  switch (static_cast<Code>(result)) {
    case Code::kInvalidArgument: return cudaErrorInvalidValue;
    case Code::kNotFound: return cudaErrorInvalidResourceHandle;
    case Code::kAlreadyExists: return cudaErrorInvalidValue;
    case Code::kUnavailable: return cudaErrorDevicesUnavailable;
    case Code::kProtocolMismatch: return cudaErrorInitializationError;
    case Code::kNotSupported: return cudaErrorNotSupported;
    case Code::kPermissionDenied: return cudaErrorNotPermitted;
    case Code::kTimeout: return cudaErrorTimeout;
    case Code::kIo: return cudaErrorOperatingSystem;
    case Code::kMalformed:
    case Code::kUnknownOp:
    case Code::kInternal:
    default: return cudaErrorUnknown;
  }
}

bool IsStickyError(cudaError_t err) {
  switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorContained:
    case cudaErrorTensorMemoryLeak:
      return true;
    default:
      return false;
  }
}

const char* CudaErrorName(int err) {
  switch (err) {
#define SMOLVM_CASE(name, value) \
  case value:                    \
    return #name;
    SMOLVM_CUDA_ERRORS(SMOLVM_CASE)
#undef SMOLVM_CASE
  }
  return nullptr;
}

const char* CudaErrorString(int err) {
  // The strings libcudart prints for the errors programs meet most; the
  // others fall back to their name.
  switch (err) {
    case 0: return "no error";
    case 1: return "invalid argument";
    case 2: return "out of memory";
    case 3: return "initialization error";
    case 4: return "driver shutting down";
    case 9: return "invalid configuration argument";
    case 13: return "invalid device symbol";
    case 16: return "invalid host pointer";
    case 17: return "invalid device pointer";
    case 21: return "invalid copy direction for memcpy";
    case 35: return "CUDA driver version is insufficient for CUDA runtime version";
    case 46: return "CUDA-capable device(s) is/are busy or unavailable";
    case 52: return "__global__ function call is not configured";
    case 98: return "invalid device function";
    case 100: return "no CUDA-capable device is detected";
    case 101: return "invalid device ordinal";
    case 200: return "device kernel image is invalid";
    case 201: return "invalid device context";
    case 209: return "no kernel image is available for execution on the device";
    case 215: return "limit is not supported on this architecture";
    case 218: return "a PTX JIT compilation failed";
    case 304: return "OS call failed or operation not supported on this OS";
    case 400: return "invalid resource handle";
    case 500: return "named symbol not found";
    case 600: return "device not ready";
    case 700: return "an illegal memory access was encountered";
    case 701: return "too many resources requested for launch";
    case 702: return "the launch timed out and was terminated";
    case 710: return "device-side assert triggered";
    case 712: return "part or all of the requested memory range is already mapped";
    case 713: return "pointer does not correspond to a registered memory region";
    case 714: return "hardware stack error";
    case 715: return "an illegal instruction was encountered";
    case 716: return "misaligned address";
    case 719: return "unspecified launch failure";
    case 800: return "operation not permitted";
    case 801: return "operation not supported";
    case 909: return "timeout occurred";
    case 999: return "unknown error";
  }
  return CudaErrorName(err);
}

}  // namespace smolvm::shim
