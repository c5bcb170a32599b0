// libcudart.so.13's CUDA arrays, copies with arrays or pitches, texture and
// surface objects: the runtime's descriptions into Runtime's (runtime.h,
// forward_arrays.cc). Mipmapped arrays, resource views and the texture and
// surface references CUDA 12 removed stay refused by name (generated stubs,
// or the message below).
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>

#include "shim/runtime.h"
#include "shim/stub_report.h"

using smolvm::ArrayDesc;
using smolvm::Copy3D;
using smolvm::CopyPlace;
using smolvm::CopySide;
using smolvm::TexDesc;
using smolvm::TexResource;
using smolvm::shim::rt;

#define SMOLVM_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

uint64_t Id(const void* a) { return reinterpret_cast<uint64_t>(a); }

// Whether `kind` lets the destination (dst) or source be device memory
// (`device`): an explicit kind must agree with the memory.
bool KindAllows(cudaMemcpyKind kind, bool dst, bool device) {
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return false;
  if (kind == cudaMemcpyDefault) return true;
  const bool want = dst ? (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice)
                        : (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice);
  return want == device;
}

// A pointer side: device memory or this process's, by its address.
bool PtrSide(const void* p, size_t pitch, size_t rows, cudaMemcpyKind kind, bool dst, CopyPlace* out) {
  const bool device = rt().IsDevicePointer(p);
  if (!KindAllows(kind, dst, device)) return false;
  *out = CopyPlace{device ? CopySide::kDevice : CopySide::kHost, Id(p), pitch, rows, 0, 0, 0};
  return true;
}

bool ArraySide(const void* array, size_t x_bytes, size_t y, size_t z, cudaMemcpyKind kind, bool dst,
               CopyPlace* out) {
  if (!KindAllows(kind, dst, true)) return false;
  *out = CopyPlace{CopySide::kArray, Id(array), 0, 0, x_bytes, y, z};
  return true;
}

uint64_t ElemBytes(const ArrayDesc& d) { return uint64_t{smolvm::ArrayFormatBytes(d.format)} * d.channels; }

cudaError_t Copy(const Copy3D& c, cudaStream_t stream, bool per_thread) { return rt().Memcpy3D(c, stream, per_thread); }

cudaError_t To2D(cudaArray_t dst, size_t w, size_t h, const void* src, size_t spitch, size_t width, size_t height,
                 cudaMemcpyKind kind, cudaStream_t stream, bool per_thread) {
  Copy3D c;
  if (!ArraySide(dst, w, h, 0, kind, true, &c.dst) || !PtrSide(src, spitch, height, kind, false, &c.src))
    return rt().Record(cudaErrorInvalidValue);
  c.width = width, c.height = height, c.depth = 1;
  return Copy(c, stream, per_thread);
}

cudaError_t From2D(void* dst, size_t dpitch, cudaArray_const_t src, size_t w, size_t h, size_t width, size_t height,
                   cudaMemcpyKind kind, cudaStream_t stream, bool per_thread) {
  Copy3D c;
  if (!PtrSide(dst, dpitch, height, kind, true, &c.dst) || !ArraySide(src, w, h, 0, kind, false, &c.src))
    return rt().Record(cudaErrorInvalidValue);
  c.width = width, c.height = height, c.depth = 1;
  return Copy(c, stream, per_thread);
}

