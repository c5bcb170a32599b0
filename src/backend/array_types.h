// CUDA arrays, texture and surface objects in the driver API's model, as the
// worker hands them to a GpuBackend (gpu_backend.h). The worker has checked
// every value against the guest's session before a backend sees it
// (worker/array_table.h); a backend checks them again only as the driver does.
#pragma once

#include <cstdint>

namespace smolvm {

// cuArray3DCreate's descriptor: `format` a CUarray_format, `channels` 1, 2
// or 4; height 0 is a 1-D array, depth 0 a 2-D one; flags CUDA_ARRAY3D_*.
struct ArrayDesc {
  uint32_t format = 0;
  uint32_t channels = 1;
  uint64_t width = 0, height = 0, depth = 0;
  uint32_t flags = 0;
};

// One side of a 3-D copy (wire values of Memcpy3D's kinds).
enum class CopySide : uint32_t { kDevice = 1, kArray = 2, kHost = 3 };

struct CopyPlace {
  CopySide kind = CopySide::kDevice;
  // kDevice: a device address; kArray: the backend's array; kHost: a pointer
  // in the worker's memory.
  uint64_t addr = 0;
  uint64_t pitch = 0, height = 0;  // kDevice and kHost: the layout's row bytes and rows per slice
  uint64_t x = 0, y = 0, z = 0;    // x in bytes
};

// cuMemcpy3D: `width` bytes x `height` rows x `depth` slices.
struct Copy3D {
  CopyPlace dst, src;
  uint64_t width = 0, height = 0, depth = 0;
};

// What a texture object reads (CUDA_RESOURCE_DESC): kind a CUresourcetype
// (0 array, 2 linear, 3 pitch2D); `handle` the backend's array or a device
// address; for linear memory `width` is its bytes, for pitch2D its elements
// per row, with `height` rows `pitch` bytes apart.
struct TexResource {
  uint32_t kind = 0;
  uint64_t handle = 0;
  uint32_t format = 0, channels = 1;
  uint64_t width = 0, height = 0, pitch = 0;
};

// CUDA_TEXTURE_DESC's fields (flags CU_TRSF_*).
struct TexDesc {
  uint32_t address[3] = {0, 0, 0};
  uint32_t filter = 0;
  uint32_t flags = 0;
  uint32_t max_anisotropy = 0;
  uint32_t mip_filter = 0;
  float mip_bias = 0, min_lod = 0, max_lod = 0;
  float border[4] = {0, 0, 0, 0};
};
// TexDesc on the wire (TexObjectCreate's `tex`): address[3], filter, flags,
// max_anisotropy, mip_filter, then the bits of mip_bias, min_lod, max_lod
// and border[4].
inline constexpr uint32_t kTexDescWords = 14;

// Bytes of one element of `format` (a CUarray_format), 0 for a format the
// shims do not take (the block-compressed and planar ones).
inline uint32_t ArrayFormatBytes(uint32_t format) {
  switch (format) {
    case 0x01: case 0x08: return 1;  // UNSIGNED_INT8, SIGNED_INT8
    case 0x02: case 0x09: case 0x10: return 2;  // UNSIGNED_INT16, SIGNED_INT16, HALF
    case 0x03: case 0x0a: case 0x20: return 4;  // UNSIGNED_INT32, SIGNED_INT32, FLOAT
    default: return 0;
  }
}

// What an array holds of the device, as a machine's --gpu-mem is charged
// for it: its elements, each row rounded up to 512 bytes (the pitch the
// driver lays arrays out with, at least). 0 when `desc` is not a valid one
// or overflows 2^48 bytes.
inline uint64_t ArrayDeviceBytes(const ArrayDesc& desc) {
  const uint64_t elem = uint64_t{ArrayFormatBytes(desc.format)} * desc.channels;
  constexpr uint64_t kMax = 1ull << 48;
  if (elem == 0 || desc.width == 0 || desc.width > kMax / elem) return 0;
  const uint64_t row = (desc.width * elem + 511) / 512 * 512;
  const uint64_t rows = desc.height == 0 ? 1 : desc.height;
  const uint64_t slices = desc.depth == 0 ? 1 : desc.depth;
  if (rows > kMax / row || slices > kMax / (row * rows)) return 0;
  return row * rows * slices;
}

}  // namespace smolvm
