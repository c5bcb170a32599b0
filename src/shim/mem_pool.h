// MemPool: one CUDA memory pool (cudaMallocAsync, cudaMemPoolCreate), kept
// in the guest on ranges of the session's arena.
//
// A pool reserves device memory from the worker in segments (MemAlloc, so
// charged to --gpu-mem like cudaMalloc, and at the same address in a clone
// after a fork) and carves allocations out of them here, so an allocation
// or a free costs no round trip. Stream order is kept with events, as the
// driver keeps it: a free on stream s records the pool's event of s on s;
// a block freed on s is reused at once by an allocation on s, and by one on
// another stream t after t waits for that event (cudaMemPoolReuseAllow-
// InternalDependencies, on by default; switched off, such a block is not
// reused until a synchronization says its free is done). A block merged
// from neighbours waits for each of their streams. Re-recording an event
// later is safe: a wait for a later record waits at least as long.
//
// Segments wholly free go back to the worker (Trim): cudaMemPoolTrimTo, and
// at synchronizations beyond cudaMemPoolAttrReleaseThreshold, as natively.
//
// Not thread-safe: the Runtime holds the session lock around every call.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "base/status.h"

namespace smolvm::shim {

// What a pool asks of the session (the Runtime's adapter; tests fake it).
class PoolBacking {
 public:
  virtual ~PoolBacking() = default;
  // A new range of device memory, with CUDA's error when there is none.
  virtual Result<uint64_t> Reserve(uint64_t bytes) = 0;
  virtual Status Release(uint64_t addr) = 0;
  // Stream order (ASYNC on the wire): a new event, recorded on a stream,
  // waited for by a stream, destroyed.
  virtual uint64_t NewEvent() = 0;
  virtual void Record(uint64_t event, uint64_t stream) = 0;
  virtual void Wait(uint64_t stream, uint64_t event) = 0;
  virtual void DestroyEvent(uint64_t event) = 0;
};

class MemPool {
 public:
  static constexpr uint64_t kAlign = 512;
  static constexpr uint64_t kSegment = 2ull << 20;
  // A free with nothing pending (made after a synchronization).
  static constexpr uint64_t kNoStream = ~0ull;

  // max_bytes: cudaMemPoolProps::maxSize (0: no cap of its own).
  explicit MemPool(uint64_t max_bytes = 0) : max_bytes_(max_bytes) {}

  // `bytes` > 0; the address, or the Reserve failure.
  Result<uint64_t> Alloc(PoolBacking& b, uint64_t bytes, uint64_t stream);
  // Stream-ordered free of the allocation starting at p (kNotFound otherwise).
  Status Free(PoolBacking& b, uint64_t p, uint64_t stream);
  // cudaFree / cuMemFree of the allocation starting at p: free at once (no
  // synchronization: the caller promises its accesses are done, as CUDA
  // documents), reusable on any stream, and - as the driver does - still
  // counted in cudaMemPoolAttrUsedMemCurrent (measured on an H100 with driver
  // 580, 2026-12-07: 1000 bytes allocated with cudaMallocAsync and freed with
  // cudaFree stayed in the used count, and in the high mark reset after;
  // the pool's reserved memory was trimmed to 0 all the same).
  Status FreeUncounted(uint64_t p);

  enum class Holds { kNothing, kAllocation, kInside };
  // kAllocation: an allocation starts at p; kInside: p is in one of the
  // pool's segments otherwise (freed, or inside an allocation).
  Holds Classify(uint64_t p) const;

  // A synchronization: free blocks whose streams all satisfy `done` wait
  // for nothing any more (reusable on any stream without a wait).
  void Settle(const std::function<bool(uint64_t stream)>& done);
  // Returns wholly free segments to the worker while more than `keep` bytes
  // are reserved; only those whose frees are done: every stream they wait
  // for satisfies `done`.
  Status Trim(PoolBacking& b, uint64_t keep, const std::function<bool(uint64_t stream)>& done);
  // Everything back (the pool's destruction): segments and events.
  Status ReleaseAll(PoolBacking& b);

  // cudaMemPoolAttr values (CUmemPool_attribute mirrors them): 1-3 int
  // flags, 4 release threshold (settable), 5-8 reserved / used, current and
  // high (a high mark is reset by setting 0, to the current value). Reserved
  // counts whole segments; used counts the bytes asked for, as natively.
  // kInvalidArgument otherwise.
  Status GetAttribute(int attr, void* value) const;
  Status SetAttribute(int attr, const void* value);
  uint64_t release_threshold() const { return release_threshold_; }
  uint64_t reserved_bytes() const { return reserved_; }
  uint64_t used_bytes() const { return used_; }
  size_t allocations() const { return allocations_; }

 private:
  struct Block {
    uint64_t bytes = 0;
    uint64_t segment = 0;
    bool free = true;
    std::vector<uint64_t> streams;  // free: the streams its frees were on
    uint64_t asked = 0;             // allocated: the bytes asked for (in used_)
  };
  // Marks the allocation at `it` free, merged with its free neighbours.
  void MakeFree(std::map<uint64_t, Block>::iterator it, uint64_t stream);
  void AddFree(uint64_t addr);
  void RemoveFree(uint64_t addr);
  // The smallest free block of at least `bytes` reusable on `stream`
  // (waiting allowed or not), or 0.
  uint64_t Fit(uint64_t bytes, uint64_t stream, bool with_waits) const;
  uint64_t EventOf(PoolBacking& b, uint64_t stream);

  uint64_t max_bytes_;
  std::map<uint64_t, uint64_t> segments_;  // base -> bytes
  std::map<uint64_t, Block> blocks_;       // by address, every byte of every segment
  std::multimap<uint64_t, uint64_t> free_by_size_;
  std::map<uint64_t, uint64_t> events_;  // stream -> the pool's event on it
  uint64_t reserved_ = 0, reserved_high_ = 0, used_ = 0, used_high_ = 0;
  size_t allocations_ = 0;
  uint64_t release_threshold_ = 0;
  int follow_events_ = 1, opportunistic_ = 1, internal_deps_ = 1;
};

}  // namespace smolvm::shim