// cudaMemcpyToArray / FromArray: `count` bytes from (w, h) on, continuing
// on the next rows of the array: a partial first row, whole rows, a
// partial last row.
cudaError_t Linear(bool to_array, cudaArray_const_t array, size_t w, size_t h, void* ptr, size_t count,
                   cudaMemcpyKind kind, cudaStream_t stream, bool per_thread) {
  ArrayDesc d;
  if (cudaError_t e = rt().ArrayGetDesc(Id(array), &d); e != cudaSuccess) return e;
  const uint64_t row = d.width * ElemBytes(d);
  if (w > row) return rt().Record(cudaErrorInvalidValue);
  auto part = [&](size_t x, size_t y, char* p, size_t width, size_t rows) {
    return to_array ? To2D(const_cast<cudaArray_t>(array), x, y, p, width, width, rows, kind, stream, per_thread)
                    : From2D(p, width, array, x, y, width, rows, kind, stream, per_thread);
  };
  char* p = static_cast<char*>(ptr);
  if (count == 0) return part(w, h, p, 0, 1);
  const size_t first = std::min<size_t>(count, row - w);
  if (first > 0)
    if (cudaError_t e = part(w, h, p, first, 1); e != cudaSuccess) return e;
  count -= first, p += first;
  if (count == 0) return cudaSuccess;
  size_t y = h + 1;  // the rest starts at the next row
  if (count >= row) {
    const size_t rows = count / row;
    if (cudaError_t e = part(0, y, p, row, rows); e != cudaSuccess) return e;
    count -= rows * row, p += rows * row, y += rows;
  }
  if (count > 0) return part(0, y, p, count, 1);
  return cudaSuccess;
}

cudaError_t ArrayToArray2D(cudaArray_t dst, size_t wd, size_t hd, cudaArray_const_t src, size_t ws, size_t hs,
                          size_t width, size_t height, cudaMemcpyKind kind, bool per_thread) {
  Copy3D c;
  if (!ArraySide(dst, wd, hd, 0, kind, true, &c.dst) || !ArraySide(src, ws, hs, 0, kind, false, &c.src))
    return rt().Record(cudaErrorInvalidValue);
  c.width = width, c.height = height, c.depth = 1;
  return Copy(c, nullptr, per_thread);
}

// The deprecated cudaMemcpyArrayToArray: `count` bytes, each side
// continuing on its next row; one copy per run that stays in both rows.
cudaError_t ArrayToArrayLinear(cudaArray_t dst, size_t wd, size_t hd, cudaArray_const_t src, size_t ws, size_t hs,
                               size_t count, cudaMemcpyKind kind, bool per_thread) {
  ArrayDesc dd, sd;
  if (cudaError_t e = rt().ArrayGetDesc(Id(dst), &dd); e != cudaSuccess) return e;
  if (cudaError_t e = rt().ArrayGetDesc(Id(src), &sd); e != cudaSuccess) return e;
  const uint64_t rd = dd.width * ElemBytes(dd), rs = sd.width * ElemBytes(sd);
  if (wd > rd || ws > rs) return rt().Record(cudaErrorInvalidValue);
  while (count > 0) {
    if (wd == rd) wd = 0, ++hd;
    if (ws == rs) ws = 0, ++hs;
    const size_t n = std::min<size_t>({count, rd - wd, rs - ws});
    if (cudaError_t e = ArrayToArray2D(dst, wd, hd, src, ws, hs, n, 1, kind, per_thread); e != cudaSuccess) return e;
    count -= n, wd += n, ws += n;
  }
  return cudaSuccess;
}

cudaError_t Parms(const cudaMemcpy3DParms* p, cudaStream_t stream, bool per_thread) {
  if (p == nullptr || (p->srcArray != nullptr) == (p->srcPtr.ptr != nullptr) ||
      (p->dstArray != nullptr) == (p->dstPtr.ptr != nullptr))
    return rt().Record(cudaErrorInvalidValue);
  // Extents and array positions count the array's elements; pointers' bytes.
  uint64_t elem = 1;
  for (cudaArray_const_t a : {p->srcArray, p->dstArray}) {
    if (a == nullptr) continue;
    ArrayDesc d;
    if (cudaError_t e = rt().ArrayGetDesc(Id(a), &d); e != cudaSuccess) return e;
    elem = ElemBytes(d);
  }
  Copy3D c;
  auto side = [&](cudaArray_const_t a, const cudaPitchedPtr& ptr, const cudaPos& pos, bool dst, CopyPlace* out) {
    if (a != nullptr) return ArraySide(a, pos.x * elem, pos.y, pos.z, p->kind, dst, out);
    if (!PtrSide(ptr.ptr, ptr.pitch, ptr.ysize, p->kind, dst, out)) return false;
    out->x = pos.x, out->y = pos.y, out->z = pos.z;
    return true;
  };
  if (!side(p->dstArray, p->dstPtr, p->dstPos, true, &c.dst) || !side(p->srcArray, p->srcPtr, p->srcPos, false, &c.src))
    return rt().Record(cudaErrorInvalidValue);
  if (p->extent.width > (1ull << 40)) return rt().Record(cudaErrorInvalidValue);
  c.width = p->extent.width * elem, c.height = p->extent.height, c.depth = p->extent.depth;
  return Copy(c, stream, per_thread);
}

