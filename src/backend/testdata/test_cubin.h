// Test images for what a module costs on the device (device_footprint.h).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace smolvm {

// A minimal ELF64 cubin-like image (what ModuleImageDeviceBytes reads of
// one): a 4 KiB code section (its bytes in the image) and a
// zero-initialised global section of `global_bytes` (none in the image).
inline std::string TestCubin(uint64_t global_bytes) {
  constexpr uint64_t kCode = 4096, kShoff = 64 + kCode;
  std::string e(kShoff + 3 * 64, '\0');
  std::memcpy(e.data(), "\x7f" "ELF", 4);
  e[4] = 2, e[5] = 1, e[6] = 1;
  auto put16 = [&e](size_t at, uint16_t v) { std::memcpy(&e[at], &v, 2); };
  auto put32 = [&e](size_t at, uint32_t v) { std::memcpy(&e[at], &v, 4); };
  auto put64 = [&e](size_t at, uint64_t v) { std::memcpy(&e[at], &v, 8); };
  put64(0x28, kShoff);
  put16(0x34, 64);
  put16(0x3A, 64);
  put16(0x3C, 3);
  // [0] null; [1] .text: PROGBITS, ALLOC|EXEC; [2] .nv.global: NOBITS, ALLOC|WRITE.
  size_t text = kShoff + 64, global = kShoff + 128;
  put32(text + 4, 1), put64(text + 8, 0x6), put64(text + 24, 64), put64(text + 32, kCode), put64(text + 48, 128);
  put32(global + 4, 8), put64(global + 8, 0x3), put64(global + 32, global_bytes), put64(global + 48, 256);
  return e;
}

}  // namespace smolvm
