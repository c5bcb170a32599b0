// Where libcuda is looked for, and how CudaBackend behaves without one. Runs
// everywhere (no GPU needed).
#include "backend/cuda_driver.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "backend/cuda_backend.h"

namespace smolvm {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "cuda_driver_test.XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string Make(const std::string& rel) {
    fs::path p = fs::path(path_) / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << "x";
    return p.string();
  }
  std::string Dir(const std::string& rel) {
    fs::create_directories(fs::path(path_) / rel);
    return (fs::path(path_) / rel).string();
  }

 private:
  std::string path_;
};

LibcudaSearch EmptySearch() {
  LibcudaSearch s;
  s.ld_so_cache = "/nonexistent/ld.so.cache";
  s.system_dirs.clear();
  return s;
}

TEST(LibcudaSearchTest, LdLibraryPathComesBeforeSystemDirsAndSkipsShims) {
  TempDir t;
  std::string shim = t.Dir("shim");
  t.Make("shim/.smolvm-shim");
  t.Make("shim/libcuda.so.1");
  std::string a = t.Dir("a");
  std::string sys = t.Dir("sys");
  LibcudaSearch s = EmptySearch();
  s.ld_library_path = shim + "::" + a;
  s.system_dirs = {sys, shim};
  std::vector<std::string> c = LibcudaCandidates(s);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0], a + "/libcuda.so.1");
  EXPECT_EQ(c[1], sys + "/libcuda.so.1");

  // The shim's copy exists but is never chosen; the system one is.
  std::string real = t.Make("sys/libcuda.so.1");
  auto found = FindLibcuda(s);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(found.value(), real);
}

TEST(LibcudaSearchTest, NotFoundNamesEveryPlaceTried) {
  TempDir t;
  LibcudaSearch s = EmptySearch();
  s.system_dirs = {t.Dir("x"), t.Dir("y")};
  auto found = FindLibcuda(s);
  ASSERT_FALSE(found.ok());
  EXPECT_EQ(found.status().code(), static_cast<int32_t>(Code::kUnavailable));
  EXPECT_NE(found.status().message().find("/x/libcuda.so.1"), std::string::npos);
  EXPECT_NE(found.status().message().find("/y/libcuda.so.1"), std::string::npos);
  EXPECT_NE(found.status().message().find("SMOLVM_LIBCUDA"), std::string::npos);
}

TEST(LibcudaSearchTest, OverrideWinsAndIsNotSecondGuessed) {
  TempDir t;
  std::string mine = t.Make("mine/libcuda.so.1");
  LibcudaSearch s = EmptySearch();
  s.override_path = mine;
  s.system_dirs = {t.Dir("other")};
  t.Make("other/libcuda.so.1");
  EXPECT_EQ(FindLibcuda(s).value(), mine);
  s.override_path = mine + ".missing";
  EXPECT_FALSE(FindLibcuda(s).ok());
}

// A cache in glibc's new format with two entries, written by hand.
TEST(LdSoCacheTest, ParsesNewFormat) {
  TempDir t;
  std::string path = t.Dir("c") + "/ld.so.cache";
  std::string strings;
  auto add = [&](const std::string& s) {
    uint32_t off = 48 + 2 * 24 + strings.size();
    strings += s + '\0';
    return off;
  };
  uint32_t k1 = add("libfoo.so.1"), v1 = add("/lib/libfoo.so.1");
  uint32_t k2 = add("libcuda.so.1"), v2 = add("/drv/libcuda.so.1");
  std::string header = "glibc-ld.so.cache1.1";
  header.resize(48, '\0');
  uint32_t nlibs = 2, len = strings.size();
  std::memcpy(&header[20], &nlibs, 4);
  std::memcpy(&header[24], &len, 4);
  std::string entries(48, '\0');
  for (auto [i, k, v] : {std::tuple{0, k1, v1}, std::tuple{1, k2, v2}}) {
    std::memcpy(&entries[i * 24 + 4], &k, 4);
    std::memcpy(&entries[i * 24 + 8], &v, 4);
  }
  std::ofstream(path, std::ios::binary) << header << entries << strings;
  EXPECT_EQ(LdSoCacheLookup(path, "libcuda.so.1"), std::vector<std::string>{"/drv/libcuda.so.1"});
  EXPECT_TRUE(LdSoCacheLookup(path, "libbar.so.1").empty());
  EXPECT_TRUE(LdSoCacheLookup(path + ".missing", "libcuda.so.1").empty());
}

TEST(LdSoCacheTest, FindsLibcInTheRealCache) {
  if (!fs::exists("/etc/ld.so.cache")) GTEST_SKIP() << "no /etc/ld.so.cache here";
  auto paths = LdSoCacheLookup("/etc/ld.so.cache", "libc.so.6");
  ASSERT_FALSE(paths.empty());
  EXPECT_NE(paths[0].find("libc.so.6"), std::string::npos);
}

TEST(CudaBackendNoDriverTest, CallsBeforeInitAreNotInitialized) {
  CudaBackend b(EmptySearch());
  uint64_t f = 0, t = 0;
  EXPECT_EQ(b.MemGetInfo(&f, &t).code(), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(b.StreamCreate(0, 0).status().code(), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(b.Granularity(), 0u);
}

TEST(CudaBackendNoDriverTest, InitWithoutLibcudaIsUnavailable) {
  CudaBackend b(EmptySearch());
  Status s = b.Init(0);
  EXPECT_EQ(s.code(), static_cast<int32_t>(Code::kUnavailable));
  EXPECT_NE(s.message().find("libcuda.so.1"), std::string::npos) << s.message();
  EXPECT_EQ(b.DeviceCount().status().code(), static_cast<int32_t>(Code::kUnavailable));
  EXPECT_EQ(b.LibcudaPath(), "");
}

// The toolkit's stub libcuda exports every symbol but answers
// CUDA_ERROR_STUB_LIBRARY: proof that every entry point resolves by name and
// that driver errors come back as their CUresult with the call's name.
TEST(CudaBackendNoDriverTest, StubLibraryResolvesEveryEntryPoint) {
  const std::string stub = "/usr/local/cuda/lib64/stubs/libcuda.so";
  if (!fs::exists(stub)) GTEST_SKIP() << "no CUDA toolkit stub at " << stub;
  LibcudaSearch s = EmptySearch();
  s.override_path = stub;
  auto driver = CudaDriver::Load(s);
  ASSERT_TRUE(driver.ok()) << driver.status().ToString();
  EXPECT_NE(driver.value()->cuLaunchKernel, nullptr);
  CudaBackend b(s);
  Status init = b.Init(0);
  EXPECT_EQ(init.code(), CUDA_ERROR_STUB_LIBRARY) << init.ToString();
  EXPECT_EQ(init.message().rfind("cuInit: ", 0), 0u) << init.message();
  EXPECT_EQ(b.LibcudaPath(), stub);
}

}  // namespace
}  // namespace smolvm
