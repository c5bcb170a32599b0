// What a cuBLAS and a cuBLASLt handle have in common, in both library shims.
// NVIDIA lets a cublasHandle_t be passed where a cublasLtHandle_t is
// expected, and torch does (getCurrentCUDABlasLtHandle casts its cuBLAS
// handle), so the cuBLASLt shim must recognise a cuBLAS handle object: both
// objects start with this head (single, non-virtual inheritance: the head is
// at offset 0 of either).
#pragma once

#include <cstdint>

namespace smolvm::shim {

inline constexpr uint32_t kBlasHandleKind = 0x424c4153;  // "BLAS"
inline constexpr uint32_t kLtHandleKind = 0x4c544c54;    // "LTLT"

struct BlasHandleHead {
  uint64_t id = 0;     // the wire id (BlasCreate or LtCreate)
  uint32_t kind = 0;   // kBlasHandleKind or kLtHandleKind
  uint64_t lt_id = 0;  // a cuBLAS handle used as a cuBLASLt one: the LtCreate id made for it, 0 until then
};

}  // namespace smolvm::shim
