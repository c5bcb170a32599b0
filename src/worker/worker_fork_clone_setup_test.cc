// A pooled worker's setup preload (ForkPreload.setup) and the clone build
// over it (worker_fork_clone_setup.cc), on the fake and, where a GPU is,
// the real backend: what was made ahead is not made again, what changed
// since is, and a worker outside the golden's jail or drawn for another
// golden holds nothing of it. Module loads are counted at the backend.
//
// The cuda instances carry the gpu label and skip, saying why, without a GPU.
#include <cuda.h>
#include <cudnn_graph.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "backend/backend_factory.h"
#include "backend/dnn_backend.h"
#include "backend/fake_backend.h"
#include "backend/forwarding_backend.h"
#include "daemon/machine_budget.h"
#include "proto/dnn_attrs.h"
#include "worker/module_cache.h"
#include "worker/worker.h"
#include "worker/worker_cudnn.h"

#ifdef SMOLVM_HAVE_TEST_FATBIN
#include "test_kernels_fatbin.h"  // src/backend/testdata/test_kernels.cu
#endif

namespace smolvm {
namespace {

// Counts the module loads and unloads that reach the backend.
class CountingBackend final : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  Result<uint64_t> ModuleLoad(std::string_view image) override {
    ++loads;
    return ForwardingBackend::ModuleLoad(image);
  }
  Status ModuleUnload(uint64_t module) override {
    ++unloads;
    return ForwardingBackend::ModuleUnload(module);
  }
  int loads = 0, unloads = 0;
};

std::string I64(int64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }
std::string I32(int32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }

// A finalize of an fp32 [1, 1, n] tensor descriptor, as the cuDNN log keeps it.
proto::ManifestDnnCall TensorFinalize(uint64_t id, int64_t n) {
  proto::DnnAttrs a;
  a.Set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, I32(CUDNN_DATA_FLOAT));
  a.Set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, I64(1) + I64(1) + I64(n));
  a.Set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, I64(n) + I64(n) + I64(1));
  a.Set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, I64(static_cast<int64_t>(id)));
  a.Set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, I64(16));
  return RecordedDnnCall(
      proto::DnnFinalizeRequest{.desc = id, .type = CUDNN_BACKEND_TENSOR_DESCRIPTOR, .attrs = a.Encode()});
}

std::string KernelsImage() {
#ifdef SMOLVM_HAVE_TEST_FATBIN
  return std::string(reinterpret_cast<const char*>(smolvm_test_kernels_fatbin), sizeof smolvm_test_kernels_fatbin);
#else
  return "fake module: smolvm_test_write_u32, smolvm_test_fill_u32";
#endif
}

class SetupPreloadTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const bool cuda = GetParam() == "cuda";
#ifndef SMOLVM_HAVE_TEST_FATBIN
    if (cuda) GTEST_SKIP() << "no test kernels for a GPU (built without nvcc)";
