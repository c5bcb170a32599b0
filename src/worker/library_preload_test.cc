#include "worker/library_preload.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "backend/fake_backend.h"
#include "daemon/machine_budget.h"
#include "worker/worker.h"

namespace smolvm {
namespace {

uint32_t Mask(const char* preload, const char* cuda_libs) {
  auto r = LibrariesToPreload(preload, cuda_libs);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : ~0u;
}

TEST(LibrariesToPreloadTest, FollowsTheVariableElseATorchInstall) {
  EXPECT_EQ(Mask(nullptr, nullptr), 0u);
  EXPECT_EQ(Mask(nullptr, ""), 0u);
  EXPECT_EQ(Mask(nullptr, "/venv/nvidia/cu13/lib"), kPreloadCublas | kPreloadCudnn);
  EXPECT_EQ(Mask("none", "/venv/nvidia/cu13/lib"), 0u);
  EXPECT_EQ(Mask("cublas", nullptr), kPreloadCublas);
  EXPECT_EQ(Mask("cudnn,cublas", nullptr), kPreloadCublas | kPreloadCudnn);
  auto bad = LibrariesToPreload("cublas,nccl", nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unknown library 'nccl'"), std::string::npos) << bad.status().ToString();
  EXPECT_EQ(LibraryNames(kPreloadCublas | kPreloadCudnn), "cuBLAS, cuDNN");
  EXPECT_EQ(LibraryNames(0), "none");
}

// A pooled worker loads the libraries and nets its handles' charges to zero.
TEST(PreloadLibrariesTest, LoadsBothAndLeavesNoHandleCharged) {
  auto budgeted = std::make_unique<BudgetedBackend>(std::make_unique<FakeBackend>());
  BudgetedBackend* budget = budgeted.get();
  WorkerOptions opts;
  opts.backend = "fake";
  opts.arena_base = 0x5c0000000000ull;
  opts.arena_bytes = 1ull << 32;
  Worker worker(std::move(budgeted), opts);
  ASSERT_TRUE(worker.Start().ok());
  testing::internal::CaptureStderr();
  worker.PreloadLibraries(kPreloadCublas | kPreloadCudnn);
  std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("libraries preloaded (cuBLAS, cuDNN)"), std::string::npos) << log;
  EXPECT_EQ(log.find("failed"), std::string::npos) << log;
  EXPECT_EQ(budget->workspace_bytes(), 0u);
  testing::internal::CaptureStderr();
  worker.PreloadLibraries(0);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

}  // namespace
}  // namespace smolvm
