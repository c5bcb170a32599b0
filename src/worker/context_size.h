// What a worker's CUDA context is taken to cost on the device where it is not
// measured: $SMOLVM_CONTEXT_BYTES, else 524 MiB on a GPU (measured on the
// H200, DESIGN §5) and a fixed 32 MiB on the fake backend, which has no
// context (a nonzero number, so tests see it travel). NVML's "used" in a
// session (docs/shim.md) and `smolvm cuda status` without the host's NVML
// (docs/fork.md) report it.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string_view>

namespace smolvm {

inline constexpr uint64_t kFakeContextBytes = 32ull << 20;

inline uint64_t EstimatedContextBytes(std::string_view backend) {
  if (const char* v = std::getenv("SMOLVM_CONTEXT_BYTES")) return std::strtoull(v, nullptr, 10);
  return backend == "fake" ? kFakeContextBytes : 524ull << 20;
}

}  // namespace smolvm
