// CUDA arrays, texture and surface objects (runtime.h, array_records.h):
// the runtime's and the driver's entry points end here.
//
// A copy with a host side travels in the frames, in slabs of at most
// kSlabBytes: to the device each slab is an ASYNC Memcpy3D carrying its rows
// packed (the program's memory is consumed when the call returns, as a
// pageable copy's is); from the device each is a SYNC Memcpy3DToHost whose
// reply carries them. Copies between device memory and arrays are one
// ASYNC Memcpy3D. Nothing here is captured into a graph (refused, as the
// worker would).
#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>

#include "shim/runtime.h"

namespace smolvm::shim {
namespace {

constexpr uint64_t kSlabBytes = 4u << 20;
using u128 = unsigned __int128;

// The bytes a pitched side spans from its base: one past the last byte the
// copy touches (0 when it overflows 2^48).
uint64_t PitchedEnd(const CopyPlace& p, uint64_t width, uint64_t height, uint64_t depth) {
  const u128 end = (u128(p.z + depth - 1) * p.height + p.y + height - 1) * p.pitch + p.x + width;
  if (p.x >> 48 || p.y >> 48 || p.z >> 48 || p.pitch >> 48 || p.height >> 48 || end >> 48) return 0;
  return static_cast<uint64_t>(end);
}

void SetSide(const CopyPlace& p, uint64_t x, uint64_t y, uint64_t z, uint32_t* kind, uint64_t* addr,
             uint64_t* pitch, uint64_t* height, std::vector<uint64_t>* pos) {
  *kind = static_cast<uint32_t>(p.kind);
  *addr = p.addr;
  *pitch = p.pitch;
  *height = p.height;
  *pos = {p.x + x, p.y + y, p.z + z};
}

}  // namespace

cudaError_t Runtime::ArrayCreate(uint64_t* array, const ArrayDesc& d) {
  if (array == nullptr) return Record(cudaErrorInvalidValue);
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  if (ArrayFormatBytes(d.format) == 0 || (d.channels != 1 && d.channels != 2 && d.channels != 4) ||
      ArrayDeviceBytes(d) == 0 || (d.depth != 0 && d.height == 0 && (d.flags & cudaArrayLayered) == 0))
    return Finish(cudaErrorInvalidValue);
  proto::ArrayCreateRequest req;
  req.array = NewHandle();
  req.format = d.format;
  req.channels = d.channels;
  req.width = d.width;
  req.height = d.height;
  req.depth = d.depth;
  req.flags = d.flags;
  proto::ArrayCreateReply rep;
  Status st = session_.Call(req, &rep);
  if (!st.ok()) return FinishStatus(st);
  arrays_.AddArray(req.array, d);
  *array = req.array;
  return Finish(cudaSuccess);
}

cudaError_t Runtime::ArrayDestroy(uint64_t array) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  if (array == 0) return Finish(cudaSuccess);
  if (arrays_.FindArray(array) == nullptr) return Finish(cudaErrorInvalidValue);
  proto::ArrayDestroyRequest req;
  req.array = array;
  proto::ArrayDestroyReply rep;
  Status st = session_.Call(req, &rep);
  arrays_.EraseArray(array);
  return FinishStatus(st);
}

cudaError_t Runtime::ArrayGetDesc(uint64_t array, ArrayDesc* desc) {
  std::lock_guard lock(session_.mu());
  const ArrayDesc* d = arrays_.FindArray(array);
  if (d == nullptr || desc == nullptr) return Record(cudaErrorInvalidValue);
  *desc = *d;
  return cudaSuccess;
}

