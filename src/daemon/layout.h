// Fixed address ranges every guest and worker agree on (docs/architecture.md §4).
// The daemon hands them to guests in HelloReply; a guest reserves both
// PROT_NONE so no host pointer of its own can ever equal a device pointer.
#pragma once

#include <cstdint>

namespace smolvm {

// Device memory of every session lives in [kArenaBase, kArenaBase + arena bytes).
// Not 0x600000000000: AddressSanitizer keeps its heap at [0x600000000000,
// 0x640000000000), and guests built with ASan must be able to reserve the arena.
inline constexpr uint64_t kArenaBase = 0x680000000000ull;    // 104 TiB
inline constexpr uint64_t kArenaDefaultBytes = 1ull << 40;   // 1 TiB of VA
// Pinned host segments (cudaMallocHost, staging) live in this range, mapped
// at the same address in guest and worker.
inline constexpr uint64_t kHostBase = 0x5c0000000000ull;     // 92 TiB
inline constexpr uint64_t kHostDefaultBytes = 1ull << 40;

}  // namespace smolvm
