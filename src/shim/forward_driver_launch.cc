// The driver API, part 5: launches (driver.h), and the launch attributes of
// cuLaunchKernelEx / cudaLaunchKernelEx (driver_launch.h).
//
// A launch is queued like the runtime's (LaunchKernel, or LaunchKernelEx when
// it carries attributes). The attributes that are plain values travel to the
// worker, which checks them again and calls cuLaunchKernelEx with them:
// cooperative, cluster dimension and scheduling policy, programmatic stream
// serialization, priority, memory sync domain and its map, preferred cluster
// dimension, preferred shared memory carveout, NVLink-centric scheduling.
// The others name events or graphs the wire does not carry (programmatic
// event, launch completion event, device-updatable graph node), a window of
// memory (access policy) or apply to streams only (synchronization policy):
// CUDA_ERROR_NOT_SUPPORTED, named once per attribute id.
#include "shim/driver_launch.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include "shim/driver.h"
#include "shim/runtime.h"
#include "shim/stub_report.h"

namespace smolvm::shim {
namespace {

// cudaLaunchAttribute is CUlaunchAttribute under the runtime's names.
static_assert(sizeof(cudaLaunchAttribute) == sizeof(CUlaunchAttribute));
static_assert(offsetof(cudaLaunchAttribute, val) == offsetof(CUlaunchAttribute, value));
static_assert(static_cast<int>(cudaLaunchAttributeClusterDimension) ==
              CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION);
static_assert(static_cast<int>(cudaLaunchAttributePreferredSharedMemoryCarveout) ==
              CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT);

uint32_t Bool(int v) { return v != 0 ? 1 : 0; }

constexpr unsigned kTooMany = ~0u;

// Names "cuLaunchKernelEx(launch attribute 7)" (or cudaLaunchKernelEx, or
// "... with more than 16 launch attributes") once per id and API.
int NotSupported(bool runtime, unsigned id) {
  constexpr unsigned kSlots = 32;  // ids above share the last slot
  static std::atomic<bool> reported[2][kSlots + 1];
  const char* call = runtime ? "cudaLaunchKernelEx" : "cuLaunchKernelEx";
  char what[96];
  if (id == kTooMany)
    std::snprintf(what, sizeof what, "%s with more than %zu launch attributes", call, kMaxWireLaunchAttrs);
  else
    std::snprintf(what, sizeof what, "%s(launch attribute %u)", call, id);
  std::atomic<bool>* flag = &reported[runtime ? 1 : 0][id < kSlots ? id : kSlots];
  ReportNotSupportedOnce(flag, runtime ? "cudart" : "cuda", what,
                         runtime ? "cudaErrorNotSupported" : "CUDA_ERROR_NOT_SUPPORTED");
  return runtime ? static_cast<int>(cudaErrorNotSupported) : static_cast<int>(CUDA_ERROR_NOT_SUPPORTED);
}

}  // namespace

int WireLaunchAttrs(const CUlaunchAttribute* attrs, unsigned n, bool runtime,
                    std::vector<uint32_t>* wire) {
  wire->clear();
  if (n > 0 && attrs == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < n; ++i) {
    const CUlaunchAttributeValue& v = attrs[i].value;
    uint32_t a = 0, b = 0, c = 0;
    switch (attrs[i].id) {
      case CU_LAUNCH_ATTRIBUTE_IGNORE:
        continue;
      case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
        a = Bool(v.cooperative);
        break;
      case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
        a = v.clusterDim.x, b = v.clusterDim.y, c = v.clusterDim.z;
        break;
      case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
        a = static_cast<uint32_t>(v.clusterSchedulingPolicyPreference);
        break;
      case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
        a = Bool(v.programmaticStreamSerializationAllowed);
        break;
      case CU_LAUNCH_ATTRIBUTE_PRIORITY:
        a = static_cast<uint32_t>(v.priority);
        break;
      case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
        a = v.memSyncDomainMap.default_, b = v.memSyncDomainMap.remote;
        break;
      case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
        a = static_cast<uint32_t>(v.memSyncDomain);
        break;
      case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
        a = v.preferredClusterDim.x, b = v.preferredClusterDim.y, c = v.preferredClusterDim.z;
        break;
      case CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        a = v.sharedMemCarveout;
        break;
      case CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING:
        a = Bool(static_cast<int>(v.nvlinkUtilCentricScheduling));
        break;
      default:
        return NotSupported(runtime, static_cast<unsigned>(attrs[i].id));
    }
    if (wire->size() / 4 == kMaxWireLaunchAttrs) return NotSupported(runtime, kTooMany);
    wire->insert(wire->end(), {static_cast<uint32_t>(attrs[i].id), a, b, c});
  }
  return CUDA_SUCCESS;
}

static CUresult Launch(CUfunction f, dim3 grid, dim3 block, unsigned smem, CUstream stream,
                       void** params, void** extra, bool per_thread,
                       const std::vector<uint32_t>& attrs) {
  Runtime::DriverCallScope scope;
  std::vector<void*> args;
  if (params != nullptr && extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (extra != nullptr) {
    CUresult e = Driver::PackedArgs(f, extra, &args);
    if (e != CUDA_SUCCESS) return e;
    params = args.data();
  }
  return ToCuResult(
      rt().LaunchKernel(f, true, grid, block, params, smem, stream, per_thread, attrs));
}

CUresult Driver::PackedArgs(CUfunction f, void** extra, std::vector<void*>* args) {
  Runtime& r = rt();
  std::lock_guard lock(r.session_.mu());
  if (cudaError_t e = r.Begin(); e != cudaSuccess) return ToCuResult(e);
  Runtime::KernelRecord* k = r.FindKernel(f, true);
  if (k == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (cudaError_t e = r.EnsureKernel(k); e != cudaSuccess) return ToCuResult(r.Finish(e));
  char* buf = nullptr;
  size_t size = 0;
  bool have_size = false;
  for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
    if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
      buf = static_cast<char*>(extra[i + 1]);
    } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
      size = *static_cast<size_t*>(extra[i + 1]);
      have_size = true;
    } else {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  if (buf == nullptr || !have_size || size < k->params_bytes) return CUDA_ERROR_INVALID_VALUE;
  // A buffer longer than the parameters (a struct's tail padding) is refused
  // by the driver with this code (measured on the H200).
  if (size > k->params_bytes) return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
  for (size_t i = 0; i + 1 < k->params.size(); i += 2) args->push_back(buf + k->params[i]);
  return CUDA_SUCCESS;
}

CUresult Driver::cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                unsigned int bx, unsigned int by, unsigned int bz,
                                unsigned int smem, CUstream stream, void** params, void** extra) {
  return Launch(f, dim3(gx, gy, gz), dim3(bx, by, bz), smem, stream, params, extra, false, {});
}

CUresult Driver::cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                     unsigned int gz, unsigned int bx, unsigned int by,
                                     unsigned int bz, unsigned int smem, CUstream stream,
                                     void** params, void** extra) {
  return Launch(f, dim3(gx, gy, gz), dim3(bx, by, bz), smem, stream, params, extra, true, {});
}

