// Module globals across a fork. A guest that resolved a `__device__` or
// `__constant__` variable (cuModuleGetGlobal, cudaMemcpyToSymbol) holds its
// address and expects what it wrote there. A clone's worker loads the
// golden's modules anew, so the driver gives each global its image's initial
// bytes, at an address of its choosing. The golden's manifest carries each
// resolved global's address and bytes at the fork (at most
// kMaxForkGlobalBytes in all); the clone build writes the bytes where its
// driver put the global and, where that is elsewhere, moves the golden's
// address there for the copy and memset ops (Worker::Moved). A kernel
// parameter holding the golden's address is not moved (docs/fork.md).
#include <cuda.h>

#include <cstdio>
#include <string>

#include "base/diagnostics.h"
#include "base/hex.h"
#include "worker/worker.h"

namespace smolvm {
namespace {

constexpr uint64_t kMaxForkGlobalBytes = 32ull << 20;  // the manifest travels in one 80 MiB frame

}  // namespace

Status Worker::DescribeGlobals(proto::ForkManifestBody* body) {
  uint64_t total = 0;
  for (const auto& [key, g] : globals_) total += g.bytes;
  if (total > kMaxForkGlobalBytes)
    return Status(static_cast<int32_t>(CUDA_ERROR_NOT_SUPPORTED),
                  "fork: the module globals the session resolved hold " + std::to_string(total) +
                      " bytes; a fork carries at most " + std::to_string(kMaxForkGlobalBytes));
  for (const auto& [key, g] : globals_) {
    proto::ManifestGlobal rec{key.first, key.second, g.dptr, std::string(g.bytes, '\0')};
    if (g.bytes) {
      Status st = backend_->MemcpyDtoH(rec.data.data(), Moved(g.dptr, g.bytes), g.bytes, 0);
      if (!st.ok()) return Status(st.code(), "fork: reading module global '" + key.second + "': " + st.message());
    }
    body->globals.push_back(std::move(rec));
  }
  // The copies are asynchronous: the bytes are in place once they finished.
  if (!body->globals.empty()) RETURN_IF_ERROR(backend_->StreamSynchronize(0));
  return Status::Ok();
}

Status Worker::ApplyGlobals(const proto::ForkManifestBody& want) {
  uint64_t total = 0;
  for (const proto::ManifestGlobal& g : want.globals) {
    total += g.data.size();
    if (total > kMaxForkGlobalBytes) return Malformed("clone manifest: module globals past the fork's limit");
    auto m = modules_.find(g.module);
    if (m == modules_.end()) return Malformed("clone manifest: a global of an unknown module");
    uint64_t dptr = 0, bytes = 0;
    Status st = backend_->ModuleGetGlobal(m->second.handle, g.name, &dptr, &bytes);
    if (!st.ok()) return Status(st.code(), "fork: module global '" + g.name + "' in the clone: " + st.message());
    if (bytes != g.data.size())
      return Malformed("clone manifest: module global '" + g.name + "' has " + std::to_string(bytes) +
                       " bytes here, " + std::to_string(g.data.size()) + " in the golden");
    if (bytes) RETURN_IF_ERROR(backend_->MemcpyHtoD(dptr, g.data.data(), bytes, 0));
    globals_[{g.module, g.name}] = GlobalInfo{g.dptr, bytes};  // the guest's address (a clone's golden again carries it)
    if (dptr != g.dptr) {
      // Two globals never overlap in one context, so neither do their moves.
      global_moves_[g.dptr] = GlobalMove{bytes, dptr};
      std::fprintf(Diagnostics(), "smolvm worker %d: fork: module global '%s' (%llu bytes) is at %s here, %s in the golden: moved\n",
                   ::getpid(), g.name.c_str(), static_cast<unsigned long long>(bytes), HexOfAddress(dptr).c_str(),
                   HexOfAddress(g.dptr).c_str());
    }
  }
  if (!want.globals.empty()) RETURN_IF_ERROR(backend_->StreamSynchronize(0));
  return Status::Ok();
}

uint64_t Worker::GuestAddressOf(uint64_t dptr) const {
  for (const auto& [from, move] : global_moves_)
    if (move.to == dptr) return from;
  return dptr;
}

uint64_t Worker::MovedSlow(uint64_t addr, uint64_t bytes) const {
  auto it = global_moves_.upper_bound(addr);
  if (it == global_moves_.begin()) return addr;
  --it;
  const uint64_t off = addr - it->first;
  if (off > it->second.bytes || bytes > it->second.bytes - off) return addr;
  return it->second.to + off;
}

}  // namespace smolvm
