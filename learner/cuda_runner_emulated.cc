// CudaRunner compiled for host emulation (tests only).
#include "learner/cuda_runner.cu"
