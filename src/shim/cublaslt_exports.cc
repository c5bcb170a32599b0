// libcublasLt.so.13 of the shim. Matmul descriptors, matrix layouts and
// matmul preferences live in the guest as attribute lists (proto/lt_attrs.h):
// create / set / get / destroy never touch the wire. cublasLtMatmul (ASYNC)
// and cublasLtMatmulAlgoGetHeuristic (SYNC) carry them by value; the worker
// rebuilds the library's objects from them and caches them by content.
// Algorithms (cublasLtMatmulAlgo_t) come from the worker's heuristic and go
// back to it unchanged. Heuristic answers are kept in the guest by content
// (HeuristicCache): torch asks before every matmul with a bias, the worker
// once per problem. Every other export is a not-supported stub.
#include <cublasLt.h>

#include <cstring>
#include <map>

#include "proto/lib_status.h"
#include "proto/lt_attrs.h"
#include "shim/blas_handle.h"
#include "shim/blas_status.h"
#include "shim/lib_client.h"

using smolvm::proto::LtAttrs;
using smolvm::shim::BlasBeginStatus;
using smolvm::shim::BlasStatusOf;
using smolvm::shim::LibCall;
namespace proto = smolvm::proto;

struct cublasLtContext : smolvm::shim::BlasHandleHead {
  cublasLtContext() { kind = smolvm::shim::kLtHandleKind; }
};

#define SMOLVM_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// What the guest knows of an attribute: its size and its value before any set.
struct AttrInfo {
  uint8_t size;
  int64_t fallback;
};

using AttrTable = std::map<uint32_t, AttrInfo>;

const AttrTable& DescAttrs() {
  static const AttrTable t = {
      {CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, {4, 0}},  {CUBLASLT_MATMUL_DESC_SCALE_TYPE, {4, 0}},
      {CUBLASLT_MATMUL_DESC_POINTER_MODE, {4, 0}},  {CUBLASLT_MATMUL_DESC_TRANSA, {4, CUBLAS_OP_N}},
      {CUBLASLT_MATMUL_DESC_TRANSB, {4, CUBLAS_OP_N}}, {CUBLASLT_MATMUL_DESC_TRANSC, {4, CUBLAS_OP_N}},
      {CUBLASLT_MATMUL_DESC_FILL_MODE, {4, CUBLAS_FILL_MODE_FULL}},
      {CUBLASLT_MATMUL_DESC_EPILOGUE, {4, CUBLASLT_EPILOGUE_DEFAULT}},
      {CUBLASLT_MATMUL_DESC_BIAS_POINTER, {8, 0}},  {CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, {8, 0}},
      {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, {8, 0}}, {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, {8, 0}},
      {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, {8, 0}},
      {CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE, {8, 0}}, {CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, {4, 0}},
      {CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, {8, 0}}, {CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, {8, 0}},
      {CUBLASLT_MATMUL_DESC_C_SCALE_POINTER, {8, 0}}, {CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, {8, 0}},
      {CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, {8, 0}}, {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, {4, -1}},
      {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER, {8, 0}},
      {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER, {8, 0}}, {CUBLASLT_MATMUL_DESC_FAST_ACCUM, {1, 0}},
      {CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, {4, -1}},
  };
  return t;
}

const AttrTable& LayoutAttrs() {
  static const AttrTable t = {
      {CUBLASLT_MATRIX_LAYOUT_TYPE, {4, 0}},       {CUBLASLT_MATRIX_LAYOUT_ORDER, {4, CUBLASLT_ORDER_COL}},
      {CUBLASLT_MATRIX_LAYOUT_ROWS, {8, 0}},       {CUBLASLT_MATRIX_LAYOUT_COLS, {8, 0}},
      {CUBLASLT_MATRIX_LAYOUT_LD, {8, 0}},         {CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, {4, 1}},
      {CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, {8, 0}}, {CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET, {8, 0}},
  };
  return t;
}

