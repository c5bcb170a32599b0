// The test kernels of check.h as PTX, for prog_driver's cuModuleLoadData
// (the build embeds the PTX text as driver_kernels_ptx.h).
#include "check.h"

// A module global for cuModuleGetGlobal (the fake backend answers the same
// name, with the same size, in every module).
__device__ unsigned char smolvm_test_global[4096];
