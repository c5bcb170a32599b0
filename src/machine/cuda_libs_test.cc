#include "machine/cuda_libs.h"

#include <gtest/gtest.h>

namespace smolvm::machine {
namespace {

TEST(CudaLibsTest, NamesOfCopiesOfReplacedLibraries) {
  EXPECT_EQ(ShimForLibraryFile("libcudart.so.13"), "libcudart.so.13");
  EXPECT_EQ(ShimForLibraryFile("libcudart.so.13.0.96"), "libcudart.so.13");
  EXPECT_EQ(ShimForLibraryFile("libcudart.faf08d9a.so.13"), "libcudart.so.13");  // torchvision.libs
  EXPECT_EQ(ShimForLibraryFile("libcudart-1a2b3c4d.so.13.0"), "libcudart.so.13");  // auditwheel
  EXPECT_EQ(ShimForLibraryFile("libcuda.so.1"), "libcuda.so.1");
  EXPECT_EQ(ShimForLibraryFile("libcublas.so.13"), "libcublas.so.13");
  EXPECT_EQ(ShimForLibraryFile("libcublasLt.so.13"), "libcublasLt.so.13");
  EXPECT_EQ(ShimForLibraryFile("libcublasLt.so.13.1.0.3"), "libcublasLt.so.13");
  EXPECT_EQ(ShimForLibraryFile("libcudnn.so.9"), "libcudnn.so.9");
  EXPECT_EQ(ShimForLibraryFile("libnvidia-ml.so.1"), "libnvidia-ml.so.1");
}

TEST(CudaLibsTest, OtherLibrariesAndOtherMajorsAreNotCopies) {
  for (const char* n : {"libcudnn_graph.so.9", "libcudnn_ops.so.9", "libcudart.so.12", "libcudart.so.130",
                        "libcudart.so", "libcudart_static.a", "libcuda.so.580.65.06", "libcudadevrt.a",
                        "libcublas.so", "libnvrtc.so.13", "libcudart.x-y.so.13", "libcudart..so.13",
                        "libcudart.so.13x", "libcudartfoo.so.13", "libnccl.so.2"})
    EXPECT_EQ(ShimForLibraryFile(n), "") << n;
}

}  // namespace
}  // namespace smolvm::machine
