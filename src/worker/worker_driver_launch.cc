// LaunchKernelEx (op 57): a launch with cuLaunchKernelEx's attributes, as
// the driver shim sends them (shim/driver_launch.h). The guest is hostile:
// the attribute list is bounded, every id must be one whose value is plain
// numbers, and every value must lie in its range before the backend sees it.
// What is left to judge (a cluster that does not divide the grid, a
// cooperative grid larger than the device holds) the backend judges as CUDA
// does.
#include <cuda.h>

#include "worker/worker.h"

namespace smolvm {
namespace {

Status Bad(uint32_t id, const std::string& why) {
  return Status(static_cast<int32_t>(CUDA_ERROR_INVALID_VALUE),
                "cuLaunchKernelEx: launch attribute " + std::to_string(id) + ": " + why);
}

// Cluster dimensions no device reaches (Hopper allows 16 blocks per cluster).
constexpr uint32_t kMaxClusterDim = 1024;

Status CheckAttr(const LaunchAttr& a) {
  const uint32_t* v = a.value;
  auto only_first = [&]() { return v[1] == 0 && v[2] == 0; };
  switch (a.id) {
    case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
    case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
    case CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING:
      if (v[0] > 1 || !only_first()) return Bad(a.id, "a flag is 0 or 1");
      return Status::Ok();
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
    case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
      for (int i = 0; i < 3; ++i)
        if (v[i] == 0 || v[i] > kMaxClusterDim) return Bad(a.id, "cluster dimension out of range");
      return Status::Ok();
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
      if (v[0] > CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING || !only_first())
        return Bad(a.id, "unknown cluster scheduling policy");
      return Status::Ok();
    case CU_LAUNCH_ATTRIBUTE_PRIORITY:  // any int; the driver clamps it to the device's range
      if (!only_first()) return Bad(a.id, "a priority is one value");
      return Status::Ok();
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
      if (v[0] > CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE || !only_first())
        return Bad(a.id, "unknown memory sync domain");
      return Status::Ok();
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
      if (v[0] > 0xff || v[1] > 0xff || v[2] != 0) return Bad(a.id, "a domain map holds two bytes");
      return Status::Ok();
    case CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      if ((v[0] > 100 && v[0] != ~0u) || !only_first())
        return Bad(a.id, "a carveout is a percentage (0-100) or -1");
      return Status::Ok();
    default:
      return Bad(a.id, "not an attribute the wire carries");
  }
}

}  // namespace

Status Worker::Handle(const proto::LaunchKernelExRequest& q, proto::LaunchKernelExReply*, Ctx*) {
  if (q.attrs.size() % 4 != 0)
    return Status(static_cast<int32_t>(CUDA_ERROR_INVALID_VALUE),
                  "cuLaunchKernelEx: launch attributes are (id, value, value, value) quadruples");
  if (q.attrs.size() / 4 > kMaxLaunchAttrs)
    return Status(static_cast<int32_t>(CUDA_ERROR_INVALID_VALUE),
                  "cuLaunchKernelEx: more than " + std::to_string(kMaxLaunchAttrs) + " launch attributes");
  LaunchConfig c;
  c.grid[0] = q.grid_x, c.grid[1] = q.grid_y, c.grid[2] = q.grid_z;
  c.block[0] = q.block_x, c.block[1] = q.block_y, c.block[2] = q.block_z;
  c.shared_bytes = q.shared_bytes;
  for (size_t i = 0; i < q.attrs.size(); i += 4) {
    LaunchAttr& a = c.attrs[c.num_attrs++];
    a.id = q.attrs[i];
    a.value[0] = q.attrs[i + 1], a.value[1] = q.attrs[i + 2], a.value[2] = q.attrs[i + 3];
    RETURN_IF_ERROR(CheckAttr(a));
  }
  return Launch(q.function, q.stream, c, q.params);
}

}  // namespace smolvm
