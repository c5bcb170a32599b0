// learner_gpu_test's suite (kernels vs CPU, whole step vs CPU, determinism)
// run on the host through cuda/host_emulation.h: checks the CUDA path's
// logic (indexing, layouts, recompute, NF4, packing) without a GPU.
#include "learner/cuda_kernels_test.cu"
