// Size and count checks for guest-supplied numbers, done by the worker's
// handlers before any arithmetic on them (docs/threat-model.md). Every
// function here returns an error Status naming the field instead of letting
// a product or an end address wrap; none touches memory.
#pragma once

#include <cstdint>
#include <string>

#include "backend/blas_backend.h"
#include "base/status.h"

namespace smolvm {

// No guest range can be larger than this: 2^48 bytes, more than any arena
// or device (and small enough that sums of a few such ranges cannot wrap).
inline constexpr uint64_t kMaxGuestRangeBytes = 1ull << 48;

// *out = count * elem_bytes when that fits kMaxGuestRangeBytes, else
// CUDA_ERROR_INVALID_VALUE naming `what`.
Status CheckedBytes(uint64_t count, uint64_t elem_bytes, const char* what, uint64_t* out);
// OK when [addr, addr + bytes) does not wrap and bytes <= kMaxGuestRangeBytes.
Status CheckRange(uint64_t addr, uint64_t bytes, const char* what);
// Memset: elem_bytes is 1, 2 or 4 and count * elem_bytes from dst is a range.
Status CheckMemset(uint64_t dst, uint32_t elem_bytes, uint64_t count, uint64_t* bytes);

// cuBLAS argument checks, as cuBLAS itself makes them (CUBLAS_STATUS_INVALID_VALUE
// for a negative dimension or a leading dimension below the rows), plus what
// cuBLAS cannot check: every matrix of every batch lies in a range that does
// not wrap.
Status CheckGemm(const BlasGemmArgs& g);
Status CheckLevel1(const BlasLevel1Args& l);
// cuBLASLt: each layout's rows, cols, ld, batch and stride (as the guest
// encoded them) give matrices that lie in ranges that do not wrap; the
// pointers are the matmul's A, B, C, D. A layout that does not decode is
// left to the backend, which refuses it.
Status CheckLtMatmul(const LtMatmulArgs& m);

}  // namespace smolvm
