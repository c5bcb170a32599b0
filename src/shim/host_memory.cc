#include "shim/host_memory.h"

#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "proto/messages.h"
#include "shim/session.h"

namespace smolvm::shim {
namespace {

constexpr uint64_t kPage = 4096;

// Puts the PROT_NONE reservation back over [addr, +bytes).
void Rereserve(uint64_t addr, uint64_t bytes) {
  ::mmap(reinterpret_cast<void*>(addr), bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
         -1, 0);
}

}  // namespace

void HostMemory::Init(uint64_t base, uint64_t bytes) {
  range_base_ = base;
  range_bytes_ = bytes;
  free_.clear();
  if (bytes != 0) free_[base] = bytes;
}

Result<uint64_t> HostMemory::Alloc(Session& session, uint64_t bytes, unsigned flags, bool scratch) {
  if (range_bytes_ == 0) return Unavailable("no pinned host range");
  uint64_t len = (bytes + kPage - 1) / kPage * kPage;
  if (len == 0) len = kPage;
  auto it = free_.begin();
  while (it != free_.end() && it->second < len) ++it;
  if (it == free_.end()) return Status(2 /* CUDA_ERROR_OUT_OF_MEMORY */, "pinned host range exhausted");
  uint64_t addr = it->first;
  uint64_t left = it->second - len;
  free_.erase(it);
  if (left != 0) free_[addr + len] = left;
  auto give_back = [&] {
    Rereserve(addr, len);
    free_[addr] = len;  // coalescing is left to Free; a failed Alloc is rare
  };
  if (mirror_ != nullptr) {
    Status st = HostMirror::MapAndRegister(session, addr, len);
    if (!st.ok()) {
      give_back();
      return st;
    }
    mirror_->AddSegment(addr, len);
    HostSegment seg;
    seg.bytes = len;
    seg.requested = bytes;
    seg.flags = flags;
    seg.scratch = scratch;
    segments_[addr] = std::move(seg);
    return addr;
  }

  UniqueFd fd(::memfd_create("smolvm-pinned", MFD_CLOEXEC));
  if (!fd.valid()) {
    give_back();
    return ErrnoStatus("memfd_create", errno);
  }
  if (::ftruncate(fd.get(), static_cast<off_t>(len)) < 0) {
    int err = errno;
    give_back();
    return Status(2, "pinned host memory: ftruncate: " + std::string(strerror(err)));
  }
  void* p = ::mmap(reinterpret_cast<void*>(addr), len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd.get(), 0);
  if (p == MAP_FAILED) {
    int err = errno;
    give_back();
    return ErrnoStatus("mmap pinned segment", err);
  }
  proto::HostRegisterRequest req;
  req.addr = addr;
  req.bytes = len;
  proto::HostRegisterReply rep;
  Status st = session.Call(req, &rep, fd.get());
  if (!st.ok()) {
    give_back();
    return st;
  }
  HostSegment seg;
  seg.bytes = len;
  seg.requested = bytes;
  seg.flags = flags;
  seg.scratch = scratch;
  seg.memfd = std::move(fd);
  segments_[addr] = std::move(seg);
  return addr;
}

Status HostMemory::Free(Session& session, uint64_t addr) {
  auto it = segments_.find(addr);
  if (it == segments_.end()) return InvalidArgument("not the start of a pinned segment");
  uint64_t len = it->second.bytes;
  proto::HostUnregisterRequest req;
  req.addr = addr;
  proto::HostUnregisterReply rep;
  Status st = session.Call(req, &rep);
  // Unmap even if the worker is gone: the segment is unusable either way.
  if (mirror_ != nullptr) mirror_->RemoveSegment(addr);
  segments_.erase(it);
  Rereserve(addr, len);
  auto next = free_.lower_bound(addr);
  if (next != free_.end() && next->first == addr + len) {
    len += next->second;
    free_.erase(next);
  }
  auto prev = free_.lower_bound(addr);
  if (prev != free_.begin()) {
    --prev;
    if (prev->first + prev->second == addr) {
      prev->second += len;
      return st;
    }
  }
  free_[addr] = len;
  return st;
}

const HostSegment* HostMemory::Find(uint64_t p, uint64_t bytes, uint64_t* base) const {
  auto it = segments_.upper_bound(p);
  if (it == segments_.begin()) return nullptr;
  --it;
  uint64_t end = it->first + it->second.bytes;
  if (p >= end || bytes > end - p) return nullptr;
  *base = it->first;
  return &it->second;
}

Status HostMemory::PrivatizeForClone() {
  for (auto& [addr, seg] : segments_) {
    // Mirrored: private anonymous pages, the child's own since fork(2).
    if (!seg.memfd.valid()) continue;
    UniqueFd fd(::memfd_create("smolvm-pinned", MFD_CLOEXEC));
    if (!fd.valid()) return ErrnoStatus("memfd_create", errno);
    if (::ftruncate(fd.get(), static_cast<off_t>(seg.bytes)) < 0) return ErrnoStatus("ftruncate", errno);
    // The bytes as the parent left them, then the copy in place.
    if (!seg.scratch)
      RETURN_IF_ERROR(CopyData(seg.memfd.get(), reinterpret_cast<const void*>(addr), seg.bytes, fd.get()));
    void* p = ::mmap(reinterpret_cast<void*>(addr), seg.bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                     fd.get(), 0);
    if (p == MAP_FAILED) return ErrnoStatus("mmap private pinned copy", errno);
    seg.memfd = std::move(fd);
  }
  return Status::Ok();
}

Status HostMemory::CopyData(int from, const void* mapped, uint64_t bytes, int to) {
  const off_t end = static_cast<off_t>(bytes);
  for (off_t data = 0; data < end;) {
    // The next extent of data; what lies past the last one is a hole.
    off_t at = ::lseek(from, data, SEEK_DATA);
    if (at < 0 && errno == ENXIO) break;
    off_t hole = at < 0 ? -1 : ::lseek(from, at, SEEK_HOLE);
    if (at < 0 || hole < 0) {  // no SEEK_DATA here: the whole rest is data
      at = data;
      hole = end;
    }
    hole = std::min(hole, end);
    for (off_t off = at; off < hole;) {
      loff_t in = off, out = off;
      ssize_t n = ::copy_file_range(from, &in, to, &out, static_cast<size_t>(hole - off), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        // No kernel copy between these files: through the parent's mapping.
        const char* src = static_cast<const char*>(mapped);
        n = ::pwrite(to, src + off, static_cast<size_t>(hole - off), off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return ErrnoStatus("pwrite pinned copy", errno);
      }
      off += n;
    }
    data = hole;
  }
  return Status::Ok();
}

Status HostMemory::RegisterAll(Session& session) {
  for (auto& [addr, seg] : segments_) {
    proto::HostRegisterRequest req;
    req.addr = addr;
    req.bytes = seg.bytes;
    proto::HostRegisterReply rep;
    // Mirrored: no memfd; the clone's worker starts an empty mirror, which
    // every copy from the segment fills first (HostWrite).
    RETURN_IF_ERROR(session.Call(req, &rep, seg.memfd.valid() ? seg.memfd.get() : -1));
  }
  return Status::Ok();
}

}  // namespace smolvm::shim
