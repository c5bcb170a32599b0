#include "worker/library_preload.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "base/diagnostics.h"
#include "worker/worker.h"

namespace smolvm {

Result<uint32_t> LibrariesToPreload(const char* preload, const char* cuda_libs) {
  if (preload == nullptr) return (cuda_libs != nullptr && *cuda_libs != '\0') ? kPreloadCublas | kPreloadCudnn : 0u;
  std::string_view list(preload);
  if (list == "none") return 0u;
  uint32_t out = 0;
  while (!list.empty()) {
    size_t comma = list.find(',');
    std::string_view name = list.substr(0, comma);
    if (name == "cublas") {
      out |= kPreloadCublas;
    } else if (name == "cudnn") {
      out |= kPreloadCudnn;
    } else {
      return InvalidArgument("SMOLVM_WORKER_PRELOAD: unknown library '" + std::string(name) +
                             "' (give cublas, cudnn, both comma-separated, or none)");
    }
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
  }
  return out;
}

uint32_t LibrariesToPreloadFromEnv() {
  auto r = LibrariesToPreload(std::getenv("SMOLVM_WORKER_PRELOAD"), std::getenv("SMOLVM_CUDA_LIBS"));
  if (r.ok()) return *r;
  std::fprintf(Diagnostics(), "smolvm worker %d: %s; preloading nothing\n", ::getpid(), r.status().ToString().c_str());
  return 0;
}

std::string LibraryNames(uint32_t libraries) {
  std::string out;
  if (libraries & kPreloadCublas) out += "cuBLAS";
  if (libraries & kPreloadCudnn) out += std::string(out.empty() ? "" : ", ") + "cuDNN";
  return out.empty() ? "none" : out;
}

void Worker::PreloadLibraries(uint32_t libraries) {
  auto t0 = std::chrono::steady_clock::now();
  auto ms = [](std::chrono::steady_clock::time_point since) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since).count();
  };
  // A failure here is the session's later answer too (Blas()/Dnn() keep it);
  // the pool goes on either way.
  auto warn = [](const char* what, const Status& st) {
    std::fprintf(Diagnostics(), "smolvm worker %d: preload of %s failed: %s\n", ::getpid(), what, st.ToString().c_str());
  };
  double blas_ms = 0, dnn_ms = 0;
  if (libraries & kPreloadCublas) {
    auto t = std::chrono::steady_clock::now();
    auto blas = Blas();
    Status st = blas.status();
    if (st.ok()) {
      auto h = (*blas)->Create();
      st = h.ok() ? (*blas)->Destroy(*h) : h.status();
    }
    if (st.ok()) {
      auto lt = (*blas)->LtCreate();
      st = lt.ok() ? (*blas)->LtDestroy(*lt) : lt.status();
    }
    if (!st.ok()) warn("cuBLAS", st);
    blas_ms = ms(t);
  }
  if (libraries & kPreloadCudnn) {
    auto t = std::chrono::steady_clock::now();
    auto dnn = Dnn();
    Status st = dnn.status();
    if (st.ok()) {
      auto h = (*dnn)->Create();
      st = h.ok() ? (*dnn)->Destroy(*h) : h.status();
    }
    if (!st.ok()) warn("cuDNN", st);
    dnn_ms = ms(t);
  }
  if (libraries)
    std::fprintf(Diagnostics(), "smolvm worker %d: libraries preloaded (%s): cuBLAS %.1f ms, cuDNN %.1f ms, total %.1f ms\n",
                 ::getpid(), LibraryNames(libraries).c_str(), blas_ms, dnn_ms, ms(t0));
}

}  // namespace smolvm