#endif
    auto made = MakeBackend(GetParam());
    if (!made.ok()) GTEST_SKIP() << "no " << GetParam() << " backend: " << made.status().ToString();
    auto counting = std::make_unique<CountingBackend>(std::move(made).value());
    backend_ = counting.get();
    auto dir = CreateModuleCacheDir("/tmp/smolvm-setup-test");
    ASSERT_TRUE(dir.ok()) << dir.status().ToString();
    dir_ = *dir;
    WorkerOptions opts;
    opts.backend = GetParam();
    opts.arena_base = cuda ? 0x5d0000000000ull : 0x5e0000000000ull;
    opts.arena_bytes = 1ull << 32;
    opts.module_cache_dir = dir_;
    worker_ = std::make_unique<Worker>(std::move(counting), opts);
    Status st = worker_->Start();
    if (!st.ok() && cuda) GTEST_SKIP() << "no usable GPU: " << st.ToString();
    ASSERT_TRUE(st.ok()) << st.ToString();
    if (cuda) {
      auto dnn = MakeDnnBackend(&worker_->backend());
      if (!dnn.ok()) GTEST_SKIP() << "no cuDNN: " << dnn.status().ToString();
    }
    // The golden's tenant stored both images (its ModuleLoads).
    ModuleCache golden(dir_, 0);
    for (const std::string& image : {image_a_, image_b_}) {
      ASSERT_TRUE(golden.Put(ModuleHash(image), image).ok());
      sha_[ModuleHash(image)] = golden.Sha256Of(ModuleHash(image));
    }
  }
  void TearDown() override {
    worker_.reset();
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }

  // The golden at its forkpoint: one module and function, a stream, an
  // event, a cuDNN handle on that stream and two finalized tensors.
  proto::ForkManifestBody GoldenSetup() {
    proto::ForkManifestBody b;
    b.modules.push_back({1, ModuleHash(image_a_), sha_[ModuleHash(image_a_)]});
    b.functions.push_back({5, 1, "smolvm_test_write_u32"});
    b.streams.push_back({0x100, 1, 0});
    b.events.push_back({0x200, 2});
    b.dnn_handles.push_back({0x700, 0x100});
    b.dnn_log = {TensorFinalize(1, 64), TensorFinalize(2, 64)};
    return b;
  }
  proto::PreloadDoneRequest Preload(uint64_t golden, const proto::ForkManifestBody& setup, uint32_t jail = 1) {
    proto::ForkPreloadRequest req;
    req.golden = golden;
    req.generation = 1;
    proto::Encoder enc(&req.chunks);
    proto::EncodeFields(enc, proto::ManifestChunkList{});
    req.jail = jail;
    req.setup = proto::EncodeManifest(setup);
    ::testing::internal::CaptureStderr();
    proto::PreloadDoneRequest done = worker_->Preload(req, {});
    preload_log_ = ::testing::internal::GetCapturedStderr();
    return done;
  }
  // A clone build of `golden` from `manifest` (no memory); its log line.
  std::string Build(uint64_t golden, const proto::ForkManifestBody& manifest) {
    proto::CloneBuildRequest req;
    req.session_id = 9;
    req.manifest = proto::EncodeManifest(manifest);
    req.golden = golden;
    ::testing::internal::CaptureStderr();
    auto built = worker_->BuildClone(req, {});
    std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_TRUE(built.ok()) << built.status().ToString() << log;
    return log;
  }
  // A clone build of golden 7 from `manifest`: "built", or why it failed.
  std::string BuildResult(const proto::ForkManifestBody& manifest) {
    proto::CloneBuildRequest req;
    req.session_id = 9;
    req.manifest = proto::EncodeManifest(manifest);
    req.golden = 7;
    ::testing::internal::CaptureStderr();
    auto built = worker_->BuildClone(req, {});
    ::testing::internal::GetCapturedStderr();
    return built.ok() ? std::string("built") : built.status().message();
  }
  // The clone holds the golden's objects under the golden's ids: a function
  // of module 1, and a graph over tensors 1 and 2 on handle 0x700.
  void ExpectGoldensIds() {
    proto::ModuleGetFunctionReply fr;
    EXPECT_TRUE(worker_->Handle(proto::ModuleGetFunctionRequest{.module = 1, .function = 77,
                                                                .name = "smolvm_test_fill_u32"},
                                &fr, nullptr).ok());
    proto::DnnGetAttributeReply gr;
    EXPECT_TRUE(worker_->Handle(proto::DnnGetAttributeRequest{.desc = 2, .name = CUDNN_ATTR_TENSOR_UNIQUE_ID,
                                                              .type = CUDNN_TYPE_INT64, .requested = 1},
                                &gr, nullptr).ok());
    int64_t uid = 0;
    ASSERT_EQ(gr.values.size(), 8u);
    std::memcpy(&uid, gr.values.data(), 8);
    EXPECT_EQ(uid, 2);
  }

  CountingBackend* backend_ = nullptr;
  std::unique_ptr<Worker> worker_;
  std::string dir_;
  std::string image_a_ = KernelsImage();
  std::string image_b_ = KernelsImage() + std::string(256, '\0');  // another image, same kernels
  std::map<std::string, std::string> sha_;
  std::string preload_log_;
};

