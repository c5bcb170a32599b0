#include "daemon/fork_parallel.h"

#include <algorithm>
#include <cmath>

#include "proto/fork_manifest.h"

namespace smolvm {
namespace {

// Device work (fork_parallel.h): a fixed part (two synchronizations, the
// scratch window's maps), the copy with its chunk creation, and per chunk
// one create and one map. Fitted to the two H200 cases there: 2.6 ms for
// 514 MiB in 9 chunks, 5.0 ms for 1,006 MiB in 35.
constexpr double kDeviceFixedMs = 0.4;
constexpr double kDeviceMsPerGiB = 4.0;
constexpr double kDeviceMsPerChunk = 0.02;
// Host work: the daemon's round trip and the manifest (fixed), a module load
// (a small one: the 8 GiB golden's whole build with its one module took
// 3.2 ms; torch's 21 big ones 293 ms, beside cuDNN work that dominates), a
// library handle's creation in a fresh context (cuBLAS: 94 ms for the 7B
// learner's two handles), a replayed cuDNN call (torch: 651 ms for 86).
constexpr double kHostFixedMs = 1.0;
constexpr double kHostMsPerModule = 1.0;
constexpr double kHostMsPerLibraryHandle = 40.0;
constexpr double kHostMsPerDnnCall = 7.5;

}  // namespace

ManifestShape ShapeOfManifest(std::string_view manifest) {
  ManifestShape out;
  proto::ForkManifestBody body;
  if (!proto::DecodeManifest(manifest, &body)) return out;
  out.ok = true;
  for (const auto& c : body.layout.chunks) {
    if (c.shared) continue;
    out.shape.private_bytes += c.bytes;
    ++out.shape.private_chunks;
  }
  out.shape.modules = static_cast<uint32_t>(body.modules.size());
  out.shape.library_handles = static_cast<uint32_t>(body.blas.size() + body.lt.size() + body.dnn_handles.size());
  out.shape.dnn_calls = static_cast<uint32_t>(body.dnn_log.size());
  return out;
}

double DeviceBuildMs(const CloneBuildShape& s) {
  return kDeviceFixedMs + kDeviceMsPerGiB * static_cast<double>(s.private_bytes) / (1ull << 30) +
         kDeviceMsPerChunk * s.private_chunks;
}

double HostBuildMs(const CloneBuildShape& s) {
  return kHostFixedMs + kHostMsPerModule * s.modules + kHostMsPerLibraryHandle * s.library_handles +
         kHostMsPerDnnCall * s.dnn_calls;
}

int ForkBuildParallelism(const CloneBuildShape& s, uint32_t count, int cap) {
  const int most = std::max(1, std::min<int>(cap, static_cast<int>(std::min<uint32_t>(count, 1u << 20))));
  // One build's device work at a time hides k - 1 builds' host work.
  const double wide = 1.0 + std::ceil(HostBuildMs(s) / DeviceBuildMs(s));
  return std::clamp(static_cast<int>(std::min(wide, 1e6)), 1, most);
}

}  // namespace smolvm