const AttrTable& PrefAttrs() {
  static const AttrTable t = {
      {CUBLASLT_MATMUL_PREF_SEARCH_MODE, {4, 0}},
      {CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, {8, 0}},
      {CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, {4, CUBLASLT_REDUCTION_SCHEME_MASK}},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, {4, 256}},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, {4, 256}},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, {4, 256}},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, {4, 256}},
      {CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT, {4, 0}},
      {CUBLASLT_MATMUL_PREF_IMPL_MASK, {8, -1}},
  };
  return t;
}

struct LtObject {
  const AttrTable* table;
  LtAttrs attrs;
};

template <typename Opaque>
LtObject* Obj(Opaque* p) {
  return reinterpret_cast<LtObject*>(p);
}

template <typename Opaque>
cublasStatus_t Create(Opaque** out, const AttrTable& table) {
  if (out == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *out = reinterpret_cast<Opaque*>(new LtObject{&table, {}});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t SetAttr(LtObject* o, uint32_t attr, const void* buf, size_t bytes) {
  if (o == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (buf == nullptr || bytes == 0 || bytes > 256) return CUBLAS_STATUS_INVALID_VALUE;
  auto it = o->table->find(attr);
  if (it != o->table->end() && it->second.size != bytes) return CUBLAS_STATUS_INVALID_VALUE;
  o->attrs.Set(attr, buf, bytes);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t GetAttr(const LtObject* o, uint32_t attr, void* buf, size_t bytes, size_t* written) {
  if (o == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  std::string value;
  if (const std::string* v = o->attrs.Find(attr)) {
    value = *v;
  } else if (auto it = o->table->find(attr); it != o->table->end()) {
    value.assign(reinterpret_cast<const char*>(&it->second.fallback), it->second.size);  // little-endian
  } else {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (bytes == 0 && buf == nullptr && written != nullptr) {
    *written = value.size();
    return CUBLAS_STATUS_SUCCESS;
  }
  if (written != nullptr) *written = value.size();
  if (buf == nullptr || bytes < value.size()) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(buf, value.data(), value.size());
  return CUBLAS_STATUS_SUCCESS;
}

size_t ScaleBytes(int32_t scale_type) {
  switch (scale_type) {
    case CUDA_R_16F: case CUDA_R_16BF: return 2;
    case CUDA_R_64F: case CUDA_C_32F: return 8;
    case CUDA_C_64F: return 16;
    default: return 4;
  }
}

// The wire id of the cuBLASLt handle `h` stands for: its own, or, for a
// cuBLAS handle passed as one (blas_handle.h), a cuBLASLt handle created for
// it on first use. 0 with *st set when there is none.
uint64_t LtWireId(LibCall& call, cublasLtHandle_t h, cublasStatus_t* st) {
  auto* head = reinterpret_cast<smolvm::shim::BlasHandleHead*>(h);
  if (head->kind == smolvm::shim::kLtHandleKind) return head->id;
  if (head->kind != smolvm::shim::kBlasHandleKind) {
    *st = CUBLAS_STATUS_NOT_INITIALIZED;
    return 0;
  }
  if (head->lt_id == 0) {
    uint64_t id = call.NewHandle();
    proto::LtCreateReply rep;
    *st = BlasStatusOf(call.Call(proto::LtCreateRequest{id}, &rep));
    if (*st != CUBLAS_STATUS_SUCCESS) return 0;
    head->lt_id = id;
  }
  return head->lt_id;
}

// The heuristic's answers by question. cuBLASLt's heuristic is a function of
// the problem (descriptor, layouts, preference) and the device; it reads no
// memory, so the addresses in a descriptor (bias, scale, aux pointers, which
// torch sets to each call's tensors) enter the key only as their alignment
// (mod 256, and whether null). REQUIRES the session lock (a LibCall).
class HeuristicCache {
 public:
  static std::string Key(uint64_t handle, int requested, const LtAttrs& desc, const std::string& a,
                         const std::string& b, const std::string& c, const std::string& d, const std::string& pref) {
    LtAttrs shape = desc;
    for (const auto& [attr, v] : desc.attrs()) {
      if (!IsPointer(attr) || v.size() != sizeof(uint64_t)) continue;
      uint64_t p;
      std::memcpy(&p, v.data(), sizeof p);
      shape.SetValue<uint64_t>(attr, p == 0 ? 0 : (p & 0xff) | 0x100);
    }
    std::string key;
    proto::Encoder enc(&key);
    enc.Put(handle);
    enc.Put(requested);
    for (const std::string& part : {shape.Encode(), a, b, c, d, pref}) enc.Put(std::string_view(part));
    return key;
  }
  // nullptr when not asked yet.
  const std::string* Find(const std::string& key) const {
    auto it = answers_.find(key);
    return it == answers_.end() ? nullptr : &it->second;
  }
  void Add(std::string key, std::string results) {
    if (answers_.size() >= kMaxAnswers) answers_.clear();  // a program that never repeats a problem
    answers_.emplace(std::move(key), std::move(results));
  }

 private:
  static bool IsPointer(uint32_t attr) {
    switch (attr) {
      case CUBLASLT_MATMUL_DESC_BIAS_POINTER: case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER: case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER:
      case CUBLASLT_MATMUL_DESC_C_SCALE_POINTER: case CUBLASLT_MATMUL_DESC_D_SCALE_POINTER:
      case CUBLASLT_MATMUL_DESC_AMAX_D_POINTER: case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER:
      case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER:
        return true;
      default:
        return false;
    }
  }
  static constexpr size_t kMaxAnswers = 4096;
  std::map<std::string, std::string> answers_;  // key -> the raw results (count = size / sizeof result)
};

HeuristicCache& Heuristics() {
  static HeuristicCache* cache = new HeuristicCache();  // never destroyed: atexit-time calls may still use it
  return *cache;
}

cublasStatus_t Finish(LibCall& call, cublasStatus_t st) {
  int32_t d = call.TakeDeferred(proto::kBlasStatusBase, proto::kBlasStatusBase + proto::kLibStatusSpan);
  if (st == CUBLAS_STATUS_SUCCESS && d != 0) return BlasStatusOf(d);
  return st;
}

}  // namespace

// --- handles and versions -------------------------------------------------------

SMOLVM_EXPORT cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  LibCall call;
  if (call.begin_error()) return CUBLAS_STATUS_NOT_INITIALIZED;
  auto* h = new cublasLtContext();
  h->id = call.NewHandle();
  proto::LtCreateReply rep;
  cublasStatus_t st = BlasStatusOf(call.Call(proto::LtCreateRequest{h->id}, &rep));
  if (st != CUBLAS_STATUS_SUCCESS) {
    delete h;
    return st;
  }
  *handle = h;
  return Finish(call, st);
}

SMOLVM_EXPORT cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  if (h == nullptr || h->kind != smolvm::shim::kLtHandleKind) return CUBLAS_STATUS_NOT_INITIALIZED;
  LibCall call;
  cublasStatus_t st = BlasBeginStatus(call.begin_error());
  if (st == CUBLAS_STATUS_SUCCESS) call.Enqueue(proto::LtDestroyRequest{h->id});
  delete h;
  return st;
}

SMOLVM_EXPORT size_t cublasLtGetVersion(void) {
  LibCall call;
  if (call.begin_error()) return 0;
  proto::BlasGetVersionReply rep;
  if (call.Call(proto::BlasGetVersionRequest{}, &rep) != 0) return 0;
  return static_cast<size_t>(rep.lt_version);
}

SMOLVM_EXPORT size_t cublasLtGetCudartVersion(void) { return CUDART_VERSION; }

SMOLVM_EXPORT cublasStatus_t cublasLtGetProperty(libraryPropertyType type, int* value) {
  if (value == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  size_t v = cublasLtGetVersion();
  if (v == 0) return CUBLAS_STATUS_NOT_INITIALIZED;
  switch (type) {
    case MAJOR_VERSION: *value = static_cast<int>(v / 10000); return CUBLAS_STATUS_SUCCESS;
    case MINOR_VERSION: *value = static_cast<int>((v / 100) % 100); return CUBLAS_STATUS_SUCCESS;
    case PATCH_LEVEL: *value = static_cast<int>(v % 100); return CUBLAS_STATUS_SUCCESS;
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
}

// --- descriptors (guest only) -----------------------------------------------------

SMOLVM_EXPORT cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                                      cudaDataType_t scale) {
  cublasStatus_t st = Create(desc, DescAttrs());
  if (st == CUBLAS_STATUS_SUCCESS) {
    Obj(*desc)->attrs.SetValue<int32_t>(CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, compute);
    Obj(*desc)->attrs.SetValue<int32_t>(CUBLASLT_MATMUL_DESC_SCALE_TYPE, scale);
  }
  return st;
}

SMOLVM_EXPORT cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete Obj(desc);
  return CUBLAS_STATUS_SUCCESS;
}

SMOLVM_EXPORT cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                            cublasLtMatmulDescAttributes_t attr, const void* buf,
                                                            size_t bytes) {
  return SetAttr(Obj(desc), attr, buf, bytes);
}

SMOLVM_EXPORT cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t desc,
                                                            cublasLtMatmulDescAttributes_t attr, void* buf,
                                                            size_t bytes, size_t* written) {
  return GetAttr(Obj(desc), attr, buf, bytes, written);
}

SMOLVM_EXPORT cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                                        uint64_t rows, uint64_t cols, int64_t ld) {
  cublasStatus_t st = Create(layout, LayoutAttrs());
  if (st == CUBLAS_STATUS_SUCCESS) {
    LtAttrs& a = Obj(*layout)->attrs;
    a.SetValue<uint32_t>(CUBLASLT_MATRIX_LAYOUT_TYPE, type);
    a.SetValue<uint64_t>(CUBLASLT_MATRIX_LAYOUT_ROWS, rows);
    a.SetValue<uint64_t>(CUBLASLT_MATRIX_LAYOUT_COLS, cols);
    a.SetValue<int64_t>(CUBLASLT_MATRIX_LAYOUT_LD, ld);
  }
  return st;
}

