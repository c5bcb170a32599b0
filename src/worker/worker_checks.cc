#include "worker/worker_checks.h"

#include <cublas_api.h>
#include <cuda.h>
#include <library_types.h>

#include <cublasLt.h>

#include "worker/cu_status.h"
#include "proto/lib_status.h"
#include "proto/lt_attrs.h"

namespace smolvm {
namespace {

using u128 = unsigned __int128;

Status BlasInvalid(const std::string& what) { return BlasError(CUBLAS_STATUS_INVALID_VALUE, what); }

// Bytes per element of a cuBLAS data type; 16 (the widest, complex double)
// for the others, so the span check never undercounts.
uint64_t ElementBytes(int32_t type) {
  switch (type) {
    case CUDA_R_8I:
    case CUDA_R_8U:
    case CUDA_R_8F_E4M3:
    case CUDA_R_8F_E5M2:
      return 1;
    case CUDA_R_16F:
    case CUDA_R_16BF:
      return 2;
    case CUDA_R_32F:
    case CUDA_R_32I:
    case CUDA_R_32U:
    case CUDA_C_16F:
    case CUDA_C_16BF:
      return 4;
    case CUDA_R_64F:
    case CUDA_C_32F:
      return 8;
    default:
      return 16;
  }
}

// The bytes a (rows x cols, leading dimension ld) column-major matrix spans.
u128 MatrixSpan(int64_t rows, int64_t cols, int64_t ld, uint64_t elem) {
  if (rows == 0 || cols == 0) return 0;
  return (u128(cols - 1) * u128(ld) + u128(rows)) * elem;
}

// OK when `batch` matrices of `span` bytes, `stride` elements apart from
// `base`, all lie in [0, 2^64) and each is at most kMaxGuestRangeBytes.
Status CheckBatch(const char* name, uint64_t base, u128 span, int64_t stride, uint64_t elem, int64_t batch) {
  if (span > kMaxGuestRangeBytes) return BlasInvalid(std::string("matrix ") + name + " spans more than 2^48 bytes");
  if (span == 0 || batch <= 0) return Status::Ok();
  __int128 step = __int128(stride) * __int128(elem);
  __int128 last = __int128(base) + step * (batch - 1);
  __int128 lo = std::min<__int128>(base, last), hi = std::max<__int128>(base, last) + __int128(span);
  if (lo < 0 || hi > (__int128(1) << 64)) return BlasInvalid(std::string("matrix ") + name + " batch wraps the address space");
  return Status::Ok();
}

}  // namespace

Status CheckedBytes(uint64_t count, uint64_t elem_bytes, const char* what, uint64_t* out) {
  u128 bytes = u128(count) * elem_bytes;
  if (bytes > kMaxGuestRangeBytes) return Invalid(std::string(what) + ": size overflows");
  *out = static_cast<uint64_t>(bytes);
  return Status::Ok();
}

Status CheckRange(uint64_t addr, uint64_t bytes, const char* what) {
  if (bytes > kMaxGuestRangeBytes || addr + bytes < addr) return Invalid(std::string(what) + ": range wraps");
  return Status::Ok();
}

Status CheckMemset(uint64_t dst, uint32_t elem_bytes, uint64_t count, uint64_t* bytes) {
  if (elem_bytes != 1 && elem_bytes != 2 && elem_bytes != 4) return Invalid("memset element size must be 1, 2 or 4");
  RETURN_IF_ERROR(CheckedBytes(count, elem_bytes, "memset", bytes));
  return CheckRange(dst, *bytes, "memset");
}

Status CheckGemm(const BlasGemmArgs& g) {
  if (g.m < 0 || g.n < 0 || g.k < 0) return BlasInvalid("negative gemm dimension");
  for (int32_t t : {g.transa, g.transb})
    if (t != CUBLAS_OP_N && t != CUBLAS_OP_T && t != CUBLAS_OP_C) return BlasInvalid("bad transpose");
  const bool na = g.transa == CUBLAS_OP_N, nb = g.transb == CUBLAS_OP_N;
  const int64_t arows = na ? g.m : g.k, acols = na ? g.k : g.m;
  const int64_t brows = nb ? g.k : g.n, bcols = nb ? g.n : g.k;
  if (g.lda < std::max<int64_t>(1, arows)) return BlasInvalid("lda is below the rows of A");
  if (g.ldb < std::max<int64_t>(1, brows)) return BlasInvalid("ldb is below the rows of B");
  if (g.ldc < std::max<int64_t>(1, g.m)) return BlasInvalid("ldc is below the rows of C");
  const bool batched = g.fn == BlasGemmFn::kGemmStridedBatchedEx || g.fn == BlasGemmFn::kSgemmStridedBatched ||
                       g.fn == BlasGemmFn::kGemmBatchedEx;
  if (batched && g.batch < 0) return BlasInvalid("negative batch count");
  const int64_t batch = batched ? g.batch : 1;
  const uint64_t ea = ElementBytes(g.atype), eb = ElementBytes(g.btype), ec = ElementBytes(g.ctype);
  const u128 sa = MatrixSpan(arows, acols, g.lda, ea), sb = MatrixSpan(brows, bcols, g.ldb, eb),
             sc = MatrixSpan(g.m, g.n, g.ldc, ec);
  if (g.fn == BlasGemmFn::kGemmBatchedEx) {
    // a, b, c are arrays of `batch` pointers: the arrays must be ranges;
    // each matrix is checked by the device when it is touched.
    uint64_t bytes = 0;
    RETURN_IF_ERROR(CheckedBytes(static_cast<uint64_t>(batch), 8, "gemm pointer array", &bytes));
    for (uint64_t p : {g.a, g.b, g.c})
      if (!CheckRange(p, bytes, "gemm pointer array").ok()) return BlasInvalid("gemm pointer array wraps");
    for (u128 s : {sa, sb, sc})
      if (s > kMaxGuestRangeBytes) return BlasInvalid("a matrix spans more than 2^48 bytes");
    return Status::Ok();
  }
  const bool strided = batch > 1;
  RETURN_IF_ERROR(CheckBatch("A", g.a, sa, strided ? g.stride_a : 0, ea, batch));
  RETURN_IF_ERROR(CheckBatch("B", g.b, sb, strided ? g.stride_b : 0, eb, batch));
  return CheckBatch("C", g.c, sc, strided ? g.stride_c : 0, ec, batch);
}

Status CheckLevel1(const BlasLevel1Args& l) {
  if (l.n <= 0) return Status::Ok();  // cuBLAS returns at once
  const bool two = l.fn == BlasLevel1Fn::kSaxpy || l.fn == BlasLevel1Fn::kSdot;
  if (l.incx == 0 || (two && l.incy == 0)) return Status::Ok();  // cuBLAS's own answer for these
  auto span = [&](int32_t inc) { return (u128(l.n - 1) * u128(inc < 0 ? -int64_t{inc} : inc) + 1) * 4; };
  if (span(l.incx) > kMaxGuestRangeBytes || !CheckRange(l.x, static_cast<uint64_t>(span(l.incx)), "x").ok())
    return BlasInvalid("vector x wraps the address space");
  if (two && (span(l.incy) > kMaxGuestRangeBytes || !CheckRange(l.y, static_cast<uint64_t>(span(l.incy)), "y").ok()))
    return BlasInvalid("vector y wraps the address space");
  return Status::Ok();
}

Status CheckLtMatmul(const LtMatmulArgs& m) {
  const std::pair<std::string_view, uint64_t> mats[] = {{m.p.adesc, m.a}, {m.p.bdesc, m.b}, {m.p.cdesc, m.c},
                                                        {m.p.ddesc, m.d}};
  const char* names[] = {"A", "B", "C", "D"};
  for (int i = 0; i < 4; ++i) {
    proto::LtAttrs a;
    if (!a.Decode(mats[i].first)) continue;
    const uint64_t rows = a.Get<uint64_t>(CUBLASLT_MATRIX_LAYOUT_ROWS, 0);
    const uint64_t cols = a.Get<uint64_t>(CUBLASLT_MATRIX_LAYOUT_COLS, 0);
    const int64_t ld = a.Get<int64_t>(CUBLASLT_MATRIX_LAYOUT_LD, 0);
    const int32_t batch = a.Get<int32_t>(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, 1);
    const int64_t stride = a.Get<int64_t>(CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, 0);
    const uint64_t elem = ElementBytes(static_cast<int32_t>(a.Get<uint32_t>(CUBLASLT_MATRIX_LAYOUT_TYPE, 0)));
    if (rows > kMaxGuestRangeBytes || cols > kMaxGuestRangeBytes || ld < 0 || batch < 0)
      return BlasInvalid(std::string("layout of ") + names[i] + " has a dimension out of range");
    // Row-major layouts swap the roles of rows and cols; the larger span of the two counts.
    u128 span = std::max(MatrixSpan(static_cast<int64_t>(rows), static_cast<int64_t>(cols), ld, elem),
                         MatrixSpan(static_cast<int64_t>(cols), static_cast<int64_t>(rows), ld, elem));
    RETURN_IF_ERROR(CheckBatch(names[i], mats[i].second, span, stride, elem, batch));
  }
  return Status::Ok();
}

}  // namespace smolvm
