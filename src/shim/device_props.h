// cudaDeviceProp from the device's attributes, as cudart fills it: every
// field is a CUdevice_attribute (value for value: cudaDeviceAttr mirrors
// the enum) except the name, the UUID and the total memory, which the
// driver answers by their own calls, and the LUID, which Linux leaves 0.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string_view>
#include <vector>

namespace smolvm::shim {

// attrs[a] = cuDeviceGetAttribute(a) (0 past its end).
void FillDeviceProp(const std::vector<int32_t>& attrs, std::string_view name, std::string_view uuid,
                    uint64_t total_mem, cudaDeviceProp* prop);

}  // namespace smolvm::shim
