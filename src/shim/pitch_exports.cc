// libcudart.so.13's pitched memory, for pitch2D textures and 2-D / 3-D
// copies (docs/shim.md, "Arrays, textures, surfaces"): cudaMallocPitch and
// cudaMalloc3D are allocations whose rows are 512 bytes apart at least;
// cudaMemset2D / 3D are memsets of their rows.
#include <cuda_runtime_api.h>

#include <algorithm>

#include "shim/runtime.h"

using smolvm::shim::rt;

#define SMOLVM_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// The row pitch cudaMallocPitch gives: the width rounded up to 512 bytes.
constexpr size_t kPitchAlign = 512;

bool PitchOf(size_t width, size_t rows, size_t* pitch, size_t* bytes) {
  if (width > (size_t{1} << 40) || rows > (size_t{1} << 40)) return false;
  *pitch = std::max<size_t>(kPitchAlign, (width + kPitchAlign - 1) / kPitchAlign * kPitchAlign);
  if (rows != 0 && *pitch > (size_t{1} << 48) / rows) return false;
  *bytes = *pitch * rows;
  return true;
}

cudaError_t Memset2D(void* p, size_t pitch, int value, size_t width, size_t height, size_t depth, size_t slice_rows,
                     cudaStream_t stream, bool per_thread) {
  if (width == 0 || height == 0 || depth == 0) return rt().Memset(p, value, 0, stream, per_thread);
  if (pitch < width || (depth > 1 && slice_rows < height)) return rt().Record(cudaErrorInvalidValue);
  if (pitch == width && (depth == 1 || slice_rows == height))
    return rt().Memset(p, value, pitch * height * depth, stream, per_thread);  // one run
  for (size_t z = 0; z < depth; ++z)
    for (size_t y = 0; y < height; ++y)
      if (cudaError_t e = rt().Memset(static_cast<char*>(p) + (z * slice_rows + y) * pitch, value, width, stream,
                                      per_thread);
          e != cudaSuccess)
        return e;
  return cudaSuccess;
}

}  // namespace

SMOLVM_EXPORT cudaError_t cudaMallocPitch(void** ptr, size_t* pitch, size_t width, size_t height) {
  size_t p = 0, bytes = 0;
  if (ptr == nullptr || pitch == nullptr || !PitchOf(width, height, &p, &bytes)) return rt().Record(cudaErrorInvalidValue);
  cudaError_t e = rt().Malloc(ptr, bytes);
  if (e == cudaSuccess) *pitch = p;
  return e;
}

SMOLVM_EXPORT cudaError_t cudaMalloc3D(cudaPitchedPtr* out, cudaExtent extent) {
  size_t p = 0, bytes = 0;
  if (out == nullptr || extent.depth > (size_t{1} << 40) ||
      !PitchOf(extent.width, extent.height * std::max<size_t>(extent.depth, 1), &p, &bytes))
    return rt().Record(cudaErrorInvalidValue);
  void* ptr = nullptr;
  cudaError_t e = rt().Malloc(&ptr, bytes);
  if (e == cudaSuccess) *out = cudaPitchedPtr{ptr, p, extent.width, extent.height};
  return e;
}

SMOLVM_EXPORT cudaError_t cudaMemset2D(void* p, size_t pitch, int value, size_t width, size_t height) {
  return Memset2D(p, pitch, value, width, height, 1, height, nullptr, false);
}
SMOLVM_EXPORT cudaError_t cudaMemset2D_ptds(void* p, size_t pitch, int value, size_t width, size_t height) {
  return Memset2D(p, pitch, value, width, height, 1, height, nullptr, true);
}
SMOLVM_EXPORT cudaError_t cudaMemset2DAsync(void* p, size_t pitch, int value, size_t width, size_t height,
                                            cudaStream_t s) {
  return Memset2D(p, pitch, value, width, height, 1, height, s, false);
}
SMOLVM_EXPORT cudaError_t cudaMemset2DAsync_ptsz(void* p, size_t pitch, int value, size_t width, size_t height,
                                                 cudaStream_t s) {
  return Memset2D(p, pitch, value, width, height, 1, height, s, true);
}
SMOLVM_EXPORT cudaError_t cudaMemset3D(cudaPitchedPtr p, int value, cudaExtent e) {
  return Memset2D(p.ptr, p.pitch, value, e.width, e.height, e.depth, p.ysize, nullptr, false);
}
SMOLVM_EXPORT cudaError_t cudaMemset3D_ptds(cudaPitchedPtr p, int value, cudaExtent e) {
  return Memset2D(p.ptr, p.pitch, value, e.width, e.height, e.depth, p.ysize, nullptr, true);
}
SMOLVM_EXPORT cudaError_t cudaMemset3DAsync(cudaPitchedPtr p, int value, cudaExtent e, cudaStream_t s) {
  return Memset2D(p.ptr, p.pitch, value, e.width, e.height, e.depth, p.ysize, s, false);
}
SMOLVM_EXPORT cudaError_t cudaMemset3DAsync_ptsz(cudaPitchedPtr p, int value, cudaExtent e, cudaStream_t s) {
  return Memset2D(p.ptr, p.pitch, value, e.width, e.height, e.depth, p.ysize, s, true);
}

