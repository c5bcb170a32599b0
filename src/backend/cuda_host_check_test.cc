// CheckCudaHost on a host without a driver, with a broken one and with the
// mock libcuda (one device): the refusal is one line that names the fix.
#include "backend/cuda_host_check.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

namespace smolvm {
namespace {

namespace fs = std::filesystem;

std::string MockPath() {
  return (fs::read_symlink("/proc/self/exe").parent_path() / "libsmolvm_mock_libcuda.so").string();
}

class CudaHostCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/smolvm-hostcheck-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  void ExpectRefusal(const Status& st, const std::string& why) {
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), static_cast<int32_t>(Code::kUnavailable));
    const std::string& m = st.message();
    EXPECT_NE(m.find("no usable NVIDIA GPU on this host"), std::string::npos) << m;
    EXPECT_NE(m.find(why), std::string::npos) << m;
    EXPECT_NE(m.find("--backend fake"), std::string::npos) << m;
    EXPECT_NE(m.find("SMOLVM_CUDA_BACKEND=fake"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << "one line: " << m;
  }
  std::string dir_;
};

TEST_F(CudaHostCheckTest, NoDriverInstalled) {
  LibcudaSearch s;
  s.ld_library_path = dir_;
  s.ld_so_cache = dir_ + "/no-cache";
  s.system_dirs = {dir_};
  ExpectRefusal(CheckCudaHost(s), "libcuda.so.1, the NVIDIA driver, is not installed");
}

TEST_F(CudaHostCheckTest, OverrideThatDoesNotExist) {
  LibcudaSearch s;
  s.override_path = dir_ + "/libcuda.so.1";
  ExpectRefusal(CheckCudaHost(s), "SMOLVM_LIBCUDA=" + dir_ + "/libcuda.so.1 does not exist");
}

TEST_F(CudaHostCheckTest, DriverThatDoesNotLoad) {
  LibcudaSearch s;
  s.override_path = dir_ + "/libcuda.so.1";
  std::ofstream(s.override_path) << "not a library\n";
  ExpectRefusal(CheckCudaHost(s), "dlopen " + s.override_path);
}

TEST_F(CudaHostCheckTest, DriverWithADevice) {
  LibcudaSearch s;
  s.override_path = MockPath();
  Status st = CheckCudaHost(s);
  EXPECT_TRUE(st.ok()) << st.ToString();
}

// Where a driver is installed (the GPU machine): the probe passes on it.
TEST_F(CudaHostCheckTest, ThisHostsDriver) {
  LibcudaSearch s = LibcudaSearch::FromEnvironment();
  if (!FindLibcuda(s).ok()) GTEST_SKIP() << "no NVIDIA driver on this host";
  Status st = CheckCudaHost(s);
  EXPECT_TRUE(st.ok()) << st.ToString();
}

}  // namespace
}  // namespace smolvm
