// The driver API, CUDA arrays, 2-D and 3-D copies, texture and surface
// objects (driver.h): the driver's descriptors into the runtime's calls
// (forward_arrays.cc) under a DriverCallScope. A CUarray is the array's
// guest id, as a cudaArray_t is; object handles are the worker's.
#include <algorithm>
#include <atomic>

#include "shim/driver.h"
#include "shim/runtime.h"
#include "shim/stub_report.h"

namespace smolvm::shim {
namespace {

uint64_t Id(const void* a) { return reinterpret_cast<uint64_t>(a); }

CUresult Create(CUarray* array, const ArrayDesc& d) {
  Runtime::DriverCallScope scope;
  uint64_t id = 0;
  CUresult e = ToCuResult(rt().ArrayCreate(&id, d));
  if (e == CUDA_SUCCESS) *array = reinterpret_cast<CUarray>(id);
  return e;
}

CUresult GetDesc(CUarray array, ArrayDesc* d) {
  Runtime::DriverCallScope scope;
  if (array == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return ToCuResult(rt().ArrayGetDesc(Id(array), d)) == CUDA_SUCCESS ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

bool Side(CUmemorytype type, const void* host, CUdeviceptr device, CUarray array, size_t pitch, size_t height,
          size_t x, size_t y, size_t z, CopyPlace* out) {
  switch (type) {
    case CU_MEMORYTYPE_HOST:
      *out = CopyPlace{CopySide::kHost, Id(host), pitch, height, x, y, z};
      return true;
    case CU_MEMORYTYPE_DEVICE:
      *out = CopyPlace{CopySide::kDevice, device, pitch, height, x, y, z};
      return true;
    case CU_MEMORYTYPE_UNIFIED: {  // by the address
      const bool dev = rt().IsDevicePointer(reinterpret_cast<void*>(device));
      *out = CopyPlace{dev ? CopySide::kDevice : CopySide::kHost, device, pitch, height, x, y, z};
      return true;
    }
    case CU_MEMORYTYPE_ARRAY:
      *out = CopyPlace{CopySide::kArray, Id(array), 0, 0, x, y, z};
      return true;
  }
  return false;
}

CUresult Copy3DDesc(const CUDA_MEMCPY3D* p, CUstream stream) {
  if (p == nullptr || p->srcLOD != 0 || p->dstLOD != 0) return CUDA_ERROR_INVALID_VALUE;
  Copy3D c;
  if (!Side(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstPitch, p->dstHeight, p->dstXInBytes,
            p->dstY, p->dstZ, &c.dst) ||
      !Side(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcPitch, p->srcHeight, p->srcXInBytes,
            p->srcY, p->srcZ, &c.src))
    return CUDA_ERROR_INVALID_VALUE;
  c.width = p->WidthInBytes, c.height = p->Height, c.depth = p->Depth;
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().Memcpy3D(c, RuntimeStream(stream), false));
}

CUresult Copy2DDesc(const CUDA_MEMCPY2D* p, CUstream stream) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Copy3D c;
  if (!Side(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstPitch, p->Height, p->dstXInBytes, p->dstY,
            0, &c.dst) ||
      !Side(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcPitch, p->Height, p->srcXInBytes, p->srcY,
            0, &c.src))
    return CUDA_ERROR_INVALID_VALUE;
  c.width = p->WidthInBytes, c.height = p->Height, c.depth = 1;
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().Memcpy3D(c, RuntimeStream(stream), false));
}

CUresult RefuseDriverCall(std::atomic<bool>* reported, const char* what) {
  ReportNotSupportedOnce(reported, "cuda", what, "CUDA_ERROR_NOT_SUPPORTED");
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult ToResource(const CUDA_RESOURCE_DESC* rd, TexResource* r) {
  if (rd == nullptr || rd->flags != 0) return CUDA_ERROR_INVALID_VALUE;
  r->kind = rd->resType;
  switch (rd->resType) {
    case CU_RESOURCE_TYPE_ARRAY:
      r->handle = Id(rd->res.array.hArray);
      return CUDA_SUCCESS;
    case CU_RESOURCE_TYPE_LINEAR:
      r->handle = rd->res.linear.devPtr;
      r->format = rd->res.linear.format, r->channels = rd->res.linear.numChannels;
      r->width = rd->res.linear.sizeInBytes;
      return CUDA_SUCCESS;
    case CU_RESOURCE_TYPE_PITCH2D:
      r->handle = rd->res.pitch2D.devPtr;
      r->format = rd->res.pitch2D.format, r->channels = rd->res.pitch2D.numChannels;
      r->width = rd->res.pitch2D.width, r->height = rd->res.pitch2D.height, r->pitch = rd->res.pitch2D.pitchInBytes;
      return CUDA_SUCCESS;
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY: {
      static std::atomic<bool> reported{false};
      return RefuseDriverCall(&reported, "a texture or surface object over a mipmapped array");
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult ResourceOf(CUDA_RESOURCE_DESC* res, uint64_t obj, bool surface) {
  if (res == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Runtime::DriverCallScope scope;
  ArrayRecords::Object o;
  if (CUresult e = ToCuResult(rt().ObjectGet(obj, surface, &o)); e != CUDA_SUCCESS) return e;
  *res = CUDA_RESOURCE_DESC{};
  res->resType = static_cast<CUresourcetype>(o.res.kind);
  if (o.res.kind == CU_RESOURCE_TYPE_ARRAY) {
    res->res.array.hArray = reinterpret_cast<CUarray>(o.res.handle);
  } else if (o.res.kind == CU_RESOURCE_TYPE_LINEAR) {
    res->res.linear.devPtr = o.res.handle;
    res->res.linear.format = static_cast<CUarray_format>(o.res.format);
    res->res.linear.numChannels = o.res.channels;
    res->res.linear.sizeInBytes = o.res.width;
  } else {
    res->res.pitch2D.devPtr = o.res.handle;
    res->res.pitch2D.format = static_cast<CUarray_format>(o.res.format);
    res->res.pitch2D.numChannels = o.res.channels;
    res->res.pitch2D.width = o.res.width, res->res.pitch2D.height = o.res.height;
    res->res.pitch2D.pitchInBytes = o.res.pitch;
  }
  return CUDA_SUCCESS;
}

// The driver's copies with a 1-D array (as the driver documents them):
// `bytes` from the array's byte `offset` on, to or from `other` (packed).
// The loop takes rows one after another, as for a 2-D array's run.
CUresult ArrayRun(CUarray array, size_t offset, CopyPlace other, bool to_array, size_t bytes, CUstream stream) {
  ArrayDesc d;
  if (CUresult e = GetDesc(array, &d); e != CUDA_SUCCESS) return e;
  const uint64_t row = d.width * ArrayFormatBytes(d.format) * d.channels;
  if (row == 0 || d.height != 0 || d.depth != 0) return CUDA_ERROR_INVALID_VALUE;  // 1-D arrays only
  uint64_t x = offset % row, y = offset / row;
  Runtime::DriverCallScope scope;
  while (bytes > 0) {
    const bool whole = x == 0 && bytes >= row;
    const uint64_t rows = whole ? bytes / row : 1;
    const uint64_t width = whole ? row : std::min<uint64_t>(bytes, row - x);
    Copy3D c;
    const CopyPlace side{CopySide::kArray, Id(array), 0, 0, x, y, 0};
    other.pitch = width, other.height = rows;
    c.dst = to_array ? side : other;
    c.src = to_array ? other : side;
    c.width = width, c.height = rows, c.depth = 1;
    if (CUresult e = ToCuResult(rt().Memcpy3D(c, RuntimeStream(stream), false)); e != CUDA_SUCCESS) return e;
    bytes -= width * rows, other.addr += width * rows;
    x += width;
    y += x / row + (rows - 1);
    x %= row;
  }
  return CUDA_SUCCESS;
}

CopyPlace Host(const void* p) { return CopyPlace{CopySide::kHost, Id(p)}; }
CopyPlace Device(CUdeviceptr p) { return CopyPlace{CopySide::kDevice, p}; }

}  // namespace

CUresult Driver::cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                                    unsigned int elem) {
  // As cudaMallocPitch: rows 512 bytes apart at least (a multiple of every
  // element size the driver takes).
  if (dptr == nullptr || pitch == nullptr || width == 0 || height == 0 ||
      (elem != 4 && elem != 8 && elem != 16) || width > (size_t{1} << 40) || height > (size_t{1} << 40))
    return CUDA_ERROR_INVALID_VALUE;
  const size_t p = (width + 511) / 512 * 512;
  if (p > (size_t{1} << 48) / height) return CUDA_ERROR_INVALID_VALUE;
  Runtime::DriverCallScope scope;
  void* ptr = nullptr;
  CUresult e = ToCuResult(rt().Malloc(&ptr, p * height));
  if (e == CUDA_SUCCESS) *dptr = reinterpret_cast<CUdeviceptr>(ptr), *pitch = p;
  return e;
}

CUresult Driver::cuArrayCreate_v2(CUarray* array, const CUDA_ARRAY_DESCRIPTOR* desc) {
  if (array == nullptr || desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Create(array, ArrayDesc{desc->Format, desc->NumChannels, desc->Width, desc->Height, 0, 0});
}

CUresult Driver::cuArray3DCreate_v2(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  if (array == nullptr || desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Create(array, ArrayDesc{desc->Format, desc->NumChannels, desc->Width, desc->Height, desc->Depth, desc->Flags});
}

CUresult Driver::cuArrayDestroy(CUarray array) {
  Runtime::DriverCallScope scope;
  if (array == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  CUresult e = ToCuResult(rt().ArrayDestroy(Id(array)));
  return e == CUDA_ERROR_INVALID_VALUE ? CUDA_ERROR_INVALID_HANDLE : e;
}

CUresult Driver::cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR* desc, CUarray array) {
  if (desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ArrayDesc d;
  if (CUresult e = GetDesc(array, &d); e != CUDA_SUCCESS) return e;
  desc->Width = d.width, desc->Height = d.height;
  desc->Format = static_cast<CUarray_format>(d.format), desc->NumChannels = d.channels;
  return CUDA_SUCCESS;
}

CUresult Driver::cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR* desc, CUarray array) {
  if (desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ArrayDesc d;
  if (CUresult e = GetDesc(array, &d); e != CUDA_SUCCESS) return e;
  desc->Width = d.width, desc->Height = d.height, desc->Depth = d.depth;
  desc->Format = static_cast<CUarray_format>(d.format), desc->NumChannels = d.channels, desc->Flags = d.flags;
  return CUDA_SUCCESS;
}

CUresult Driver::cuMemcpy2D_v2(const CUDA_MEMCPY2D* p) { return Copy2DDesc(p, nullptr); }
CUresult Driver::cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D* p) { return Copy2DDesc(p, nullptr); }
CUresult Driver::cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* p, CUstream s) { return Copy2DDesc(p, s); }
CUresult Driver::cuMemcpy3D_v2(const CUDA_MEMCPY3D* p) { return Copy3DDesc(p, nullptr); }
CUresult Driver::cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D* p, CUstream s) { return Copy3DDesc(p, s); }

CUresult Driver::cuMemcpyHtoA_v2(CUarray dst, size_t offset, const void* src, size_t bytes) {
  return ArrayRun(dst, offset, Host(src), true, bytes, nullptr);
}
CUresult Driver::cuMemcpyHtoAAsync_v2(CUarray dst, size_t offset, const void* src, size_t bytes, CUstream s) {
  return ArrayRun(dst, offset, Host(src), true, bytes, s);
}
CUresult Driver::cuMemcpyAtoH_v2(void* dst, CUarray src, size_t offset, size_t bytes) {
  return ArrayRun(src, offset, Host(dst), false, bytes, nullptr);
}
CUresult Driver::cuMemcpyAtoHAsync_v2(void* dst, CUarray src, size_t offset, size_t bytes, CUstream s) {
  return ArrayRun(src, offset, Host(dst), false, bytes, s);
}
CUresult Driver::cuMemcpyDtoA_v2(CUarray dst, size_t offset, CUdeviceptr src, size_t bytes) {
  return ArrayRun(dst, offset, Device(src), true, bytes, nullptr);
}
CUresult Driver::cuMemcpyAtoD_v2(CUdeviceptr dst, CUarray src, size_t offset, size_t bytes) {
  return ArrayRun(src, offset, Device(dst), false, bytes, nullptr);
}

CUresult Driver::cuTexObjectCreate(CUtexObject* obj, const CUDA_RESOURCE_DESC* res, const CUDA_TEXTURE_DESC* tex,
                                   const CUDA_RESOURCE_VIEW_DESC* view) {
  if (view != nullptr) {
    static std::atomic<bool> reported{false};
    return RefuseDriverCall(&reported, "cuTexObjectCreate with a resource view");
  }
  if (obj == nullptr || tex == nullptr) return CUDA_ERROR_INVALID_VALUE;
  TexResource r;
  if (CUresult e = ToResource(res, &r); e != CUDA_SUCCESS) return e;
  TexDesc t;
  for (int i = 0; i < 3; ++i) t.address[i] = tex->addressMode[i];
  t.filter = tex->filterMode;
  t.flags = tex->flags;
  t.max_anisotropy = tex->maxAnisotropy;
  t.mip_filter = tex->mipmapFilterMode;
  t.mip_bias = tex->mipmapLevelBias, t.min_lod = tex->minMipmapLevelClamp, t.max_lod = tex->maxMipmapLevelClamp;
  for (int i = 0; i < 4; ++i) t.border[i] = tex->borderColor[i];
  Runtime::DriverCallScope scope;
  uint64_t o = 0;
  CUresult e = ToCuResult(rt().TexObjectCreate(&o, r, t));
  if (e == CUDA_SUCCESS) *obj = o;
  return e;
}

CUresult Driver::cuTexObjectDestroy(CUtexObject obj) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().ObjectDestroy(obj, false));
}

CUresult Driver::cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC* res, CUtexObject obj) {
  return ResourceOf(res, obj, false);
}

CUresult Driver::cuSurfObjectGetResourceDesc(CUDA_RESOURCE_DESC* res, CUsurfObject obj) {
  return ResourceOf(res, obj, true);
}

CUresult Driver::cuSurfObjectCreate(CUsurfObject* obj, const CUDA_RESOURCE_DESC* res) {
  if (obj == nullptr) return CUDA_ERROR_INVALID_VALUE;
  TexResource r;
  if (CUresult e = ToResource(res, &r); e != CUDA_SUCCESS) return e;
  if (r.kind != CU_RESOURCE_TYPE_ARRAY) return CUDA_ERROR_INVALID_VALUE;
  Runtime::DriverCallScope scope;
  uint64_t o = 0;
  CUresult e = ToCuResult(rt().SurfObjectCreate(&o, r.handle));
  if (e == CUDA_SUCCESS) *obj = o;
  return e;
}

CUresult Driver::cuSurfObjectDestroy(CUsurfObject obj) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().ObjectDestroy(obj, true));
}

}  // namespace smolvm::shim