cudaError_t Copy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                   cudaMemcpyKind kind, cudaStream_t stream, bool per_thread) {
  Copy3D c;
  if (!PtrSide(dst, dpitch, height, kind, true, &c.dst) || !PtrSide(src, spitch, height, kind, false, &c.src))
    return rt().Record(cudaErrorInvalidValue);
  c.width = width, c.height = height, c.depth = 1;
  return Copy(c, stream, per_thread);
}

bool ToDesc(const cudaChannelFormatDesc* desc, ArrayDesc* d) {
  return desc != nullptr && smolvm::shim::ChannelToFormat(*desc, &d->format, &d->channels);
}

constexpr unsigned kArrayFlags = cudaArrayLayered | cudaArraySurfaceLoadStore | cudaArrayCubemap | cudaArrayTextureGather;
static_assert(cudaArrayLayered == CUDA_ARRAY3D_LAYERED && cudaArraySurfaceLoadStore == CUDA_ARRAY3D_SURFACE_LDST &&
              cudaArrayCubemap == CUDA_ARRAY3D_CUBEMAP && cudaArrayTextureGather == CUDA_ARRAY3D_TEXTURE_GATHER);

cudaError_t Refuse(std::atomic<bool>* reported, const char* what) {
  smolvm::shim::ReportNotSupportedOnce(reported, "cudart", what, "cudaErrorNotSupported");
  return rt().Record(cudaErrorNotSupported);
}

// cudaResourceDesc -> TexResource (handle: the array id or the address).
cudaError_t ToResource(const cudaResourceDesc* rd, TexResource* r) {
  if (rd == nullptr) return rt().Record(cudaErrorInvalidValue);
  r->kind = rd->resType;
  switch (rd->resType) {
    case cudaResourceTypeArray:
      r->handle = Id(rd->res.array.array);
      return cudaSuccess;
    case cudaResourceTypeLinear:
      r->handle = Id(rd->res.linear.devPtr);
      r->width = rd->res.linear.sizeInBytes;
      if (!smolvm::shim::ChannelToFormat(rd->res.linear.desc, &r->format, &r->channels)) break;
      return cudaSuccess;
    case cudaResourceTypePitch2D:
      r->handle = Id(rd->res.pitch2D.devPtr);
      r->width = rd->res.pitch2D.width, r->height = rd->res.pitch2D.height, r->pitch = rd->res.pitch2D.pitchInBytes;
      if (!smolvm::shim::ChannelToFormat(rd->res.pitch2D.desc, &r->format, &r->channels)) break;
      return cudaSuccess;
    case cudaResourceTypeMipmappedArray: {
      static std::atomic<bool> reported{false};
      return Refuse(&reported, "a texture or surface object over a mipmapped array");
    }
    default:
      break;
  }
  return rt().Record(cudaErrorInvalidValue);
}