SMOLVM_EXPORT cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete Obj(layout);
  return CUBLAS_STATUS_SUCCESS;
}

SMOLVM_EXPORT cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                              cublasLtMatrixLayoutAttribute_t attr, const void* buf,
                                                              size_t bytes) {
  return SetAttr(Obj(layout), attr, buf, bytes);
}

SMOLVM_EXPORT cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t layout,
                                                              cublasLtMatrixLayoutAttribute_t attr, void* buf,
                                                              size_t bytes, size_t* written) {
  return GetAttr(Obj(layout), attr, buf, bytes, written);
}

SMOLVM_EXPORT cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  return Create(pref, PrefAttrs());
}

SMOLVM_EXPORT cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete Obj(pref);
  return CUBLAS_STATUS_SUCCESS;
}

SMOLVM_EXPORT cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                                  cublasLtMatmulPreferenceAttributes_t attr,
                                                                  const void* buf, size_t bytes) {
  return SetAttr(Obj(pref), attr, buf, bytes);
}

SMOLVM_EXPORT cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t pref,
                                                                  cublasLtMatmulPreferenceAttributes_t attr, void* buf,
                                                                  size_t bytes, size_t* written) {
  return GetAttr(Obj(pref), attr, buf, bytes, written);
}

// --- matmul and heuristics ----------------------------------------------------------

