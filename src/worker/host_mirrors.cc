#include "worker/host_mirrors.h"

#include <cuda.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "proto/frame.h"

namespace smolvm {

HostMirrors::~HostMirrors() {
  for (uint64_t e : all_events_) (void)backend_->EventDestroy(e);
}

void HostMirrors::AddSegment(uint64_t addr, uint64_t bytes) {
  std::lock_guard l(mu_);
  segments_[addr] = bytes;
}

void HostMirrors::RemoveSegment(uint64_t addr) {
  std::lock_guard l(mu_);
  auto seg = segments_.find(addr);
  if (seg == segments_.end()) return;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.addr >= addr && it->second.addr - addr < seg->second) {
      free_events_.push_back(it->second.event);
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
  segments_.erase(seg);
}

bool HostMirrors::ContainsLocked(uint64_t addr, uint64_t bytes) const {
  auto it = segments_.upper_bound(addr);
  if (it == segments_.begin()) return false;
  --it;
  return addr + bytes >= addr && addr + bytes <= it->first + it->second;
}

bool HostMirrors::Contains(uint64_t addr, uint64_t bytes) const {
  std::lock_guard l(mu_);
  return ContainsLocked(addr, bytes);
}

Status HostMirrors::WriteGuestBytes(uint64_t addr, std::string_view data) {
  const uint64_t bytes = data.size();
  std::lock_guard l(mu_);
  if (!ContainsLocked(addr, bytes))
    return Status(CUDA_ERROR_INVALID_VALUE, "pinned memory bytes from the guest outside its mirrored segments");
  // The parts no landing covers: those are the device's, newer.
  const uint64_t end = addr + bytes;
  std::vector<std::pair<uint64_t, uint64_t>> covered;  // [from, to)
  for (const auto& [n, x] : pending_) {
    uint64_t from = std::max(addr, x.addr), to = std::min(end, x.addr + x.bytes);
    if (from < to) covered.emplace_back(from, to);
  }
  std::sort(covered.begin(), covered.end());
  uint64_t at = addr;
  auto put = [&](uint64_t to) {
    if (to > at) std::memcpy(reinterpret_cast<void*>(at), data.data() + (at - addr), to - at);
  };
  for (const auto& [from, to] : covered) {
    put(from);
    at = std::max(at, to);
  }
  put(end);
  return Status::Ok();
}

Status HostMirrors::AddLanding(uint64_t addr, uint64_t bytes, uint64_t stream, uint64_t wire_stream) {
  uint64_t event = 0;
  {
    std::lock_guard l(mu_);
    if (pending_.size() >= kMaxPending)
      return Status(CUDA_ERROR_OUT_OF_MEMORY,
                    "too many device-to-host copies into pinned memory in flight (" + std::to_string(kMaxPending) +
                        ") with no synchronization, event query or other waiting call between them");
    if (!free_events_.empty()) {
      event = free_events_.back();
      free_events_.pop_back();
    }
  }
  if (event == 0) {
    ASSIGN_OR_RETURN(event, backend_->EventCreate(CU_EVENT_DISABLE_TIMING));
    std::lock_guard l(mu_);
    all_events_.push_back(event);
  }
  Status st = backend_->EventRecord(event, stream);
  std::lock_guard l(mu_);
  if (!st.ok()) {
    free_events_.push_back(event);
    return st;
  }
  pending_[next_++] = Landing{addr, bytes, stream, wire_stream, event};
  return Status::Ok();
}

Status HostMirrors::Send(const std::vector<Landing>& taken, const FrameSink& write) {
  // A mirror is unmapped only by the serve loop (RemoveSegment, after the
  // device and its callbacks are idle): the bytes stay readable here.
  std::string frame;
  for (const Landing& l : taken) {
    for (uint64_t off = 0; off < l.bytes; off += kMaxFrameBytes) {
      proto::HostLandRequest m;
      m.addr = l.addr + off;
      m.data = std::string_view(reinterpret_cast<const char*>(l.addr + off), std::min(kMaxFrameBytes, l.bytes - off));
      frame.clear();
      proto::AppendRequest(&frame, m, 0);
      RETURN_IF_ERROR(write(frame));
    }
  }
  return Status::Ok();
}

Status HostMirrors::TakeFinished(const FrameSink& write) {
  std::vector<Landing> taken;
  {
    std::lock_guard l(mu_);
    std::set<uint64_t> held;  // streams whose earlier landing has not finished
    for (auto it = pending_.begin(); it != pending_.end();) {
      const Landing& x = it->second;
      if (held.count(x.stream) != 0 || !backend_->EventQuery(x.event).ok()) {
        held.insert(x.stream);
        ++it;
        continue;
      }
      taken.push_back(x);
      free_events_.push_back(x.event);
      it = pending_.erase(it);
    }
  }
  return Send(taken, write);
}

Status HostMirrors::TakeStream(uint64_t wire_stream, uint64_t before, const FrameSink& write) {
  std::vector<Landing> taken;
  {
    std::lock_guard l(mu_);
    for (auto it = pending_.begin(); it != pending_.end() && it->first < before;) {
      if (it->second.wire_stream != wire_stream) {
        ++it;
        continue;
      }
      taken.push_back(it->second);
      free_events_.push_back(it->second.event);
      it = pending_.erase(it);
    }
  }
  return Send(taken, write);
}

uint64_t HostMirrors::next() const {
  std::lock_guard l(mu_);
  return next_;
}

size_t HostMirrors::pending() const {
  std::lock_guard l(mu_);
  return pending_.size();
}

}  // namespace smolvm
