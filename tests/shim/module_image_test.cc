// ModuleImage measures an image from its first byte, as cuModuleLoadData
// must: real nvcc outputs (cubin, fatbin, PTX) of the test kernels, each
// placed in a larger buffer so reading past the image would show.
#include "shim/module_image.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

namespace smolvm::shim {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The image followed by junk that must not be counted.
size_t Measured(const std::string& image) {
  std::string buf = image + std::string(4096, '\x7f');
  return ModuleImage(buf.data()).size();
}

TEST(ModuleImageTest, CubinIsMeasuredToTheEndOfItsElf) {
  std::string cubin = Slurp(MODULE_DIR "/driver_kernels.cubin");
  ASSERT_GT(cubin.size(), 64u);
  EXPECT_EQ(Measured(cubin), cubin.size());
}

TEST(ModuleImageTest, FatbinIsMeasuredByItsHeader) {
  std::string fatbin = Slurp(MODULE_DIR "/driver_kernels.fatbin");
  ASSERT_GT(fatbin.size(), 16u);
  EXPECT_EQ(Measured(fatbin), fatbin.size());
  // Through nvcc's wrapper, as __cudaRegisterFatBinary receives it.
  FatbinWrapper w{kFatbinWrapperMagic, 1,
                  reinterpret_cast<const unsigned long long*>(fatbin.data()), nullptr};
  EXPECT_EQ(ModuleImage(&w).size(), fatbin.size());
}

TEST(ModuleImageTest, PtxIsMeasuredToItsNul) {
  std::string ptx = Slurp(MODULE_DIR "/driver_kernels.ptx");
  ASSERT_FALSE(ptx.empty());
  EXPECT_EQ(ModuleImage(ptx.c_str()).size(), ptx.size() + 1);
  EXPECT_TRUE(ModuleImage(nullptr).empty());
}

}  // namespace
}  // namespace smolvm::shim
