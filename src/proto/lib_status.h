// Result codes of the libraries remoted at their own API level (cuBLAS,
// cuBLASLt, NVML, cuDNN). A library status travels in a reply's `result` (or a
// deferred error) as base + status, outside CUresult's range (< 1000) and
// smolvm's Code range (100001..), so one field carries every kind of failure.
#pragma once

#include <cstdint>

namespace smolvm::proto {

inline constexpr int32_t kBlasStatusBase = 200000;  // + cublasStatus_t
inline constexpr int32_t kNvmlStatusBase = 300000;  // + nvmlReturn_t
inline constexpr int32_t kDnnStatusBase = 400000;   // + cudnnStatus_t (< 10000)
inline constexpr int32_t kDnnStatusSpan = 10000;
inline constexpr int32_t kLibStatusSpan = 1000;

inline bool IsBlasStatus(int32_t code) {
  return code >= kBlasStatusBase && code < kBlasStatusBase + kLibStatusSpan;
}
inline bool IsNvmlStatus(int32_t code) {
  return code >= kNvmlStatusBase && code < kNvmlStatusBase + kLibStatusSpan;
}

inline bool IsDnnStatus(int32_t code) { return code >= kDnnStatusBase && code < kDnnStatusBase + kDnnStatusSpan; }

}  // namespace smolvm::proto