cudaResourceDesc FromResource(const TexResource& r) {
  cudaResourceDesc rd{};
  rd.resType = static_cast<cudaResourceType>(r.kind);
  if (r.kind == cudaResourceTypeArray) {
    rd.res.array.array = reinterpret_cast<cudaArray_t>(r.handle);
  } else if (r.kind == cudaResourceTypeLinear) {
    rd.res.linear.devPtr = reinterpret_cast<void*>(r.handle);
    rd.res.linear.desc = smolvm::shim::FormatToChannel(r.format, r.channels);
    rd.res.linear.sizeInBytes = r.width;
  } else {
    rd.res.pitch2D.devPtr = reinterpret_cast<void*>(r.handle);
    rd.res.pitch2D.desc = smolvm::shim::FormatToChannel(r.format, r.channels);
    rd.res.pitch2D.width = r.width, rd.res.pitch2D.height = r.height, rd.res.pitch2D.pitchInBytes = r.pitch;
  }
  return rd;
}

}  // namespace

// --- arrays -----------------------------------------------------------------------
SMOLVM_EXPORT cudaError_t cudaMallocArray(cudaArray_t* array, const cudaChannelFormatDesc* desc, size_t width,
                                          size_t height, unsigned flags) {
  ArrayDesc d;
  if (array == nullptr || !ToDesc(desc, &d) || (flags & ~kArrayFlags) != 0 || (flags & cudaArrayLayered) != 0)
    return rt().Record(cudaErrorInvalidValue);
  d.width = width, d.height = height, d.flags = flags;
  uint64_t id = 0;
  cudaError_t e = rt().ArrayCreate(&id, d);
  if (e == cudaSuccess) *array = reinterpret_cast<cudaArray_t>(id);
  return e;
}

SMOLVM_EXPORT cudaError_t cudaMalloc3DArray(cudaArray_t* array, const cudaChannelFormatDesc* desc, cudaExtent extent,
                                            unsigned flags) {
  ArrayDesc d;
  if (array == nullptr || !ToDesc(desc, &d) || (flags & ~kArrayFlags) != 0) return rt().Record(cudaErrorInvalidValue);
  d.width = extent.width, d.height = extent.height, d.depth = extent.depth, d.flags = flags;
  uint64_t id = 0;
  cudaError_t e = rt().ArrayCreate(&id, d);
  if (e == cudaSuccess) *array = reinterpret_cast<cudaArray_t>(id);
  return e;
}

SMOLVM_EXPORT cudaError_t cudaFreeArray(cudaArray_t array) { return rt().ArrayDestroy(Id(array)); }

SMOLVM_EXPORT cudaError_t cudaArrayGetInfo(cudaChannelFormatDesc* desc, cudaExtent* extent, unsigned* flags,
                                           cudaArray_t array) {
  ArrayDesc d;
  if (cudaError_t e = rt().ArrayGetDesc(Id(array), &d); e != cudaSuccess) return e;
  if (desc != nullptr) *desc = smolvm::shim::FormatToChannel(d.format, d.channels);
  if (extent != nullptr) *extent = cudaExtent{d.width, d.height, d.depth};
  if (flags != nullptr) *flags = d.flags;
  return cudaSuccess;
}

// --- copies -----------------------------------------------------------------------
#define SMOLVM_EXPORT_COPY(name, params, call) \
  SMOLVM_EXPORT cudaError_t name params { return call; }

SMOLVM_EXPORT_COPY(cudaMemcpy2DToArray, (cudaArray_t dst, size_t w, size_t h, const void* src, size_t spitch,
                                         size_t width, size_t height, cudaMemcpyKind kind),
                   To2D(dst, w, h, src, spitch, width, height, kind, nullptr, false))
SMOLVM_EXPORT_COPY(cudaMemcpy2DToArray_ptds, (cudaArray_t dst, size_t w, size_t h, const void* src, size_t spitch,
                                              size_t width, size_t height, cudaMemcpyKind kind),
                   To2D(dst, w, h, src, spitch, width, height, kind, nullptr, true))
SMOLVM_EXPORT_COPY(cudaMemcpy2DToArrayAsync, (cudaArray_t dst, size_t w, size_t h, const void* src, size_t spitch,
                                              size_t width, size_t height, cudaMemcpyKind kind, cudaStream_t s),
                   To2D(dst, w, h, src, spitch, width, height, kind, s, false))
