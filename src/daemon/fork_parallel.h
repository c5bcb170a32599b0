// How many clone builds of one fork run at once (daemon side, one thread).
//
// A clone build (worker_fork_clone.cc) has two kinds of work:
//   device work: creating, mapping and copying the private chunks. Builds in
//     different workers contend for it (the driver serialises VMM calls across
//     processes and the GPU time-slices their contexts' copies), so running k
//     builds at once makes each take about k times as long and gains little;
//   host work: loading modules, creating cuBLAS/cuBLASLt handles, replaying
//     cuDNN calls, the daemon's round trip. It runs side by side in the
//     workers' processes.
// Measured on the H200 (bench/device-runs, 2026-12-04): a clone of an 8 GiB
// golden with 512 MiB private and no library handle built in 3.2 ms alone and
// in 11-22 ms eight at once (2.4 ms per clone of throughput); a 7B learner's
// clone (1,006 MiB private, cuBLAS) in 114 ms alone and 152 ms eight at once
// (94 ms of it cuBLAS).
//
// So a fork runs 1 + ceil(host / device) builds at once, at most the daemon's
// --fork-parallel and the fork's clone count: host-bound builds (library
// handles) go wide, device-bound ones (memory only) run two at a time, which
// hides the daemon's round trip without piling copies on one another. The
// first build, whose end releases the golden's orders, is then not held up by
// seven others.
#pragma once

#include <cstdint>
#include <string_view>

namespace smolvm {

// What one clone's build does, read from the golden's fork manifest.
struct CloneBuildShape {
  uint64_t private_bytes = 0;   // copied into every clone
  uint32_t private_chunks = 0;
  uint32_t modules = 0;          // module images loaded
  uint32_t library_handles = 0;  // cuBLAS, cuBLASLt and cuDNN handles created
  uint32_t dnn_calls = 0;        // cuDNN descriptor calls replayed
};

// The shape of an encoded ForkManifestBody (the golden's worker wrote it: it
// is decoded with every length checked); ok is false when it does not decode,
// and the clone builds then fail on it themselves.
struct ManifestShape {
  bool ok = false;
  CloneBuildShape shape;
};
ManifestShape ShapeOfManifest(std::string_view manifest);

// Estimated milliseconds of each kind of work in one build (H200 figures).
double DeviceBuildMs(const CloneBuildShape& s);
double HostBuildMs(const CloneBuildShape& s);

// Builds to run at once for `count` clones of shape `s`, in [1, cap]
// (cap: --fork-parallel).
int ForkBuildParallelism(const CloneBuildShape& s, uint32_t count, int cap);

}  // namespace smolvm
