// HostMirror: host memory and large copies in a session that passes no
// descriptors (docs/shim.md, "Without descriptors").
//
// A gVisor machine reaches its CUDA endpoint through runsc's host-UDS path,
// and gVisor cannot hand its own descriptors to a host process: a frame that
// carries one fails in sendmsg and ends the session. The daemon knows the
// endpoint's mode and says so in the Hello reply (kHelloNoDescriptors; a
// guest may ask for it with SMOLVM_CUDA_NO_FDS=1), before the shim would
// send its first descriptor. From then on:
//  * pinned memory (cudaMallocHost, cudaHostAlloc, cuMemHostAlloc) is this
//    process's own pages at the same addresses as ever, registered without a
//    memfd: the worker keeps a mirror of each segment. Before a host-to-device
//    copy from it the shim sends the bytes (HostWrite, Push); a device-to-host
//    copy into it lands in this process when the worker sends them back
//    (HostLand frames, ahead of the next reply once the copy has finished, or
//    ahead of a host function behind it on its stream): Land.
//  * pageable copies above the inline size travel inline in chunks under the
//    frame limit (CopyToDevice, CopyFromDevice) instead of through the two
//    8 MiB pinned staging buffers.
//  * mapped host memory (cudaHostAllocMapped, cudaHostGetDevicePointer) and
//    pinned memory in graphs and captures are refused by name: the device
//    would read or write the worker's mirror, not this process's memory.
//  * a forked child's pinned segments are private anonymous pages already
//    (no memfd to copy), and it registers them again without descriptors.
//
// Threads: the runtime adds and removes segments under the session lock;
// Land runs on whichever thread reads the connection (a CUDA call waiting
// for its reply, or the host-function runner), so the segment table has its
// own lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string_view>

#include "base/status.h"

namespace smolvm::shim {

class Session;

class HostMirror {
 public:
  // Bytes of one HostWrite or inline copy frame: under the 80 MiB frame limit.
  static constexpr size_t kChunkBytes = 32u << 20;

  // Maps [addr, +bytes) (inside the reserved pinned range) as private
  // anonymous memory and registers it with the worker without a memfd.
  // REQUIRES the session lock.
  static Status MapAndRegister(Session& session, uint64_t addr, uint64_t bytes);
  // The segments HostLand may write into.
  void AddSegment(uint64_t addr, uint64_t bytes);
  void RemoveSegment(uint64_t addr);
  // Whether [addr, +bytes) lies inside one segment (any thread).
  bool Contains(uint64_t addr, uint64_t bytes);
  // A HostLand frame's payload: its bytes into this process's memory.
  // kMalformed when it does not decode or is not inside one segment.
  Status Land(std::string_view payload);

  // Before a copy from pinned [addr, +bytes) on wire stream `stream`
  // (REQUIRES the lock): HostWrite frames with the bytes as they are now;
  // or, while a host function may still write them in stream order
  // (Session::callbacks_unfinished), a HostFetch, answered with the bytes
  // as they are when the stream reaches it.
  static Status Push(Session& session, uint64_t addr, uint64_t bytes, uint64_t stream);
  // A pageable copy of any size, inline: host-to-device queued in chunks
  // (each consumed by the worker before the next is read, as pageable
  // copies are), device-to-host one SYNC round trip per chunk.
  static Status CopyToDevice(Session& session, uint64_t dst, const void* src, size_t bytes, uint64_t stream);
  static Status CopyFromDevice(Session& session, void* dst, uint64_t src, size_t bytes, uint64_t stream);

 private:
  std::mutex mu_;
  std::map<uint64_t, uint64_t> segments_;  // base -> bytes
};

}  // namespace smolvm::shim
