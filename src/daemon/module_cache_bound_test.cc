#include "daemon/module_cache_bound.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace smolvm {
namespace {

namespace fs = std::filesystem;

uint64_t Bytes(const std::vector<std::string>& dirs) {
  uint64_t n = 0;
  for (const auto& d : dirs)
    for (const auto& e : fs::directory_iterator(d)) n += e.file_size();
  return n;
}

// Issue 29: the bound was per tenant (N tenants x --module-cache-mib).
TEST(ModuleCacheBound, OneBoundOverEveryTenantsDirectory) {
  char tmpl[] = "/tmp/smolvm-mcb-XXXXXX";
  std::string root = ::mkdtemp(tmpl);
  std::string jail = root + "/jail", own = root + "/daemon";
  fs::create_directories(own);
  for (int uid : {2100000000, 2100000001, 2100000002}) {
    std::string dir = jail + "/u" + std::to_string(uid) + "/modules";
    fs::create_directories(dir);
    for (int i = 0; i < 4; ++i) std::ofstream(dir + "/img" + std::to_string(i)) << std::string(100 << 10, 'x');
  }
  fs::create_directories(jail + "/w123");  // a worker's cache path: not a tenant's
  ModuleCacheBound bound(own, jail, 500 << 10);
  ASSERT_EQ(bound.Dirs().size(), 4u);
  EXPECT_EQ(Bytes(bound.Dirs()), 1200u << 10);
  auto t = ModuleCacheBound::Clock::now();
  EXPECT_TRUE(bound.OnModulesGrew(t));
  EXPECT_LE(Bytes(bound.Dirs()), 500u << 10);
  // At most one sweep a second.
  std::ofstream(own + "/late") << std::string(400 << 10, 'y');
  EXPECT_FALSE(bound.OnModulesGrew(t + std::chrono::milliseconds(500)));
  EXPECT_TRUE(bound.OnModulesGrew(t + std::chrono::seconds(1)));
  EXPECT_LE(Bytes(bound.Dirs()), 500u << 10);
  fs::remove_all(root);
}

}  // namespace
}  // namespace smolvm
