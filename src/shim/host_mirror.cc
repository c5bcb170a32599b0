#include "shim/host_mirror.h"

#include <errno.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>

#include "proto/messages.h"
#include "shim/session.h"

namespace smolvm::shim {

Status HostMirror::MapAndRegister(Session& session, uint64_t addr, uint64_t bytes) {
  // Private: a forked child gets its own copy, as it does of any memory.
  void* p = ::mmap(reinterpret_cast<void*>(addr), bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  if (p == MAP_FAILED) return ErrnoStatus("mmap pinned segment", errno);
  proto::HostRegisterRequest req;
  req.addr = addr;
  req.bytes = bytes;
  proto::HostRegisterReply rep;
  return session.Call(req, &rep);
}

void HostMirror::AddSegment(uint64_t addr, uint64_t bytes) {
  std::lock_guard l(mu_);
  segments_[addr] = bytes;
}

void HostMirror::RemoveSegment(uint64_t addr) {
  std::lock_guard l(mu_);
  segments_.erase(addr);
}

Status HostMirror::Land(std::string_view payload) {
  proto::HostLandRequest m;
  proto::Decoder dec(payload);
  if (!proto::Decode(dec, &m)) return Malformed("a HostLand from the worker does not decode");
  const uint64_t bytes = m.data.size();
  if (!Contains(m.addr, bytes)) return Malformed("a HostLand from the worker is outside every pinned segment");
  std::memcpy(reinterpret_cast<void*>(m.addr), m.data.data(), bytes);
  return Status::Ok();
}

bool HostMirror::Contains(uint64_t addr, uint64_t bytes) {
  std::lock_guard l(mu_);
  auto it = segments_.upper_bound(addr);
  if (it == segments_.begin()) return false;
  --it;
  return addr + bytes >= addr && addr + bytes <= it->first + it->second;
}

Status HostMirror::Push(Session& session, uint64_t addr, uint64_t bytes, uint64_t stream) {
  if (session.callbacks_unfinished()) {
    proto::HostFetchRequest req;
    req.stream = stream;
    req.addr = addr;
    req.bytes = bytes;
    session.Enqueue(req);
    session.Callbacks().Expect(1);
    // The worker asks for the bytes when the stream reaches it: send it now.
    return session.Flush();
  }
  for (uint64_t off = 0; off < bytes; off += kChunkBytes) {
    proto::HostWriteRequest req;
    req.addr = addr + off;
    req.data = std::string_view(reinterpret_cast<const char*>(addr + off), std::min<uint64_t>(kChunkBytes, bytes - off));
    session.Enqueue(req);
  }
  return Status::Ok();
}

Status HostMirror::CopyToDevice(Session& session, uint64_t dst, const void* src, size_t bytes, uint64_t stream) {
  const char* from = static_cast<const char*>(src);
  // While a host function of ours may be running, the worker's callback
  // reads this session's frames itself and sets them aside, at most 64 MiB
  // (worker/guest_link.h), until the function is done: then each chunk
  // waits for the worker to have taken the one before it (a Ping answered
  // in order), as a native pageable copy waits for its staging buffers.
  const bool paced = session.callbacks_unfinished();
  for (size_t off = 0; off < bytes; off += kChunkBytes) {
    proto::MemcpyHtoDRequest req;
    req.dst = dst + off;
    req.stream = stream;
    req.data = std::string_view(from + off, std::min(kChunkBytes, bytes - off));
    session.Enqueue(req);
    if (paced && off + kChunkBytes < bytes) {
      proto::PingRequest ping;
      proto::PingReply pong;
      RETURN_IF_ERROR(session.Call(ping, &pong));
    }
  }
  // The program may reuse its buffer when the call returns: every chunk
  // was copied into the queue, and goes now.
  return session.Flush();
}

Status HostMirror::CopyFromDevice(Session& session, void* dst, uint64_t src, size_t bytes, uint64_t stream) {
  char* to = static_cast<char*>(dst);
  for (size_t off = 0; off < bytes; off += kChunkBytes) {
    const size_t n = std::min(kChunkBytes, bytes - off);
    proto::MemcpyDtoHRequest req;
    req.src = src + off;
    req.bytes = n;
    req.stream = stream;
    proto::MemcpyDtoHReply rep;
    RETURN_IF_ERROR(session.Call(req, &rep));
    if (rep.data.size() != n) return Malformed("a MemcpyDtoH reply of the wrong size");
    std::memcpy(to + off, rep.data.data(), n);
  }
  return Status::Ok();
}

}  // namespace smolvm::shim
