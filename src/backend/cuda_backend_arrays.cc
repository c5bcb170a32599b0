// CudaBackend's CUDA arrays, texture and surface objects: the worker's
// checked values into the driver's descriptors (array_types.h).
#include <cuda.h>

#include <cstring>

#include "backend/cuda_backend.h"

namespace smolvm {
namespace {

CUarray ToArray(uint64_t a) { return reinterpret_cast<CUarray>(static_cast<uintptr_t>(a)); }

void Place(const CopyPlace& p, CUmemorytype* type, CUdeviceptr* device, void** host, CUarray* array, size_t* pitch,
           size_t* height, size_t* x, size_t* y, size_t* z) {
  *x = p.x, *y = p.y, *z = p.z;
  switch (p.kind) {
    case CopySide::kDevice:
      *type = CU_MEMORYTYPE_DEVICE, *device = p.addr, *pitch = p.pitch, *height = p.height;
      break;
    case CopySide::kHost:
      *type = CU_MEMORYTYPE_HOST, *host = reinterpret_cast<void*>(p.addr), *pitch = p.pitch, *height = p.height;
      break;
    case CopySide::kArray:
      *type = CU_MEMORYTYPE_ARRAY, *array = ToArray(p.addr);
      break;
  }
}

}  // namespace

Result<uint64_t> CudaBackend::ArrayCreate(const ArrayDesc& d) {
  RETURN_IF_ERROR(Enter());
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  desc.Width = d.width;
  desc.Height = d.height;
  desc.Depth = d.depth;
  desc.Format = static_cast<CUarray_format>(d.format);
  desc.NumChannels = d.channels;
  desc.Flags = d.flags;
  CUarray a = nullptr;
  RETURN_IF_ERROR(Check(driver_->cuArray3DCreate(&a, &desc), "cuArray3DCreate"));
  return reinterpret_cast<uint64_t>(a);
}

Status CudaBackend::ArrayDestroy(uint64_t array) {
  RETURN_IF_ERROR(Enter());
  return Check(driver_->cuArrayDestroy(ToArray(array)), "cuArrayDestroy");
}

Status CudaBackend::Memcpy3D(const Copy3D& c, uint64_t stream) {
  RETURN_IF_ERROR(Enter());
  CUDA_MEMCPY3D m{};
  Place(c.dst, &m.dstMemoryType, &m.dstDevice, &m.dstHost, &m.dstArray, &m.dstPitch, &m.dstHeight, &m.dstXInBytes,
        &m.dstY, &m.dstZ);
  const void* src_host = nullptr;
  Place(c.src, &m.srcMemoryType, &m.srcDevice, const_cast<void**>(&src_host), &m.srcArray, &m.srcPitch, &m.srcHeight,
        &m.srcXInBytes, &m.srcY, &m.srcZ);
  m.srcHost = src_host;
  m.WidthInBytes = c.width;
  m.Height = c.height;
  m.Depth = c.depth;
  RETURN_IF_ERROR(Check(driver_->cuMemcpy3DAsync(&m, ToStream(stream)), "cuMemcpy3DAsync"));
  if (c.dst.kind == CopySide::kHost || c.src.kind == CopySide::kHost)
    return Check(driver_->cuStreamSynchronize(ToStream(stream)), "cuStreamSynchronize");
  return Status::Ok();
}

Result<uint64_t> CudaBackend::TexObjectCreate(const TexResource& r, const TexDesc& t) {
  RETURN_IF_ERROR(Enter());
  CUDA_RESOURCE_DESC res{};
  res.resType = static_cast<CUresourcetype>(r.kind);
  if (r.kind == CU_RESOURCE_TYPE_ARRAY) {
    res.res.array.hArray = ToArray(r.handle);
  } else if (r.kind == CU_RESOURCE_TYPE_LINEAR) {
    res.res.linear.devPtr = r.handle;
    res.res.linear.format = static_cast<CUarray_format>(r.format);
    res.res.linear.numChannels = r.channels;
    res.res.linear.sizeInBytes = r.width;
  } else {
    res.res.pitch2D.devPtr = r.handle;
    res.res.pitch2D.format = static_cast<CUarray_format>(r.format);
    res.res.pitch2D.numChannels = r.channels;
    res.res.pitch2D.width = r.width;
    res.res.pitch2D.height = r.height;
    res.res.pitch2D.pitchInBytes = r.pitch;
  }
  CUDA_TEXTURE_DESC tex{};
  for (int i = 0; i < 3; ++i) tex.addressMode[i] = static_cast<CUaddress_mode>(t.address[i]);
  tex.filterMode = static_cast<CUfilter_mode>(t.filter);
  tex.flags = t.flags;
  tex.maxAnisotropy = t.max_anisotropy;
  tex.mipmapFilterMode = static_cast<CUfilter_mode>(t.mip_filter);
  tex.mipmapLevelBias = t.mip_bias;
  tex.minMipmapLevelClamp = t.min_lod;
  tex.maxMipmapLevelClamp = t.max_lod;
  std::memcpy(tex.borderColor, t.border, sizeof t.border);
  CUtexObject o = 0;
  RETURN_IF_ERROR(Check(driver_->cuTexObjectCreate(&o, &res, &tex, nullptr), "cuTexObjectCreate"));
  return static_cast<uint64_t>(o);
}

Status CudaBackend::TexObjectDestroy(uint64_t object) {
  RETURN_IF_ERROR(Enter());
  return Check(driver_->cuTexObjectDestroy(static_cast<CUtexObject>(object)), "cuTexObjectDestroy");
}

Result<uint64_t> CudaBackend::SurfObjectCreate(uint64_t array) {
  RETURN_IF_ERROR(Enter());
  CUDA_RESOURCE_DESC res{};
  res.resType = CU_RESOURCE_TYPE_ARRAY;
  res.res.array.hArray = ToArray(array);
  CUsurfObject o = 0;
  RETURN_IF_ERROR(Check(driver_->cuSurfObjectCreate(&o, &res), "cuSurfObjectCreate"));
  return static_cast<uint64_t>(o);
}

Status CudaBackend::SurfObjectDestroy(uint64_t object) {
  RETURN_IF_ERROR(Enter());
  return Check(driver_->cuSurfObjectDestroy(static_cast<CUsurfObject>(object)), "cuSurfObjectDestroy");
}

}  // namespace smolvm
