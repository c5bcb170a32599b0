// The real cuDNN, where the toolkit has it (no GPU needed): found by the
// documented search, the shim directory skipped, its version reported, and
// a tensor descriptor built through DnnBackend's attribute plumbing (element
// sizes as proto/dnn_attrs.h says) finalizes on NVIDIA's library.
#include "backend/dnn_cuda.h"

#include <cudnn_graph.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace smolvm {
namespace {

TEST(CudaDnnBackendTest, MissingOverrideNamesTheFile) {
  ::setenv("SMOLVM_LIBCUDNN", "/nonexistent/libcudnn.so.9", 1);
  auto b = CudaDnnBackend::Load();
  ::unsetenv("SMOLVM_LIBCUDNN");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("/nonexistent/libcudnn.so.9"), std::string::npos)
      << b.status().ToString();
}

TEST(CudaDnnBackendTest, LoadsTheRealLibraryAndBuildsATensor) {
  // A shim directory first on the path: skipped by its marker.
  std::string dir = ::testing::TempDir() + "/shimdir" + std::to_string(::getpid());
  ::mkdir(dir.c_str(), 0700);
  struct Cleanup {  // on every way out, skips and failures too
    std::string d;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(d, ec);
    }
  } cleanup{dir};
  std::ofstream(dir + "/.smolvm-shim") << "marker\n";
  std::ofstream(dir + "/libcudnn.so.9") << "not a library\n";
  ::setenv("SMOLVM_CUDA_LIBS", dir.c_str(), 1);
  auto b = CudaDnnBackend::Load();
  ::unsetenv("SMOLVM_CUDA_LIBS");
  if (!b.ok()) GTEST_SKIP() << "no libcudnn.so.9 here: " << b.status().ToString();
  DnnVersion v = (*b)->Version();
  EXPECT_GE(v.version, 90000u);
  EXPECT_EQ(v.library.find(dir), std::string::npos) << v.library;
  auto t = (*b)->DescCreate(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  int32_t dt = CUDNN_DATA_FLOAT;
  int64_t dims[3] = {1, 4, 8}, strides[3] = {32, 8, 1}, uid = 7, align = 16;
  bool by_value = false;
  ASSERT_TRUE((*b)->DescSet(*t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt).ok());
  ASSERT_TRUE((*b)->DescSet(*t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 3, dims).ok());
  ASSERT_TRUE((*b)->DescSet(*t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 3, strides).ok());
  ASSERT_TRUE((*b)->DescSet(*t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid).ok());
  ASSERT_TRUE(
      (*b)->DescSet(*t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align).ok());
  ASSERT_TRUE(
      (*b)->DescSet(*t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value).ok());
  Status fin = (*b)->DescFinalize(*t);
  if (!fin.ok()) GTEST_SKIP() << "finalize needs a device here: " << fin.ToString();
  int64_t n = 0, back[3] = {};
  ASSERT_TRUE((*b)->DescGet(*t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 3, &n, back).ok());
  EXPECT_EQ(n, 3);
  EXPECT_EQ(back[1], 8);
  // A library status comes back as kDnnStatusBase + cudnnStatus_t.
  Status again = (*b)->DescSet(*t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  EXPECT_GE(again.code(), proto::kDnnStatusBase + 2000) << again.ToString();
  EXPECT_TRUE((*b)->DescDestroy(*t).ok());
}

}  // namespace
}  // namespace smolvm