SMOLVM_EXPORT cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void* alpha,
                                            const void* a, cublasLtMatrixLayout_t adesc, const void* b,
                                            cublasLtMatrixLayout_t bdesc, const void* beta, const void* c,
                                            cublasLtMatrixLayout_t cdesc, void* d, cublasLtMatrixLayout_t ddesc,
                                            const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                                            cudaStream_t stream) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!desc || !adesc || !bdesc || !cdesc || !ddesc || !alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
  LibCall call;
  if (int32_t e = call.begin_error()) return BlasBeginStatus(e);
  proto::LtMatmulRequest q;
  cublasStatus_t hst = CUBLAS_STATUS_SUCCESS;
  q.handle = LtWireId(call, h, &hst);
  if (q.handle == 0) return hst;
  std::string ds = Obj(desc)->attrs.Encode(), as = Obj(adesc)->attrs.Encode(), bs = Obj(bdesc)->attrs.Encode(),
              cs = Obj(cdesc)->attrs.Encode(), dd = Obj(ddesc)->attrs.Encode();
  q.desc = ds, q.adesc = as, q.bdesc = bs, q.cdesc = cs, q.ddesc = dd;
  const LtAttrs& da = Obj(desc)->attrs;
  size_t sb = ScaleBytes(da.Get<int32_t>(CUBLASLT_MATMUL_DESC_SCALE_TYPE, CUDA_R_32F));
  int32_t mode = da.Get<int32_t>(CUBLASLT_MATMUL_DESC_POINTER_MODE, CUBLASLT_POINTER_MODE_HOST);
  bool alpha_host = mode == CUBLASLT_POINTER_MODE_HOST;
  bool beta_host = mode == CUBLASLT_POINTER_MODE_HOST || mode == CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST;
  if (alpha_host) q.alpha = std::string_view(static_cast<const char*>(alpha), sb);
  else q.alpha_ptr = reinterpret_cast<uint64_t>(alpha);
  if (beta_host) q.beta = std::string_view(static_cast<const char*>(beta), sb);
  else q.beta_ptr = reinterpret_cast<uint64_t>(beta);
  q.a = reinterpret_cast<uint64_t>(a), q.b = reinterpret_cast<uint64_t>(b);
  q.c = reinterpret_cast<uint64_t>(c), q.d = reinterpret_cast<uint64_t>(d);
  if (algo) q.algo = std::string_view(reinterpret_cast<const char*>(algo), sizeof *algo);
  q.workspace = reinterpret_cast<uint64_t>(workspace), q.workspace_bytes = workspace_bytes;
  if (call.StreamId(stream, &q.stream) != 0) return CUBLAS_STATUS_INVALID_VALUE;
  call.Enqueue(q);
  return Finish(call, CUBLAS_STATUS_SUCCESS);
}

