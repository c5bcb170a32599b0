// FakeBackend's CUDA arrays, texture and surface objects (fake_backend.h):
// arrays as host buffers, objects as handles naming their resource, copies
// row by row with the checks the driver makes.
#include <cuda.h>

#include <cstring>

#include "backend/fake_backend.h"

namespace smolvm {
namespace {

uint64_t ElemBytes(const ArrayDesc& d) { return uint64_t{ArrayFormatBytes(d.format)} * d.channels; }
uint64_t Rows(const ArrayDesc& d) { return d.height == 0 ? 1 : d.height; }
uint64_t Slices(const ArrayDesc& d) { return d.depth == 0 ? 1 : d.depth; }

}  // namespace

Result<uint64_t> FakeBackend::ArrayCreate(const ArrayDesc& desc) {
  RETURN_IF_ERROR(Enter("ArrayCreate"));
  const uint64_t bytes = ArrayDeviceBytes(desc);
  if (bytes == 0 || (desc.channels != 1 && desc.channels != 2 && desc.channels != 4))
    return Cu(CUDA_ERROR_INVALID_VALUE, "bad array descriptor");
  if ((desc.flags & CUDA_ARRAY3D_LAYERED) == 0 && desc.height == 0 && desc.depth != 0)
    return Cu(CUDA_ERROR_INVALID_VALUE, "a 3-D array needs a height");
  if (desc.width > 65536 || desc.height > 65536 || desc.depth > 16384)
    return Cu(CUDA_ERROR_INVALID_VALUE, "array larger than the device's limits");
  if (used_bytes_ + bytes > options_.total_mem) return Cu(CUDA_ERROR_OUT_OF_MEMORY, "the fake device is full");
  FakeArray a;
  a.desc = desc;
  a.bytes.assign(desc.width * ElemBytes(desc) * Rows(desc) * Slices(desc), 0);
  uint64_t h = next_handle_++;
  used_bytes_ += bytes;
  arrays_.emplace(h, std::move(a));
  return h;
}

Status FakeBackend::ArrayDestroy(uint64_t array) {
  RETURN_IF_ERROR(Enter("ArrayDestroy"));
  auto it = arrays_.find(array);
  if (it == arrays_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown array");
  used_bytes_ -= ArrayDeviceBytes(it->second.desc);
  arrays_.erase(it);
  return Status::Ok();
}

Result<unsigned char*> FakeBackend::CopyRow(const CopyPlace& p, uint64_t width, uint64_t row, uint64_t slice,
                                            bool write) {
  const uint64_t y = p.y + row, z = p.z + slice;
  switch (p.kind) {
    case CopySide::kHost:
      return reinterpret_cast<unsigned char*>(p.addr + (z * p.height + y) * p.pitch + p.x);
    case CopySide::kDevice: {
      if (p.pitch < p.x + width) return Cu(CUDA_ERROR_INVALID_VALUE, "pitch shorter than a row");
      const unsigned __int128 at = (static_cast<unsigned __int128>(z) * p.height + y) * p.pitch + p.x + p.addr;
      if (at + width > ~uint64_t{0}) return Cu(CUDA_ERROR_INVALID_VALUE, "address range wraps");
      RETURN_IF_ERROR(CheckDevice(static_cast<uint64_t>(at), width, write));
      return reinterpret_cast<unsigned char*>(static_cast<uint64_t>(at));
    }
    case CopySide::kArray: {
      auto it = arrays_.find(p.addr);
      if (it == arrays_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown array");
      const ArrayDesc& d = it->second.desc;
      const uint64_t row_bytes = d.width * ElemBytes(d);
      if (p.x % ElemBytes(d) != 0 || width % ElemBytes(d) != 0 || p.x > row_bytes || width > row_bytes - p.x ||
          y >= Rows(d) || z >= Slices(d))
        return Cu(CUDA_ERROR_INVALID_VALUE, "copy outside the array");
      return it->second.bytes.data() + (z * Rows(d) + y) * row_bytes + p.x;
    }
  }
  return Cu(CUDA_ERROR_INVALID_VALUE, "bad copy side");
}

Status FakeBackend::Memcpy3D(const Copy3D& c, uint64_t stream) {
  RETURN_IF_ERROR(Enter("Memcpy3D"));
  RETURN_IF_ERROR(CheckStream(stream));
  if (Capturing(stream)) return BreakCapture(stream, "Memcpy3D");
  // The driver checks the whole copy before any byte moves.
  for (bool apply : {false, true})
    for (uint64_t z = 0; z < c.depth; ++z)
      for (uint64_t y = 0; y < c.height; ++y) {
        ASSIGN_OR_RETURN(unsigned char* to, CopyRow(c.dst, c.width, y, z, true));
        ASSIGN_OR_RETURN(unsigned char* from, CopyRow(c.src, c.width, y, z, false));
        if (apply) std::memmove(to, from, c.width);
      }
  return Status::Ok();
}

Result<uint64_t> FakeBackend::TexObjectCreate(const TexResource& res, const TexDesc& tex) {
  RETURN_IF_ERROR(Enter("TexObjectCreate"));
  if (res.kind == CU_RESOURCE_TYPE_ARRAY) {
    if (!arrays_.count(res.handle)) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown array");
  } else if (res.kind == CU_RESOURCE_TYPE_LINEAR) {
    RETURN_IF_ERROR(CheckDevice(res.handle, res.width, false));
  } else if (res.kind == CU_RESOURCE_TYPE_PITCH2D) {
    const uint64_t row = res.width * ArrayFormatBytes(res.format) * res.channels;
    if (res.height == 0 || row == 0 || res.pitch < row) return Cu(CUDA_ERROR_INVALID_VALUE, "bad pitch2D resource");
    RETURN_IF_ERROR(CheckDevice(res.handle, (res.height - 1) * res.pitch + row, false));
  } else {
    return Cu(CUDA_ERROR_INVALID_VALUE, "bad resource type");
  }
  uint64_t h = next_handle_++;
  objects_[h] = FakeObject{false, res, tex};
  return h;
}

Status FakeBackend::TexObjectDestroy(uint64_t object) {
  RETURN_IF_ERROR(Enter("TexObjectDestroy"));
  auto it = objects_.find(object);
  if (it == objects_.end() || it->second.surface) return Cu(CUDA_ERROR_INVALID_VALUE, "unknown texture object");
  objects_.erase(it);
  return Status::Ok();
}

Result<uint64_t> FakeBackend::SurfObjectCreate(uint64_t array) {
  RETURN_IF_ERROR(Enter("SurfObjectCreate"));
  auto it = arrays_.find(array);
  if (it == arrays_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown array");
  if ((it->second.desc.flags & CUDA_ARRAY3D_SURFACE_LDST) == 0)
    return Cu(CUDA_ERROR_INVALID_VALUE, "array made without CUDA_ARRAY3D_SURFACE_LDST");
  uint64_t h = next_handle_++;
  FakeObject o;
  o.surface = true;
  o.res.kind = CU_RESOURCE_TYPE_ARRAY;
  o.res.handle = array;
  objects_[h] = o;
  return h;
}

Status FakeBackend::SurfObjectDestroy(uint64_t object) {
  RETURN_IF_ERROR(Enter("SurfObjectDestroy"));
  auto it = objects_.find(object);
  if (it == objects_.end() || !it->second.surface) return Cu(CUDA_ERROR_INVALID_VALUE, "unknown surface object");
  objects_.erase(it);
  return Status::Ok();
}

Result<float> FakeBackend::TexFetch(uint64_t object, int64_t x, int64_t y) {
  auto it = objects_.find(object);
  if (it == objects_.end() || it->second.surface) return Fault("texture fetch through an unknown texture object");
  const FakeObject& o = it->second;
  uint32_t format = o.res.format, channels = o.res.channels;
  uint64_t width = 0, height = 1, pitch = 0;
  const unsigned char* base = nullptr;
  if (o.res.kind == CU_RESOURCE_TYPE_ARRAY) {
    auto a = arrays_.find(o.res.handle);
    if (a == arrays_.end()) return Fault("texture fetch from a destroyed array");
    format = a->second.desc.format, channels = a->second.desc.channels;
    width = a->second.desc.width, height = Rows(a->second.desc), pitch = width * 4;
    base = a->second.bytes.data();
  } else {
    base = reinterpret_cast<const unsigned char*>(o.res.handle);
    width = o.res.kind == CU_RESOURCE_TYPE_LINEAR ? o.res.width / 4 : o.res.width;
    height = o.res.kind == CU_RESOURCE_TYPE_LINEAR ? 1 : o.res.height;
    pitch = o.res.kind == CU_RESOURCE_TYPE_LINEAR ? o.res.width : o.res.pitch;
  }
  if (format != CU_AD_FORMAT_FLOAT || channels != 1)
    return Fault("the fake's texture kernels read 1-channel float textures only");
  auto clamp = [&](int64_t v, uint64_t n, uint32_t mode, bool* border) {
    if (v >= 0 && static_cast<uint64_t>(v) < n) return static_cast<uint64_t>(v);
    if (mode == CU_TR_ADDRESS_MODE_BORDER) *border = true;
    return v < 0 ? 0 : n - 1;
  };
  bool border = false;
  uint64_t cx = clamp(x, width, o.tex.address[0], &border), cy = clamp(y, height, o.tex.address[1], &border);
  if (border) return 0.0f;
  const unsigned char* at = base + cy * pitch + cx * 4;
  if (o.res.kind != CU_RESOURCE_TYPE_ARRAY) RETURN_IF_ERROR(KernelAccess(reinterpret_cast<uint64_t>(at), 4, false));
  float v;
  std::memcpy(&v, at, 4);
  return v;
}

Status FakeBackend::SurfWrite(uint64_t object, uint64_t x_bytes, uint64_t y, float value) {
  auto it = objects_.find(object);
  if (it == objects_.end() || !it->second.surface) return Fault("surface write through an unknown surface object");
  auto a = arrays_.find(it->second.res.handle);
  if (a == arrays_.end()) return Fault("surface write into a destroyed array");
  const ArrayDesc& d = a->second.desc;
  const uint64_t row = d.width * ElemBytes(d);
  // cudaBoundaryModeTrap: a write outside the surface faults.
  if (ElemBytes(d) != 4 || x_bytes % 4 != 0 || x_bytes >= row || y >= Rows(d))
    return Fault("surface write outside the surface");
  std::memcpy(a->second.bytes.data() + y * row + x_bytes, &value, 4);
  return Status::Ok();
}

}  // namespace smolvm
