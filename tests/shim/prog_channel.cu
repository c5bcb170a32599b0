// cudaCreateChannelDesc is a plain function (issue 34: deviceQuery-style
// samples build one first); mipmapped arrays stay stubs, named once (CUDA
// arrays themselves: prog_textures).
#include <cstdlib>

#include "check.h"

int main() {
  bool through_shim = std::getenv("SMOLVM_CUDA_SOCKET") != nullptr;
  cudaChannelFormatDesc d = cudaCreateChannelDesc(32, 0, 0, 0, cudaChannelFormatKindFloat);
  CHECK(d.x == 32 && d.y == 0 && d.z == 0 && d.w == 0 && d.f == cudaChannelFormatKindFloat);
  cudaChannelFormatDesc t = cudaCreateChannelDesc<uchar4>();  // the header's template, on the C API
  CHECK(t.x == 8 && t.y == 8 && t.z == 8 && t.w == 8 && t.f == cudaChannelFormatKindUnsigned);
  if (through_shim) {
    cudaMipmappedArray_t a = nullptr;
    EXPECT_CUDA(cudaErrorNotSupported, cudaMallocMipmappedArray(&a, &d, cudaExtent{64, 64, 0}, 2));
    (void)cudaGetLastError();
  }
  std::printf("PASS channel\n");
  return 0;
}