SMOLVM_EXPORT_COPY(cudaMemcpy2DToArrayAsync_ptsz, (cudaArray_t dst, size_t w, size_t h, const void* src,
                                                   size_t spitch, size_t width, size_t height, cudaMemcpyKind kind,
                                                   cudaStream_t s),
                   To2D(dst, w, h, src, spitch, width, height, kind, s, true))
SMOLVM_EXPORT_COPY(cudaMemcpy2DFromArray, (void* dst, size_t dpitch, cudaArray_const_t src, size_t w, size_t h,
                                           size_t width, size_t height, cudaMemcpyKind kind),
                   From2D(dst, dpitch, src, w, h, width, height, kind, nullptr, false))
SMOLVM_EXPORT_COPY(cudaMemcpy2DFromArray_ptds, (void* dst, size_t dpitch, cudaArray_const_t src, size_t w, size_t h,
                                                size_t width, size_t height, cudaMemcpyKind kind),
                   From2D(dst, dpitch, src, w, h, width, height, kind, nullptr, true))
SMOLVM_EXPORT_COPY(cudaMemcpy2DFromArrayAsync, (void* dst, size_t dpitch, cudaArray_const_t src, size_t w, size_t h,
                                                size_t width, size_t height, cudaMemcpyKind kind, cudaStream_t s),
                   From2D(dst, dpitch, src, w, h, width, height, kind, s, false))
SMOLVM_EXPORT_COPY(cudaMemcpy2DFromArrayAsync_ptsz, (void* dst, size_t dpitch, cudaArray_const_t src, size_t w,
                                                     size_t h, size_t width, size_t height, cudaMemcpyKind kind,
                                                     cudaStream_t s),
                   From2D(dst, dpitch, src, w, h, width, height, kind, s, true))
SMOLVM_EXPORT_COPY(cudaMemcpyToArray, (cudaArray_t dst, size_t w, size_t h, const void* src, size_t count,
                                       cudaMemcpyKind kind),
                   Linear(true, dst, w, h, const_cast<void*>(src), count, kind, nullptr, false))
SMOLVM_EXPORT_COPY(cudaMemcpyToArray_ptds, (cudaArray_t dst, size_t w, size_t h, const void* src, size_t count,
                                            cudaMemcpyKind kind),
                   Linear(true, dst, w, h, const_cast<void*>(src), count, kind, nullptr, true))
SMOLVM_EXPORT_COPY(cudaMemcpyToArrayAsync, (cudaArray_t dst, size_t w, size_t h, const void* src, size_t count,
                                            cudaMemcpyKind kind, cudaStream_t s),
                   Linear(true, dst, w, h, const_cast<void*>(src), count, kind, s, false))
SMOLVM_EXPORT_COPY(cudaMemcpyToArrayAsync_ptsz, (cudaArray_t dst, size_t w, size_t h, const void* src, size_t count,
                                                 cudaMemcpyKind kind, cudaStream_t s),
                   Linear(true, dst, w, h, const_cast<void*>(src), count, kind, s, true))
SMOLVM_EXPORT_COPY(cudaMemcpyFromArray, (void* dst, cudaArray_const_t src, size_t w, size_t h, size_t count,
                                         cudaMemcpyKind kind),
                   Linear(false, src, w, h, dst, count, kind, nullptr, false))
SMOLVM_EXPORT_COPY(cudaMemcpyFromArray_ptds, (void* dst, cudaArray_const_t src, size_t w, size_t h, size_t count,
                                              cudaMemcpyKind kind),
                   Linear(false, src, w, h, dst, count, kind, nullptr, true))
SMOLVM_EXPORT_COPY(cudaMemcpyFromArrayAsync, (void* dst, cudaArray_const_t src, size_t w, size_t h, size_t count,
                                              cudaMemcpyKind kind, cudaStream_t s),
                   Linear(false, src, w, h, dst, count, kind, s, false))
SMOLVM_EXPORT_COPY(cudaMemcpyFromArrayAsync_ptsz, (void* dst, cudaArray_const_t src, size_t w, size_t h,
                                                   size_t count, cudaMemcpyKind kind, cudaStream_t s),
                   Linear(false, src, w, h, dst, count, kind, s, true))
