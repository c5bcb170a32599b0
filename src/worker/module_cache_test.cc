#include "worker/module_cache.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "base/sha256.h"

namespace smolvm {
namespace {

class ModuleCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/smolvm-mc-XXXXXX";
    root_ = ::mkdtemp(tmpl);
    auto dir = CreateModuleCacheDir(root_ + "/cuda.sock.modules");
    ASSERT_TRUE(dir.ok()) << dir.status().ToString();
    dir_ = *dir;
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  size_t Files() const {
    size_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) n += e.is_regular_file();
    return n;
  }
  std::string root_, dir_;
};

TEST_F(ModuleCacheTest, TheDirectoryIsFreshAndPrivate) {
  struct stat st;
  ASSERT_EQ(::lstat(dir_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(st.st_uid, ::geteuid());
  // A second one never reuses the first.
  auto again = CreateModuleCacheDir(root_ + "/cuda.sock.modules");
  ASSERT_TRUE(again.ok());
  EXPECT_NE(*again, dir_);
}

TEST_F(ModuleCacheTest, LookupsGoThroughTheTenantsOwnIndex) {
  ModuleCache golden(dir_, 0), stranger(dir_, 0), clone(dir_, 0);
  const std::string image = "an image";
  ASSERT_TRUE(golden.Put(ModuleHash(image), image).ok());
  auto got = golden.Get(ModuleHash(image));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, image);
  // Another tenant: a miss, though the bytes are on disk (deduplicated).
  EXPECT_EQ(stranger.Get(ModuleHash(image)).status().code(), static_cast<int32_t>(Code::kNotFound));
  // A clone learns the golden's entry from the fork manifest.
  ASSERT_TRUE(clone.Remember(ModuleHash(image), golden.Sha256Of(ModuleHash(image))).ok());
  EXPECT_EQ(clone.Get(ModuleHash(image)).value(), image);
  EXPECT_EQ(golden.Sha256Of(ModuleHash(image)), Sha256(image));
  // Storing the same image again adds no file.
  ASSERT_TRUE(stranger.Put(ModuleHash(image), image).ok());
  EXPECT_EQ(Files(), 1u);
  // A wrong image under a hash is refused.
  EXPECT_EQ(golden.Put(ModuleHash("good"), "evil").code(), static_cast<int32_t>(Code::kInvalidArgument));
  EXPECT_FALSE(clone.Remember("short", "x").ok());
}

TEST_F(ModuleCacheTest, AChangedFileIsRefusedAndRemoved) {
  ModuleCache c(dir_, 0);
  const std::string image = "the real image";
  ASSERT_TRUE(c.Put(ModuleHash(image), image).ok());
  std::ofstream(dir_ + "/" + Sha256Hex(image), std::ios::trunc) << "planted";
  auto got = c.Get(ModuleHash(image));
  EXPECT_EQ(got.status().code(), static_cast<int32_t>(Code::kNotFound)) << "a changed image was returned";
  EXPECT_EQ(Files(), 0u);
  // Storing it again repairs it.
  ASSERT_TRUE(c.Put(ModuleHash(image), image).ok());
  EXPECT_EQ(c.Get(ModuleHash(image)).value(), image);
}

TEST_F(ModuleCacheTest, TheLeastRecentlyUsedImagesAreEvictedPastTheBound) {
  ModuleCache c(dir_, 2500);
  std::vector<std::string> images;
  for (char ch : {'a', 'b', 'c'}) images.push_back(std::string(1000, ch));
  ASSERT_TRUE(c.Put(ModuleHash(images[0]), images[0]).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(c.Put(ModuleHash(images[1]), images[1]).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(c.Get(ModuleHash(images[0])).ok());  // a is used again: b is now the oldest
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(c.Put(ModuleHash(images[2]), images[2]).ok());
  EXPECT_EQ(Files(), 2u);
  EXPECT_TRUE(c.Get(ModuleHash(images[0])).ok());
  EXPECT_EQ(c.Get(ModuleHash(images[1])).status().code(), static_cast<int32_t>(Code::kNotFound));
  EXPECT_TRUE(c.Get(ModuleHash(images[2])).ok());
  // An image larger than the bound is used but not kept.
  std::string big(3000, 'z');
  ASSERT_TRUE(c.Put(ModuleHash(big), big).ok());
  EXPECT_EQ(Files(), 2u);
}

}  // namespace
}  // namespace smolvm
