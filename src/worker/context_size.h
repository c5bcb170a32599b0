// What a worker's CUDA context is taken to cost on the device where it is not
// measured: $SMOLVM_CONTEXT_BYTES, else kCudaContextBytes on a GPU and a fixed
// 32 MiB on the fake backend, which has no context (a nonzero number, so
// tests see it travel; the fake counts its context limits' reservations as
// used device memory instead, backend/fake_backend.h). NVML's "used" in a
// session (docs/shim.md) and `smolvm cuda status` without the host's NVML
// (docs/fork.md) report it.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string_view>

namespace smolvm {

inline constexpr uint64_t kFakeContextBytes = 32ull << 20;
// A context with the worker's limits (backend/context_limits.h): on the H200
// 518-524 MiB with CUDA's default limits (docs/architecture.md §5), of which the default
// stack (1 KiB x 132 SMs x 2048 threads = 264 MiB), malloc heap (8 MiB) and
// printf FIFO (1 MiB) are given back; 254 MiB measured (issue 18).
inline constexpr uint64_t kCudaContextBytes = 256ull << 20;

inline uint64_t EstimatedContextBytes(std::string_view backend) {
  if (const char* v = std::getenv("SMOLVM_CONTEXT_BYTES")) return std::strtoull(v, nullptr, 10);
  return backend == "fake" ? kFakeContextBytes : kCudaContextBytes;
}

}  // namespace smolvm