cudaError_t Runtime::Memcpy3D(const Copy3D& c, cudaStream_t stream, bool per_thread) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  uint64_t sid;
  if (cudaError_t e = StreamId(stream, per_thread, &sid); e != cudaSuccess) return Finish(e);
  if (c.width == 0 || c.height == 0 || c.depth == 0) return Finish(cudaSuccess);
  for (const CopyPlace* p : {&c.dst, &c.src}) {
    switch (p->kind) {
      case CopySide::kArray:
        if (!arrays_.ArraySideFits(*p, c.width, c.height, c.depth)) return Finish(cudaErrorInvalidValue);
        break;
      case CopySide::kDevice:
      case CopySide::kHost: {
        if (p->addr == 0 || p->pitch < p->x + c.width) return Finish(cudaErrorInvalidPitchValue);
        if (c.depth > 1 && p->height < p->y + c.height) return Finish(cudaErrorInvalidValue);
        const uint64_t end = PitchedEnd(*p, c.width, c.height, c.depth);
        if (end == 0) return Finish(cudaErrorInvalidValue);
        if (p->kind == CopySide::kDevice && !device_mem_.Contains(p->addr, end)) return Finish(cudaErrorInvalidValue);
        break;
      }
      default:
        return Finish(cudaErrorInvalidValue);
    }
  }
  if (CaptureTable::Capture* cap = captures_.Of(sid)) {
    cap->invalidated = true;
    return Finish(cudaErrorStreamCaptureUnsupported);
  }
  const bool host_src = c.src.kind == CopySide::kHost, host_dst = c.dst.kind == CopySide::kHost;
  auto host_row = [&](const CopyPlace& p, uint64_t y, uint64_t z) {
    return reinterpret_cast<char*>(p.addr + ((p.z + z) * p.height + p.y + y) * p.pitch + p.x);
  };
  if (host_src && host_dst) {
    // Stream-ordered in CUDA: drain the stream, then copy here.
    proto::StreamSynchronizeRequest req;
    req.stream = sid;
    proto::StreamSynchronizeReply rep;
    if (Status st = session_.Call(req, &rep); !st.ok()) return FinishStatus(st);
    for (uint64_t z = 0; z < c.depth; ++z)
      for (uint64_t y = 0; y < c.height; ++y) std::memmove(host_row(c.dst, y, z), host_row(c.src, y, z), c.width);
    return Finish(cudaSuccess);
  }
  if (!host_src && !host_dst) {
    proto::Memcpy3DRequest req;
    SetSide(c.dst, 0, 0, 0, &req.dst_kind, &req.dst, &req.dst_pitch, &req.dst_height, &req.dst_pos);
    SetSide(c.src, 0, 0, 0, &req.src_kind, &req.src, &req.src_pitch, &req.src_height, &req.src_pos);
    req.extent = {c.width, c.height, c.depth};
    req.stream = sid;
    session_.Enqueue(req);
    return Finish(cudaSuccess);
  }
  // Slabs of whole rows (or a row in pieces) of at most kSlabBytes.
  const uint64_t piece = std::min(c.width, kSlabBytes);
  const uint64_t rows_per = c.width >= kSlabBytes ? 1 : kSlabBytes / c.width;
  std::string buf;
  for (uint64_t z = 0; z < c.depth; ++z)
    for (uint64_t y = 0; y < c.height; y += rows_per)
      for (uint64_t x = 0; x < c.width; x += piece) {
        const uint64_t rows = std::min(rows_per, c.height - y), w = std::min(piece, c.width - x);
        if (host_src) {
          buf.resize(w * rows);
          for (uint64_t r = 0; r < rows; ++r) std::memcpy(&buf[r * w], host_row(c.src, y + r, z) + x, w);
          proto::Memcpy3DRequest req;
          SetSide(c.dst, x, y, z, &req.dst_kind, &req.dst, &req.dst_pitch, &req.dst_height, &req.dst_pos);
          req.src_kind = static_cast<uint32_t>(CopySide::kHost);
          req.src_pitch = w;
          req.src_height = rows;
          req.src_pos = {0, 0, 0};
          req.extent = {w, rows, 1};
          req.stream = sid;
          req.data = buf;
          session_.Enqueue(req);
        } else {
          proto::Memcpy3DToHostRequest req;
          SetSide(c.src, x, y, z, &req.src_kind, &req.src, &req.src_pitch, &req.src_height, &req.src_pos);
          req.extent = {w, rows, 1};
          req.stream = sid;
          proto::Memcpy3DToHostReply rep;
          if (Status st = session_.Call(req, &rep); !st.ok()) return FinishStatus(st);
          if (rep.data.size() != w * rows) return Finish(cudaErrorUnknown);
          for (uint64_t r = 0; r < rows; ++r) std::memcpy(host_row(c.dst, y + r, z) + x, &rep.data[r * w], w);
        }
      }
  return Finish(cudaSuccess);
}

