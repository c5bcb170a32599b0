// ChunkPreload: a pooled worker's read-only mappings of one golden's shared
// chunks, made when the golden reaches its forkpoint and before any fork is
// asked for (docs/architecture.md §5), so the first cross-process import of each chunk is
// paid off the fork's path. A fork then hands them to DeviceMemory::
// ImportLayout (Take); a worker adopted for any other session drops them
// first (Drop), so it never holds another session's memory.
//
// A chunk's GPU memory lives while any process holds a handle to it: the
// daemon makes pooled workers drop the preloads of a golden that leaves its
// forkpoint or ends, so the memory goes with its last user.
//
// Owned by the worker; its one thread.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "backend/gpu_backend.h"
#include "base/status.h"
#include "worker/device_memory.h"

namespace smolvm {

// One chunk of a golden, as the ahead manifest names it.
struct PreloadChunk {
  uint64_t addr = 0;
  uint64_t bytes = 0;
  uint64_t id = 0;  // the golden's chunk id (ChunkRecord::id)
};

class ChunkPreload {
 public:
  explicit ChunkPreload(GpuBackend* backend) : backend_(backend) {}
  ~ChunkPreload() { Drop(); }
  ChunkPreload(const ChunkPreload&) = delete;
  ChunkPreload& operator=(const ChunkPreload&) = delete;

  // Makes the held set exactly `want` (fds[i] is want[i]'s descriptor) of
  // session `golden`: chunks already held with the same address, id and size
  // stay; the others are unmapped and released; new ones are imported and
  // mapped read-only, one access call per run of back-to-back chunks. On
  // failure nothing is held.
  Status Update(uint64_t golden, const std::vector<PreloadChunk>& want, const std::vector<int>& fds);
  // Synchronizes, unmaps and releases everything held.
  void Drop();
  // Hands the held chunks (still mapped read-only) to the caller, for
  // DeviceMemory::ImportLayout; nothing is held afterwards.
  std::map<uint64_t, MappedImport> Take();

  uint64_t golden() const { return golden_; }
  size_t size() const { return held_.size(); }

 private:
  GpuBackend* backend_;
  uint64_t golden_ = 0;
  std::map<uint64_t, MappedImport> held_;  // by address
};

}  // namespace smolvm