SMOLVM_EXPORT_COPY(cudaMemcpy2DArrayToArray, (cudaArray_t dst, size_t wd, size_t hd, cudaArray_const_t src, size_t ws,
                                              size_t hs, size_t width, size_t height, cudaMemcpyKind kind),
                   ArrayToArray2D(dst, wd, hd, src, ws, hs, width, height, kind, false))
SMOLVM_EXPORT_COPY(cudaMemcpy2DArrayToArray_ptds, (cudaArray_t dst, size_t wd, size_t hd, cudaArray_const_t src,
                                                   size_t ws, size_t hs, size_t width, size_t height,
                                                   cudaMemcpyKind kind),
                   ArrayToArray2D(dst, wd, hd, src, ws, hs, width, height, kind, true))
SMOLVM_EXPORT_COPY(cudaMemcpyArrayToArray, (cudaArray_t dst, size_t wd, size_t hd, cudaArray_const_t src, size_t ws,
                                            size_t hs, size_t count, cudaMemcpyKind kind),
                   ArrayToArrayLinear(dst, wd, hd, src, ws, hs, count, kind, false))
SMOLVM_EXPORT_COPY(cudaMemcpyArrayToArray_ptds, (cudaArray_t dst, size_t wd, size_t hd, cudaArray_const_t src,
                                                 size_t ws, size_t hs, size_t count, cudaMemcpyKind kind),
                   ArrayToArrayLinear(dst, wd, hd, src, ws, hs, count, kind, true))
SMOLVM_EXPORT_COPY(cudaMemcpy3D, (const cudaMemcpy3DParms* p), Parms(p, nullptr, false))
SMOLVM_EXPORT_COPY(cudaMemcpy3D_ptds, (const cudaMemcpy3DParms* p), Parms(p, nullptr, true))
SMOLVM_EXPORT_COPY(cudaMemcpy3DAsync, (const cudaMemcpy3DParms* p, cudaStream_t s), Parms(p, s, false))
SMOLVM_EXPORT_COPY(cudaMemcpy3DAsync_ptsz, (const cudaMemcpy3DParms* p, cudaStream_t s), Parms(p, s, true))
SMOLVM_EXPORT_COPY(cudaMemcpy2D, (void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                  size_t height, cudaMemcpyKind kind),
                   Copy2D(dst, dpitch, src, spitch, width, height, kind, nullptr, false))
SMOLVM_EXPORT_COPY(cudaMemcpy2D_ptds, (void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                       size_t height, cudaMemcpyKind kind),
                   Copy2D(dst, dpitch, src, spitch, width, height, kind, nullptr, true))
SMOLVM_EXPORT_COPY(cudaMemcpy2DAsync, (void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                       size_t height, cudaMemcpyKind kind, cudaStream_t s),
                   Copy2D(dst, dpitch, src, spitch, width, height, kind, s, false))
SMOLVM_EXPORT_COPY(cudaMemcpy2DAsync_ptsz, (void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                            size_t height, cudaMemcpyKind kind, cudaStream_t s),
                   Copy2D(dst, dpitch, src, spitch, width, height, kind, s, true))
#undef SMOLVM_EXPORT_COPY

SMOLVM_EXPORT cudaError_t cudaGetChannelDesc(cudaChannelFormatDesc* desc, cudaArray_const_t array) {
  ArrayDesc d;
  if (desc == nullptr) return rt().Record(cudaErrorInvalidValue);
  if (cudaError_t e = rt().ArrayGetDesc(Id(array), &d); e != cudaSuccess) return e;
  *desc = smolvm::shim::FormatToChannel(d.format, d.channels);
  return cudaSuccess;
}

