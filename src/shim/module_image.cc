#include "shim/module_image.h"

#include <algorithm>
#include <cstring>

namespace smolvm::shim {
namespace {

template <typename T>
T Load(const unsigned char* p, size_t at) {
  T v;
  std::memcpy(&v, p + at, sizeof v);
  return v;
}

// ELF64: the furthest byte any header or non-NOBITS section reaches.
size_t ElfBytes(const unsigned char* p) {
  uint64_t phoff = Load<uint64_t>(p, 0x20), shoff = Load<uint64_t>(p, 0x28);
  uint16_t phentsize = Load<uint16_t>(p, 0x36), phnum = Load<uint16_t>(p, 0x38);
  uint16_t shentsize = Load<uint16_t>(p, 0x3A), shnum = Load<uint16_t>(p, 0x3C);
  uint64_t end = std::max<uint64_t>(
      {64, phoff + uint64_t{phentsize} * phnum, shoff + uint64_t{shentsize} * shnum});
  for (uint16_t i = 0; i < shnum && shentsize >= 0x28; ++i) {
    const unsigned char* sh = p + shoff + uint64_t{i} * shentsize;
    constexpr uint32_t kNoBits = 8;
    if (Load<uint32_t>(sh, 4) == kNoBits) continue;
    end = std::max(end, Load<uint64_t>(sh, 0x18) + Load<uint64_t>(sh, 0x20));
  }
  return end;
}

}  // namespace

std::string_view ModuleImage(const void* image) {
  if (image == nullptr) return {};
  auto* p = static_cast<const unsigned char*>(image);
  if (Load<int>(p, 0) == kFatbinWrapperMagic) {
    auto* w = static_cast<const FatbinWrapper*>(image);
    return w->data != nullptr ? ModuleImage(w->data) : std::string_view{};
  }
  if (Load<uint32_t>(p, 0) == kFatbinMagic) {
    auto* h = static_cast<const FatbinHeader*>(image);
    return {reinterpret_cast<const char*>(p), h->header_size + h->fat_size};
  }
  constexpr unsigned char kElf64[5] = {0x7f, 'E', 'L', 'F', 2};
  if (std::memcmp(p, kElf64, sizeof kElf64) == 0)
    return {reinterpret_cast<const char*>(p), ElfBytes(p)};
  return {reinterpret_cast<const char*>(p), std::strlen(reinterpret_cast<const char*>(p)) + 1};
}

}  // namespace smolvm::shim