TEST_P(SetupPreloadTest, ACloneOfThePreloadedGoldenLoadsAndReplaysNothing) {
  proto::PreloadDoneRequest done = Preload(7, GoldenSetup());
  EXPECT_EQ(done.result, 0) << done.message;
  EXPECT_EQ(done.setup_message, "") << preload_log_;
  EXPECT_EQ(done.modules, 1u);
  EXPECT_EQ(done.dnn_calls, 2u);
  EXPECT_EQ(backend_->loads, 1);
  EXPECT_NE(preload_log_.find("modules"), std::string::npos) << preload_log_;
  EXPECT_NE(preload_log_.find("(1 loaded, 0 kept)"), std::string::npos) << preload_log_;
  EXPECT_NE(preload_log_.find("(2 calls replayed, 0 kept)"), std::string::npos) << preload_log_;

  std::string log = Build(7, GoldenSetup());
  EXPECT_NE(log.find("modules"), std::string::npos) << log;
  EXPECT_NE(log.find("(1: 0 loaded, 1 preloaded)"), std::string::npos) << log;
  EXPECT_NE(log.find("(2 calls: 0 replayed, 2 preloaded)"), std::string::npos) << log;
  EXPECT_EQ(backend_->loads, 1) << "the clone build loaded a module again";
  EXPECT_EQ(backend_->unloads, 0);
  ExpectGoldensIds();
}

TEST_P(SetupPreloadTest, ACloneBuildMakesOnlyWhatChangedSinceThePreload) {
  ASSERT_EQ(Preload(7, GoldenSetup()).setup_message, "") << preload_log_;
  // After the ahead: one more module and function, one more tensor.
  proto::ForkManifestBody m = GoldenSetup();
  m.modules.push_back({2, ModuleHash(image_b_), sha_[ModuleHash(image_b_)]});
  m.functions.push_back({6, 2, "smolvm_test_fill_u32"});
  m.dnn_log.push_back(TensorFinalize(3, 128));
  std::string log = Build(7, m);
  EXPECT_NE(log.find("(2: 1 loaded, 1 preloaded)"), std::string::npos) << log;
  EXPECT_NE(log.find("(3 calls: 1 replayed, 2 preloaded)"), std::string::npos) << log;
  EXPECT_EQ(backend_->loads, 2);
  ExpectGoldensIds();
}

TEST_P(SetupPreloadTest, WhatNoLongerMatchesIsMadeAnew) {
  ASSERT_EQ(Preload(7, GoldenSetup()).setup_message, "") << preload_log_;
  // Module 1 is another image now; the log is not a continuation of the
  // preloaded one (tensor 2 first): everything is made again.
  proto::ForkManifestBody m = GoldenSetup();
  m.modules[0] = {1, ModuleHash(image_b_), sha_[ModuleHash(image_b_)]};
  std::swap(m.dnn_log[0], m.dnn_log[1]);
  std::string log = Build(7, m);
  EXPECT_NE(log.find("(1: 1 loaded, 0 preloaded)"), std::string::npos) << log;
  EXPECT_NE(log.find("(2 calls: 2 replayed, 0 preloaded)"), std::string::npos) << log;
  EXPECT_EQ(backend_->loads, 2);
  EXPECT_EQ(backend_->unloads, 1);
  ExpectGoldensIds();
}

TEST_P(SetupPreloadTest, OnlyAWorkerInTheGoldensJailPreloadsAndAnotherGoldensCloneGetsNone) {
  // Outside the golden's jail: the chunks only.
  proto::PreloadDoneRequest done = Preload(7, GoldenSetup(), /*jail=*/0);
  EXPECT_EQ(done.result, 0) << done.message;
  EXPECT_EQ(done.modules, 0u);
  EXPECT_EQ(backend_->loads, 0);
  // Preloaded for golden 7, built as a clone of golden 8: all of 7's goes
  // first, and 8's manifest is made whole.
  ASSERT_EQ(Preload(7, GoldenSetup()).modules, 1u);
  std::string log = Build(8, GoldenSetup());
  EXPECT_NE(log.find("(1: 1 loaded, 0 preloaded)"), std::string::npos) << log;
  EXPECT_NE(log.find("(2 calls: 2 replayed, 0 preloaded)"), std::string::npos) << log;
  EXPECT_EQ(backend_->unloads, 1);
  ExpectGoldensIds();
}

