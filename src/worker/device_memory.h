// DeviceMemory: one session's device allocations, built from VMM chunks
// mapped into the fixed guest arena (docs/architecture.md §4). Owned by the worker thread.
//
// - Large allocations (> kSlabMaxBytes) get their own VA range, rounded up to
//   the granularity and split into chunks of at most kMaxChunkBytes.
// - Small allocations are packed, 512-byte aligned, into slab chunks of one
//   granule each (512: what cudaMalloc gives on NVIDIA's runtime, and the
//   texture alignment a texture object over linear or pitch2D memory needs).
// Every chunk is its own backend handle, so sharing and copy-on-write can be
// decided per chunk at a fork.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>


#include "backend/gpu_backend.h"
#include "base/status.h"
#include "proto/fork_manifest.h"
#include "worker/upload_trace.h"

namespace smolvm {

inline constexpr uint64_t kMaxChunkBytes = 64ull << 20;
inline constexpr uint64_t kSlabMaxBytes = 1ull << 20;
inline constexpr uint64_t kAllocAlign = 512;

struct ChunkRecord {
  uint64_t addr = 0;
  uint64_t bytes = 0;
  uint64_t handle = 0;   // the backend's chunk handle
  bool writable = true;  // false once shared with clones (read-only for everyone)
  bool shared = false;   // imported from, or exported to, other sessions
  bool owned = true;     // false when imported from a golden (not counted as ours)
  uint64_t id = 0;       // never reused within one DeviceMemory (manifests name chunks by it)
  UploadTrace uploads;   // for --share auto
};

// A chunk to map at an address.
struct ChunkPlacement {
  uint64_t addr = 0, handle = 0, bytes = 0;
};
// Maps `run` (address-ordered) with one ChunkMapRun per stretch of
// back-to-back addresses. `*mapped` says how many, from the front, are
// mapped when it returns (all of them on success).
Status MapChunkRuns(GpuBackend* backend, const std::vector<ChunkPlacement>& run, bool writable, size_t* mapped);

// A golden's chunk that a pooled worker imported and mapped read-only at its
// address ahead of a fork (ChunkPreload), handed to ImportLayout.
struct MappedImport {
  uint64_t handle = 0;
  uint64_t bytes = 0;
  uint64_t id = 0;  // the golden's chunk id
};

// What a fork copies into each clone: the chunks not shared, the bytes of
// live allocations in them, and those allocations by size (device_memory_report.cc).
struct PrivateMemorySummary {
  size_t chunks = 0;
  uint64_t chunk_bytes = 0;
  uint64_t live_bytes = 0;  // allocated bytes (as asked) inside the private chunks
  std::map<uint64_t, size_t> allocation_sizes;  // bytes as asked -> allocations touching a private chunk
};
// "private 3 chunks 66.0 MiB, live 64.1 MiB in 5 allocations; largest: 1 x 64.0 MiB, 4 x 32.0 KiB"
std::string FormatPrivateSummary(const PrivateMemorySummary& s, size_t top = 6);

// At the top of the arena: a window never handed to allocations, for the
// worker's temporary mappings (copying a golden's chunks, copy-on-write).
inline constexpr uint64_t kScratchBytes = 16ull << 30;

class DeviceMemory {
 public:
  // `limit_bytes` caps the chunk bytes this session may hold (0 = no cap).
  DeviceMemory(GpuBackend* backend, uint64_t arena_base, uint64_t arena_bytes,
               uint64_t limit_bytes = 0);
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  // A new allocation; bytes > 0. Fails with CUDA_ERROR_OUT_OF_MEMORY when the
  // device, the arena or the session's limit is exhausted.
  Result<uint64_t> Alloc(uint64_t bytes);
  // Frees an allocation made by Alloc (exact start address), else
  // CUDA_ERROR_INVALID_VALUE. Synchronizes the context before unmapping.
  Status Free(uint64_t ptr);
  // True when [ptr, ptr+bytes) lies inside one live allocation.
  bool Contains(uint64_t ptr, uint64_t bytes) const;