static CUresult LaunchEx(const CUlaunchConfig* c, CUfunction f, void** params, void** extra,
                         bool per_thread) {
  if (c == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<uint32_t> attrs;
  if (int e = WireLaunchAttrs(c->attrs, c->numAttrs, false, &attrs); e != CUDA_SUCCESS)
    return static_cast<CUresult>(e);
  return Launch(f, dim3(c->gridDimX, c->gridDimY, c->gridDimZ),
                dim3(c->blockDimX, c->blockDimY, c->blockDimZ), c->sharedMemBytes, c->hStream,
                params, extra, per_thread, attrs);
}

CUresult Driver::cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params,
                                  void** extra) {
  return LaunchEx(config, f, params, extra, false);
}

CUresult Driver::cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params,
                                       void** extra) {
  return LaunchEx(config, f, params, extra, true);
}

// A cooperative launch is a launch with the cooperative attribute.
static const std::vector<uint32_t> kCooperative = {CU_LAUNCH_ATTRIBUTE_COOPERATIVE, 1, 0, 0};

CUresult Driver::cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy,
                                           unsigned int gz, unsigned int bx, unsigned int by,
                                           unsigned int bz, unsigned int smem, CUstream stream,
                                           void** params) {
  return Launch(f, dim3(gx, gy, gz), dim3(bx, by, bz), smem, stream, params, nullptr, false,
                kCooperative);
}

CUresult Driver::cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                                unsigned int gz, unsigned int bx, unsigned int by,
                                                unsigned int bz, unsigned int smem,
                                                CUstream stream, void** params) {
  return Launch(f, dim3(gx, gy, gz), dim3(bx, by, bz), smem, stream, params, nullptr, true,
                kCooperative);
}

}  // namespace smolvm::shim