TEST_P(SetupPreloadTest, AFailedOrDroppedPreloadHoldsNothing) {
  // An image the tenant never stored: the setup fails, the chunks stand.
  proto::ForkManifestBody bad = GoldenSetup();
  bad.modules.push_back({3, std::string(16, 'x'), std::string(32, 'y')});
  proto::PreloadDoneRequest done = Preload(7, bad);
  EXPECT_EQ(done.result, 0) << done.message;
  EXPECT_NE(done.setup_message.find("not cached"), std::string::npos) << done.setup_message;
  EXPECT_EQ(done.modules, 0u);
  EXPECT_EQ(backend_->loads, backend_->unloads);
  // A good preload, then the daemon's PreloadDrop (the golden left).
  ASSERT_EQ(Preload(7, GoldenSetup()).modules, 1u);
  worker_->DropPreload();
  EXPECT_EQ(backend_->loads, backend_->unloads);
  // The clone build after all that makes everything itself.
  std::string log = Build(7, GoldenSetup());
  EXPECT_NE(log.find("(1: 1 loaded, 0 preloaded)"), std::string::npos) << log;
  ExpectGoldensIds();
}

// A preload happens before the worker knows its clone machine's budget:
// what it holds is charged when the budget comes, refunded exactly once,
// and when it does not fit the clone build makes it anew under the budget,
// failing as it would have without the preload.
TEST(SetupPreloadBudgetTest, WhatAPreloadHoldsIsChargedToTheBudgetThatComesAfter) {
  for (uint64_t limit : {1ull << 30, 1ull}) {
    SCOPED_TRACE(limit);
    auto budgeted = std::make_unique<BudgetedBackend>(std::make_unique<FakeBackend>());
    BudgetedBackend* b = budgeted.get();
    auto dir = CreateModuleCacheDir("/tmp/smolvm-setup-test");
    ASSERT_TRUE(dir.ok());
    WorkerOptions opts;
    opts.backend = "fake";
    opts.arena_base = 0x5f0000000000ull;
    opts.arena_bytes = 1ull << 32;
    opts.module_cache_dir = *dir;
    Worker worker(std::move(budgeted), opts);
    ASSERT_TRUE(worker.Start().ok());
    const std::string image = KernelsImage();
    ModuleCache golden(*dir, 0);
    ASSERT_TRUE(golden.Put(ModuleHash(image), image).ok());
    proto::ForkManifestBody setup;
    setup.modules.push_back({1, ModuleHash(image), golden.Sha256Of(ModuleHash(image))});
    setup.dnn_handles.push_back({0x700, 0});
    proto::ForkPreloadRequest req;
    req.golden = 7;
    proto::Encoder enc(&req.chunks);
    proto::EncodeFields(enc, proto::ManifestChunkList{});
    req.jail = 1;
    req.setup = proto::EncodeManifest(setup);
    ASSERT_EQ(worker.Preload(req, {}).modules, 1u);
    const uint64_t held = b->module_bytes() + b->workspace_bytes();
    ASSERT_GT(held, 0u);
    auto budget = MachineBudget::Create(limit);
    ASSERT_TRUE(budget.ok());
    b->SetBudget(*budget, 0);
    proto::CloneBuildRequest build;
    build.manifest = proto::EncodeManifest(setup);
    build.golden = 7;
    ::testing::internal::CaptureStderr();
    auto built = worker.BuildClone(build, {});
    std::string log = ::testing::internal::GetCapturedStderr();
    if (limit > held) {
      EXPECT_EQ((*budget)->used(), held);
      EXPECT_EQ(b->unpaid(), 0u);
      ASSERT_TRUE(built.ok()) << built.status().ToString();
      EXPECT_NE(log.find("(1: 0 loaded, 1 preloaded)"), std::string::npos) << log;
      worker.DropPreload();  // as for a session of another golden
      EXPECT_EQ((*budget)->used(), 0u);
    } else {
      EXPECT_FALSE(built.ok()) << log;
      EXPECT_EQ(b->unpaid(), 0u) << "the preload's unpaid bytes were let go";
      EXPECT_EQ((*budget)->used(), 0u);
    }
    std::error_code ec;
    std::filesystem::remove_all(*dir, ec);
  }
}