SMOLVM_EXPORT cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t desc,
                                                            cublasLtMatrixLayout_t adesc, cublasLtMatrixLayout_t bdesc,
                                                            cublasLtMatrixLayout_t cdesc, cublasLtMatrixLayout_t ddesc,
                                                            cublasLtMatmulPreference_t pref, int requested,
                                                            cublasLtMatmulHeuristicResult_t results[], int* count) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!desc || !adesc || !bdesc || !cdesc || !ddesc || !pref || !results || !count || requested <= 0)
    return CUBLAS_STATUS_INVALID_VALUE;
  LibCall call;
  if (int32_t e = call.begin_error()) return BlasBeginStatus(e);
  proto::LtHeuristicRequest q;
  cublasStatus_t hst = CUBLAS_STATUS_SUCCESS;
  q.handle = LtWireId(call, h, &hst);
  if (q.handle == 0) return hst;
  std::string ds = Obj(desc)->attrs.Encode(), as = Obj(adesc)->attrs.Encode(), bs = Obj(bdesc)->attrs.Encode(),
              cs = Obj(cdesc)->attrs.Encode(), dd = Obj(ddesc)->attrs.Encode(), ps = Obj(pref)->attrs.Encode();
  q.desc = ds, q.adesc = as, q.bdesc = bs, q.cdesc = cs, q.ddesc = dd, q.pref = ps;
  q.requested = requested;
  std::string key = HeuristicCache::Key(q.handle, requested, Obj(desc)->attrs, as, bs, cs, dd, ps);
  std::string answer;
  if (const std::string* hit = Heuristics().Find(key)) {
    answer = *hit;
  } else {
    proto::LtHeuristicReply rep;
    int32_t r = call.Call(q, &rep);
    if (r != 0) return Finish(call, BlasStatusOf(r));
    size_t n = rep.results.size() / sizeof(cublasLtMatmulHeuristicResult_t);
    if (rep.count < 0 || static_cast<size_t>(rep.count) != n ||
        n * sizeof(cublasLtMatmulHeuristicResult_t) != rep.results.size() || rep.count > requested)
      return CUBLAS_STATUS_INTERNAL_ERROR;
    answer.assign(rep.results.data(), rep.results.size());
    Heuristics().Add(std::move(key), answer);
  }
  std::memcpy(results, answer.data(), answer.size());
  *count = static_cast<int>(answer.size() / sizeof(cublasLtMatmulHeuristicResult_t));
  return Finish(call, *count == 0 ? CUBLAS_STATUS_NOT_SUPPORTED : CUBLAS_STATUS_SUCCESS);
}
