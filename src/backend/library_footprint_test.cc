// On a GPU: what cublasCreate, cublasLtCreate and cudnnCreate add to this
// process's device memory as NVML counts it, against what `--gpu-mem`
// charges a handle (LibraryDeviceFootprint). Prints the measured figures
// ("library footprint measured: ..."; scripts/device-density.sh shows them)
// and fails when a handle holds more than its charge. Skips without a GPU,
// without NVML's per-process figures, or without the libraries.
#include <cuda.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "backend/backend_factory.h"
#include "backend/blas_backend.h"
#include "backend/device_footprint.h"
#include "backend/dnn_backend.h"
#include "backend/nvml_host.h"

namespace smolvm {
namespace {

constexpr double kMiB = 1 << 20;

bool GpuRequired() {
  const char* env = std::getenv("SMOLVM_REQUIRE_GPU");
  return env && std::string(env) == "1";
}

// This process's device memory as NVML counts it, or -1.
int64_t OwnDeviceBytes() {
  auto used = HostProcessMemory();
  if (!used.ok()) return -1;
  auto it = used->find(static_cast<uint32_t>(::getpid()));
  return it == used->end() ? -1 : static_cast<int64_t>(it->second);
}

TEST(LibraryFootprintOnTheGpu, AHandleHoldsNoMoreThanItsCharge) {
  auto made = MakeBackend("cuda");
  if (!made.ok()) GTEST_SKIP() << "no cuda backend in this build: " << made.status().ToString();
  std::unique_ptr<GpuBackend> gpu = std::move(made).value();
  Status init = gpu->Init(0);
  if (!init.ok()) {
    if (GpuRequired()) FAIL() << "Init(0): " << init.ToString();
    GTEST_SKIP() << "no usable GPU here: " << init.ToString();
  }
  const int64_t base = OwnDeviceBytes();
  if (base < 0) GTEST_SKIP() << "NVML does not count this process (no NVML, or another pid namespace)";
  auto info = gpu->GetDeviceInfo(0);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  const LibraryFootprint f = LibraryDeviceFootprint("cuda", *info);
  std::string line = "library footprint measured (MiB, NVML per process, context " + std::to_string(base / kMiB) + "):";

  auto blas = MakeBlasBackend(gpu.get());
  if (blas.ok()) {
    int64_t before = OwnDeviceBytes();
    auto h = (*blas)->Create();
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    int64_t after = OwnDeviceBytes();
    line += " cublasCreate +" + std::to_string((after - before) / kMiB);
    EXPECT_LE(after - before, static_cast<int64_t>(f.blas_handle + f.blas_default_workspace));
    before = after;
    auto lt = (*blas)->LtCreate();
    ASSERT_TRUE(lt.ok()) << lt.status().ToString();
    after = OwnDeviceBytes();
    line += ", cublasLtCreate +" + std::to_string((after - before) / kMiB);
    EXPECT_LE(after - before, static_cast<int64_t>(f.lt_handle));
  } else {
    line += " cuBLAS not loaded (" + blas.status().message() + ")";
  }
  auto dnn = MakeDnnBackend(gpu.get());
  if (dnn.ok()) {
    int64_t before = OwnDeviceBytes();
    auto h = (*dnn)->Create();
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    int64_t after = OwnDeviceBytes();
    line += ", cudnnCreate +" + std::to_string((after - before) / kMiB);
    EXPECT_LE(after - before, static_cast<int64_t>(f.dnn_handle));
  } else {
    line += ", cuDNN not loaded (" + dnn.status().message() + ")";
  }
  line += "; charged: cuBLAS " + std::to_string(f.blas_handle / kMiB) + " + pool " +
          std::to_string(f.blas_default_workspace / kMiB) + ", cuBLASLt " + std::to_string(f.lt_handle / kMiB) +
          ", cuDNN " + std::to_string(f.dnn_handle / kMiB);
  std::printf("%s\n", line.c_str());
  RecordProperty("measured", line);
}

}  // namespace
}  // namespace smolvm
