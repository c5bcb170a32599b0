// HostMemory: pinned host memory shared with the worker.
//
// Every segment is its own memfd, mapped MAP_SHARED|MAP_FIXED at an address
// inside the host range the daemon handed out at Hello (which the session
// reserved PROT_NONE), and registered with the worker (HostRegister, the
// memfd riding with the frame), which maps it at the same address and
// page-locks it. So a pinned pointer means the same bytes in guest and
// worker, and copies to and from it are zero-copy on the worker side.
//
// Fork (a later issue): each segment keeps its memfd, address and size, so a
// child can copy it into a fresh memfd and map that MAP_FIXED at the same
// address before it re-attaches; Segments() lists them.
//
// Not thread-safe by itself: the Runtime holds the session lock.
#pragma once

#include <cstdint>
#include <map>

#include "base/status.h"
#include "base/unique_fd.h"
#include "shim/host_mirror.h"

namespace smolvm::shim {

class Session;

struct HostSegment {
  uint64_t bytes = 0;     // mapped length (page multiple)
  uint64_t requested = 0; // what the caller asked for
  unsigned flags = 0;     // cudaHostAlloc flags
  // Contents that mean nothing between uses (the shim's own staging): a
  // clone gets the segment zeroed, not copied.
  bool scratch = false;
  UniqueFd memfd;  // none in a session without descriptors (host_mirror.h)
};

class HostMemory {
 public:
  // Sets the range to carve segments from; called after Hello.
  void Init(uint64_t base, uint64_t bytes);
  bool initialized() const { return range_bytes_ != 0; }
  bool InRange(uint64_t p) const { return p >= range_base_ && p - range_base_ < range_bytes_; }
  // A session without descriptors: segments are this process's own pages,
  // mirrored by the worker (host_mirror.h). Set before the first Alloc.
  void set_mirror(HostMirror* mirror) { mirror_ = mirror; }
  HostMirror* mirror() const { return mirror_; }

  // Maps a new segment and registers it with the worker through `session`
  // (REQUIRES its lock). Returns the address.
  Result<uint64_t> Alloc(Session& session, uint64_t bytes, unsigned flags, bool scratch = false);
  // Unregisters and unmaps the segment starting at `addr`, putting the
  // PROT_NONE reservation back. kInvalidArgument when no segment starts there.
  Status Free(Session& session, uint64_t addr);
  // The segment holding [p, p+bytes), or nullptr.
  const HostSegment* Find(uint64_t p, uint64_t bytes, uint64_t* base) const;
  const std::map<uint64_t, HostSegment>& Segments() const { return segments_; }

  // In a forked child, before it talks to anyone: replaces every segment's
  // mapping (shared with the parent's memfd) by a private copy in a fresh
  // memfd at the same address, so the child's writes stay its own. Only the
  // parent's data is copied (its memfd's holes stay holes, scratch segments
  // start zeroed), kernel to kernel where it can (copy_file_range).
  Status PrivatizeForClone();
  // Copies the data of the memfd `from` (`bytes` long, also mapped at
  // `mapped`) into the same offsets of the empty memfd `to`: only its data
  // extents (holes stay holes), kernel to kernel (copy_file_range), through
  // the mapping where the kernel cannot.
  static Status CopyData(int from, const void* mapped, uint64_t bytes, int to);
  // Registers every segment with the session's current worker (REQUIRES its
  // lock); the clone's worker starts knowing none.
  Status RegisterAll(Session& session);

 private:
  uint64_t range_base_ = 0;
  uint64_t range_bytes_ = 0;
  std::map<uint64_t, uint64_t> free_;  // base -> bytes, coalesced
  std::map<uint64_t, HostSegment> segments_;
  HostMirror* mirror_ = nullptr;
};

}  // namespace smolvm::shim
