// Module images as the CUDA APIs receive them: how long an image is, given
// only its first byte (cuModuleLoadData's contract), and nvcc's fatbin
// wrapper that __cudaRegisterFatBinary receives.
#pragma once

#include <cstdint>
#include <string_view>

namespace smolvm::shim {

// What __cudaRegisterFatBinary receives (nvcc's __fatDeviceText).
struct FatbinWrapper {
  int magic;    // kFatbinWrapperMagic
  int version;  // 1
  const unsigned long long* data;
  void* filename_or_fatbins;
};
inline constexpr int kFatbinWrapperMagic = 0x466243b1;

// Start of a fatbin image; the image is header_size + fat_size bytes long.
struct FatbinHeader {
  uint32_t magic;  // kFatbinMagic
  uint16_t version;
  uint16_t header_size;
  uint64_t fat_size;
};
static_assert(sizeof(FatbinHeader) == 16);
inline constexpr uint32_t kFatbinMagic = 0xBA55ED50;

// The image `p` points at: a fatbin wrapper (its fatbin), a fatbin, a 64-bit
// ELF cubin (up to the end of its last section or header table) or PTX text
// (up to and including its NUL). Empty for null.
std::string_view ModuleImage(const void* p);

}  // namespace smolvm::shim