  // Marks [ptr, ptr+bytes) frozen; it must lie inside one live allocation.
  Status MarkFrozen(uint64_t ptr, uint64_t bytes);
  // True when every allocated byte of the chunk at `addr` is frozen, so the
  // chunk can be shared with clones without hiding anyone's writes.
  bool ChunkIsFrozen(uint64_t addr) const;
  // Marks the chunks shared and maps them read-only (for everyone, the owner
  // too), with one access call per run of back-to-back chunks.
  Status ShareChunks(const std::vector<uint64_t>& addrs);
  // The chunks `--share auto` shares: written only by host-to-device copies
  // that cover every allocated byte, and still holding exactly that (read
  // back and hashed now; the caller has synchronized). See UploadTrace.
  Result<std::vector<uint64_t>> AutoShareChunks();
  // Bookkeeping for AutoShareChunks, called by the worker before issuing
  // the write: an upload of `data` into [ptr, ptr+bytes), or any other write.
  void NoteUpload(uint64_t ptr, const void* data, uint64_t bytes);
  void NoteOtherWrite(uint64_t ptr, uint64_t bytes);
  // Before a copy or memset writes [ptr, ptr+bytes): every read-only shared
  // chunk it touches is replaced by a private copy at the same address.
  // Returns how many chunks were copied.
  Result<int> PrepareWrite(uint64_t ptr, uint64_t bytes);
  // Chunks overlapping [ptr, ptr+bytes) that are shared (for fault reports).
  std::vector<uint64_t> SharedChunksIn(uint64_t ptr, uint64_t bytes) const;

  // The allocator's layout (allocations, slabs, free VA, frozen ranges, and
  // the chunks in `chunks()` order) for a clone to rebuild.
  proto::ManifestLayout ExportLayout() const;
  // Rebuilds this (empty) allocator from a golden's layout. `chunk_fds[i]` is
  // the golden's i-th chunk: shared chunks are imported and mapped read-only;
  // the others get a new private chunk holding a copy of the golden's bytes.
  // `mapped` (by address) are the golden's chunks already imported and
  // mapped read-only ahead: a shared chunk found there (same id and size) is
  // taken as it is; one the layout keeps private serves as the copy's
  // source; the rest are unmapped and released. Ownership of all of them
  // passes to this call. Runs of back-to-back chunks are mapped with one
  // access call, and private copies are synchronized once.
  // On failure the allocator holds what it mapped so far: destroy it.
  Status ImportLayout(const proto::ManifestLayout& layout, const std::vector<int>& chunk_fds,
                      std::map<uint64_t, MappedImport> mapped = {});

  // A VA range for the driver shim's cuMemAddressReserve: `bytes` (a
  // granularity multiple) aligned to `align` (0 = granularity), taken from
  // the arena so no allocation lands there until ReleaseVa gives it back.
  Result<uint64_t> ReserveVa(uint64_t bytes, uint64_t align);
  void ReleaseVa(uint64_t addr, uint64_t bytes) { ReturnVa(addr, bytes); }
  uint64_t granularity() const { return granularity_; }

  // The chunks that are not shared, with what lives in them.
  PrivateMemorySummary PrivateSummary() const;

  const std::map<uint64_t, ChunkRecord>& chunks() const { return chunks_; }
  uint64_t chunk_bytes() const { return chunk_bytes_; }
  size_t allocation_count() const { return allocs_.size(); }

 private:
  struct Allocation {
    uint64_t bytes = 0;     // as asked
    uint64_t reserved = 0;  // VA bytes held (large) or slab bytes held (small)
    uint64_t slab = 0;      // the slab's address for small allocations, else 0
  };
  struct Slab {
    std::map<uint64_t, uint64_t> free;  // offset -> bytes
    uint64_t used = 0;
  };

  Result<uint64_t> TakeVa(uint64_t bytes);
  void ReturnVa(uint64_t addr, uint64_t bytes);
  // Creates and maps chunks covering [addr, addr+bytes); rolls back on failure.
  Status MapRange(uint64_t addr, uint64_t bytes);
  Status UnmapRange(uint64_t addr, uint64_t bytes);
  Result<uint64_t> AllocSmall(uint64_t bytes);
  using Placement = ChunkPlacement;
  // Copies each source handle's bytes to its address through mappings in
  // the scratch window, synchronizing once per window-full, then unmaps them.
  Status CopyFromHandles(const std::vector<Placement>& sources);
  // The allocated (offset, bytes) ranges of the chunk at `addr`.
  std::vector<std::pair<uint64_t, uint64_t>> LiveRanges(const ChunkRecord& c) const;

  GpuBackend* backend_;
  uint64_t granularity_;
  uint64_t limit_bytes_;
  uint64_t chunk_bytes_ = 0;
  std::map<uint64_t, uint64_t> free_va_;  // addr -> bytes, coalesced
  std::map<uint64_t, ChunkRecord> chunks_;
  std::map<uint64_t, Allocation> allocs_;
  std::map<uint64_t, Slab> slabs_;
  std::map<uint64_t, uint64_t> frozen_;  // start -> end, merged
  uint64_t scratch_base_ = 0;
  uint64_t scratch_bytes_ = 0;
  uint64_t next_id_ = 1;
};

}  // namespace smolvm
