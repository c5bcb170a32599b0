#include "backend/device_footprint.h"

#include <cuda.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>

namespace smolvm {
namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
constexpr uint32_t kFatbinMagic = 0xBA55ED50;  // the fatbin container's first word
constexpr uint64_t kShfAlloc = 0x2;

template <typename T>
std::optional<T> At(std::string_view b, uint64_t off) {
  if (off > b.size() || b.size() - off < sizeof(T)) return std::nullopt;
  T v;
  std::memcpy(&v, b.data() + off, sizeof v);
  return v;
}

uint64_t AddSat(uint64_t a, uint64_t b) { return a > kMax - b ? kMax : a + b; }

uint64_t AlignSat(uint64_t v, uint64_t align) {
  if (align <= 1) return v;
  uint64_t rem = v % align;
  return rem == 0 ? v : AddSat(v, align - rem);
}

// The SHF_ALLOC footprint of an ELF64 little-endian image; nullopt when it
// is not one or its section table does not fit in it.
std::optional<uint64_t> ElfAllocBytes(std::string_view e) {
  if (e.size() < 64 || std::memcmp(e.data(), "\x7f" "ELF", 4) != 0 || e[4] != 2 /* 64-bit */ || e[5] != 1 /* LE */)
    return std::nullopt;
  auto shoff = At<uint64_t>(e, 0x28);
  auto shentsize = At<uint16_t>(e, 0x3A);
  auto shnum = At<uint16_t>(e, 0x3C);
  if (!shoff || !shentsize || !shnum || *shentsize < 64) return std::nullopt;
  if (*shoff > e.size() || uint64_t{*shnum} * *shentsize > e.size() - *shoff) return std::nullopt;
  uint64_t total = 0;
  for (uint64_t i = 0; i < *shnum; ++i) {
    uint64_t sh = *shoff + i * *shentsize;
    uint64_t flags = *At<uint64_t>(e, sh + 8);
    uint64_t size = *At<uint64_t>(e, sh + 32);
    uint64_t align = *At<uint64_t>(e, sh + 48);
    if (flags & kShfAlloc) total = AddSat(AlignSat(total, align), size);
  }
  return total;
}

// A fatbin container: header {u32 magic, u16 version, u16 header_bytes,
// u64 payload_bytes}, then entries {u16 kind, u16, u32 header_bytes,
// u64 payload_bytes, ...; u64 uncompressed_bytes at 56 when the entry's
// header is that long}, each followed by its payload.
std::optional<uint64_t> FatbinBytes(std::string_view f) {
  auto magic = At<uint32_t>(f, 0);
  auto header = At<uint16_t>(f, 6);
  auto payload = At<uint64_t>(f, 8);
  if (!magic || *magic != kFatbinMagic || !header || !payload || *header < 16) return std::nullopt;
  uint64_t end = std::min<uint64_t>(f.size(), AddSat(*header, *payload));
  uint64_t at = *header, most = 0;
  bool any = false;
  while (at < end) {
    auto eh = At<uint32_t>(f, at + 4);
    auto es = At<uint64_t>(f, at + 8);
    if (!eh || !es || *eh < 16 || *eh > end - at || *es > end - at - *eh) break;
    std::string_view body = f.substr(at + *eh, *es);
    uint64_t bytes = *es;
    if (auto elf = ElfAllocBytes(body)) {
      bytes = *elf;
    } else if (*eh >= 64) {
      if (auto raw = At<uint64_t>(f, at + 56); raw && *raw > bytes) bytes = *raw;  // a compressed entry
    }
    most = std::max(most, bytes);
    any = true;
    at += *eh + *es;
  }
  if (!any) return std::nullopt;
  return most;
}

}  // namespace

uint64_t ContextLimitDeviceBytes(int limit, uint64_t value, const DeviceInfo& device) {
  auto attr = [&device](int a) -> uint64_t {
    return a < static_cast<int>(device.attrs.size()) && device.attrs[a] > 0 ? static_cast<uint64_t>(device.attrs[a]) : 0;
  };
  switch (limit) {
    case CU_LIMIT_STACK_SIZE: {
      uint64_t threads = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) *
                         attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
      return threads != 0 && value > kMax / threads ? kMax : value * threads;
    }
    case CU_LIMIT_MALLOC_HEAP_SIZE:
    case CU_LIMIT_PRINTF_FIFO_SIZE:
      return value;
    default:
      return 0;
  }
}

LibraryFootprint LibraryDeviceFootprint(std::string_view backend, const DeviceInfo& device) {
  if (backend == "fake") return kFakeLibraryFootprint;
  const int cc_major = CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR < static_cast<int>(device.attrs.size())
                           ? device.attrs[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR]
                           : 0;
  LibraryFootprint f;
  f.blas_default_workspace = cc_major >= 9 ? 32ull << 20 : (4ull << 20) * 2 + (16ull << 10) * 8;
  // Measured on the H200 (NVML per process, cuBLAS 13.1, cuDNN 9.19,
  // 2026-12-03, LibraryFootprintOnTheGpu): a first cublasCreate +68 MiB
  // (its pool's 32 included: the rest is cuBLAS's own state and kernels in
  // the context, charged to each handle, which over-counts a second one),
  // cublasLtCreate +0, cudnnCreate +8.
  f.blas_handle = 36ull << 20;
  f.lt_handle = 2ull << 20;
  f.dnn_handle = 8ull << 20;
  return f;
}

uint64_t ModuleImageDeviceBytes(std::string_view image) {
  if (auto elf = ElfAllocBytes(image)) return *elf;
  if (auto fat = FatbinBytes(image)) return *fat;
  return image.size();
}

}  // namespace smolvm
