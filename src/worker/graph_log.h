// GraphLog: what a clone replays to rebuild its golden's CUDA graphs and
// executables under the same ids (docs/fork.md, Graphs).
//
// A graph's nodes may be kernels the driver made on the golden's context
// (cuBLAS, cuDNN work captured from a stream), so a clone cannot copy them:
// it makes them again. The log keeps, in order, every graph request the
// golden's guest sent (building, capture, instantiate, update, destroy) and,
// while a stream captured, the requests issued on capturing streams (which
// did not run: they became nodes), plus what those need around them
// (streams and events made or destroyed, cuBLAS / cuDNN stream and mode
// settings). A clone dispatches them again through the generated guest
// dispatch before its guest is adopted, with its streams capturing exactly
// where the golden's did, so its graphs hold its own kernels at the same
// addresses; its private buffers are its own (the fork copied them).
//
// When no graph, executable or capture is left the log is emptied. It is
// bounded (kMaxBytes); past that a fork of the session is refused, naming
// the log.
//
// Owned by the Worker; used on its one thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "proto/fork_manifest.h"

namespace smolvm {

class GraphLog {
 public:
  static constexpr size_t kMaxBytes = 256u << 20;

  // Whether an op is logged whenever the log is active (graph ops always;
  // stream, event and library settings while active).
  static bool IsGraphOp(uint16_t op);
  static bool IsSettingOp(uint16_t op);

  bool active() const { return !calls_.empty(); }
  // Appends a request (op number and encoded fields) that succeeded; `ok`
  // false only for a StreamEndCapture that failed (a clone ends its capture
  // there too, and drops what it made).
  void Append(uint16_t op, std::string_view request, bool ok = true);
  bool overflowed() const { return overflowed_; }
  // Forgets everything (no graph, exec or capture left).
  void Clear();

  // Graph memory: where each mem-alloc node's allocation is, so a clone
  // takes the same memory instead of allocating.
  void NoteAllocation(uint64_t graph, uint64_t node, uint64_t dptr) { allocs_[{graph, node}] = dptr; }
  // The allocation was freed (its graph's last holder went).
  void ForgetAllocation(uint64_t dptr) {
    for (auto it = allocs_.begin(); it != allocs_.end();) it = it->second == dptr ? allocs_.erase(it) : std::next(it);
  }
  // In a clone's replay: the golden's allocation for that node, once (0 if none).
  uint64_t TakeReplayAllocation(uint64_t graph, uint64_t node);

  // The manifest's part (golden) and the replay's input (clone).
  void Describe(proto::ForkManifestBody* body) const;
  void BeginReplay(const proto::ForkManifestBody& body);

 private:
  std::vector<proto::ManifestGraphCall> calls_;
  size_t bytes_ = 0;
  bool overflowed_ = false;
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> allocs_;
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> replay_allocs_;
};

}  // namespace smolvm
