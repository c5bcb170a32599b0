#include "daemon/chunk_preload.h"

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
  struct Fresh {
    uint64_t addr, bytes, id, handle;
  };
  std::vector<Fresh> fresh;
  Status st;
  for (size_t i = 0; i < want.size() && st.ok(); ++i) {
    if (held_.count(want[i].addr)) continue;
    auto h = backend_->ChunkImport(fds[i], want[i].bytes);
    if (!h.ok()) {
      st = h.status();
      break;
    }
    fresh.push_back({want[i].addr, want[i].bytes, want[i].id, *h});
  }
  std::sort(fresh.begin(), fresh.end(), [](const Fresh& a, const Fresh& b) { return a.addr < b.addr; });
  size_t placed = 0;
  while (st.ok() && placed < fresh.size()) {
    std::vector<ChunkPiece> run{{fresh[placed].handle, fresh[placed].bytes}};
    uint64_t end = fresh[placed].addr + fresh[placed].bytes;
    size_t j = placed + 1;
    for (; j < fresh.size() && fresh[j].addr == end; ++j) {
      run.push_back({fresh[j].handle, fresh[j].bytes});
      end += fresh[j].bytes;
    }
    st = backend_->ChunkMapRun(fresh[placed].addr, run, false);
    if (!st.ok()) break;
    for (; placed < j; ++placed)
      held_[fresh[placed].addr] = MappedImport{fresh[placed].handle, fresh[placed].bytes, fresh[placed].id};
  }
  if (!st.ok()) {
    for (size_t k = placed; k < fresh.size(); ++k) (void)backend_->ChunkRelease(fresh[k].handle);
    Drop();
  }
  return st;
}

}  // namespace smolvm
