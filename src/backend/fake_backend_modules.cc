// FakeBackend's modules, functions and launches, and its built-in test
// kernels (fake_backend.h lists them).
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "backend/device_footprint.h"
#include "backend/fake_backend.h"

namespace smolvm {

struct FakeBackend::Kernel {
  const char* name;
  std::vector<ParamInfo> params;
  std::function<Status(FakeBackend&, const LaunchConfig&, std::string_view)> run;
  int32_t local_bytes = 0;  // CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES (per thread)
};

namespace {

template <typename T>
T ParamAt(std::string_view params, uint32_t offset) {
  T v{};
  std::memcpy(&v, params.data() + offset, sizeof(T));
  return v;
}

uint64_t ThreadsOf(const LaunchConfig& c) {
  return uint64_t{c.grid[0]} * c.grid[1] * c.grid[2] * c.block[0] * c.block[1] * c.block[2];
}

// The built-in test kernels. Each checks its pointers as a GPU would fault.
const std::vector<FakeBackend::Kernel*>& Kernels();

}  // namespace

Result<uint64_t> FakeBackend::ModuleLoad(std::string_view image) {
  FlushDeviceOutput();
  RETURN_IF_ERROR(Enter("ModuleLoad"));
  if (image.empty()) return Cu(CUDA_ERROR_INVALID_IMAGE, "empty module image");
  uint64_t bytes = ModuleImageDeviceBytes(image);
  if (bytes > options_.total_mem || used_bytes_ > options_.total_mem - bytes)
    return Cu(CUDA_ERROR_OUT_OF_MEMORY, "fake device memory is full");
  used_bytes_ += bytes;
  uint64_t h = next_handle_++;
  modules_[h] = bytes;
  Own(h);
  return h;
}

bool FakeBackend::LibraryReserve(uint64_t bytes) {
  if (bytes > options_.total_mem || used_bytes_ > options_.total_mem - bytes) return false;
  used_bytes_ += bytes;
  return true;
}

void FakeBackend::LibraryRelease(uint64_t bytes) { used_bytes_ -= std::min(bytes, used_bytes_); }

Status FakeBackend::ModuleUnload(uint64_t module) {
  FlushDeviceOutput();
  RETURN_IF_ERROR(Enter("ModuleUnload"));
  auto mod = modules_.find(module);
  if (mod == modules_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown module");
  used_bytes_ -= mod->second;
  modules_.erase(mod);
  std::erase_if(function_of_, [&](const auto& e) { return e.first.first == module; });
  return Status::Ok();
}

Result<uint64_t> FakeBackend::ModuleGetFunction(uint64_t module, const std::string& name) {
  RETURN_IF_ERROR(Enter("ModuleGetFunction"));
  if (!modules_.count(module)) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown module");
  // One function per module and name, as the driver's: attributes set
  // through one handle are the other's.
  if (auto f = function_of_.find({module, name}); f != function_of_.end()) return f->second;
  for (const Kernel* k : Kernels()) {
    if (name == k->name) {
      uint64_t h = next_handle_++;
      function_of_[{module, name}] = h;
      functions_[h] = k;
      if (auto o = owner_.find(module); o != owner_.end()) owner_[h] = o->second;  // its module's context
      std::vector<int32_t> attrs(CU_FUNC_ATTRIBUTE_MAX, 0);
      attrs[CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK] = 1024;
      attrs[CU_FUNC_ATTRIBUTE_NUM_REGS] = 16;
      attrs[CU_FUNC_ATTRIBUTE_PTX_VERSION] = 90;
      attrs[CU_FUNC_ATTRIBUTE_BINARY_VERSION] = 90;
      attrs[CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES] = 49152;
      attrs[CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES] = k->local_bytes;
      function_attrs_[h] = std::move(attrs);
      return h;
    }
  }
  return Cu(CUDA_ERROR_NOT_FOUND, "the fake backend has no kernel named '" + name + "'");
}

Status FakeBackend::ModuleGetGlobal(uint64_t module, const std::string& name, uint64_t* dptr,
                                    uint64_t* bytes) {
  RETURN_IF_ERROR(Enter("ModuleGetGlobal"));
  if (!modules_.count(module)) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown module");
  if (name != "smolvm_test_global") return Cu(CUDA_ERROR_NOT_FOUND, "no global named '" + name + "'");
  *dptr = reinterpret_cast<uint64_t>(global_);
  *bytes = 4096;
  return Status::Ok();
}

Result<std::vector<ParamInfo>> FakeBackend::FuncGetParamInfo(uint64_t function) {
  RETURN_IF_ERROR(Enter("FuncGetParamInfo"));
  auto it = functions_.find(function);
  if (it == functions_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown function");
  return it->second->params;
}

Result<std::vector<int32_t>> FakeBackend::FuncGetAttributes(uint64_t function) {
  RETURN_IF_ERROR(Enter("FuncGetAttributes"));
  auto it = function_attrs_.find(function);
  if (it == function_attrs_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown function");
  return it->second;
}

Status FakeBackend::FuncSetAttribute(uint64_t function, int32_t attr, int32_t value) {
  RETURN_IF_ERROR(Enter("FuncSetAttribute"));
  auto it = function_attrs_.find(function);
  if (it == function_attrs_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown function");
  if (attr != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES &&
      attr != CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT &&
      attr != CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED &&
      attr != CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE)
    return Cu(CUDA_ERROR_INVALID_VALUE, "attribute is not settable");
  if (attr == CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED && value != 0 && value != 1)
    return Cu(CUDA_ERROR_INVALID_VALUE, "a flag is 0 or 1");
  if (attr == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES && (value < 0 || value > 232448))
    return Cu(CUDA_ERROR_INVALID_VALUE, "dynamic shared memory above the device limit");
  it->second[attr] = value;
  return Status::Ok();
}

Status FakeBackend::LaunchKernel(uint64_t function, const LaunchConfig& config, uint64_t stream,
                                 std::string_view params) {
  FlushDeviceOutput();  // the driver flushes at the start of a launch
  RETURN_IF_ERROR(Enter("LaunchKernel"));
  RETURN_IF_ERROR(CheckStream(stream));
  if (Capturing(stream)) {
    if (!functions_.count(function)) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown function");
    if (config.num_attrs != 0) return Cu(CUDA_ERROR_NOT_SUPPORTED, "the fake captures no launch attributes");
    GraphNodeParams n;
    n.kind = GraphNodeKind::kKernel;
    n.function = function;
    n.config = config;
    n.params.assign(params.data(), params.size());
    return CaptureNode(stream, std::move(n));
  }
  return RunKernel(function, config, params);
}

Status FakeBackend::RunKernel(uint64_t function, const LaunchConfig& config, std::string_view params) {
  auto it = functions_.find(function);
  if (it == functions_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown function");
  const Kernel* k = it->second;
  uint32_t need = 0;
  for (const ParamInfo& p : k->params) need = std::max(need, p.offset + p.size);
  if (params.size() < need) return Cu(CUDA_ERROR_INVALID_VALUE, "parameter buffer too small");
  uint64_t threads = ThreadsOf(config);
  if (threads == 0 || uint64_t{config.block[0]} * config.block[1] * config.block[2] > 1024)
    return Cu(CUDA_ERROR_INVALID_VALUE, "invalid launch configuration");
  auto& attrs = function_attrs_[function];
  if (config.shared_bytes > static_cast<uint32_t>(std::max(attrs[CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES], 0)))
    return Cu(CUDA_ERROR_INVALID_VALUE, "too much dynamic shared memory");
  RETURN_IF_ERROR(CheckLaunchAttrs(function, config));
  // As the driver does: a kernel that needs more local memory per thread
  // than the stack limit grows the context's reservation (and the limit)
  // at its launch, which fails when the device has no room for it.
  if (auto local = static_cast<uint64_t>(std::max(attrs[CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES], 0)); local > 0) {
    auto stack = limits_.find(CU_LIMIT_STACK_SIZE);
    if (local > (stack == limits_.end() ? 1024 : stack->second)) {
      Status grown = CtxSetLimit(CU_LIMIT_STACK_SIZE, local);
      if (!grown.ok()) return Cu(grown.code(), "the launch cannot grow local memory: " + grown.message());
    }
  }
  last_launch_ = config;
  static const long long launch_ns = [] {
    const char* v = std::getenv("SMOLVM_FAKE_LAUNCH_NS");
    return v ? std::clamp(std::atoll(v), 0LL, 1000000LL) : 0LL;
  }();
  if (launch_ns > 0) {
    auto end = std::chrono::steady_clock::now() + std::chrono::nanoseconds(launch_ns);
    while (std::chrono::steady_clock::now() < end) {
    }
  }
  return k->run(*this, config, params);
}

// As the H200 judges them: a cluster tiles the grid exactly and holds at
// most 8 blocks (16 once the function allows non-portable sizes); a
// cooperative grid fits on the device at once (the occupancy below times the
// fake's 4 SMs). The other attributes are hints or orderings the fake, which
// runs every launch to completion in order, honours trivially.
Status FakeBackend::CheckLaunchAttrs(uint64_t function, const LaunchConfig& c) {
  auto& fattrs = function_attrs_[function];
  for (uint32_t i = 0; i < c.num_attrs && i < kMaxLaunchAttrs; ++i) {
    const LaunchAttr& a = c.attrs[i];
    if (a.id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
      uint64_t blocks = 1;
      for (int d = 0; d < 3; ++d) {
        if (a.value[d] == 0 || c.grid[d] % a.value[d] != 0)
          return Cu(CUDA_ERROR_INVALID_CLUSTER_SIZE, "the cluster does not tile the grid");
        blocks *= a.value[d];
      }
      uint64_t max = fattrs[CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED] != 0 ? 16 : 8;
      if (blocks > max) return Cu(CUDA_ERROR_INVALID_CLUSTER_SIZE, "cluster larger than the device allows");
    } else if (a.id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && a.value[0] != 0) {
      uint64_t block = uint64_t{c.block[0]} * c.block[1] * c.block[2];
      uint64_t grid = uint64_t{c.grid[0]} * c.grid[1] * c.grid[2];
      uint64_t per_sm = block == 0 ? 0 : std::min<uint64_t>(32, 2048 / block);
      if (grid > per_sm * 4)
        return Cu(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "the cooperative grid does not fit on the device");
    }
  }
  return Status::Ok();
}

Result<int32_t> FakeBackend::OccupancyMaxBlocks(uint64_t function, int32_t block_size,
                                                uint64_t dynamic_smem, uint32_t flags) {
  RETURN_IF_ERROR(Enter("OccupancyMaxBlocks"));
  if (!functions_.count(function)) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown function");
  if (block_size <= 0 || block_size > 1024) return Cu(CUDA_ERROR_INVALID_VALUE, "bad block size");
  return std::min(32, 2048 / block_size);
}

namespace {

const std::vector<FakeBackend::Kernel*>& Kernels() {
  using K = FakeBackend::Kernel;
  static K fill{"smolvm_test_fill_u32", {{0, 8}, {8, 4}, {16, 8}},
                [](FakeBackend& b, const LaunchConfig& c, std::string_view prm) -> Status {
                  auto* p = ParamAt<uint32_t*>(prm, 0);
                  uint32_t value = ParamAt<uint32_t>(prm, 8);
                  uint64_t n = ParamAt<uint64_t>(prm, 16);
                  RETURN_IF_ERROR(b.KernelAccess(reinterpret_cast<uint64_t>(p), n, 4, true));
                  for (uint64_t i = 0; i < n; ++i) p[i] = value + static_cast<uint32_t>(i);
                  return Status::Ok();
                }};
  static K saxpy{"smolvm_test_saxpy", {{0, 4}, {8, 8}, {16, 8}, {24, 8}},
                 [](FakeBackend& b, const LaunchConfig& c, std::string_view prm) -> Status {
                   float a = ParamAt<float>(prm, 0);
                   auto* x = ParamAt<const float*>(prm, 8);
                   auto* y = ParamAt<float*>(prm, 16);
                   uint64_t n = ParamAt<uint64_t>(prm, 24);
                   RETURN_IF_ERROR(b.KernelAccess(reinterpret_cast<uint64_t>(x), n, 4, false));
                   RETURN_IF_ERROR(b.KernelAccess(reinterpret_cast<uint64_t>(y), n, 4, true));
                   for (uint64_t i = 0; i < n; ++i) y[i] = a * x[i] + y[i];
                   return Status::Ok();
                 }};
  static K empty{"smolvm_test_empty", {},
                 [](FakeBackend&, const LaunchConfig&, std::string_view) { return Status::Ok(); }};
  static K write{"smolvm_test_write_u32", {{0, 8}, {8, 4}},
                 [](FakeBackend& b, const LaunchConfig& c, std::string_view prm) -> Status {
                   auto* p = ParamAt<uint32_t*>(prm, 0);
                   uint32_t value = ParamAt<uint32_t>(prm, 8);
                   RETURN_IF_ERROR(b.KernelAccess(reinterpret_cast<uint64_t>(p), 4, true));
                   *p = value;
                   return Status::Ok();
                 }};
  // No work; needs 2 KiB of local memory per thread (a stack-hungry kernel).
  static K local{"smolvm_test_local_2k", {},
                 [](FakeBackend&, const LaunchConfig&, std::string_view) { return Status::Ok(); }, 2048};
  // Thread 0 of block 0 prints `lines` lines (one thread, so their order is
  // the same on every GPU).
  static K print{"smolvm_test_printf", {{0, 4}, {4, 4}},
                 [](FakeBackend& b, const LaunchConfig&, std::string_view prm) -> Status {
                   uint32_t tag = ParamAt<uint32_t>(prm, 0);
                   uint32_t lines = ParamAt<uint32_t>(prm, 4);
                   for (uint32_t i = 0; i < lines; ++i)
                     b.DevicePrintf("device " + std::to_string(tag) + ": line " + std::to_string(i) + " of " +
                                    std::to_string(lines) + "\n");
                   return Status::Ok();
                 }};
  // Every thread asserts *p == want; the driver prints one message per
  // failing thread (here block and thread 0's, the first of them).
  static K check{"smolvm_test_assert", {{0, 8}, {8, 4}},
                 [](FakeBackend& b, const LaunchConfig&, std::string_view prm) -> Status {
                   auto* p = ParamAt<const uint32_t*>(prm, 0);
                   uint32_t want = ParamAt<uint32_t>(prm, 8);
                   RETURN_IF_ERROR(b.KernelAccess(reinterpret_cast<uint64_t>(p), 4, false));
                   if (*p != want)
                     b.DeviceAssert(
                         "smolvm_test_assert: block: [0,0,0], thread: [0,0,0] Assertion `*p == want` failed.\n");
                   return Status::Ok();
                 }};
  // Dynamic parallelism: thread 0 launches a fill of p[0, n) from the device
  // (the child's work, done here as the GPU would do it before the parent
  // completes).
  static K launch{"smolvm_test_launch_fill", {{0, 8}, {8, 4}, {16, 8}},
                  [](FakeBackend& b, const LaunchConfig& c, std::string_view prm) -> Status {
                    auto* p = ParamAt<uint32_t*>(prm, 0);
                    uint32_t value = ParamAt<uint32_t>(prm, 8);
                    uint64_t n = ParamAt<uint64_t>(prm, 16);
                    RETURN_IF_ERROR(b.KernelAccess(reinterpret_cast<uint64_t>(p), n, 4, true));
                    for (uint64_t i = 0; i < n; ++i) p[i] = value + static_cast<uint32_t>(i);
                    return Status::Ok();
                  }};
  // Texture and surface objects (fake_backend_arrays.cc): out(x, y) =
  // 2 * tex2D(tex, x, y) + 1 over a width x height float surface.
  static K tex_to_surf{"smolvm_test_tex_to_surf", {{0, 8}, {8, 8}, {16, 4}, {20, 4}},
                       [](FakeBackend& b, const LaunchConfig&, std::string_view prm) -> Status {
                         uint64_t tex = ParamAt<uint64_t>(prm, 0), surf = ParamAt<uint64_t>(prm, 8);
                         uint32_t width = ParamAt<uint32_t>(prm, 16), height = ParamAt<uint32_t>(prm, 20);
                         for (uint32_t y = 0; y < height; ++y)
                           for (uint32_t x = 0; x < width; ++x) {
                             ASSIGN_OR_RETURN(float v, b.TexFetch(tex, x, y));
                             RETURN_IF_ERROR(b.SurfWrite(surf, uint64_t{x} * 4, y, 2 * v + 1));
                           }
                         return Status::Ok();
                       }};
  // out[i] = tex1Dfetch(tex, i) for i < n.
  static K tex1d{"smolvm_test_tex1d_copy", {{0, 8}, {8, 8}, {16, 8}},
                 [](FakeBackend& b, const LaunchConfig&, std::string_view prm) -> Status {
                   uint64_t tex = ParamAt<uint64_t>(prm, 0);
                   auto* out = ParamAt<float*>(prm, 8);
                   uint64_t n = ParamAt<uint64_t>(prm, 16);
                   RETURN_IF_ERROR(b.KernelAccess(reinterpret_cast<uint64_t>(out), n, 4, true));
                   for (uint64_t i = 0; i < n; ++i) {
                     ASSIGN_OR_RETURN(float v, b.TexFetch(tex, static_cast<int64_t>(i), 0));
                     out[i] = v;
                   }
                   return Status::Ok();
                 }};
  static const std::vector<K*> all = {&fill,  &saxpy,  &empty,       &write, &local,
                                      &print, &check, &launch, &tex_to_surf, &tex1d};
  return all;
}

}  // namespace

}  // namespace smolvm
