#include "backend/blas_cuda.h"

#include <cublasLt.h>
#include <cublas_api.h>
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/diagnostics.h"
#include "backend/cuda_driver.h"
#include "backend/path_env.h"
#include "proto/lt_attrs.h"

namespace smolvm {

#define SMOLVM_CUBLAS_FNS(X)                                                                          \
  X(cublasCreate_v2) X(cublasDestroy_v2) X(cublasSetStream_v2) X(cublasSetMathMode)                  \
  X(cublasSetPointerMode_v2) X(cublasSetAtomicsMode) X(cublasSetWorkspace_v2) X(cublasGetProperty)   \
  X(cublasSgemm_v2)                                                                                   \
  X(cublasSgemmStridedBatched) X(cublasSaxpy_v2) X(cublasSscal_v2) X(cublasSdot_v2) X(cublasSnrm2_v2)
#define SMOLVM_CUBLASLT_FNS(X)                                                                        \
  X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtGetVersion) X(cublasLtMatmul)                       \
  X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy)         \
  X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy)     \
  X(cublasLtMatrixLayoutSetAttribute) X(cublasLtMatmulPreferenceCreate)                              \
  X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulPreferenceSetAttribute)

struct BlasLibraries {
  std::string blas_path, lt_path;
  void* blas_dl = nullptr;
  void* lt_dl = nullptr;
#define SMOLVM_BLAS_MEMBER(fn) decltype(&::fn) fn = nullptr;
  SMOLVM_CUBLAS_FNS(SMOLVM_BLAS_MEMBER)
  SMOLVM_CUBLASLT_FNS(SMOLVM_BLAS_MEMBER)
#undef SMOLVM_BLAS_MEMBER
  // cublas_api.h overloads these three for C++ (a cudaDataType compute type):
  // name the exported C prototype explicitly.
  cublasStatus_t (*cublasGemmEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                 const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                 cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  cublasStatus_t (*cublasGemmStridedBatchedEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                               const void*, const void*, cudaDataType, int, long long, const void*,
                                               cudaDataType, int, long long, const void*, void*, cudaDataType, int,
                                               long long, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  cublasStatus_t (*cublasGemmBatchedEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                        const void*, const void* const[], cudaDataType, int, const void* const[],
                                        cudaDataType, int, const void*, void* const[], cudaDataType, int, int,
                                        cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
};

namespace {

Status Check(cublasStatus_t st, const char* call) {
  if (st == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return BlasError(st, std::string(call) + " returned " + std::to_string(static_cast<int>(st)));
}

Result<void*> Open(const std::string& soname, const std::string& override_path, std::string* path) {
  std::string dirs = Env("SMOLVM_CUDA_LIBS");  // the torch install under test, first
  std::vector<std::string> tried =
      BlasLibraryCandidates(soname, override_path, dirs.empty() ? Env("LD_LIBRARY_PATH") : dirs + ":" + Env("LD_LIBRARY_PATH"));
  std::string list;
  for (const std::string& c : tried) {
    list += (list.empty() ? "" : ", ") + c;
    if (!Exists(c)) continue;
    void* dl = ::dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (dl == nullptr) {
      const char* e = ::dlerror();
      return Unavailable("dlopen " + c + ": " + (e ? e : "?"));
    }
    *path = c;
    return dl;
  }
  return Unavailable(soname + " not found; tried " + list + "; set SMOLVM_LIBCUBLAS / SMOLVM_LIBCUBLASLT");
}

// Host scalars arrive unaligned inside the frame: copy them out first.
struct HostScalar {
  alignas(16) char bytes[16] = {};
  const void* Ptr(std::string_view host, uint64_t dptr) {
    if (host.empty()) return reinterpret_cast<const void*>(dptr);
    std::memcpy(bytes, host.data(), std::min(host.size(), sizeof bytes));
    return bytes;
  }
};

}  // namespace

std::vector<std::string> BlasLibraryCandidates(const std::string& soname, const std::string& override_path,
                                               const std::string& ld_library_path) {
  std::vector<std::string> out;
  auto add = [&](const std::string& file) {
    if (!Exists(DirOf(file) + "/.smolvm-shim")) out.push_back(file);
  };
  if (!override_path.empty()) {
    out.push_back(override_path);  // taken as given, even from a marked directory
    return out;
  }
  size_t start = 0;
  while (start <= ld_library_path.size()) {
    size_t end = ld_library_path.find(':', start);
    if (end == std::string::npos) end = ld_library_path.size();
    std::string dir = ld_library_path.substr(start, end - start);
    if (!dir.empty()) add(dir + "/" + soname);
    start = end + 1;
  }
  for (const std::string& p : LdSoCacheLookup("/etc/ld.so.cache", soname)) add(p);
  for (const char* dir : {"/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib",
                          "/usr/local/cuda/targets/sbsa-linux/lib", "/usr/lib/x86_64-linux-gnu"})
    add(std::string(dir) + "/" + soname);
  return out;
}

Result<std::unique_ptr<CudaBlasBackend>> CudaBlasBackend::Load() {
  auto lib = std::make_unique<BlasLibraries>();
  std::string blas_override = Env("SMOLVM_LIBCUBLAS"), lt_override = Env("SMOLVM_LIBCUBLASLT");
  if (lt_override.empty() && !blas_override.empty() && Exists(DirOf(blas_override) + "/libcublasLt.so.13"))
    lt_override = DirOf(blas_override) + "/libcublasLt.so.13";
  ASSIGN_OR_RETURN(lib->lt_dl, Open("libcublasLt.so.13", lt_override, &lib->lt_path));
  ASSIGN_OR_RETURN(lib->blas_dl, Open("libcublas.so.13", blas_override, &lib->blas_path));
  std::string missing;
#define SMOLVM_BLAS_RESOLVE_IN(dl, fn)                                 \
  lib->fn = reinterpret_cast<decltype(lib->fn)>(::dlsym(dl, #fn));     \
  if (lib->fn == nullptr) missing += std::string(missing.empty() ? "" : ", ") + #fn;
#define SMOLVM_BLAS_RESOLVE(fn) SMOLVM_BLAS_RESOLVE_IN(lib->blas_dl, fn)
#define SMOLVM_LT_RESOLVE(fn) SMOLVM_BLAS_RESOLVE_IN(lib->lt_dl, fn)
  SMOLVM_CUBLAS_FNS(SMOLVM_BLAS_RESOLVE)
  SMOLVM_BLAS_RESOLVE(cublasGemmEx)
  SMOLVM_BLAS_RESOLVE(cublasGemmStridedBatchedEx)
  SMOLVM_BLAS_RESOLVE(cublasGemmBatchedEx)
  SMOLVM_CUBLASLT_FNS(SMOLVM_LT_RESOLVE)
#undef SMOLVM_LT_RESOLVE
#undef SMOLVM_BLAS_RESOLVE
#undef SMOLVM_BLAS_RESOLVE_IN
  if (!missing.empty()) return Unavailable(lib->blas_path + " / " + lib->lt_path + " lack " + missing);
  std::unique_ptr<CudaBlasBackend> b(new CudaBlasBackend());
  b->lib_ = std::move(lib);
  int32_t v = 0, lt = 0;
  if (b->GetVersion(&v, &lt).ok())  // the daemon log records what the workers run
    std::fprintf(Diagnostics(), "smolvm worker %d: cuBLAS %d from %s, cuBLASLt %d from %s\n", ::getpid(), v,
                 b->lib_->blas_path.c_str(), lt, b->lib_->lt_path.c_str());
  return b;
}

CudaBlasBackend::~CudaBlasBackend() {
  if (!lib_) return;
  for (auto& [k, v] : cache_[0]) lib_->cublasLtMatmulDescDestroy(static_cast<cublasLtMatmulDesc_t>(v));
  for (auto& [k, v] : cache_[1]) lib_->cublasLtMatrixLayoutDestroy(static_cast<cublasLtMatrixLayout_t>(v));
  for (auto& [k, v] : cache_[2]) lib_->cublasLtMatmulPreferenceDestroy(static_cast<cublasLtMatmulPreference_t>(v));
  // The libraries stay loaded: their atexit handlers and threads outlive us.
}

static cublasHandle_t H(uint64_t h) { return reinterpret_cast<cublasHandle_t>(h); }

Result<uint64_t> CudaBlasBackend::Create() {
  cublasHandle_t h = nullptr;
  RETURN_IF_ERROR(Check(lib_->cublasCreate_v2(&h), "cublasCreate"));
  return reinterpret_cast<uint64_t>(h);
}

Status CudaBlasBackend::Destroy(uint64_t h) { return Check(lib_->cublasDestroy_v2(H(h)), "cublasDestroy"); }

Status CudaBlasBackend::SetStream(uint64_t h, uint64_t stream) {
  return Check(lib_->cublasSetStream_v2(H(h), reinterpret_cast<cudaStream_t>(stream)), "cublasSetStream");
}

Status CudaBlasBackend::SetMode(uint64_t h, BlasMode what, int32_t v) {
  switch (what) {
    case BlasMode::kMath: return Check(lib_->cublasSetMathMode(H(h), static_cast<cublasMath_t>(v)), "cublasSetMathMode");
    case BlasMode::kPointer:
      return Check(lib_->cublasSetPointerMode_v2(H(h), static_cast<cublasPointerMode_t>(v)), "cublasSetPointerMode");
    case BlasMode::kAtomics:
      return Check(lib_->cublasSetAtomicsMode(H(h), static_cast<cublasAtomicsMode_t>(v)), "cublasSetAtomicsMode");
  }
  return BlasError(CUBLAS_STATUS_INVALID_VALUE, "unknown mode");
}

Status CudaBlasBackend::SetWorkspace(uint64_t h, uint64_t dptr, uint64_t bytes) {
  return Check(lib_->cublasSetWorkspace_v2(H(h), reinterpret_cast<void*>(dptr), bytes), "cublasSetWorkspace");
}

Status CudaBlasBackend::GetVersion(int32_t* blas, int32_t* lt) {
  int major = 0, minor = 0, patch = 0;
  RETURN_IF_ERROR(Check(lib_->cublasGetProperty(MAJOR_VERSION, &major), "cublasGetProperty"));
  RETURN_IF_ERROR(Check(lib_->cublasGetProperty(MINOR_VERSION, &minor), "cublasGetProperty"));
  RETURN_IF_ERROR(Check(lib_->cublasGetProperty(PATCH_LEVEL, &patch), "cublasGetProperty"));
  *blas = major * 10000 + minor * 100 + patch;
  *lt = static_cast<int32_t>(lib_->cublasLtGetVersion());
  return Status::Ok();
}

Status CudaBlasBackend::Gemm(uint64_t h, const BlasGemmArgs& g) {
  HostScalar alpha_s, beta_s;
  const void* alpha = alpha_s.Ptr(g.scalars.alpha, g.scalars.alpha_ptr);
  const void* beta = beta_s.Ptr(g.scalars.beta, g.scalars.beta_ptr);
  auto ta = static_cast<cublasOperation_t>(g.transa), tb = static_cast<cublasOperation_t>(g.transb);
  auto at = static_cast<cudaDataType>(g.atype), bt = static_cast<cudaDataType>(g.btype),
       ct = static_cast<cudaDataType>(g.ctype);
  auto compute = static_cast<cublasComputeType_t>(g.compute);
  auto algo = static_cast<cublasGemmAlgo_t>(g.algo);
  auto p = [](uint64_t a) { return reinterpret_cast<void*>(a); };
  switch (g.fn) {
    case BlasGemmFn::kGemmEx:
      return Check(lib_->cublasGemmEx(H(h), ta, tb, g.m, g.n, g.k, alpha, p(g.a), at, g.lda, p(g.b), bt, g.ldb, beta,
                                      p(g.c), ct, g.ldc, compute, algo),
                   "cublasGemmEx");
    case BlasGemmFn::kGemmStridedBatchedEx:
      return Check(lib_->cublasGemmStridedBatchedEx(H(h), ta, tb, g.m, g.n, g.k, alpha, p(g.a), at, g.lda, g.stride_a,
                                                    p(g.b), bt, g.ldb, g.stride_b, beta, p(g.c), ct, g.ldc,
                                                    g.stride_c, g.batch, compute, algo),
                   "cublasGemmStridedBatchedEx");
    case BlasGemmFn::kGemmBatchedEx:
      return Check(lib_->cublasGemmBatchedEx(H(h), ta, tb, g.m, g.n, g.k, alpha,
                                             static_cast<const void* const*>(p(g.a)), at, g.lda,
                                             static_cast<const void* const*>(p(g.b)), bt, g.ldb, beta,
                                             static_cast<void* const*>(p(g.c)), ct, g.ldc, g.batch, compute, algo),
                   "cublasGemmBatchedEx");
    case BlasGemmFn::kSgemm:
      return Check(lib_->cublasSgemm_v2(H(h), ta, tb, g.m, g.n, g.k, static_cast<const float*>(alpha),
                                        static_cast<const float*>(p(g.a)), g.lda, static_cast<const float*>(p(g.b)),
                                        g.ldb, static_cast<const float*>(beta), static_cast<float*>(p(g.c)), g.ldc),
                   "cublasSgemm");
    case BlasGemmFn::kSgemmStridedBatched:
      return Check(lib_->cublasSgemmStridedBatched(
                       H(h), ta, tb, g.m, g.n, g.k, static_cast<const float*>(alpha),
                       static_cast<const float*>(p(g.a)), g.lda, g.stride_a, static_cast<const float*>(p(g.b)), g.ldb,
                       g.stride_b, static_cast<const float*>(beta), static_cast<float*>(p(g.c)), g.ldc, g.stride_c,
                       g.batch),
                   "cublasSgemmStridedBatched");
  }
  return BlasError(CUBLAS_STATUS_INVALID_VALUE, "unknown gemm function");
}

Status CudaBlasBackend::Level1(uint64_t h, const BlasLevel1Args& l, float* host_result) {
  HostScalar alpha_s;
  auto alpha = static_cast<const float*>(alpha_s.Ptr(l.alpha.alpha, l.alpha.alpha_ptr));
  auto x = reinterpret_cast<float*>(l.x);
  auto y = reinterpret_cast<float*>(l.y);
  float* result = l.result ? reinterpret_cast<float*>(l.result) : host_result;
  switch (l.fn) {
    case BlasLevel1Fn::kSaxpy: return Check(lib_->cublasSaxpy_v2(H(h), l.n, alpha, x, l.incx, y, l.incy), "cublasSaxpy");
    case BlasLevel1Fn::kSscal: return Check(lib_->cublasSscal_v2(H(h), l.n, alpha, x, l.incx), "cublasSscal");
    case BlasLevel1Fn::kSdot: return Check(lib_->cublasSdot_v2(H(h), l.n, x, l.incx, y, l.incy, result), "cublasSdot");
    case BlasLevel1Fn::kSnrm2: return Check(lib_->cublasSnrm2_v2(H(h), l.n, x, l.incx, result), "cublasSnrm2");
  }
  return BlasError(CUBLAS_STATUS_INVALID_VALUE, "unknown level-1 function");
}

Result<uint64_t> CudaBlasBackend::LtCreate() {
  cublasLtHandle_t h = nullptr;
  RETURN_IF_ERROR(Check(lib_->cublasLtCreate(&h), "cublasLtCreate"));
  return reinterpret_cast<uint64_t>(h);
}

Status CudaBlasBackend::LtDestroy(uint64_t h) {
  return Check(lib_->cublasLtDestroy(reinterpret_cast<cublasLtHandle_t>(h)), "cublasLtDestroy");
}

Result<void*> CudaBlasBackend::Rebuild(Kind kind, std::string_view blob) {
  auto& cache = cache_[static_cast<int>(kind)];
  std::string key(blob);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  proto::LtAttrs a;
  if (!a.Decode(blob)) return BlasError(CUBLAS_STATUS_INVALID_VALUE, "descriptor does not decode");
  if (cache.size() >= 4096) {
    // A program that builds ever-new descriptors: start over rather than grow.
    for (auto& [k, v] : cache) {
      if (kind == Kind::kDesc) lib_->cublasLtMatmulDescDestroy(static_cast<cublasLtMatmulDesc_t>(v));
      if (kind == Kind::kLayout) lib_->cublasLtMatrixLayoutDestroy(static_cast<cublasLtMatrixLayout_t>(v));
      if (kind == Kind::kPref) lib_->cublasLtMatmulPreferenceDestroy(static_cast<cublasLtMatmulPreference_t>(v));
    }
    cache.clear();
  }
  void* obj = nullptr;
  Status st;
  switch (kind) {
    case Kind::kDesc: {
      cublasLtMatmulDesc_t d = nullptr;
      RETURN_IF_ERROR(Check(lib_->cublasLtMatmulDescCreate(
                                &d, static_cast<cublasComputeType_t>(a.Get<int32_t>(CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, 0)),
                                static_cast<cudaDataType_t>(a.Get<int32_t>(CUBLASLT_MATMUL_DESC_SCALE_TYPE, 0))),
                            "cublasLtMatmulDescCreate"));
      for (const auto& [attr, v] : a.attrs()) {
        if (attr == CUBLASLT_MATMUL_DESC_COMPUTE_TYPE || attr == CUBLASLT_MATMUL_DESC_SCALE_TYPE) continue;
        if (st.ok())
          st = Check(lib_->cublasLtMatmulDescSetAttribute(d, static_cast<cublasLtMatmulDescAttributes_t>(attr),
                                                          v.data(), v.size()),
                     "cublasLtMatmulDescSetAttribute");
      }
      if (!st.ok()) lib_->cublasLtMatmulDescDestroy(d);
      obj = d;
      break;
    }
    case Kind::kLayout: {
      cublasLtMatrixLayout_t l = nullptr;
      RETURN_IF_ERROR(Check(lib_->cublasLtMatrixLayoutCreate(
                                &l, static_cast<cudaDataType>(a.Get<uint32_t>(CUBLASLT_MATRIX_LAYOUT_TYPE, 0)),
                                a.Get<uint64_t>(CUBLASLT_MATRIX_LAYOUT_ROWS, 0),
                                a.Get<uint64_t>(CUBLASLT_MATRIX_LAYOUT_COLS, 0),
                                a.Get<int64_t>(CUBLASLT_MATRIX_LAYOUT_LD, 0)),
                            "cublasLtMatrixLayoutCreate"));
      for (const auto& [attr, v] : a.attrs()) {
        if (attr <= CUBLASLT_MATRIX_LAYOUT_LD && attr != CUBLASLT_MATRIX_LAYOUT_ORDER) continue;
        if (st.ok())
          st = Check(lib_->cublasLtMatrixLayoutSetAttribute(l, static_cast<cublasLtMatrixLayoutAttribute_t>(attr),
                                                            v.data(), v.size()),
                     "cublasLtMatrixLayoutSetAttribute");
      }
      if (!st.ok()) lib_->cublasLtMatrixLayoutDestroy(l);
      obj = l;
      break;
    }
    case Kind::kPref: {
      cublasLtMatmulPreference_t p = nullptr;
      RETURN_IF_ERROR(Check(lib_->cublasLtMatmulPreferenceCreate(&p), "cublasLtMatmulPreferenceCreate"));
      for (const auto& [attr, v] : a.attrs()) {
        if (st.ok())
          st = Check(lib_->cublasLtMatmulPreferenceSetAttribute(
                         p, static_cast<cublasLtMatmulPreferenceAttributes_t>(attr), v.data(), v.size()),
                     "cublasLtMatmulPreferenceSetAttribute");
      }
      if (!st.ok()) lib_->cublasLtMatmulPreferenceDestroy(p);
      obj = p;
      break;
    }
  }
  RETURN_IF_ERROR(st);
  cache.emplace(std::move(key), obj);
  return obj;
}

Status CudaBlasBackend::LtMatmul(uint64_t h, const LtMatmulArgs& m) {
  ASSIGN_OR_RETURN(void* desc, Rebuild(Kind::kDesc, m.p.desc));
  ASSIGN_OR_RETURN(void* ad, Rebuild(Kind::kLayout, m.p.adesc));
  ASSIGN_OR_RETURN(void* bd, Rebuild(Kind::kLayout, m.p.bdesc));
  ASSIGN_OR_RETURN(void* cd, Rebuild(Kind::kLayout, m.p.cdesc));
  ASSIGN_OR_RETURN(void* dd, Rebuild(Kind::kLayout, m.p.ddesc));
  HostScalar alpha_s, beta_s;
  cublasLtMatmulAlgo_t algo;
  if (!m.algo.empty()) {
    if (m.algo.size() != sizeof algo) return BlasError(CUBLAS_STATUS_INVALID_VALUE, "algo is not 64 bytes");
    std::memcpy(&algo, m.algo.data(), sizeof algo);
  }
  auto L = [](void* p) { return static_cast<cublasLtMatrixLayout_t>(p); };
  auto p = [](uint64_t a) { return reinterpret_cast<void*>(a); };
  return Check(lib_->cublasLtMatmul(reinterpret_cast<cublasLtHandle_t>(h), static_cast<cublasLtMatmulDesc_t>(desc),
                                    alpha_s.Ptr(m.scalars.alpha, m.scalars.alpha_ptr), p(m.a), L(ad), p(m.b), L(bd),
                                    beta_s.Ptr(m.scalars.beta, m.scalars.beta_ptr), p(m.c), L(cd), p(m.d), L(dd),
                                    m.algo.empty() ? nullptr : &algo, p(m.workspace), m.workspace_bytes,
                                    reinterpret_cast<cudaStream_t>(m.stream)),
               "cublasLtMatmul");
}

Status CudaBlasBackend::LtHeuristic(uint64_t h, const LtProblem& pr, std::string_view pref, int32_t requested,
                                    int32_t* count, std::string* results) {
  if (requested < 1 || requested > 1024) return BlasError(CUBLAS_STATUS_INVALID_VALUE, "requested out of range");
  ASSIGN_OR_RETURN(void* desc, Rebuild(Kind::kDesc, pr.desc));
  ASSIGN_OR_RETURN(void* ad, Rebuild(Kind::kLayout, pr.adesc));
  ASSIGN_OR_RETURN(void* bd, Rebuild(Kind::kLayout, pr.bdesc));
  ASSIGN_OR_RETURN(void* cd, Rebuild(Kind::kLayout, pr.cdesc));
  ASSIGN_OR_RETURN(void* dd, Rebuild(Kind::kLayout, pr.ddesc));
  ASSIGN_OR_RETURN(void* pf, Rebuild(Kind::kPref, pref));
  std::vector<cublasLtMatmulHeuristicResult_t> r(requested);
  int found = 0;
  auto L = [](void* p) { return static_cast<cublasLtMatrixLayout_t>(p); };
  RETURN_IF_ERROR(Check(lib_->cublasLtMatmulAlgoGetHeuristic(
                            reinterpret_cast<cublasLtHandle_t>(h), static_cast<cublasLtMatmulDesc_t>(desc), L(ad),
                            L(bd), L(cd), L(dd), static_cast<cublasLtMatmulPreference_t>(pf), requested, r.data(),
                            &found),
                        "cublasLtMatmulAlgoGetHeuristic"));
  *count = found;
  results->append(reinterpret_cast<const char*>(r.data()), sizeof(r[0]) * found);
  return Status::Ok();
}

}  // namespace smolvm