cudaError_t Runtime::TexObjectCreate(uint64_t* object, const TexResource& res, const TexDesc& tex) {
  if (object == nullptr) return Record(cudaErrorInvalidValue);
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  const uint64_t elem = uint64_t{ArrayFormatBytes(res.format)} * res.channels;
  switch (res.kind) {
    case cudaResourceTypeArray:
      if (arrays_.FindArray(res.handle) == nullptr) return Finish(cudaErrorInvalidValue);
      break;
    case cudaResourceTypeLinear:
      if (elem == 0 || res.width == 0 || !device_mem_.Contains(res.handle, res.width))
        return Finish(cudaErrorInvalidValue);
      break;
    case cudaResourceTypePitch2D:
      if (elem == 0 || res.width == 0 || res.height == 0 || res.width > (1ull << 32) || res.height > (1ull << 32) ||
          res.pitch < res.width * elem || res.pitch >> 40 ||
          !device_mem_.Contains(res.handle, (res.height - 1) * res.pitch + res.width * elem))
        return Finish(cudaErrorInvalidValue);
      break;
    default:
      return Finish(cudaErrorInvalidValue);
  }
  proto::TexObjectCreateRequest req;
  req.res_kind = res.kind;
  req.res = res.handle;
  req.format = res.format;
  req.channels = res.channels;
  req.width = res.width;
  req.height = res.height;
  req.pitch = res.pitch;
  req.tex = EncodeTexDesc(tex);
  proto::TexObjectCreateReply rep;
  Status st = session_.Call(req, &rep);
  if (!st.ok()) return FinishStatus(st);
  arrays_.AddObject(rep.object, ArrayRecords::Object{false, res, tex});
  *object = rep.object;
  return Finish(cudaSuccess);
}

cudaError_t Runtime::SurfObjectCreate(uint64_t* object, uint64_t array) {
  if (object == nullptr) return Record(cudaErrorInvalidValue);
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  const ArrayDesc* d = arrays_.FindArray(array);
  if (d == nullptr || (d->flags & cudaArraySurfaceLoadStore) == 0) return Finish(cudaErrorInvalidValue);
  proto::SurfObjectCreateRequest req;
  req.array = array;
  proto::SurfObjectCreateReply rep;
  Status st = session_.Call(req, &rep);
  if (!st.ok()) return FinishStatus(st);
  ArrayRecords::Object o;
  o.surface = true;
  o.res.kind = cudaResourceTypeArray;
  o.res.handle = array;
  arrays_.AddObject(rep.object, o);
  *object = rep.object;
  return Finish(cudaSuccess);
}

cudaError_t Runtime::ObjectDestroy(uint64_t object, bool surface) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  if (object == 0) return Finish(cudaSuccess);
  const ArrayRecords::Object* o = arrays_.FindObject(object);
  if (o == nullptr || o->surface != surface) return Finish(cudaErrorInvalidValue);
  proto::ObjectDestroyRequest req;
  req.object = object;
  req.surface = surface ? 1 : 0;
  session_.Enqueue(req);
  arrays_.EraseObject(object);
  return Finish(cudaSuccess);
}

cudaError_t Runtime::ObjectGet(uint64_t object, bool surface, ArrayRecords::Object* out) {
  std::lock_guard lock(session_.mu());
  const ArrayRecords::Object* o = arrays_.FindObject(object);
  if (o == nullptr || o->surface != surface || out == nullptr) return Record(cudaErrorInvalidValue);
  *out = *o;
  return cudaSuccess;
}

bool Runtime::IsDevicePointer(const void* p) {
  std::lock_guard lock(session_.mu());
  return device_mem_.Contains(reinterpret_cast<uint64_t>(p), 1);
}

}  // namespace smolvm::shim
