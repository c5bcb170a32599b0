#include "shim/array_records.h"

#include <cuda.h>

#include <cstring>

namespace smolvm::shim {

bool ArrayRecords::ArraySideFits(const CopyPlace& p, uint64_t width, uint64_t height, uint64_t depth) const {
  const ArrayDesc* d = FindArray(p.addr);
  if (d == nullptr) return false;
  const uint64_t elem = uint64_t{ArrayFormatBytes(d->format)} * d->channels;
  const uint64_t row = d->width * elem;
  const uint64_t rows = d->height == 0 ? 1 : d->height, slices = d->depth == 0 ? 1 : d->depth;
  if (elem == 0 || p.x % elem != 0 || width % elem != 0) return false;
  return p.x <= row && width <= row - p.x && p.y <= rows && height <= rows - p.y && p.z <= slices &&
         depth <= slices - p.z;
}

bool ChannelToFormat(const cudaChannelFormatDesc& d, uint32_t* format, uint32_t* channels) {
  const int bits[4] = {d.x, d.y, d.z, d.w};
  uint32_t n = 0;
  while (n < 4 && bits[n] != 0) ++n;
  for (uint32_t i = n; i < 4; ++i)
    if (bits[i] != 0) return false;  // a gap
  if (n == 0 || n == 3) return false;
  for (uint32_t i = 1; i < n; ++i)
    if (bits[i] != bits[0]) return false;
  uint32_t f = 0;
  switch (d.f) {
    case cudaChannelFormatKindSigned:
      f = bits[0] == 8 ? CU_AD_FORMAT_SIGNED_INT8 : bits[0] == 16 ? CU_AD_FORMAT_SIGNED_INT16
                                                  : bits[0] == 32 ? CU_AD_FORMAT_SIGNED_INT32 : 0;
      break;
    case cudaChannelFormatKindUnsigned:
      f = bits[0] == 8 ? CU_AD_FORMAT_UNSIGNED_INT8 : bits[0] == 16 ? CU_AD_FORMAT_UNSIGNED_INT16
                                                    : bits[0] == 32 ? CU_AD_FORMAT_UNSIGNED_INT32 : 0;
      break;
    case cudaChannelFormatKindFloat:
      f = bits[0] == 16 ? CU_AD_FORMAT_HALF : bits[0] == 32 ? CU_AD_FORMAT_FLOAT : 0;
      break;
    default:
      return false;
  }
  if (f == 0) return false;
  *format = f;
  *channels = n;
  return true;
}

cudaChannelFormatDesc FormatToChannel(uint32_t format, uint32_t channels) {
  cudaChannelFormatDesc d{};
  int bits = static_cast<int>(ArrayFormatBytes(format) * 8);
  switch (format) {
    case CU_AD_FORMAT_SIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT32:
      d.f = cudaChannelFormatKindSigned;
      break;
    case CU_AD_FORMAT_HALF: case CU_AD_FORMAT_FLOAT:
      d.f = cudaChannelFormatKindFloat;
      break;
    default:
      d.f = cudaChannelFormatKindUnsigned;
  }
  d.x = bits;
  d.y = channels > 1 ? bits : 0;
  d.z = channels > 2 ? bits : 0;
  d.w = channels > 3 ? bits : 0;
  return d;
}

std::vector<uint32_t> EncodeTexDesc(const TexDesc& t) {
  std::vector<uint32_t> w(kTexDescWords);
  for (int i = 0; i < 3; ++i) w[i] = t.address[i];
  w[3] = t.filter, w[4] = t.flags, w[5] = t.max_anisotropy, w[6] = t.mip_filter;
  const float f[7] = {t.mip_bias, t.min_lod, t.max_lod, t.border[0], t.border[1], t.border[2], t.border[3]};
  std::memcpy(&w[7], f, sizeof f);
  return w;
}

}  // namespace smolvm::shim
