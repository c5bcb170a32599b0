#include "shim/capture_table.h"

namespace smolvm::shim {

cudaStreamCaptureMode& ThreadCaptureMode() {
  thread_local cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  return mode;
}

CaptureTable::Capture* CaptureTable::Of(uint64_t stream) {
  auto it = streams_.find(stream);
  return it == streams_.end() ? nullptr : &captures_.at(it->second);
}

const CaptureTable::Capture* CaptureTable::Of(uint64_t stream) const {
  auto it = streams_.find(stream);
  return it == streams_.end() ? nullptr : &captures_.at(it->second);
}

CaptureTable::Capture* CaptureTable::OfEvent(uint64_t event) {
  auto it = events_.find(event);
  if (it == events_.end()) return nullptr;
  auto c = captures_.find(it->second);
  return c == captures_.end() ? nullptr : &c->second;
}

CaptureTable::Capture& CaptureTable::Begin(uint64_t stream, cudaStreamCaptureMode mode, uint64_t graph,
                                           bool blocking) {
  unsigned long long id = next_id_++;
  Capture& c = captures_[id];
  c.id = id;
  c.graph = graph;
  c.origin = stream;
  c.mode = mode;
  c.thread = std::this_thread::get_id();
  c.blocking = blocking;
  streams_[stream] = id;
  return c;
}

CaptureTable::Capture CaptureTable::End(uint64_t stream) {
  unsigned long long id = streams_.at(stream);
  Capture c = captures_.at(id);
  captures_.erase(id);
  for (auto it = streams_.begin(); it != streams_.end();) it = it->second == id ? streams_.erase(it) : std::next(it);
  for (auto it = events_.begin(); it != events_.end();) it = it->second == id ? events_.erase(it) : std::next(it);
  return c;
}

void CaptureTable::Record(uint64_t event, uint64_t stream) {
  auto it = streams_.find(stream);
  if (it == streams_.end()) {
    events_.erase(event);
  } else {
    events_[event] = it->second;
  }
}

void CaptureTable::Wait(uint64_t stream, uint64_t event) {
  auto e = events_.find(event);
  if (e == events_.end() || streams_.count(stream)) return;
  streams_[stream] = e->second;
}

void CaptureTable::Forget(uint64_t id) {
  streams_.erase(id);
  events_.erase(id);
}

cudaError_t CaptureTable::CheckUnsafeCall() {
  if (captures_.empty()) return cudaSuccess;
  const cudaStreamCaptureMode mine = ThreadCaptureMode();
  if (mine == cudaStreamCaptureModeRelaxed) return cudaSuccess;
  const std::thread::id self = std::this_thread::get_id();
  bool prohibited = false;
  for (auto& [id, c] : captures_) {
    bool forbids = c.mode != cudaStreamCaptureModeRelaxed &&
                   (c.thread == self || (mine == cudaStreamCaptureModeGlobal && c.mode == cudaStreamCaptureModeGlobal));
    if (forbids) {
      c.invalidated = true;
      prohibited = true;
    }
  }
  return prohibited ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

bool CaptureTable::LegacyBlocked() const {
  for (const auto& [id, c] : captures_)
    if (c.blocking) return true;
  return false;
}

}  // namespace smolvm::shim
