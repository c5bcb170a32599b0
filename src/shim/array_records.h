// ArrayRecords: what the guest knows of its CUDA arrays and texture and
// surface objects (docs/shim.md, "Arrays, textures, surfaces"), for CUDA's
// call-time checks and the queries answered without a round trip
// (cudaArrayGetInfo, cuArrayGetDescriptor, cudaGetTextureObjectResourceDesc).
//
// An array is named by a guest-chosen id: the cudaArray_t / CUarray value
// the program holds is that id (the worker maps it to its own array). A
// texture or surface object is the worker's own handle (the value a kernel
// receives), remembered here so that destroy and queries accept only what
// this process was given. The worker checks everything again.
//
// Plain data, owned by the Runtime, used under its session lock.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <vector>

#include "backend/array_types.h"

namespace smolvm::shim {

class ArrayRecords {
 public:
  struct Object {
    bool surface = false;
    TexResource res;  // res.handle: the array id or the device address, as the guest gave it
    TexDesc tex;
  };

  void AddArray(uint64_t id, const ArrayDesc& d) { arrays_[id] = d; }
  const ArrayDesc* FindArray(uint64_t id) const {
    auto it = arrays_.find(id);
    return it == arrays_.end() ? nullptr : &it->second;
  }
  void EraseArray(uint64_t id) { arrays_.erase(id); }

  void AddObject(uint64_t handle, const Object& o) { objects_[handle] = o; }
  const Object* FindObject(uint64_t handle) const {
    auto it = objects_.find(handle);
    return it == objects_.end() ? nullptr : &it->second;
  }
  void EraseObject(uint64_t handle) { objects_.erase(handle); }

  // OK (true) when `p`, a kArray side of an extent `width` bytes x `height`
  // x `depth`, lies inside its array in whole elements.
  bool ArraySideFits(const CopyPlace& p, uint64_t width, uint64_t height, uint64_t depth) const;

 private:
  std::map<uint64_t, ArrayDesc> arrays_;
  std::map<uint64_t, Object> objects_;
};

// cudaChannelFormatDesc <-> (CUarray_format, channels): equal bits in each
// used channel, x first; signed, unsigned (8, 16, 32 bits) or float (16, 32).
// False for a description the shims do not take (the block-compressed, NV12
// and packed formats, or unequal channels).
bool ChannelToFormat(const cudaChannelFormatDesc& d, uint32_t* format, uint32_t* channels);
cudaChannelFormatDesc FormatToChannel(uint32_t format, uint32_t channels);

// TexDesc as TexObjectCreate carries it (kTexDescWords words).
std::vector<uint32_t> EncodeTexDesc(const TexDesc& t);

}  // namespace smolvm::shim
