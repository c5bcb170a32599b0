// The test kernels of check.h as PTX, for prog_driver's cuModuleLoadData
// (the build embeds the PTX text as driver_kernels_ptx.h).
#include "check.h"
