#include "backend/dnn_cuda.h"

#include <cudnn_graph.h>
#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/blas_cuda.h"
#include "backend/path_env.h"

namespace smolvm {

#define SMOLVM_CUDNN_FNS(X)                                                                        \
  X(cudnnGetVersion)                                                                               \
  X(cudnnGetCudartVersion) X(cudnnCreate) X(cudnnDestroy) X(cudnnSetStream)                        \
      X(cudnnBackendCreateDescriptor) X(cudnnBackendDestroyDescriptor) X(cudnnBackendSetAttribute) \
          X(cudnnBackendGetAttribute) X(cudnnBackendFinalize) X(cudnnBackendExecute)               \
              X(cudnnGetLastErrorString)

struct DnnLibrary {
  std::string path;
  void* dl = nullptr;
#define SMOLVM_DNN_MEMBER(fn) decltype(&::fn) fn = nullptr;
  SMOLVM_CUDNN_FNS(SMOLVM_DNN_MEMBER)
#undef SMOLVM_DNN_MEMBER
};

namespace {

Status Check(const DnnLibrary& lib, cudnnStatus_t st, const char* call) {
  if (st == CUDNN_STATUS_SUCCESS) return Status::Ok();
  char msg[512] = {};
  lib.cudnnGetLastErrorString(msg, sizeof msg);
  return DnnError(st, std::string(call) + " returned " + std::to_string(static_cast<int>(st)) +
                          (msg[0] ? std::string(": ") + msg : std::string()));
}

cudnnBackendDescriptor_t D(uint64_t d) { return reinterpret_cast<cudnnBackendDescriptor_t>(d); }
cudnnHandle_t DnnH(uint64_t h) { return reinterpret_cast<cudnnHandle_t>(h); }

}  // namespace

Result<std::unique_ptr<CudaDnnBackend>> CudaDnnBackend::Load() {
  auto lib = std::make_unique<DnnLibrary>();
  std::string dirs = Env("SMOLVM_CUDA_LIBS"), ld = Env("LD_LIBRARY_PATH");
  std::vector<std::string> tried = BlasLibraryCandidates("libcudnn.so.9", Env("SMOLVM_LIBCUDNN"),
                                                         dirs.empty() ? ld : dirs + ":" + ld);
  std::string list;
  for (const std::string& c : tried) {
    list += (list.empty() ? "" : ", ") + c;
    struct stat st;
    if (::stat(c.c_str(), &st) != 0) continue;
    lib->dl = ::dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib->dl == nullptr) {
      const char* e = ::dlerror();
      return Unavailable("dlopen " + c + ": " + (e ? e : "?"));
    }
    lib->path = c;
    break;
  }
  if (lib->dl == nullptr)
    return Unavailable("libcudnn.so.9 not found; tried " + list +
                       "; set SMOLVM_CUDA_LIBS or SMOLVM_LIBCUDNN");
  std::string missing;
#define SMOLVM_DNN_RESOLVE(fn)                                          \
  lib->fn = reinterpret_cast<decltype(lib->fn)>(::dlsym(lib->dl, #fn)); \
  if (lib->fn == nullptr) missing += std::string(missing.empty() ? "" : ", ") + #fn;
  SMOLVM_CUDNN_FNS(SMOLVM_DNN_RESOLVE)
#undef SMOLVM_DNN_RESOLVE
  if (!missing.empty()) return Unavailable(lib->path + " lacks " + missing);
  std::unique_ptr<CudaDnnBackend> b(new CudaDnnBackend());
  b->lib_ = std::move(lib);
  return b;
}

CudaDnnBackend::~CudaDnnBackend() =
    default;  // the library stays loaded (its threads and atexit handlers)

Result<uint64_t> CudaDnnBackend::Create() {
  cudnnHandle_t h = nullptr;
  RETURN_IF_ERROR(Check(*lib_, lib_->cudnnCreate(&h), "cudnnCreate"));
  return reinterpret_cast<uint64_t>(h);
}

Status CudaDnnBackend::Destroy(uint64_t h) {
  return Check(*lib_, lib_->cudnnDestroy(DnnH(h)), "cudnnDestroy");
}

Status CudaDnnBackend::SetStream(uint64_t h, uint64_t stream) {
  return Check(*lib_, lib_->cudnnSetStream(DnnH(h), reinterpret_cast<cudaStream_t>(stream)),
               "cudnnSetStream");
}

DnnVersion CudaDnnBackend::Version() const {
  return DnnVersion{lib_->cudnnGetVersion(), lib_->cudnnGetCudartVersion(), lib_->path};
}

Result<uint64_t> CudaDnnBackend::DescCreate(uint32_t type) {
  cudnnBackendDescriptor_t d = nullptr;
  RETURN_IF_ERROR(
      Check(*lib_,
            lib_->cudnnBackendCreateDescriptor(static_cast<cudnnBackendDescriptorType_t>(type), &d),
            "cudnnBackendCreateDescriptor"));
  return reinterpret_cast<uint64_t>(d);
}

Status CudaDnnBackend::DescDestroy(uint64_t d) {
  return Check(*lib_, lib_->cudnnBackendDestroyDescriptor(D(d)), "cudnnBackendDestroyDescriptor");
}

Status CudaDnnBackend::DescSet(uint64_t d, uint32_t name, uint32_t type, int64_t count,
                               const void* values) {
  return Check(
      *lib_,
      lib_->cudnnBackendSetAttribute(D(d), static_cast<cudnnBackendAttributeName_t>(name),
                                     static_cast<cudnnBackendAttributeType_t>(type), count, values),
      "cudnnBackendSetAttribute");
}

Status CudaDnnBackend::DescFinalize(uint64_t d) {
  return Check(*lib_, lib_->cudnnBackendFinalize(D(d)), "cudnnBackendFinalize");
}

Status CudaDnnBackend::DescGet(uint64_t d, uint32_t name, uint32_t type, int64_t requested,
                               int64_t* count, void* values) {
  return Check(*lib_,
               lib_->cudnnBackendGetAttribute(D(d), static_cast<cudnnBackendAttributeName_t>(name),
                                              static_cast<cudnnBackendAttributeType_t>(type),
                                              requested, count, values),
               "cudnnBackendGetAttribute");
}

Status CudaDnnBackend::Execute(uint64_t h, uint64_t plan, const DnnVariantPack& pack) {
  cudnnBackendDescriptor_t vp = nullptr;
  RETURN_IF_ERROR(
      Check(*lib_, lib_->cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp),
            "cudnnBackendCreateDescriptor(variant pack)"));
  auto set = [&](cudnnBackendAttributeName_t n, cudnnBackendAttributeType_t t, int64_t c,
                 const void* v) {
    return Check(*lib_, lib_->cudnnBackendSetAttribute(vp, n, t, c, v),
                 "cudnnBackendSetAttribute(variant pack)");
  };
  void* ws = pack.workspace;
  int64_t n = static_cast<int64_t>(pack.uids.size());
  Status st = set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, pack.uids.data());
  if (st.ok())
    st = set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, pack.ptrs.data());
  if (st.ok()) st = set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
  if (st.ok())
    st = Check(*lib_, lib_->cudnnBackendFinalize(vp), "cudnnBackendFinalize(variant pack)");
  if (st.ok())
    st = Check(*lib_, lib_->cudnnBackendExecute(DnnH(h), D(plan), vp), "cudnnBackendExecute");
  lib_->cudnnBackendDestroyDescriptor(vp);
  return st;
}

}  // namespace smolvm