// Module globals in the manifest (worker_fork_globals.cc): the clone writes
// the golden's bytes where its driver put the global, and a copy at the
// golden's address, or the name resolved again, reaches them there. A global
// of a module the manifest does not load, of another size, or past the
// fork's limit fails the build.
TEST_P(SetupPreloadTest, ModuleGlobalsAreWrittenAndReachedAtTheGoldensAddress) {
  proto::ForkManifestBody m = GoldenSetup();
  std::string bytes(4096, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7);
  const uint64_t golden_addr = 0x7e0000001000;  // not where this context has it
  m.globals.push_back({1, "smolvm_test_global", golden_addr, bytes});
  std::string log = Build(7, m);
  EXPECT_NE(log.find("module global 'smolvm_test_global' (4096 bytes) is at"), std::string::npos) << log;
  proto::MemcpyDtoHReply r;
  ASSERT_TRUE(worker_->Handle(proto::MemcpyDtoHRequest{.src = golden_addr + 100, .bytes = 200, .stream = 0}, &r,
                              nullptr).ok());
  EXPECT_EQ(r.data, bytes.substr(100, 200));
  proto::ModuleGetGlobalReply gr;
  ASSERT_TRUE(worker_->Handle(proto::ModuleGetGlobalRequest{.module = 1, .name = "smolvm_test_global"}, &gr,
                              nullptr).ok());
  EXPECT_EQ(gr.dptr, golden_addr);
  EXPECT_EQ(gr.bytes, 4096u);

  // Unloaded, the module's global is gone at the golden's address too: no
  // copy there reaches the memory the driver took back.
  proto::ModuleUnloadReply ur;
  ASSERT_TRUE(worker_->Handle(proto::ModuleUnloadRequest{.module = 1}, &ur, nullptr).ok());
  EXPECT_FALSE(worker_->Handle(proto::MemcpyDtoHRequest{.src = golden_addr + 100, .bytes = 200, .stream = 0}, &r,
                               nullptr).ok());
}

TEST_P(SetupPreloadTest, ABadModuleGlobalInTheManifestFailsTheCloneBuild) {
  auto build = [&](const proto::ManifestGlobal& g) {
    proto::ForkManifestBody m = GoldenSetup();
    m.globals.push_back(g);
    return BuildResult(m);
  };
  EXPECT_NE(build({3, "smolvm_test_global", 0x1000, std::string(4096, 'x')}).find("unknown module"),
            std::string::npos);
  EXPECT_NE(build({1, "smolvm_test_global", 0x1000, std::string(16, 'x')}).find("has 4096 bytes here, 16"),
            std::string::npos);
  EXPECT_NE(build({1, "smolvm_test_global", 0x1000, std::string((32u << 20) + 1, 'x')}).find("past the fork's limit"),
            std::string::npos);
}

// A function attribute the golden set comes with its manifest; a manifest
// with more attributes for one function than CUDA has is no golden's.
TEST_P(SetupPreloadTest, AFunctionsAttributesComeWithItAndTooManyFailTheBuild) {
  auto build = [&](const proto::ManifestFunction& f) {
    proto::ForkManifestBody m = GoldenSetup();
    m.functions.push_back(f);
    return BuildResult(m);
  };
  const int32_t kShared = CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
  ASSERT_EQ(build({6, 1, "smolvm_test_fill_u32", {{kShared, 100000}}}), "built");
  // The clone's function holds it (the driver's function of that name).
  proto::ModuleGetFunctionReply fr;
  ASSERT_TRUE(worker_->Handle(proto::ModuleGetFunctionRequest{.module = 1, .function = 78,
                                                              .name = "smolvm_test_fill_u32"},
                              &fr, nullptr).ok());
  ASSERT_GT(fr.attrs.size(), static_cast<size_t>(kShared));
  EXPECT_EQ(fr.attrs[kShared], 100000);
  std::vector<proto::ManifestFuncAttr> many(33, proto::ManifestFuncAttr{kShared, 100000});
  EXPECT_NE(build({6, 1, "smolvm_test_fill_u32", many}).find("too many attributes"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Backends, SetupPreloadTest, ::testing::Values("fake", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace smolvm
