// Device properties and versions as a program sees them. Through the shim
// every value must equal the native one (memory in use is not printed: it
// differs by design).
#include "gpu_check.cuh"

int main() {
  RequireDevice();
  int count = 0, driver = 0, runtime = 0;
  CHECK(cudaGetDeviceCount(&count));
  CHECK(cudaDriverGetVersion(&driver));
  CHECK(cudaRuntimeGetVersion(&runtime));
  std::printf("devices=%d driver=%d runtime=%d\n", count, driver, runtime);
  int dev = -1;
  CHECK(cudaGetDevice(&dev));
  cudaDeviceProp p;
  CHECK(cudaGetDeviceProperties(&p, dev));
  std::printf("name=%s\n", p.name);
  std::printf("uuid_hash=%016llx\n", static_cast<unsigned long long>(Fnv1a(&p.uuid, sizeof p.uuid)));
  std::printf("cc=%d.%d sms=%d total_mem=%zu\n", p.major, p.minor, p.multiProcessorCount,
              p.totalGlobalMem);
  std::printf("smem_block=%zu smem_optin=%zu smem_sm=%zu regs_block=%d regs_sm=%d warp=%d\n",
              p.sharedMemPerBlock, p.sharedMemPerBlockOptin, p.sharedMemPerMultiprocessor,
              p.regsPerBlock, p.regsPerMultiprocessor, p.warpSize);
  std::printf("threads_block=%d block=(%d,%d,%d) grid=(%d,%d,%d) threads_sm=%d blocks_sm=%d\n",
              p.maxThreadsPerBlock, p.maxThreadsDim[0], p.maxThreadsDim[1], p.maxThreadsDim[2],
              p.maxGridSize[0], p.maxGridSize[1], p.maxGridSize[2], p.maxThreadsPerMultiProcessor,
              p.maxBlocksPerMultiProcessor);
  std::printf("l2=%d bus_width=%d const_mem=%zu async_engines=%d concurrent_kernels=%d "
              "unified_addressing=%d pci=%04x:%02x:%02x\n",
              p.l2CacheSize, p.memoryBusWidth, p.totalConstMem, p.asyncEngineCount,
              p.concurrentKernels, p.unifiedAddressing, p.pciDomainID, p.pciBusID, p.pciDeviceID);
  int attrs[] = {cudaDevAttrClockRate, cudaDevAttrMemoryClockRate, cudaDevAttrComputeMode,
                 cudaDevAttrMaxSharedMemoryPerBlockOptin, cudaDevAttrCooperativeLaunch};
  for (int a : attrs) {
    int v = 0;
    CHECK(cudaDeviceGetAttribute(&v, static_cast<cudaDeviceAttr>(a), dev));
    std::printf("attr[%d]=%d\n", a, v);
  }
  return 0;
}
