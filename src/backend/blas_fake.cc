#include "backend/blas_fake.h"

#include <cublasLt.h>
#include <cublas_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backend/device_footprint.h"
#include "proto/lt_attrs.h"

namespace smolvm {
namespace {

float HalfToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: renormalize
      exp = 127 - 15 + 1;
      while (!(man & 0x400)) man <<= 1, --exp;
      bits = sign | (exp << 23) | ((man & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToHalf(float f) {  // round to nearest even
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow to inf
  if (ax < 0x38800000u) {  // subnormal or zero in half
    float af;
    std::memcpy(&af, &ax, 4);
    uint32_t h = static_cast<uint32_t>(std::nearbyint(af * 16777216.0f));  // / 2^-24
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t r = ax + 0xc8000fffu + ((ax >> 13) & 1);  // rebias exponent, round half to even
  return static_cast<uint16_t>(sign | (r >> 13));
}

float Bf16ToFloat(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

size_t TypeBytes(int32_t type) {
  switch (type) {
    case CUDA_R_32F: return 4;
    case CUDA_R_16F:
    case CUDA_R_16BF: return 2;
    default: return 0;
  }
}

bool Is32FCompute(int32_t compute) {
  switch (compute) {
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC:
    case CUBLAS_COMPUTE_32F_FAST_16F:
    case CUBLAS_COMPUTE_32F_FAST_16BF:
    case CUBLAS_COMPUTE_32F_FAST_TF32:
      return true;
    default:
      return false;
  }
}

// Elements a column-major rows x cols matrix with leading dimension ld spans.
uint64_t Span(int64_t rows, int64_t cols, int64_t ld) {
  if (rows <= 0 || cols <= 0) return 0;
  return static_cast<uint64_t>((cols - 1) * ld + rows);
}

float Gelu(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}

Status BlasNotSupported(const std::string& what) { return BlasError(CUBLAS_STATUS_NOT_SUPPORTED, what); }
Status BlasInvalidValue(const std::string& what) { return BlasError(CUBLAS_STATUS_INVALID_VALUE, what); }

// NOT_SUPPORTED past kFakeGemmMaxMacs. Sizes are non-negative and below 2^63:
// the product of four fits 128 bits only when each is below 2^32, which
// int32 dimensions are; batch/m/n of a matmul layout are checked first.
// k = 0 still scales every element of C by beta, so it counts as k = 1.
Status WithinFakeWork(const char* what, int64_t batch, int64_t m, int64_t n, int64_t k) {
  if (batch <= 0 || m <= 0 || n <= 0 || k < 0) return Status::Ok();
  k = std::max<int64_t>(k, 1);
  const bool huge = batch > INT32_MAX || m > INT32_MAX || n > INT32_MAX || k > INT32_MAX;
  const unsigned __int128 macs = static_cast<unsigned __int128>(batch) * static_cast<uint64_t>(m) *
                                 static_cast<uint64_t>(n) * static_cast<uint64_t>(k);
  if (huge || macs > kFakeGemmMaxMacs)
    return BlasNotSupported(std::string(what) + ": batch " + std::to_string(batch) + " x " + std::to_string(m) +
                            " x " + std::to_string(n) + " x " + std::to_string(k) +
                            " multiply-adds is past the fake's " + std::to_string(kFakeGemmMaxMacs) +
                            " per call (it computes on the CPU)");
  return Status::Ok();
}

}  // namespace

float BlasLoad(const void* base, int32_t type, int64_t i) {
  switch (type) {
    case CUDA_R_32F: return static_cast<const float*>(base)[i];
    case CUDA_R_16F: return HalfToFloat(static_cast<const uint16_t*>(base)[i]);
    case CUDA_R_16BF: return Bf16ToFloat(static_cast<const uint16_t*>(base)[i]);
    default: return 0;
  }
}

void BlasStore(void* base, int32_t type, int64_t i, float v) {
  switch (type) {
    case CUDA_R_32F: static_cast<float*>(base)[i] = v; break;
    case CUDA_R_16F: static_cast<uint16_t*>(base)[i] = FloatToHalf(v); break;
    case CUDA_R_16BF: static_cast<uint16_t*>(base)[i] = FloatToBf16(v); break;
    default: break;
  }
}

bool HostGemm(int32_t transa, int32_t transb, int32_t m, int32_t n, int32_t k, float alpha, const void* a,
              int32_t atype, int64_t lda, const void* b, int32_t btype, int64_t ldb, float beta, void* c,
              int32_t ctype, int64_t ldc) {
  if (!TypeBytes(atype) || !TypeBytes(btype) || !TypeBytes(ctype)) return false;
  for (int32_t j = 0; j < n; ++j) {
    for (int32_t i = 0; i < m; ++i) {
      float acc = 0;
      for (int32_t p = 0; p < k; ++p) {
        float x = BlasLoad(a, atype, transa == CUBLAS_OP_N ? i + p * lda : p + i * lda);
        float y = BlasLoad(b, btype, transb == CUBLAS_OP_N ? p + j * ldb : j + p * ldb);
        acc += x * y;
      }
      float out = alpha * acc;
      if (beta != 0) out += beta * BlasLoad(c, ctype, i + j * ldc);
      BlasStore(c, ctype, i + j * ldc, out);
    }
  }
  return true;
}

Result<char*> FakeBlasBackend::Device(uint64_t addr, uint64_t bytes, bool write) {
  if (bytes == 0) return static_cast<char*>(nullptr);
  RETURN_IF_ERROR(gpu_->KernelAccess(addr, bytes, write));
  return reinterpret_cast<char*>(addr);
}

Result<float> FakeBlasBackend::Scalar(std::string_view host, uint64_t dptr) {
  float v = 0;
  if (!host.empty()) {
    if (host.size() != 4) return BlasNotSupported("fake cuBLAS: scalars must be fp32");
    std::memcpy(&v, host.data(), 4);
    return v;
  }
  ASSIGN_OR_RETURN(char* p, Device(dptr, 4, false));
  std::memcpy(&v, p, 4);
  return v;
}

FakeBlasBackend::~FakeBlasBackend() {
  for (const auto& [h, rec] : handles_)
    gpu_->LibraryRelease(kFakeLibraryFootprint.blas_handle +
                         (rec.pool_held ? kFakeLibraryFootprint.blas_default_workspace : 0));
  gpu_->LibraryRelease(lt_handles_.size() * kFakeLibraryFootprint.lt_handle);
}

Result<uint64_t> FakeBlasBackend::Create() {
  if (!gpu_->LibraryReserve(kFakeLibraryFootprint.blas_handle + kFakeLibraryFootprint.blas_default_workspace))
    return BlasError(CUBLAS_STATUS_ALLOC_FAILED, "fake cuBLAS: device memory is full");
  uint64_t h = next_++;
  handles_[h] = Handle{};
  handles_[h].pool_held = true;
  return h;
}

Status FakeBlasBackend::Destroy(uint64_t handle) {
  auto it = handles_.find(handle);
  if (it == handles_.end()) return BlasError(CUBLAS_STATUS_NOT_INITIALIZED, "unknown handle");
  gpu_->LibraryRelease(kFakeLibraryFootprint.blas_handle +
                       (it->second.pool_held ? kFakeLibraryFootprint.blas_default_workspace : 0));
  handles_.erase(it);
  return Status::Ok();
}

Status FakeBlasBackend::UsePool(Handle& h) {
  if (h.workspace_set || h.pool_held) return Status::Ok();
  if (!gpu_->LibraryReserve(kFakeLibraryFootprint.blas_default_workspace))
    return BlasError(CUBLAS_STATUS_ALLOC_FAILED, "fake cuBLAS: no device memory for the default workspace");
  h.pool_held = true;
  return Status::Ok();
}

const FakeBlasBackend::Handle* FakeBlasBackend::Find(uint64_t handle) const {
  auto it = handles_.find(handle);
  return it == handles_.end() ? nullptr : &it->second;
}

Status FakeBlasBackend::SetStream(uint64_t handle, uint64_t stream) {
  auto it = handles_.find(handle);
  if (it == handles_.end()) return BlasError(CUBLAS_STATUS_NOT_INITIALIZED, "unknown handle");
  it->second.stream = stream;
  it->second.workspace_set = false;  // back to the default pool
  return Status::Ok();
}

Status FakeBlasBackend::SetMode(uint64_t handle, BlasMode what, int32_t value) {
  auto it = handles_.find(handle);
  if (it == handles_.end()) return BlasError(CUBLAS_STATUS_NOT_INITIALIZED, "unknown handle");
  switch (what) {
    case BlasMode::kMath: it->second.math = value; break;
    case BlasMode::kPointer: it->second.pointer = value; break;
    case BlasMode::kAtomics: it->second.atomics = value; break;
    default: return BlasInvalidValue("unknown mode");
  }
  return Status::Ok();
}

Status FakeBlasBackend::SetWorkspace(uint64_t handle, uint64_t dptr, uint64_t bytes) {
  auto it = handles_.find(handle);
  if (it == handles_.end()) return BlasError(CUBLAS_STATUS_NOT_INITIALIZED, "unknown handle");
  it->second.workspace = dptr;
  it->second.workspace_bytes = bytes;
  it->second.workspace_set = true;
  if (it->second.pool_held) gpu_->LibraryRelease(kFakeLibraryFootprint.blas_default_workspace);
  it->second.pool_held = false;
  return Status::Ok();
}

Status FakeBlasBackend::GetVersion(int32_t* blas, int32_t* lt) {
  *blas = CUBLAS_VERSION;
  *lt = CUBLAS_VERSION;
  return Status::Ok();
}

Status FakeBlasBackend::GemmOne(const BlasGemmArgs& g, float alpha, float beta, uint64_t a, uint64_t b,
                                uint64_t c) {
  int64_t arows = g.transa == CUBLAS_OP_N ? g.m : g.k, acols = g.transa == CUBLAS_OP_N ? g.k : g.m;
  int64_t brows = g.transb == CUBLAS_OP_N ? g.k : g.n, bcols = g.transb == CUBLAS_OP_N ? g.n : g.k;
  ASSIGN_OR_RETURN(char* pa, Device(a, Span(arows, acols, g.lda) * TypeBytes(g.atype), false));
  ASSIGN_OR_RETURN(char* pb, Device(b, Span(brows, bcols, g.ldb) * TypeBytes(g.btype), false));
  ASSIGN_OR_RETURN(char* pc, Device(c, Span(g.m, g.n, g.ldc) * TypeBytes(g.ctype), true));
  if (g.m == 0 || g.n == 0) return Status::Ok();
  if (g.k == 0) {  // C = beta * C
    for (int32_t j = 0; j < g.n; ++j)
      for (int32_t i = 0; i < g.m; ++i)
        BlasStore(pc, g.ctype, i + int64_t{j} * g.ldc, beta == 0 ? 0 : beta * BlasLoad(pc, g.ctype, i + int64_t{j} * g.ldc));
    return Status::Ok();
  }
  HostGemm(g.transa, g.transb, g.m, g.n, g.k, alpha, pa, g.atype, g.lda, pb, g.btype, g.ldb, beta, pc, g.ctype,
           g.ldc);
  return Status::Ok();
}

Status FakeBlasBackend::Gemm(uint64_t handle, const BlasGemmArgs& g) {
  auto it = handles_.find(handle);
  if (it == handles_.end()) return BlasError(CUBLAS_STATUS_NOT_INITIALIZED, "unknown handle");
  if (gpu_->Capturing(it->second.stream)) return BlasNotSupported("the fake cuBLAS cannot be captured into a graph");
  RETURN_IF_ERROR(UsePool(it->second));
  if (!Is32FCompute(g.compute)) return BlasNotSupported("fake cuBLAS computes in fp32 only");
  if (!TypeBytes(g.atype) || !TypeBytes(g.btype) || !TypeBytes(g.ctype))
    return BlasNotSupported("fake cuBLAS: types must be R_32F, R_16F or R_16BF");
  for (int32_t t : {g.transa, g.transb})
    if (t != CUBLAS_OP_N && t != CUBLAS_OP_T && t != CUBLAS_OP_C) return BlasInvalidValue("bad transpose");
  if (g.m < 0 || g.n < 0 || g.k < 0 || g.batch < 0) return BlasInvalidValue("negative dimension");
  const bool batched = g.fn != BlasGemmFn::kGemmEx && g.fn != BlasGemmFn::kSgemm;
  RETURN_IF_ERROR(WithinFakeWork("fake cuBLAS GEMM", batched ? g.batch : 1, g.m, g.n, g.k));
  ASSIGN_OR_RETURN(float alpha, Scalar(g.scalars.alpha, g.scalars.alpha_ptr));
  ASSIGN_OR_RETURN(float beta, Scalar(g.scalars.beta, g.scalars.beta_ptr));
  switch (g.fn) {
    case BlasGemmFn::kGemmEx:
    case BlasGemmFn::kSgemm:
      return GemmOne(g, alpha, beta, g.a, g.b, g.c);
    case BlasGemmFn::kGemmStridedBatchedEx:
    case BlasGemmFn::kSgemmStridedBatched:
      for (int32_t i = 0; i < g.batch; ++i) {
        RETURN_IF_ERROR(GemmOne(g, alpha, beta, g.a + i * g.stride_a * TypeBytes(g.atype),
                                g.b + i * g.stride_b * TypeBytes(g.btype), g.c + i * g.stride_c * TypeBytes(g.ctype)));
      }
      return Status::Ok();
    case BlasGemmFn::kGemmBatchedEx: {
      uint64_t bytes = uint64_t(g.batch) * 8;
      ASSIGN_OR_RETURN(char* pa, Device(g.a, bytes, false));
      ASSIGN_OR_RETURN(char* pb, Device(g.b, bytes, false));
      ASSIGN_OR_RETURN(char* pc, Device(g.c, bytes, false));
      for (int32_t i = 0; i < g.batch; ++i) {
        uint64_t a, b, c;
        std::memcpy(&a, pa + 8 * i, 8);
        std::memcpy(&b, pb + 8 * i, 8);
        std::memcpy(&c, pc + 8 * i, 8);
        RETURN_IF_ERROR(GemmOne(g, alpha, beta, a, b, c));
      }
      return Status::Ok();
    }
  }
  return BlasInvalidValue("unknown gemm function");
}

Status FakeBlasBackend::Level1(uint64_t handle, const BlasLevel1Args& l, float* host_result) {
  auto it = handles_.find(handle);
  if (it == handles_.end()) return BlasError(CUBLAS_STATUS_NOT_INITIALIZED, "unknown handle");
  if (gpu_->Capturing(it->second.stream)) return BlasNotSupported("the fake cuBLAS cannot be captured into a graph");
  RETURN_IF_ERROR(UsePool(it->second));
  if (l.n <= 0) {
    if (host_result) *host_result = 0;
    if (l.result && (l.fn == BlasLevel1Fn::kSdot || l.fn == BlasLevel1Fn::kSnrm2)) {
      ASSIGN_OR_RETURN(char* r, Device(l.result, 4, true));
      std::memset(r, 0, 4);
    }
    return Status::Ok();
  }
  if (l.incx == 0 || (l.fn != BlasLevel1Fn::kSscal && l.fn != BlasLevel1Fn::kSnrm2 && l.incy == 0))
    return BlasInvalidValue("zero increment");
  auto at = [&](int32_t i, int32_t inc) { return inc > 0 ? int64_t{i} * inc : int64_t{l.n - 1 - i} * -inc; };
  uint64_t xbytes = (uint64_t(l.n - 1) * std::abs(l.incx) + 1) * 4;
  uint64_t ybytes = (uint64_t(l.n - 1) * std::abs(l.incy) + 1) * 4;
  bool writes_x = l.fn == BlasLevel1Fn::kSscal;
  ASSIGN_OR_RETURN(char* px, Device(l.x, xbytes, writes_x));
  float* x = reinterpret_cast<float*>(px);
  float out = 0;
  switch (l.fn) {
    case BlasLevel1Fn::kSaxpy: {
      ASSIGN_OR_RETURN(float a, Scalar(l.alpha.alpha, l.alpha.alpha_ptr));
      ASSIGN_OR_RETURN(char* py, Device(l.y, ybytes, true));
      float* y = reinterpret_cast<float*>(py);
      for (int32_t i = 0; i < l.n; ++i) y[at(i, l.incy)] += a * x[at(i, l.incx)];
      return Status::Ok();
    }
    case BlasLevel1Fn::kSscal: {
      ASSIGN_OR_RETURN(float a, Scalar(l.alpha.alpha, l.alpha.alpha_ptr));
      for (int32_t i = 0; i < l.n; ++i) x[at(i, l.incx)] *= a;
      return Status::Ok();
    }
    case BlasLevel1Fn::kSdot: {
      ASSIGN_OR_RETURN(char* py, Device(l.y, ybytes, false));
      float* y = reinterpret_cast<float*>(py);
      for (int32_t i = 0; i < l.n; ++i) out += x[at(i, l.incx)] * y[at(i, l.incy)];
      break;
    }
    case BlasLevel1Fn::kSnrm2: {
      double s = 0;
      for (int32_t i = 0; i < l.n; ++i) s += double(x[at(i, l.incx)]) * x[at(i, l.incx)];
      out = static_cast<float>(std::sqrt(s));
      break;
    }
    default:
      return BlasInvalidValue("unknown level-1 function");
  }
  if (l.result) {
    ASSIGN_OR_RETURN(char* r, Device(l.result, 4, true));
    std::memcpy(r, &out, 4);
  } else if (host_result) {
    *host_result = out;
  }
  return Status::Ok();
}

Result<uint64_t> FakeBlasBackend::LtCreate() {
  if (!gpu_->LibraryReserve(kFakeLibraryFootprint.lt_handle))
    return BlasError(CUBLAS_STATUS_ALLOC_FAILED, "fake cuBLASLt: device memory is full");
  uint64_t h = next_++;
  lt_handles_.insert(h);
  return h;
}

Status FakeBlasBackend::LtDestroy(uint64_t handle) {
  if (!lt_handles_.erase(handle)) return BlasError(CUBLAS_STATUS_NOT_INITIALIZED, "unknown Lt handle");
  gpu_->LibraryRelease(kFakeLibraryFootprint.lt_handle);
  return Status::Ok();
}

namespace {

struct FakeLayout {
  int32_t type = 0;
  int64_t rows = 0, cols = 0, ld = 0, stride = 0;
  int32_t batch = 1;
};

Result<FakeLayout> ParseLayout(std::string_view blob) {
  proto::LtAttrs a;
  if (!a.Decode(blob)) return BlasInvalidValue("matrix layout does not decode");
  FakeLayout l;
  l.type = static_cast<int32_t>(a.Get<uint32_t>(CUBLASLT_MATRIX_LAYOUT_TYPE, 0));
  l.rows = static_cast<int64_t>(a.Get<uint64_t>(CUBLASLT_MATRIX_LAYOUT_ROWS, 0));
  l.cols = static_cast<int64_t>(a.Get<uint64_t>(CUBLASLT_MATRIX_LAYOUT_COLS, 0));
  l.ld = a.Get<int64_t>(CUBLASLT_MATRIX_LAYOUT_LD, 0);
  l.batch = a.Get<int32_t>(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, 1);
  l.stride = a.Get<int64_t>(CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, 0);
  if (a.Get<int32_t>(CUBLASLT_MATRIX_LAYOUT_ORDER, CUBLASLT_ORDER_COL) != CUBLASLT_ORDER_COL)
    return BlasNotSupported("fake cuBLASLt: column-major layouts only");
  if (!TypeBytes(l.type)) return BlasNotSupported("fake cuBLASLt: types must be R_32F, R_16F or R_16BF");
  if (l.rows < 0 || l.cols < 0 || l.ld < std::max<int64_t>(1, l.rows) || l.batch < 1)
    return BlasInvalidValue("bad matrix layout");
  return l;
}

}  // namespace

Status FakeBlasBackend::LtMatmul(uint64_t handle, const LtMatmulArgs& args) {
  if (!lt_handles_.count(handle)) return BlasError(CUBLAS_STATUS_NOT_INITIALIZED, "unknown Lt handle");
  if (gpu_->Capturing(args.stream)) return BlasNotSupported("the fake cuBLASLt cannot be captured into a graph");
  proto::LtAttrs desc;
  if (!desc.Decode(args.p.desc)) return BlasInvalidValue("matmul descriptor does not decode");
  if (!Is32FCompute(desc.Get<int32_t>(CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, 0)))
    return BlasNotSupported("fake cuBLASLt computes in fp32 only");
  ASSIGN_OR_RETURN(FakeLayout la, ParseLayout(args.p.adesc));
  ASSIGN_OR_RETURN(FakeLayout lb, ParseLayout(args.p.bdesc));
  ASSIGN_OR_RETURN(FakeLayout lc, ParseLayout(args.p.cdesc));
  ASSIGN_OR_RETURN(FakeLayout ld, ParseLayout(args.p.ddesc));
  int32_t ta = desc.Get<int32_t>(CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_N);
  int32_t tb = desc.Get<int32_t>(CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  uint32_t epi = desc.Get<uint32_t>(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_DEFAULT);
  bool relu = false, gelu = false, bias = false;
  switch (epi) {
    case CUBLASLT_EPILOGUE_DEFAULT: break;
    case CUBLASLT_EPILOGUE_RELU: relu = true; break;
    case CUBLASLT_EPILOGUE_GELU: gelu = true; break;
    case CUBLASLT_EPILOGUE_BIAS: bias = true; break;
    case CUBLASLT_EPILOGUE_RELU_BIAS: relu = bias = true; break;
    case CUBLASLT_EPILOGUE_GELU_BIAS: gelu = bias = true; break;
    default: return BlasNotSupported("fake cuBLASLt: epilogue " + std::to_string(epi));
  }
  int64_t m = ld.rows, n = ld.cols;
  int64_t k = ta == CUBLAS_OP_N ? la.cols : la.rows;
  if ((ta == CUBLAS_OP_N ? la.rows : la.cols) != m || (tb == CUBLAS_OP_N ? lb.rows : lb.cols) != k ||
      (tb == CUBLAS_OP_N ? lb.cols : lb.rows) != n || lc.rows != m || lc.cols != n)
    return BlasInvalidValue("fake cuBLASLt: layouts do not describe one matmul");
  int32_t batch = ld.batch;
  if (la.batch != batch || lb.batch != batch || lc.batch != batch) return BlasInvalidValue("batch counts differ");
  RETURN_IF_ERROR(WithinFakeWork("fake cuBLASLt matmul", batch, m, n, k));
  ASSIGN_OR_RETURN(float alpha, Scalar(args.scalars.alpha, args.scalars.alpha_ptr));
  ASSIGN_OR_RETURN(float beta, Scalar(args.scalars.beta, args.scalars.beta_ptr));
  const char* pbias = nullptr;
  int32_t bias_type = desc.Get<int32_t>(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, ld.type);
  if (bias) {
    uint64_t bias_ptr = desc.Get<uint64_t>(CUBLASLT_MATMUL_DESC_BIAS_POINTER, 0);
    if (!TypeBytes(bias_type)) return BlasNotSupported("fake cuBLASLt: bias type");
    ASSIGN_OR_RETURN(char* p, Device(bias_ptr, uint64_t(m) * TypeBytes(bias_type), false));
    pbias = p;
  }
  for (int32_t bi = 0; bi < batch; ++bi) {
    uint64_t a = args.a + bi * la.stride * TypeBytes(la.type);
    uint64_t b = args.b + bi * lb.stride * TypeBytes(lb.type);
    uint64_t c = args.c + bi * lc.stride * TypeBytes(lc.type);
    uint64_t d = args.d + bi * ld.stride * TypeBytes(ld.type);
    ASSIGN_OR_RETURN(char* pa, Device(a, Span(la.rows, la.cols, la.ld) * TypeBytes(la.type), false));
    ASSIGN_OR_RETURN(char* pb, Device(b, Span(lb.rows, lb.cols, lb.ld) * TypeBytes(lb.type), false));
    char* pc = nullptr;
    if (beta != 0) {
      ASSIGN_OR_RETURN(pc, Device(c, Span(lc.rows, lc.cols, lc.ld) * TypeBytes(lc.type), false));
    }
    ASSIGN_OR_RETURN(char* pd, Device(d, Span(ld.rows, ld.cols, ld.ld) * TypeBytes(ld.type), true));
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t i = 0; i < m; ++i) {
        float acc = 0;
        for (int64_t p = 0; p < k; ++p)
          acc += BlasLoad(pa, la.type, ta == CUBLAS_OP_N ? i + p * la.ld : p + i * la.ld) *
                 BlasLoad(pb, lb.type, tb == CUBLAS_OP_N ? p + j * lb.ld : j + p * lb.ld);
        float v = alpha * acc;
        if (pc) v += beta * BlasLoad(pc, lc.type, i + j * lc.ld);
        if (pbias) v += BlasLoad(pbias, bias_type, i);
        if (relu) v = v > 0 ? v : 0;
        if (gelu) v = Gelu(v);
        BlasStore(pd, ld.type, i + j * ld.ld, v);
      }
    }
  }
  return Status::Ok();
}

Status FakeBlasBackend::LtHeuristic(uint64_t handle, const LtProblem& p, std::string_view pref, int32_t requested,
                                    int32_t* count, std::string* results) {
  if (!lt_handles_.count(handle)) return BlasError(CUBLAS_STATUS_NOT_INITIALIZED, "unknown Lt handle");
  proto::LtAttrs d;
  if (!d.Decode(p.desc)) return BlasInvalidValue("matmul descriptor does not decode");
  for (std::string_view l : {p.adesc, p.bdesc, p.cdesc, p.ddesc}) RETURN_IF_ERROR(ParseLayout(l).status());
  if (requested < 1) return BlasInvalidValue("requested < 1");
  cublasLtMatmulHeuristicResult_t r{};
  r.algo.data[0] = 0x66616b65;  // "fake"
  r.workspaceSize = 0;
  r.state = CUBLAS_STATUS_SUCCESS;
  r.wavesCount = 1.0f;
  results->append(reinterpret_cast<const char*>(&r), sizeof r);
  *count = 1;
  return Status::Ok();
}

}  // namespace smolvm
