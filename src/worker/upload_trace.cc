#include "worker/upload_trace.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace smolvm {

uint64_t UploadHash(const void* data, uint64_t bytes) { return XXH3_64bits(data, bytes); }

void UploadTrace::NoteUpload(uint64_t off, const void* data, uint64_t bytes) {
  if (!clean_ || bytes == 0) return;
  const uint64_t end = off + bytes;
  auto it = pieces_.upper_bound(off);
  if (it != pieces_.begin() && std::prev(it)->first + std::prev(it)->second.bytes > off) --it;
  // Uploaded again: an input buffer, not weights (and hashing every rewrite
  // of a buffer copied in a loop would cost the copy's own bandwidth).
  if (it != pieces_.end() && it->first < end) return NoteOtherWrite();
  pieces_[off] = Piece{bytes, UploadHash(data, bytes)};
}

void UploadTrace::NoteOtherWrite() {
  clean_ = false;
  pieces_.clear();
}

void UploadTrace::NoteFresh(uint64_t off, uint64_t bytes) {
  if (!clean_) return;
  const uint64_t end = off + bytes;
  auto it = pieces_.upper_bound(off);
  if (it != pieces_.begin() && std::prev(it)->first + std::prev(it)->second.bytes > off) --it;
  while (it != pieces_.end() && it->first < end) {
    if (it->first < off || it->first + it->second.bytes > end) return NoteOtherWrite();
    it = pieces_.erase(it);
  }
}

bool UploadTrace::Covers(const std::vector<std::pair<uint64_t, uint64_t>>& live) const {
  if (!clean_ || live.empty()) return false;
  for (auto [off, bytes] : live) {
    uint64_t at = off;
    const uint64_t end = off + bytes;
    auto it = pieces_.upper_bound(at);
    if (it != pieces_.begin()) --it;
    while (at < end) {
      if (it == pieces_.end() || it->first > at) return false;
      if (it->first + it->second.bytes > at) at = it->first + it->second.bytes;
      ++it;
    }
  }
  return true;
}

Result<bool> UploadTrace::Matches(const std::function<Status(uint64_t, uint64_t, std::string*)>& read) const {
  if (!clean_) return false;
  std::string buf;
  for (const auto& [off, p] : pieces_) {
    RETURN_IF_ERROR(read(off, p.bytes, &buf));
    if (buf.size() != p.bytes || UploadHash(buf.data(), buf.size()) != p.hash) return false;
  }
  return true;
}

}  // namespace smolvm
