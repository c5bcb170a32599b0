#include "shim/device_props.h"

#include <cuda.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace smolvm::shim {

void FillDeviceProp(const std::vector<int32_t>& v, std::string_view name, std::string_view uuid,
                    uint64_t total_mem, cudaDeviceProp* prop) {
  auto a = [&v](cudaDeviceAttr attr) -> int {
    size_t i = static_cast<size_t>(attr);
    return i < v.size() ? v[i] : 0;
  };
  auto bytes = [&a](cudaDeviceAttr attr) { return static_cast<size_t>(static_cast<unsigned>(a(attr))); };
  std::memset(prop, 0, sizeof *prop);
  std::snprintf(prop->name, sizeof prop->name, "%.*s", static_cast<int>(name.size()), name.data());
  std::memcpy(prop->uuid.bytes, uuid.data(), std::min(uuid.size(), sizeof prop->uuid.bytes));
  prop->totalGlobalMem = total_mem;
  prop->sharedMemPerBlock = bytes(cudaDevAttrMaxSharedMemoryPerBlock);
  prop->regsPerBlock = a(cudaDevAttrMaxRegistersPerBlock);
  prop->warpSize = a(cudaDevAttrWarpSize);
  prop->memPitch = bytes(cudaDevAttrMaxPitch);
  prop->maxThreadsPerBlock = a(cudaDevAttrMaxThreadsPerBlock);
  prop->maxThreadsDim[0] = a(cudaDevAttrMaxBlockDimX);
  prop->maxThreadsDim[1] = a(cudaDevAttrMaxBlockDimY);
  prop->maxThreadsDim[2] = a(cudaDevAttrMaxBlockDimZ);
  prop->maxGridSize[0] = a(cudaDevAttrMaxGridDimX);
  prop->maxGridSize[1] = a(cudaDevAttrMaxGridDimY);
  prop->maxGridSize[2] = a(cudaDevAttrMaxGridDimZ);
  prop->totalConstMem = bytes(cudaDevAttrTotalConstantMemory);
  prop->major = a(cudaDevAttrComputeCapabilityMajor);
  prop->minor = a(cudaDevAttrComputeCapabilityMinor);
  prop->textureAlignment = bytes(cudaDevAttrTextureAlignment);
  prop->texturePitchAlignment = bytes(cudaDevAttrTexturePitchAlignment);
  prop->multiProcessorCount = a(cudaDevAttrMultiProcessorCount);
  prop->integrated = a(cudaDevAttrIntegrated);
  prop->canMapHostMemory = a(cudaDevAttrCanMapHostMemory);
  prop->maxTexture1D = a(cudaDevAttrMaxTexture1DWidth);
  prop->maxTexture1DMipmap = a(cudaDevAttrMaxTexture1DMipmappedWidth);
  prop->maxTexture2D[0] = a(cudaDevAttrMaxTexture2DWidth);
  prop->maxTexture2D[1] = a(cudaDevAttrMaxTexture2DHeight);
  prop->maxTexture2DMipmap[0] = a(cudaDevAttrMaxTexture2DMipmappedWidth);
  prop->maxTexture2DMipmap[1] = a(cudaDevAttrMaxTexture2DMipmappedHeight);
  prop->maxTexture2DLinear[0] = a(cudaDevAttrMaxTexture2DLinearWidth);
  prop->maxTexture2DLinear[1] = a(cudaDevAttrMaxTexture2DLinearHeight);
  prop->maxTexture2DLinear[2] = a(cudaDevAttrMaxTexture2DLinearPitch);
  prop->maxTexture2DGather[0] = a(cudaDevAttrMaxTexture2DGatherWidth);
  prop->maxTexture2DGather[1] = a(cudaDevAttrMaxTexture2DGatherHeight);
  prop->maxTexture3D[0] = a(cudaDevAttrMaxTexture3DWidth);
  prop->maxTexture3D[1] = a(cudaDevAttrMaxTexture3DHeight);
  prop->maxTexture3D[2] = a(cudaDevAttrMaxTexture3DDepth);
  prop->maxTexture3DAlt[0] = a(cudaDevAttrMaxTexture3DWidthAlt);
  prop->maxTexture3DAlt[1] = a(cudaDevAttrMaxTexture3DHeightAlt);
  prop->maxTexture3DAlt[2] = a(cudaDevAttrMaxTexture3DDepthAlt);
  prop->maxTextureCubemap = a(cudaDevAttrMaxTextureCubemapWidth);
  prop->maxTexture1DLayered[0] = a(cudaDevAttrMaxTexture1DLayeredWidth);
  prop->maxTexture1DLayered[1] = a(cudaDevAttrMaxTexture1DLayeredLayers);
  prop->maxTexture2DLayered[0] = a(cudaDevAttrMaxTexture2DLayeredWidth);
  prop->maxTexture2DLayered[1] = a(cudaDevAttrMaxTexture2DLayeredHeight);
  prop->maxTexture2DLayered[2] = a(cudaDevAttrMaxTexture2DLayeredLayers);
  prop->maxTextureCubemapLayered[0] = a(cudaDevAttrMaxTextureCubemapLayeredWidth);
  prop->maxTextureCubemapLayered[1] = a(cudaDevAttrMaxTextureCubemapLayeredLayers);
  prop->maxSurface1D = a(cudaDevAttrMaxSurface1DWidth);
  prop->maxSurface2D[0] = a(cudaDevAttrMaxSurface2DWidth);
  prop->maxSurface2D[1] = a(cudaDevAttrMaxSurface2DHeight);
  prop->maxSurface3D[0] = a(cudaDevAttrMaxSurface3DWidth);
  prop->maxSurface3D[1] = a(cudaDevAttrMaxSurface3DHeight);
  prop->maxSurface3D[2] = a(cudaDevAttrMaxSurface3DDepth);
  prop->maxSurface1DLayered[0] = a(cudaDevAttrMaxSurface1DLayeredWidth);
  prop->maxSurface1DLayered[1] = a(cudaDevAttrMaxSurface1DLayeredLayers);
  prop->maxSurface2DLayered[0] = a(cudaDevAttrMaxSurface2DLayeredWidth);
  prop->maxSurface2DLayered[1] = a(cudaDevAttrMaxSurface2DLayeredHeight);
  prop->maxSurface2DLayered[2] = a(cudaDevAttrMaxSurface2DLayeredLayers);
  prop->maxSurfaceCubemap = a(cudaDevAttrMaxSurfaceCubemapWidth);
  prop->maxSurfaceCubemapLayered[0] = a(cudaDevAttrMaxSurfaceCubemapLayeredWidth);
  prop->maxSurfaceCubemapLayered[1] = a(cudaDevAttrMaxSurfaceCubemapLayeredLayers);
  prop->surfaceAlignment = bytes(cudaDevAttrSurfaceAlignment);
  prop->concurrentKernels = a(cudaDevAttrConcurrentKernels);
  prop->ECCEnabled = a(cudaDevAttrEccEnabled);
  prop->pciBusID = a(cudaDevAttrPciBusId);
  prop->pciDeviceID = a(cudaDevAttrPciDeviceId);
  prop->pciDomainID = a(cudaDevAttrPciDomainId);
  prop->tccDriver = a(cudaDevAttrTccDriver);
  prop->asyncEngineCount = a(cudaDevAttrAsyncEngineCount);
  prop->unifiedAddressing = a(cudaDevAttrUnifiedAddressing);
  prop->memoryBusWidth = a(cudaDevAttrGlobalMemoryBusWidth);
  prop->l2CacheSize = a(cudaDevAttrL2CacheSize);
  prop->persistingL2CacheMaxSize = a(cudaDevAttrMaxPersistingL2CacheSize);
  prop->maxThreadsPerMultiProcessor = a(cudaDevAttrMaxThreadsPerMultiProcessor);
  prop->streamPrioritiesSupported = a(cudaDevAttrStreamPrioritiesSupported);
  prop->globalL1CacheSupported = a(cudaDevAttrGlobalL1CacheSupported);
  prop->localL1CacheSupported = a(cudaDevAttrLocalL1CacheSupported);
  prop->sharedMemPerMultiprocessor = bytes(cudaDevAttrMaxSharedMemoryPerMultiprocessor);
  prop->regsPerMultiprocessor = a(cudaDevAttrMaxRegistersPerMultiprocessor);
  prop->managedMemory = a(cudaDevAttrManagedMemory);
  prop->isMultiGpuBoard = a(cudaDevAttrIsMultiGpuBoard);
  prop->multiGpuBoardGroupID = a(cudaDevAttrMultiGpuBoardGroupID);
  prop->hostNativeAtomicSupported = a(cudaDevAttrHostNativeAtomicSupported);
  prop->pageableMemoryAccess = a(cudaDevAttrPageableMemoryAccess);
  prop->concurrentManagedAccess = a(cudaDevAttrConcurrentManagedAccess);
  prop->computePreemptionSupported = a(cudaDevAttrComputePreemptionSupported);
  prop->canUseHostPointerForRegisteredMem = a(cudaDevAttrCanUseHostPointerForRegisteredMem);
  prop->cooperativeLaunch = a(cudaDevAttrCooperativeLaunch);
  prop->sharedMemPerBlockOptin = bytes(cudaDevAttrMaxSharedMemoryPerBlockOptin);
  prop->pageableMemoryAccessUsesHostPageTables = a(cudaDevAttrPageableMemoryAccessUsesHostPageTables);
  prop->directManagedMemAccessFromHost = a(cudaDevAttrDirectManagedMemAccessFromHost);
  prop->maxBlocksPerMultiProcessor = a(cudaDevAttrMaxBlocksPerMultiprocessor);
  prop->accessPolicyMaxWindowSize = a(cudaDevAttrMaxAccessPolicyWindowSize);
  prop->reservedSharedMemPerBlock = bytes(cudaDevAttrReservedSharedMemoryPerBlock);
  prop->hostRegisterSupported = a(cudaDevAttrHostRegisterSupported);
  prop->sparseCudaArraySupported = a(cudaDevAttrSparseCudaArraySupported);
  prop->hostRegisterReadOnlySupported = a(cudaDevAttrHostRegisterReadOnlySupported);
  prop->timelineSemaphoreInteropSupported = a(cudaDevAttrTimelineSemaphoreInteropSupported);
  prop->memoryPoolsSupported = a(cudaDevAttrMemoryPoolsSupported);
  prop->gpuDirectRDMASupported = a(cudaDevAttrGPUDirectRDMASupported);
  prop->gpuDirectRDMAFlushWritesOptions = static_cast<unsigned>(a(cudaDevAttrGPUDirectRDMAFlushWritesOptions));
  prop->gpuDirectRDMAWritesOrdering = a(cudaDevAttrGPUDirectRDMAWritesOrdering);
  prop->memoryPoolSupportedHandleTypes = static_cast<unsigned>(a(cudaDevAttrMemoryPoolSupportedHandleTypes));
  prop->deferredMappingCudaArraySupported = a(cudaDevAttrDeferredMappingCudaArraySupported);
  prop->ipcEventSupported = a(cudaDevAttrIpcEventSupport);
  prop->clusterLaunch = a(cudaDevAttrClusterLaunch);
  prop->unifiedFunctionPointers = a(static_cast<cudaDeviceAttr>(CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS));
  prop->deviceNumaConfig = a(cudaDevAttrNumaConfig);
  prop->deviceNumaId = a(cudaDevAttrNumaId);
  prop->mpsEnabled = a(cudaDevAttrMpsEnabled);
  prop->hostNumaId = a(cudaDevAttrHostNumaId);
  prop->gpuPciDeviceID = static_cast<unsigned>(a(cudaDevAttrGpuPciDeviceId));
  prop->gpuPciSubsystemID = static_cast<unsigned>(a(cudaDevAttrGpuPciSubsystemId));
  prop->hostNumaMultinodeIpcSupported = a(cudaDevAttrHostNumaMultinodeIpcSupported);
}

}  // namespace smolvm::shim
