// cuBLASLt descriptors by value: a matmul descriptor, matrix layout or
// matmul preference lives in the guest as a list of (attribute, value bytes)
// pairs and travels in LtMatmul / LtHeuristic as this encoding:
//
//   u32 count, then count x { u32 attr, u32 len, len bytes }   (little-endian)
//
// Pairs are kept sorted by attribute, one per attribute, so equal descriptors
// encode to equal bytes and the worker can cache what it rebuilt by content.
// The creation parameters are attributes too (matmul desc: COMPUTE_TYPE and
// SCALE_TYPE; layout: TYPE, ROWS, COLS, LD).
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <string_view>

#include "proto/codec.h"

namespace smolvm::proto {

class LtAttrs {
 public:
  void Set(uint32_t attr, const void* value, size_t bytes) {
    attrs_[attr].assign(static_cast<const char*>(value), bytes);
  }
  template <typename T>
  void SetValue(uint32_t attr, const T& v) {
    Set(attr, &v, sizeof v);
  }
  // nullptr when the attribute was never set.
  const std::string* Find(uint32_t attr) const {
    auto it = attrs_.find(attr);
    return it == attrs_.end() ? nullptr : &it->second;
  }
  // The value as T when set with exactly sizeof(T) bytes, else `fallback`.
  template <typename T>
  T Get(uint32_t attr, T fallback) const {
    const std::string* v = Find(attr);
    if (v == nullptr || v->size() != sizeof(T)) return fallback;
    T out;
    std::memcpy(&out, v->data(), sizeof(T));
    return out;
  }
  const std::map<uint32_t, std::string>& attrs() const { return attrs_; }

  std::string Encode() const {
    std::string out;
    Encoder enc(&out);
    enc.Put(static_cast<uint32_t>(attrs_.size()));
    for (const auto& [a, v] : attrs_) {
      enc.Put(a);
      enc.Put(std::string_view(v));
    }
    return out;
  }
  // False on truncation, trailing bytes, more than 64 attributes or a value
  // over 256 bytes (no cuBLASLt attribute is larger).
  bool Decode(std::string_view in) {
    attrs_.clear();
    Decoder dec(in);
    uint32_t n = 0;
    dec.Get(&n);
    if (!dec.ok() || n > 64) return false;
    for (uint32_t i = 0; i < n; ++i) {
      uint32_t a = 0;
      std::string_view v;
      dec.Get(&a);
      dec.Get(&v);
      if (!dec.ok() || v.size() > 256) return false;
      attrs_[a].assign(v.data(), v.size());
    }
    return dec.done();
  }

 private:
  std::map<uint32_t, std::string> attrs_;
};

}  // namespace smolvm::proto