// --- texture and surface objects --------------------------------------------------
SMOLVM_EXPORT cudaError_t cudaCreateTextureObject(cudaTextureObject_t* object, const cudaResourceDesc* rd,
                                                  const cudaTextureDesc* td, const cudaResourceViewDesc* view) {
  if (view != nullptr) {
    static std::atomic<bool> reported{false};
    return Refuse(&reported, "cudaCreateTextureObject with a resource view");
  }
  if (object == nullptr || td == nullptr) return rt().Record(cudaErrorInvalidValue);
  TexResource r;
  if (cudaError_t e = ToResource(rd, &r); e != cudaSuccess) return e;
  TexDesc t;
  for (int i = 0; i < 3; ++i) t.address[i] = td->addressMode[i];
  t.filter = td->filterMode;
  uint32_t format = r.format;
  if (r.kind == cudaResourceTypeArray) {
    ArrayDesc d;
    if (cudaError_t e = rt().ArrayGetDesc(r.handle, &d); e != cudaSuccess) return e;
    format = d.format;
  }
  const bool is_float = format == CU_AD_FORMAT_FLOAT || format == CU_AD_FORMAT_HALF;
  if (td->readMode == cudaReadModeElementType && !is_float) t.flags |= CU_TRSF_READ_AS_INTEGER;
  if (td->normalizedCoords) t.flags |= CU_TRSF_NORMALIZED_COORDINATES;
  if (td->sRGB) t.flags |= CU_TRSF_SRGB;
  if (td->disableTrilinearOptimization) t.flags |= CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION;
  if (td->seamlessCubemap) t.flags |= CU_TRSF_SEAMLESS_CUBEMAP;
  t.max_anisotropy = td->maxAnisotropy;
  t.mip_filter = td->mipmapFilterMode;
  t.mip_bias = td->mipmapLevelBias, t.min_lod = td->minMipmapLevelClamp, t.max_lod = td->maxMipmapLevelClamp;
  for (int i = 0; i < 4; ++i) t.border[i] = td->borderColor[i];
  uint64_t o = 0;
  cudaError_t e = rt().TexObjectCreate(&o, r, t);
  if (e == cudaSuccess) *object = o;
  return e;
}

SMOLVM_EXPORT cudaError_t cudaDestroyTextureObject(cudaTextureObject_t object) {
  return rt().ObjectDestroy(object, false);
}

SMOLVM_EXPORT cudaError_t cudaGetTextureObjectResourceDesc(cudaResourceDesc* rd, cudaTextureObject_t object) {
  smolvm::shim::ArrayRecords::Object o;
  if (rd == nullptr) return rt().Record(cudaErrorInvalidValue);
  if (cudaError_t e = rt().ObjectGet(object, false, &o); e != cudaSuccess) return e;
  *rd = FromResource(o.res);
  return cudaSuccess;
}

SMOLVM_EXPORT cudaError_t cudaCreateSurfaceObject(cudaSurfaceObject_t* object, const cudaResourceDesc* rd) {
  if (object == nullptr || rd == nullptr) return rt().Record(cudaErrorInvalidValue);
  if (rd->resType != cudaResourceTypeArray) {
    TexResource r;
    if (cudaError_t e = ToResource(rd, &r); e != cudaSuccess) return e;  // names a mipmapped array
    return rt().Record(cudaErrorInvalidValue);  // a surface is over an array
  }
  uint64_t o = 0;
  cudaError_t e = rt().SurfObjectCreate(&o, Id(rd->res.array.array));
  if (e == cudaSuccess) *object = o;
  return e;
}

SMOLVM_EXPORT cudaError_t cudaDestroySurfaceObject(cudaSurfaceObject_t object) {
  return rt().ObjectDestroy(object, true);
}

SMOLVM_EXPORT cudaError_t cudaGetSurfaceObjectResourceDesc(cudaResourceDesc* rd, cudaSurfaceObject_t object) {
  smolvm::shim::ArrayRecords::Object o;
  if (rd == nullptr) return rt().Record(cudaErrorInvalidValue);
  if (cudaError_t e = rt().ObjectGet(object, true, &o); e != cudaSuccess) return e;
  *rd = FromResource(o.res);
  return cudaSuccess;
}
