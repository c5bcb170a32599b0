// Encoder / Decoder for the explicit little-endian wire format.
//
// The Decoder keeps a sticky failure flag: decode every field of a message,
// then check ok() once. A failed decoder returns zero values and never reads
// past its input, so a truncated or hostile frame cannot crash the reader.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace smolvm::proto {

// Field types of the op table (ops.h): F(u64, x) declares `u64_t x`.
using u8_t = uint8_t;
using u32_t = uint32_t;
using i32_t = int32_t;
using u64_t = uint64_t;
using i64_t = int64_t;
using f32_t = float;
using str_t = std::string;
// A view of bytes: encoding copies from it; decoding points into the frame,
// valid as long as the frame's buffer is.
using bytes_t = std::string_view;
using u32s_t = std::vector<uint32_t>;
using i32s_t = std::vector<int32_t>;
using u64s_t = std::vector<uint64_t>;

// Vectors longer than this are rejected by the decoder.
inline constexpr uint32_t kMaxVectorElements = 1u << 20;

class Encoder {
 public:
  explicit Encoder(std::string* out) : out_(out) {}

  void Put(uint8_t v) { out_->push_back(static_cast<char>(v)); }
  void Put(uint32_t v) { PutLe(v); }
  void Put(int32_t v) { PutLe(static_cast<uint32_t>(v)); }
  void Put(uint64_t v) { PutLe(v); }
  void Put(int64_t v) { PutLe(static_cast<uint64_t>(v)); }
  void Put(float v) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    PutLe(u);
  }
  void Put(std::string_view s) {
    PutLe(static_cast<uint32_t>(s.size()));
    out_->append(s.data(), s.size());
  }
  void Put(const std::string& s) { Put(std::string_view(s)); }
  template <typename T>
  void Put(const std::vector<T>& v) {
    PutLe(static_cast<uint32_t>(v.size()));
    for (const T& x : v) Put(x);
  }
  // A record of the manifest table (fork_manifest.h): its fields in order.
  template <typename T>
    requires requires(Encoder& e, const T& r) { EncodeFields(e, r); }
  void Put(const T& r) {
    EncodeFields(*this, r);
  }

 private:
  template <typename U>
  void PutLe(U v) {
    char b[sizeof(U)];
    for (size_t i = 0; i < sizeof(U); ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
    out_->append(b, sizeof(U));
  }
  std::string* out_;
};

class Decoder {
 public:
  explicit Decoder(std::string_view in) : p_(in.data()), end_(in.data() + in.size()) {}

  void Get(uint8_t* v) { *v = Need(1) ? static_cast<uint8_t>(*p_++) : 0; }
  void Get(uint32_t* v) { *v = GetLe<uint32_t>(); }
  void Get(int32_t* v) { *v = static_cast<int32_t>(GetLe<uint32_t>()); }
  void Get(uint64_t* v) { *v = GetLe<uint64_t>(); }
  void Get(int64_t* v) { *v = static_cast<int64_t>(GetLe<uint64_t>()); }
  void Get(float* v) {
    uint32_t u = GetLe<uint32_t>();
    std::memcpy(v, &u, 4);
  }
  void Get(std::string_view* v) {
    uint32_t n = GetLe<uint32_t>();
    if (!Need(n)) {
      *v = {};
      return;
    }
    *v = std::string_view(p_, n);
    p_ += n;
  }
  void Get(std::string* v) {
    std::string_view s;
    Get(&s);
    v->assign(s.data(), s.size());
  }
  template <typename T>
  void Get(std::vector<T>* v) {
    uint32_t n = GetLe<uint32_t>();
    v->clear();
    // Every element takes at least one byte: a count past what is left is a lie.
    if (n > kMaxVectorElements || !Need(0) || n > remaining()) {
      failed_ = true;
      return;
    }
    v->resize(n);
    for (T& x : *v) Get(&x);
  }

  // A record of the manifest table (fork_manifest.h).
  template <typename T>
    requires requires(Decoder& d, T* r) { DecodeFields(d, r); }
  void Get(T* r) {
    if (!DecodeFields(*this, r)) failed_ = true;
  }

  bool ok() const { return !failed_; }
  // True when every byte was consumed; trailing bytes make a message malformed.
  bool done() const { return !failed_ && p_ == end_; }
  size_t remaining() const { return failed_ ? 0 : static_cast<size_t>(end_ - p_); }

 private:
  bool Need(size_t n) {
    if (failed_ || static_cast<size_t>(end_ - p_) < n) {
      failed_ = true;
      return false;
    }
    return true;
  }
  template <typename U>
  U GetLe() {
    if (!Need(sizeof(U))) return 0;
    U v = 0;
    for (size_t i = 0; i < sizeof(U); ++i) v |= static_cast<U>(static_cast<uint8_t>(p_[i])) << (8 * i);
    p_ += sizeof(U);
    return v;
  }
  const char* p_;
  const char* end_;
  bool failed_ = false;
};

}  // namespace smolvm::proto
