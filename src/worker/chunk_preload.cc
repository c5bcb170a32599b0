#include "worker/chunk_preload.h"

#include <algorithm>
#include <utility>

namespace smolvm {

void ChunkPreload::Drop() {
  if (!held_.empty()) (void)backend_->CtxSynchronize();
  for (auto& [addr, m] : held_) {
    (void)backend_->ChunkUnmap(addr, m.bytes);
    (void)backend_->ChunkRelease(m.handle);
  }
  held_.clear();
  golden_ = 0;
}

std::map<uint64_t, MappedImport> ChunkPreload::Take() {
  golden_ = 0;
  return std::exchange(held_, {});
}

Status ChunkPreload::Update(uint64_t golden, const std::vector<PreloadChunk>& want, const std::vector<int>& fds) {
  if (fds.size() != want.size()) {
    Drop();
    return InvalidArgument("preload descriptors do not match the chunk list");
  }
  if (golden != golden_) Drop();
  golden_ = golden;
  // Keep what still matches; let go of the rest.
  std::map<uint64_t, const PreloadChunk*> by_addr;
  for (const PreloadChunk& c : want) by_addr[c.addr] = &c;
  bool synced = false;
  for (auto it = held_.begin(); it != held_.end();) {
    auto w = by_addr.find(it->first);
    if (w != by_addr.end() && w->second->id == it->second.id && w->second->bytes == it->second.bytes) {
      ++it;
      continue;
    }
    if (!synced) (void)backend_->CtxSynchronize();
    synced = true;
    (void)backend_->ChunkUnmap(it->first, it->second.bytes);
    (void)backend_->ChunkRelease(it->second.handle);
    it = held_.erase(it);
  }
  // Import the new ones, then map them run by run.
  std::vector<ChunkPlacement> fresh;
  std::map<uint64_t, uint64_t> id_of;  // address -> the golden's chunk id
  Status st;
  for (size_t i = 0; i < want.size() && st.ok(); ++i) {
    if (held_.count(want[i].addr)) continue;
    auto h = backend_->ChunkImport(fds[i], want[i].bytes);
    if (!h.ok()) {
      st = h.status();
      break;
    }
    fresh.push_back({want[i].addr, *h, want[i].bytes});
    id_of[want[i].addr] = want[i].id;
  }
  std::sort(fresh.begin(), fresh.end(), [](const auto& a, const auto& b) { return a.addr < b.addr; });
  size_t placed = 0;
  if (st.ok()) st = MapChunkRuns(backend_, fresh, false, &placed);
  for (size_t k = 0; k < placed; ++k) held_[fresh[k].addr] = MappedImport{fresh[k].handle, fresh[k].bytes, id_of[fresh[k].addr]};
  if (!st.ok()) {
    for (size_t k = placed; k < fresh.size(); ++k) (void)backend_->ChunkRelease(fresh[k].handle);
    Drop();
  }
  return st;
}

}  // namespace smolvm
