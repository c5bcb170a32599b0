// cuDNN backend descriptors by value: a descriptor lives in the guest as its
// type and a list of (attribute name, attribute type, elements) and travels
// in DnnFinalize as this encoding:
//
//   u32 count, then count x { u32 name, u32 type, u32 len, len bytes }   (little-endian)
//
// Elements are cuDNN's own representation (cudnnBackendAttributeType_t
// sizes, DnnElemBytes), except the two kinds of reference: a
// CUDNN_TYPE_BACKEND_DESCRIPTOR element is the guest id (u64) of another
// descriptor, a CUDNN_TYPE_HANDLE element the guest id of a cuDNN handle;
// the worker maps both onto its own objects. Sorted by name, one entry per
// name, so equal descriptors encode to equal bytes.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <string_view>

#include "proto/codec.h"

namespace smolvm::proto {

// cudnnBackendAttributeType_t values this file needs by number (proto/
// includes no NVIDIA header).
inline constexpr uint32_t kDnnTypeHandle = 0;
inline constexpr uint32_t kDnnTypeBoolean = 2;
inline constexpr uint32_t kDnnTypeInt64 = 3;
inline constexpr uint32_t kDnnTypeDouble = 5;
inline constexpr uint32_t kDnnTypeVoidPtr = 6;
inline constexpr uint32_t kDnnTypeDescriptor = 15;
inline constexpr uint32_t kDnnTypeChar = 24;
inline constexpr uint32_t kDnnTypeFraction = 26;
inline constexpr uint32_t kDnnTypeLast = 30;  // CUDNN_TYPE_MOE_GROUPED_MATMUL_MODE

// Bytes of one element of attribute type `type` (on the wire and in cuDNN's
// API on a 64-bit host); 0 for a type this build does not know.
inline size_t DnnElemBytes(uint32_t type) {
  switch (type) {
    case kDnnTypeHandle:
    case kDnnTypeDescriptor:
    case kDnnTypeVoidPtr:
    case kDnnTypeInt64:
    case kDnnTypeDouble:
      return 8;
    case kDnnTypeBoolean:
    case kDnnTypeChar:
      return 1;
    case kDnnTypeFraction:
      return 16;  // cudnnFraction_t {int64 numerator, denominator}
    default:
      return type <= kDnnTypeLast ? 4 : 0;  // every other type is a 4-byte enum / int32 / float
  }
}

struct DnnAttr {
  uint32_t type = 0;
  std::string values;  // count x DnnElemBytes(type)
  int64_t count() const {
    size_t e = DnnElemBytes(type);
    return e ? static_cast<int64_t>(values.size() / e) : 0;
  }
  uint64_t U64(size_t i) const {  // element i of an 8-byte type
    uint64_t v = 0;
    if ((i + 1) * 8 <= values.size()) std::memcpy(&v, values.data() + i * 8, 8);
    return v;
  }
};

class DnnAttrs {
 public:
  static constexpr uint32_t kMaxAttrs = 128;
  static constexpr size_t kMaxValueBytes = 1 << 16;

  void Set(uint32_t name, uint32_t type, std::string values) {
    attrs_[name] = DnnAttr{type, std::move(values)};
  }
  const DnnAttr* Find(uint32_t name) const {
    auto it = attrs_.find(name);
    return it == attrs_.end() ? nullptr : &it->second;
  }
  const std::map<uint32_t, DnnAttr>& attrs() const { return attrs_; }
  size_t size() const { return attrs_.size(); }

  std::string Encode() const {
    std::string out;
    Encoder enc(&out);
    enc.Put(static_cast<uint32_t>(attrs_.size()));
    for (const auto& [name, a] : attrs_) {
      enc.Put(name);
      enc.Put(a.type);
      enc.Put(std::string_view(a.values));
    }
    return out;
  }
  // False on truncation, trailing bytes, too many attributes, an unknown
  // type or a value that is not a whole number of elements.
  bool Decode(std::string_view in) {
    attrs_.clear();
    Decoder dec(in);
    uint32_t n = 0;
    dec.Get(&n);
    if (!dec.ok() || n > kMaxAttrs) return false;
    for (uint32_t i = 0; i < n; ++i) {
      uint32_t name = 0, type = 0;
      std::string_view v;
      dec.Get(&name);
      dec.Get(&type);
      dec.Get(&v);
      if (!dec.ok()) return false;
      size_t e = DnnElemBytes(type);
      if (e == 0 || v.size() > kMaxValueBytes || v.size() % e != 0) return false;
      attrs_[name] = DnnAttr{type, std::string(v)};
    }
    return dec.done();
  }

 private:
  std::map<uint32_t, DnnAttr> attrs_;
};

}  // namespace smolvm::proto
