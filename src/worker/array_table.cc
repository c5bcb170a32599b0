#include "worker/array_table.h"

#include <cuda.h>

#include <cmath>
#include <cstring>
#include <string>

#include "worker/cu_status.h"
#include "worker/worker_checks.h"

namespace smolvm {
namespace {

using u128 = unsigned __int128;

Status BadHandle(const std::string& what) { return Status(static_cast<int32_t>(CUDA_ERROR_INVALID_HANDLE), what); }

constexpr uint32_t kArrayFlags =
    CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST | CUDA_ARRAY3D_CUBEMAP | CUDA_ARRAY3D_TEXTURE_GATHER;
constexpr uint32_t kTexFlags = CU_TRSF_READ_AS_INTEGER | CU_TRSF_NORMALIZED_COORDINATES | CU_TRSF_SRGB |
                               CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION | CU_TRSF_SEAMLESS_CUBEMAP;

bool GoodChannels(uint32_t c) { return c == 1 || c == 2 || c == 4; }
uint64_t Rows(const ArrayDesc& d) { return d.height == 0 ? 1 : d.height; }
uint64_t Slices(const ArrayDesc& d) { return d.depth == 0 ? 1 : d.depth; }

}  // namespace

ArrayTable::~ArrayTable() {
  for (uint64_t t : textures_) (void)backend_->TexObjectDestroy(t);
  for (uint64_t s : surfaces_) (void)backend_->SurfObjectDestroy(s);
  for (auto& [id, e] : arrays_) (void)backend_->ArrayDestroy(e.handle);
}

Status ArrayTable::Create(uint64_t id, const ArrayDesc& d) {
  if (id == 0 || arrays_.count(id)) return Invalid("array id is reserved or in use");
  if (arrays_.size() >= kMaxArrays)
    return Status(static_cast<int32_t>(CUDA_ERROR_OUT_OF_MEMORY),
                  "a session holds at most " + std::to_string(kMaxArrays) + " CUDA arrays");
  if (ArrayFormatBytes(d.format) == 0) return Invalid("array format is not one the shims take");
  if (!GoodChannels(d.channels)) return Invalid("array channels must be 1, 2 or 4");
  if ((d.flags & ~kArrayFlags) != 0) return Invalid("unknown array flags");
  if (d.width == 0 || ArrayDeviceBytes(d) == 0) return Invalid("array size is zero or too large");
  ASSIGN_OR_RETURN(uint64_t h, backend_->ArrayCreate(d));
  arrays_.emplace(id, Entry{h, d});
  return Status::Ok();
}

Status ArrayTable::Destroy(uint64_t id) {
  auto it = arrays_.find(id);
  if (it == arrays_.end()) return BadHandle("unknown array");
  RETURN_IF_ERROR(backend_->ArrayDestroy(it->second.handle));
  arrays_.erase(it);
  return Status::Ok();
}

Status ArrayTable::CheckSide(CopyPlace* p, uint64_t width, uint64_t height, uint64_t depth, const char* side,
                             Span* span) const {
  const std::string what = std::string("copy ") + side;
  switch (p->kind) {
    case CopySide::kArray: {
      auto it = arrays_.find(p->addr);
      if (it == arrays_.end()) return BadHandle(what + ": unknown array");
      const ArrayDesc& d = it->second.desc;
      const uint64_t elem = uint64_t{ArrayFormatBytes(d.format)} * d.channels;
      const uint64_t row = d.width * elem;
      if (p->x % elem != 0 || width % elem != 0) return Invalid(what + ": x and width must be whole elements");
      if (p->x > row || width > row - p->x || p->y > Rows(d) || height > Rows(d) - p->y || p->z > Slices(d) ||
          depth > Slices(d) - p->z)
        return Invalid(what + ": outside the array");
      p->pitch = p->height = 0;
      p->addr = it->second.handle;
      return Status::Ok();
    }
    case CopySide::kDevice:
    case CopySide::kHost: {
      if (p->pitch < width) return Invalid(what + ": pitch shorter than the width");
      if ((depth > 1 || p->z > 0) && (p->y > p->height || height > p->height - p->y))
        return Invalid(what + ": slice height shorter than the rows copied");
      // From the layout's origin: the first byte touched and one past the last.
      const u128 end = (u128(p->z + depth - 1) * p->height + p->y + height - 1) * p->pitch + p->x + width;
      const u128 start = (u128(p->z) * p->height + p->y) * p->pitch + p->x;
      if (p->x > kMaxGuestRangeBytes || p->y > kMaxGuestRangeBytes || p->z > kMaxGuestRangeBytes ||
          p->pitch > kMaxGuestRangeBytes || p->height > kMaxGuestRangeBytes || end > kMaxGuestRangeBytes)
        return Invalid(what + ": the layout overflows");
      RETURN_IF_ERROR(CheckRange(p->addr, static_cast<uint64_t>(end), what.c_str()));
      if (span) *span = Span{p->addr + static_cast<uint64_t>(start), static_cast<uint64_t>(end - start)};
      return Status::Ok();
    }
  }
  return Invalid(what + ": unknown kind");
}

Status ArrayTable::CheckCopy(Copy3D* c, uint64_t host_bytes, Span* device_dst) const {
  if (c->width == 0 || c->height == 0 || c->depth == 0) {
    if (host_bytes != 0) return Invalid("copy: data for an empty extent");
    return Status::Ok();
  }
  if (c->width > kMaxGuestRangeBytes || c->height > kMaxGuestRangeBytes || c->depth > kMaxGuestRangeBytes ||
      u128(c->width) * c->height * c->depth > kMaxGuestRangeBytes)
    return Invalid("copy: extent too large");
  const uint64_t packed = c->width * c->height * c->depth;
  bool host = false;
  for (CopyPlace* p : {&c->dst, &c->src}) {
    if (p->kind != CopySide::kHost) continue;
    if (host) return Invalid("copy: both sides are host memory");
    host = true;
    if (p->pitch != c->width || p->height != c->height || p->x || p->y || p->z)
      return Invalid("copy: the host side must be packed");
    if (host_bytes != packed) return Invalid("copy: the data is not the extent's bytes");
  }
  if (!host && host_bytes != 0) return Invalid("copy: data without a host side");
  Span dst_span;
  RETURN_IF_ERROR(CheckSide(&c->dst, c->width, c->height, c->depth, "destination", &dst_span));
  RETURN_IF_ERROR(CheckSide(&c->src, c->width, c->height, c->depth, "source", nullptr));
  if (device_dst) *device_dst = c->dst.kind == CopySide::kDevice ? dst_span : Span{};
  return Status::Ok();
}

Result<uint64_t> ArrayTable::CreateTexture(TexResource r, const TexDesc& tex) {
  if (object_count() >= kMaxObjects)
    return Status(static_cast<int32_t>(CUDA_ERROR_OUT_OF_MEMORY),
                  "a session holds at most " + std::to_string(kMaxObjects) + " texture and surface objects");
  if (r.kind == CU_RESOURCE_TYPE_ARRAY) {
    auto it = arrays_.find(r.handle);
    if (it == arrays_.end()) return BadHandle("texture resource: unknown array");
    r.handle = it->second.handle;
    r.format = it->second.desc.format, r.channels = it->second.desc.channels;
    r.width = r.height = r.pitch = 0;
  } else if (r.kind == CU_RESOURCE_TYPE_LINEAR || r.kind == CU_RESOURCE_TYPE_PITCH2D) {
    const uint64_t elem = uint64_t{ArrayFormatBytes(r.format)} * r.channels;
    if (elem == 0 || !GoodChannels(r.channels)) return Invalid("texture resource: bad format or channels");
    if (r.kind == CU_RESOURCE_TYPE_LINEAR) {
      if (r.width == 0) return Invalid("texture resource: no bytes");
      RETURN_IF_ERROR(CheckRange(r.handle, r.width, "texture resource"));
      r.height = r.pitch = 0;
    } else {
      if (r.width == 0 || r.height == 0 || r.width > kMaxGuestRangeBytes / elem || r.pitch < r.width * elem ||
          r.pitch > kMaxGuestRangeBytes || r.height > kMaxGuestRangeBytes ||
          u128(r.height - 1) * r.pitch + r.width * elem > kMaxGuestRangeBytes)
        return Invalid("texture resource: bad pitch2D layout");
      RETURN_IF_ERROR(CheckRange(r.handle, (r.height - 1) * r.pitch + r.width * elem, "texture resource"));
    }
  } else {
    return Invalid("texture resource: only arrays, linear and pitch2D memory (mipmapped arrays are refused)");
  }
  ASSIGN_OR_RETURN(uint64_t o, backend_->TexObjectCreate(r, tex));
  textures_.insert(o);
  return o;
}

Result<uint64_t> ArrayTable::CreateSurface(uint64_t array_id) {
  if (object_count() >= kMaxObjects)
    return Status(static_cast<int32_t>(CUDA_ERROR_OUT_OF_MEMORY),
                  "a session holds at most " + std::to_string(kMaxObjects) + " texture and surface objects");
  auto it = arrays_.find(array_id);
  if (it == arrays_.end()) return BadHandle("surface resource: unknown array");
  if ((it->second.desc.flags & CUDA_ARRAY3D_SURFACE_LDST) == 0)
    return Invalid("surface resource: the array was made without cudaArraySurfaceLoadStore");
  ASSIGN_OR_RETURN(uint64_t o, backend_->SurfObjectCreate(it->second.handle));
  surfaces_.insert(o);
  return o;
}

Status ArrayTable::DestroyObject(uint64_t object, bool surface) {
  std::set<uint64_t>& set = surface ? surfaces_ : textures_;
  auto it = set.find(object);
  if (it == set.end()) return Invalid(surface ? "unknown surface object" : "unknown texture object");
  Status st = surface ? backend_->SurfObjectDestroy(object) : backend_->TexObjectDestroy(object);
  set.erase(it);
  return st;
}

Result<TexDesc> DecodeTexDesc(const std::vector<uint32_t>& w) {
  if (w.size() != kTexDescWords) return Invalid("texture descriptor: wrong length");
  TexDesc t;
  for (int i = 0; i < 3; ++i) {
    if (w[i] > CU_TR_ADDRESS_MODE_BORDER) return Invalid("texture descriptor: bad address mode");
    t.address[i] = w[i];
  }
  t.filter = w[3], t.flags = w[4], t.max_anisotropy = w[5], t.mip_filter = w[6];
  if (t.filter > CU_TR_FILTER_MODE_LINEAR || t.mip_filter > CU_TR_FILTER_MODE_LINEAR)
    return Invalid("texture descriptor: bad filter mode");
  if ((t.flags & ~kTexFlags) != 0) return Invalid("texture descriptor: unknown flags");
  if (t.max_anisotropy > 16) return Invalid("texture descriptor: anisotropy above 16");
  float f[7];
  std::memcpy(f, &w[7], sizeof f);
  for (float v : f)
    if (!std::isfinite(v)) return Invalid("texture descriptor: a level or border value is not finite");
  t.mip_bias = f[0], t.min_lod = f[1], t.max_lod = f[2];
  std::memcpy(t.border, &f[3], sizeof t.border);
  return t;
}

}  // namespace smolvm
