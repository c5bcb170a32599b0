// ArrayTable: one session's CUDA arrays and texture and surface objects in
// its worker (docs/shim.md, Arrays, textures, surfaces).
//
// Arrays are named by guest-chosen ids, as streams are; the table maps each
// to the backend's array and keeps its descriptor, so every copy, texture
// and surface naming it is checked against it here before the backend sees
// a handle. Texture and surface objects are the backend's own values: a
// kernel receives them as parameters, so the guest must hold the very value
// the driver gave; the table accepts back (to destroy) only values it handed
// out to this session. Everything the guest sends is checked first: an id,
// a format, a size, a pitch or an extent the session cannot have is
// CUDA_ERROR_INVALID_VALUE (or _INVALID_HANDLE) and nothing reaches the
// driver. A session holds at most kMaxArrays arrays and kMaxObjects objects.
//
// Owned by the worker, on its one thread; `backend` outlives the table. The
// destructor destroys every object, then every array (the caller has
// synchronized the context).
#pragma once

#include <cstdint>
#include <map>
#include <set>

#include "backend/gpu_backend.h"
#include "base/status.h"

namespace smolvm {

class ArrayTable {
 public:
  static constexpr size_t kMaxArrays = 1u << 16;
  static constexpr size_t kMaxObjects = 1u << 16;

  explicit ArrayTable(GpuBackend* backend) : backend_(backend) {}
  ~ArrayTable();
  ArrayTable(const ArrayTable&) = delete;
  ArrayTable& operator=(const ArrayTable&) = delete;

  // A new array under the guest's `id` (non-zero, unused).
  Status Create(uint64_t id, const ArrayDesc& desc);
  Status Destroy(uint64_t id);

  // A device-memory side of a copy: the bytes it spans from `start`.
  struct Span {
    uint64_t start = 0, bytes = 0;
  };
  // Checks `copy` as the guest sent it and resolves its array ids to the
  // backend's handles. A kHost side must be packed (pitch = width, height =
  // the extent's) over exactly `host_bytes`. `device_dst`, when the
  // destination is device memory, receives the range the copy may write.
  // An empty extent is OK (nothing to copy).
  Status CheckCopy(Copy3D* copy, uint64_t host_bytes, Span* device_dst) const;

  // `res.handle` is an array id (kind 0) or a device address; on success the
  // object's value, which the table remembers.
  Result<uint64_t> CreateTexture(TexResource res, const TexDesc& tex);
  Result<uint64_t> CreateSurface(uint64_t array_id);
  Status DestroyObject(uint64_t object, bool surface);

  bool empty() const { return arrays_.empty() && textures_.empty() && surfaces_.empty(); }
  size_t array_count() const { return arrays_.size(); }
  size_t object_count() const { return textures_.size() + surfaces_.size(); }

 private:
  struct Entry {
    uint64_t handle = 0;
    ArrayDesc desc;
  };
  Status CheckSide(CopyPlace* p, uint64_t width, uint64_t height, uint64_t depth, const char* side,
                   Span* span) const;

  GpuBackend* backend_;
  std::map<uint64_t, Entry> arrays_;  // by guest id
  std::set<uint64_t> textures_, surfaces_;
};

// TexDesc from TexObjectCreate's words (kTexDescWords of them), checked as
// the driver takes them: address and filter modes in range, known flags,
// anisotropy at most 16, finite levels and border.
Result<TexDesc> DecodeTexDesc(const std::vector<uint32_t>& words);

}  // namespace smolvm
