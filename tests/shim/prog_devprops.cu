// Every field of cudaDeviceProp and every device attribute, one a line, so
// a native run and one through the shims can be compared line for line
// (issue 34: deviceQuery's layered-texture limits read 0 through the shim).
// Each property is also checked against the attribute cudart reads it from.
#include <cuda.h>
#include <cuda_profiler_api.h>

#include <cstring>

#include "check.h"

namespace {

int Attr(int a) {
  int v = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&v, static_cast<cudaDeviceAttr>(a), 0));
  return v;
}

#define FIELD(f) std::printf("%s = %lld\n", #f, static_cast<long long>(p.f))
#define FIELD2(f) std::printf("%s = %lld %lld\n", #f, static_cast<long long>(p.f[0]), static_cast<long long>(p.f[1]))
#define FIELD3(f)                                                                                   \
  std::printf("%s = %lld %lld %lld\n", #f, static_cast<long long>(p.f[0]), static_cast<long long>(p.f[1]), \
              static_cast<long long>(p.f[2]))
#define SAME(f, attr) CHECK(static_cast<long long>(p.f) == static_cast<long long>(Attr(attr)))

}  // namespace

int main() {
  CHECK_CUDA(cudaProfilerStart());
  cudaDeviceProp p;
  std::memset(&p, 0, sizeof p);
  CHECK_CUDA(cudaGetDeviceProperties(&p, 0));
  std::printf("name = %s\n", p.name);
  std::printf("uuid =");
  for (int i = 0; i < 16; ++i) std::printf(" %02x", static_cast<unsigned char>(p.uuid.bytes[i]));
  std::printf("\nluid =");
  for (int i = 0; i < 8; ++i) std::printf(" %02x", static_cast<unsigned char>(p.luid[i]));
  std::printf("\n");
  FIELD(luidDeviceNodeMask);
  FIELD(totalGlobalMem);
  FIELD(sharedMemPerBlock);
  FIELD(regsPerBlock);
  FIELD(warpSize);
  FIELD(memPitch);
  FIELD(maxThreadsPerBlock);
  FIELD3(maxThreadsDim);
  FIELD3(maxGridSize);
  FIELD(totalConstMem);
  FIELD(major);
  FIELD(minor);
  FIELD(textureAlignment);
  FIELD(texturePitchAlignment);
  FIELD(multiProcessorCount);
  FIELD(integrated);
  FIELD(canMapHostMemory);
  FIELD(maxTexture1D);
  FIELD(maxTexture1DMipmap);
  FIELD2(maxTexture2D);
  FIELD2(maxTexture2DMipmap);
  FIELD3(maxTexture2DLinear);
  FIELD2(maxTexture2DGather);
  FIELD3(maxTexture3D);
  FIELD3(maxTexture3DAlt);
  FIELD(maxTextureCubemap);
  FIELD2(maxTexture1DLayered);
  FIELD3(maxTexture2DLayered);
  FIELD2(maxTextureCubemapLayered);
  FIELD(maxSurface1D);
  FIELD2(maxSurface2D);
  FIELD3(maxSurface3D);
  FIELD2(maxSurface1DLayered);
  FIELD3(maxSurface2DLayered);
  FIELD(maxSurfaceCubemap);
  FIELD2(maxSurfaceCubemapLayered);
  FIELD(surfaceAlignment);
  FIELD(concurrentKernels);
  FIELD(ECCEnabled);
  FIELD(pciBusID);
  FIELD(pciDeviceID);
  FIELD(pciDomainID);
  FIELD(tccDriver);
  FIELD(asyncEngineCount);
  FIELD(unifiedAddressing);
  FIELD(memoryBusWidth);
  FIELD(l2CacheSize);
  FIELD(persistingL2CacheMaxSize);
  FIELD(maxThreadsPerMultiProcessor);
  FIELD(streamPrioritiesSupported);
  FIELD(globalL1CacheSupported);
  FIELD(localL1CacheSupported);
  FIELD(sharedMemPerMultiprocessor);
  FIELD(regsPerMultiprocessor);
  FIELD(managedMemory);
  FIELD(isMultiGpuBoard);
  FIELD(multiGpuBoardGroupID);
  FIELD(hostNativeAtomicSupported);
  FIELD(pageableMemoryAccess);
  FIELD(concurrentManagedAccess);
  FIELD(computePreemptionSupported);
  FIELD(canUseHostPointerForRegisteredMem);
  FIELD(cooperativeLaunch);
  FIELD(sharedMemPerBlockOptin);
  FIELD(pageableMemoryAccessUsesHostPageTables);
  FIELD(directManagedMemAccessFromHost);
  FIELD(maxBlocksPerMultiProcessor);
  FIELD(accessPolicyMaxWindowSize);
  FIELD(reservedSharedMemPerBlock);
  FIELD(hostRegisterSupported);
  FIELD(sparseCudaArraySupported);
  FIELD(hostRegisterReadOnlySupported);
  FIELD(timelineSemaphoreInteropSupported);
  FIELD(memoryPoolsSupported);
  FIELD(gpuDirectRDMASupported);
  FIELD(gpuDirectRDMAFlushWritesOptions);
  FIELD(gpuDirectRDMAWritesOrdering);
  FIELD(memoryPoolSupportedHandleTypes);
  FIELD(deferredMappingCudaArraySupported);
  FIELD(ipcEventSupported);
  FIELD(clusterLaunch);
  FIELD(unifiedFunctionPointers);
  FIELD(deviceNumaConfig);
  FIELD(deviceNumaId);
  FIELD(mpsEnabled);
  FIELD(hostNumaId);
  FIELD(gpuPciDeviceID);
  FIELD(gpuPciSubsystemID);
  FIELD(hostNumaMultinodeIpcSupported);

  // Every attribute, refused ones by their error (as the driver answers).
  for (int a = 0; a <= CU_DEVICE_ATTRIBUTE_MAX; ++a) {
    int v = 0;
    cudaError_t e = cudaDeviceGetAttribute(&v, static_cast<cudaDeviceAttr>(a), 0);
    if (e == cudaSuccess)
      std::printf("attribute %d = %d\n", a, v);
    else
      std::printf("attribute %d: %s\n", a, cudaGetErrorName(e));
  }
  (void)cudaGetLastError();

  // The properties are the attributes cudart reads them from.
  SAME(maxTexture1DMipmap, cudaDevAttrMaxTexture1DMipmappedWidth);
  SAME(maxTexture2DLayered[0], cudaDevAttrMaxTexture2DLayeredWidth);
  SAME(maxTexture2DLayered[1], cudaDevAttrMaxTexture2DLayeredHeight);
  SAME(maxTexture2DLayered[2], cudaDevAttrMaxTexture2DLayeredLayers);
  SAME(maxTexture1DLayered[1], cudaDevAttrMaxTexture1DLayeredLayers);
  SAME(maxTextureCubemapLayered[1], cudaDevAttrMaxTextureCubemapLayeredLayers);
  SAME(maxTexture2DLinear[2], cudaDevAttrMaxTexture2DLinearPitch);
  SAME(maxTexture3DAlt[2], cudaDevAttrMaxTexture3DDepthAlt);
  SAME(maxSurface2DLayered[2], cudaDevAttrMaxSurface2DLayeredLayers);
  SAME(maxSurfaceCubemapLayered[0], cudaDevAttrMaxSurfaceCubemapLayeredWidth);
  SAME(sharedMemPerMultiprocessor, cudaDevAttrMaxSharedMemoryPerMultiprocessor);
  SAME(reservedSharedMemPerBlock, cudaDevAttrReservedSharedMemoryPerBlock);
  SAME(gpuPciDeviceID, cudaDevAttrGpuPciDeviceId);
  SAME(gpuPciSubsystemID, cudaDevAttrGpuPciSubsystemId);
  SAME(unifiedFunctionPointers, CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS);
  SAME(deviceNumaId, cudaDevAttrNumaId);
  SAME(mpsEnabled, cudaDevAttrMpsEnabled);
  SAME(hostNumaMultinodeIpcSupported, cudaDevAttrHostNumaMultinodeIpcSupported);
  SAME(memoryPoolsSupported, cudaDevAttrMemoryPoolsSupported);
  // A device has layered textures (deviceQuery's line read 0 through the shim).
  CHECK(p.maxTexture2DLayered[2] > 0 && p.maxTexture1DLayered[1] > 0);
  CHECK_CUDA(cudaProfilerStop());
  std::printf("PASS devprops\n");
  return 0;
}
