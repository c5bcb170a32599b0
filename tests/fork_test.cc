// GPU fork end to end on the fake backend: a golden with frozen and private
// memory and a device-resident pointer table forks clones through the CLI
// (the fixture: fork_fixture.h).
#include <cudnn_graph.h>

#include "backend/array_types.h"
#include "fork_fixture.h"
#include "proto/dnn_attrs.h"
#include "proto/lib_status.h"

namespace smolvm::testing {
namespace {

TEST_F(ForkTest, ClonesShareFrozenMemoryReadOnlyAndKeepPrivateWritesApart) {
  Golden g(&golden);
  std::vector<std::unique_ptr<RawClient>> clones;
  auto [rc, out] = Fork(g, 4, "on", &clones);
  ASSERT_EQ(rc, 0) << out << daemon.Log();
  ASSERT_EQ(clones.size(), 4u);
  // One line per clone: the frozen 128 MiB are two shared chunks.
  for (int i = 0; i < 4; ++i)
    EXPECT_NE(out.find("fork: clone " + std::to_string(i) + " of " + std::to_string(::getpid()) +
                       " shared=2 private=2 shared_mib=128.0 private_mib=10.0"),
              std::string::npos)
        << out;
  EXPECT_NE(daemon.Log().find("fork: clone 3 of"), std::string::npos);

  // Same contents at the same addresses, pointer table included.
  for (auto& c : clones) {
    EXPECT_EQ(Bytes(*c, frozen.dptr + 7 * kMiB, kMiB), frozen_bytes.substr(7 * kMiB, kMiB));
    EXPECT_EQ(Bytes(*c, priv.dptr, kPrivate), private_bytes);
    std::string t = Bytes(*c, table.dptr, 16);
    uint64_t ptrs[2];
    std::memcpy(ptrs, t.data(), 16);
    EXPECT_EQ(ptrs[0], frozen.dptr);
    EXPECT_EQ(ptrs[1], priv.dptr);
  }
  // Private writes stay private.
  clones[0]->Queue(MemsetRequest{.dst = priv.dptr, .value = 0x55, .elem_bytes = 1, .count = 4096, .stream = 0});
  EXPECT_EQ(Bytes(*clones[0], priv.dptr, 4096), std::string(4096, '\x55'));
  EXPECT_EQ(Bytes(*clones[1], priv.dptr, 4096), private_bytes.substr(0, 4096));
  // A copy into frozen memory is copy-on-write at the same address.
  clones[1]->Queue(MemcpyHtoDRequest{.dst = frozen.dptr + 100, .stream = 0, .data = "copy-on-write"});
  EXPECT_EQ(Bytes(*clones[1], frozen.dptr + 100, 13), "copy-on-write");
  EXPECT_EQ(Bytes(*clones[2], frozen.dptr + 100, 13), frozen_bytes.substr(100, 13));
  // A kernel writing frozen memory faults in that clone only.
  std::string params(12, '\0');
  uint64_t p = frozen.dptr + 64 * kMiB;
  std::memcpy(params.data(), &p, 8);
  clones[2]->Queue(LaunchKernelRequest{.function = 5, .grid_x = 1, .grid_y = 1, .grid_z = 1, .block_x = 1,
                                       .block_y = 1, .block_z = 1, .shared_bytes = 0, .stream = 0, .params = params});
  CtxSynchronizeReply sr;
  CallResult r = clones[2]->Call(CtxSynchronizeRequest{}, &sr);
  EXPECT_EQ(r.head.result, CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_TRUE(clones[3]->Call(CtxSynchronizeRequest{}, &sr).ok());
  EXPECT_EQ(Bytes(*clones[3], p, 4), frozen_bytes.substr(64 * kMiB, 4));
  // Streams and cuBLAS / cuBLASLt handles were rebuilt under the same ids.
  StreamQueryReply q;
  EXPECT_TRUE(clones[3]->Call(StreamQueryRequest{.stream = 0x100}, &q).ok());
  clones[3]->Queue(BlasSetStreamRequest{.handle = 0x500, .stream = 0x100});
  clones[3]->Queue(LtDestroyRequest{.handle = 0x600});
  PingReply pong;
  CallResult blas = clones[3]->Call(PingRequest{}, &pong);
  EXPECT_EQ(blas.head.deferred, 0) << "cuBLAS handles were not rebuilt in the clone";
  clones[3]->Queue(BlasSetStreamRequest{.handle = 0x501, .stream = 0x100});
  EXPECT_NE(clones[3]->Call(PingRequest{}, &pong).head.deferred, 0) << "an unknown handle must fail";
  for (int i = 0; i < 100 && daemon.Log().find("read-only) chunks") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_NE(daemon.Log().find("smolvm_test_write_u32->0x"), std::string::npos) << daemon.Log();

  // The control arm: --share off shares nothing.
  std::vector<std::unique_ptr<RawClient>> copies;
  auto [rc2, out2] = Fork(g, 1, "off", &copies);
  ASSERT_EQ(rc2, 0) << out2;
  EXPECT_NE(out2.find("fork: clone 4 of"), std::string::npos) << out2;
  EXPECT_NE(out2.find("shared=0 private=4"), std::string::npos) << out2;
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(Bytes(*copies[0], frozen.dptr + 3, 10), frozen_bytes.substr(3, 10));

  auto status = RunCommand(std::string(SMOLVM_BINARY) + " cuda status --json --socket " + daemon.socket());
  auto j = nlohmann::json::parse(status.second);
  int goldens = 0, clones_seen = 0;
  for (auto& s : j["sessions"]) {
    goldens += s["role"] == "golden";
    clones_seen += s["role"] == "clone";
    // What each session holds, as the daemon sees it: the golden's frozen
    // chunks are shared; a share-on clone holds 2 shared chunks.
    if (s["role"] == "golden") {
      EXPECT_EQ(s["shared_chunks"], 2) << s.dump();
    }
    // At its forkpoint: of the 10 MiB each clone copies, 8 MiB + 16 B are in use.
    if (s["role"] == "golden") {
      EXPECT_EQ(s["private_live_mib"], (8.0 * 1048576 + 16) / 1048576) << s.dump();
    }
    if (s["role"] == "clone") {
      EXPECT_TRUE(s["private_live_mib"].is_null()) << s.dump();
    }
    if (s["role"] == "clone" && s["shared_chunks"] != 0) {
      EXPECT_EQ(s["shared_mib"], 128.0) << s.dump();
    }
  }
  EXPECT_EQ(goldens, 1);
  EXPECT_EQ(clones_seen, 5);

  // Release: the golden's forkpoint returns a negative value; clones live on.
  auto [rc3, out3] = RunCommand(Cli(daemon, "release --pid " + std::to_string(::getpid())));
  EXPECT_EQ(rc3, 0) << out3;
  EXPECT_LT(g.Next().clone_index, 0);
  EXPECT_EQ(Bytes(*clones[3], priv.dptr, 16), private_bytes.substr(0, 16));
  // The golden's own copy into shared memory is copy-on-write too.
  golden.Queue(MemcpyHtoDRequest{.dst = frozen.dptr, .stream = 0, .data = "golden"});
  EXPECT_EQ(Bytes(golden, frozen.dptr, 6), "golden");
  EXPECT_EQ(Bytes(*clones[3], frozen.dptr, 6), frozen_bytes.substr(0, 6));
}

// A golden that raised its malloc heap and printf FIFO forks clones with the
// same limits (the manifest's limits, worker_fork_limits.cc): a clone's
// device malloc and printf behave as the golden's; the stack the golden
// left at the worker's 0 stays 0.
TEST_F(ForkTest, ClonesKeepTheGoldensContextLimits) {
  CtxSetLimitReply sl;
  ASSERT_TRUE(golden.Call(CtxSetLimitRequest{.limit = CU_LIMIT_MALLOC_HEAP_SIZE, .value = 32 << 20}, &sl).ok());
  ASSERT_TRUE(golden.Call(CtxSetLimitRequest{.limit = CU_LIMIT_PRINTF_FIFO_SIZE, .value = 2 << 20}, &sl).ok());
  Golden g(&golden);
  std::vector<std::unique_ptr<RawClient>> clones;
  auto [rc, out] = Fork(g, 2, "on", &clones);
  ASSERT_EQ(rc, 0) << out << daemon.Log();
  ASSERT_EQ(clones.size(), 2u);
  for (auto& c : clones) {
    CtxGetLimitReply gl;
    ASSERT_TRUE(c->Call(CtxGetLimitRequest{.limit = CU_LIMIT_MALLOC_HEAP_SIZE}, &gl).ok());
    EXPECT_EQ(gl.value, 32u << 20);
    ASSERT_TRUE(c->Call(CtxGetLimitRequest{.limit = CU_LIMIT_PRINTF_FIFO_SIZE}, &gl).ok());
    EXPECT_EQ(gl.value, 2u << 20);
    ASSERT_TRUE(c->Call(CtxGetLimitRequest{.limit = CU_LIMIT_STACK_SIZE}, &gl).ok());
    EXPECT_EQ(gl.value, 0u);
  }
  auto [rc2, out2] = RunCommand(Cli(daemon, "release --pid " + std::to_string(::getpid())));
  EXPECT_EQ(rc2, 0) << out2;
  EXPECT_LT(g.Next().clone_index, 0);
}

// Module globals: the golden resolved one and wrote it. Each clone's worker
// loads the module anew (on the fake, each worker's global is a mapping of
// its own, so it is elsewhere, as a driver may put it): the clone still
// reads the golden's bytes at the golden's address, writes its own there
// without touching the golden's, and resolving the name again gives the
// golden's address.
TEST_F(ForkTest, ClonesKeepTheGoldensModuleGlobalsAtTheGoldensAddress) {
  ModuleGetGlobalReply gg;
  ASSERT_TRUE(golden.Call(ModuleGetGlobalRequest{.module = 1, .name = "smolvm_test_global"}, &gg).ok());
  ASSERT_EQ(gg.bytes, 4096u);
  const std::string golden_bytes = Pattern(4096, 7);
  golden.Queue(MemcpyHtoDRequest{.dst = gg.dptr, .stream = 0, .data = golden_bytes});
  Golden g(&golden);
  std::vector<std::unique_ptr<RawClient>> clones;
  auto [rc, out] = Fork(g, 2, "on", &clones);
  ASSERT_EQ(rc, 0) << out << daemon.Log();
  ASSERT_EQ(clones.size(), 2u);
  for (size_t i = 0; i < clones.size(); ++i) {
    RawClient& c = *clones[i];
    MemcpyDtoHReply back;
    CallResult res = c.Call(MemcpyDtoHRequest{.src = gg.dptr + 64, .bytes = 1024, .stream = 0}, &back);
    ASSERT_TRUE(res.ok()) << res.head.message << daemon.Log();
    EXPECT_EQ(back.data, golden_bytes.substr(64, 1024)) << "clone " << i;
    ModuleGetGlobalReply again;
    ASSERT_TRUE(c.Call(ModuleGetGlobalRequest{.module = 1, .name = "smolvm_test_global"}, &again).ok());
    EXPECT_EQ(again.dptr, gg.dptr);
    c.Queue(MemsetRequest{.dst = gg.dptr, .value = 0x40u + static_cast<uint32_t>(i), .elem_bytes = 1, .count = 16,
                          .stream = 0});
    ASSERT_TRUE(c.Call(MemcpyDtoHRequest{.src = gg.dptr, .bytes = 16, .stream = 0}, &back).ok());
    EXPECT_EQ(back.data, std::string(16, static_cast<char>(0x40 + i)));
  }
  EXPECT_NE(daemon.Log().find("moved"), std::string::npos) << "the fake's global should sit elsewhere in a clone";
  auto [rc2, out2] = RunCommand(Cli(daemon, "release --pid " + std::to_string(::getpid())));
  EXPECT_EQ(rc2, 0) << out2;
  EXPECT_LT(g.Next().clone_index, 0);
  MemcpyDtoHReply mine;
  ASSERT_TRUE(golden.Call(MemcpyDtoHRequest{.src = gg.dptr, .bytes = 4096, .stream = 0}, &mine).ok());
  EXPECT_EQ(mine.data, golden_bytes);
}

// cuDNN: a golden with a finalized plan (graph, heuristics' engine config,
// plan; the tensors and config destroyed after) forks; the clone executes
// the plan by the same handle and plan ids on its own data.
namespace dnn {
std::string I64(int64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }
std::string I32(int32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }
std::string Tensor(int64_t uid, int64_t n) {  // fp32 [1, 1, n]
  DnnAttrs a;
  a.Set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, I32(CUDNN_DATA_FLOAT));
  a.Set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, I64(1) + I64(1) + I64(n));
  a.Set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, I64(n) + I64(n) + I64(1));
  a.Set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, I64(uid));
  a.Set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, I64(16));
  return a.Encode();
}
std::string Refs(uint32_t name, std::initializer_list<uint64_t> ids, DnnAttrs a = {}) {
  std::string v;
  for (uint64_t id : ids) v += I64(static_cast<int64_t>(id));
  a.Set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, v);
  return a.Encode();
}
}  // namespace dnn

TEST_F(ForkTest, CudnnPlansAreRebuiltInTheCloneUnderTheSameIds) {
  using namespace dnn;
  constexpr int64_t n = 64;
  const uint64_t x = priv.dptr, b = priv.dptr + 4096, y = priv.dptr + 8192;
  auto finalize = [&](RawClient& c, uint64_t id, uint32_t type, const std::string& attrs) {
    DnnFinalizeReply r;
    CallResult res = c.Call(DnnFinalizeRequest{.desc = id, .type = type, .attrs = attrs}, &r);
    EXPECT_TRUE(res.ok()) << "descriptor " << id << ": " << res.head.message;
  };
  DnnCreateReply cr;
  ASSERT_TRUE(golden.Call(DnnCreateRequest{.handle = 0x700}, &cr).ok());
  golden.Queue(DnnSetStreamRequest{.handle = 0x700, .stream = 0x100});
  finalize(golden, 1, CUDNN_BACKEND_TENSOR_DESCRIPTOR, Tensor(1, n));
  finalize(golden, 2, CUDNN_BACKEND_TENSOR_DESCRIPTOR, Tensor(2, n));
  finalize(golden, 3, CUDNN_BACKEND_TENSOR_DESCRIPTOR, Tensor(3, n));
  DnnAttrs pw;
  pw.Set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, I32(CUDNN_POINTWISE_ADD));
  finalize(golden, 4, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, pw.Encode());
  DnnAttrs op;
  DnnAttrs with_handle;
  with_handle.Set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, I64(0x700));
  {
    DnnAttrs a;
    a.Decode(Refs(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, {4}));
    a.Decode(Refs(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, {1}, a));
    a.Decode(Refs(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, {2}, a));
    finalize(golden, 5, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, Refs(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, {3}, a));
  }
  finalize(golden, 6, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, Refs(CUDNN_ATTR_OPERATIONGRAPH_OPS, {5}, with_handle));
  DnnAttrs heur;
  heur.Set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, I32(CUDNN_HEUR_MODE_A));
  finalize(golden, 7, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, Refs(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, {6}, heur));
  DnnGetAttributeReply gr;
  ASSERT_TRUE(golden.Call(DnnGetAttributeRequest{.desc = 7, .name = CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                 .type = CUDNN_TYPE_BACKEND_DESCRIPTOR, .requested = 1,
                                                 .outs = {8}, .out_types = {CUDNN_BACKEND_ENGINECFG_DESCRIPTOR}},
                                &gr).ok());
  EXPECT_EQ(gr.count, 2);  // the fake recommends its engines 0 and 1; the first is filled
  DnnAttrs plan;
  plan.Set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, I64(0x700));
  finalize(golden, 9, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, Refs(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, {8}, plan));
  for (uint64_t id : {1, 2, 3, 4, 5, 6, 7, 8}) golden.Queue(DnnDestroyDescRequest{.desc = id});
  std::vector<float> xs(n), bs(n);
  for (int i = 0; i < n; ++i) xs[i] = 0.25f * i, bs[i] = 100.f + i;
  auto put = [](RawClient& c, uint64_t dst, const std::vector<float>& v) {
    c.Queue(MemcpyHtoDRequest{.dst = dst, .stream = 0x100,
                              .data = std::string_view(reinterpret_cast<const char*>(v.data()), v.size() * 4)});
  };
  auto exec = [&](RawClient& c, uint64_t handle, uint64_t plan_id) {
    c.Queue(DnnExecuteRequest{.handle = handle, .plan = plan_id, .uids = {1, 2, 3}, .ptrs = {x, b, y},
                              .sizes = {0, 0, 0}, .values = {}, .workspace = 0});
  };
  auto result = [&](RawClient& c) {
    std::string out = Bytes(c, y, n * 4);
    std::vector<float> v(n);
    std::memcpy(v.data(), out.data(), out.size());
    return v;
  };
  put(golden, x, xs);
  put(golden, b, bs);
  exec(golden, 0x700, 9);
  std::vector<float> y0 = result(golden);
  for (int i = 0; i < n; ++i) ASSERT_EQ(y0[i], xs[i] + bs[i]) << i;

  Golden g(&golden);
  std::vector<std::unique_ptr<RawClient>> clones;
  auto [rc, out] = Fork(g, 1, "off", &clones);
  EXPECT_EQ(rc, 0) << out << daemon.Log();
  if (clones.size() != 1u) {
    ADD_FAILURE() << "no clone" << daemon.Log();
    RunCommand(Cli(daemon, "release --pid " + std::to_string(::getpid())));
    EXPECT_LT(g.Next().clone_index, 0);
    return;
  }
  RawClient& clone = *clones[0];
  for (float& v : xs) v = -v * 3;
  put(clone, x, xs);  // ordered before the execute that reads it
  exec(clone, 0x700, 9);
  std::vector<float> y1 = result(clone);
  int wrong = 0;  // no ASSERT before the release: the golden's forkpoint thread must end
  for (int i = 0; i < n; ++i) wrong += y1[i] != xs[i] + bs[i];
  EXPECT_EQ(wrong, 0) << "the clone's execute of the golden's plan" << daemon.Log();
  // An id the golden never finalized is refused with cuDNN's status.
  exec(clone, 0x700, 10);
  PingReply pong;
  EXPECT_EQ(clone.Call(PingRequest{}, &pong).head.deferred, kDnnStatusBase + CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED);
  RunCommand(Cli(daemon, "release --pid " + std::to_string(::getpid())));
  EXPECT_LT(g.Next().clone_index, 0);
}

// The golden's shared chunks are imported by pooled workers as soon as it
// reaches its forkpoint; a fork takes them, an unrelated session never holds
// them, and when the golden is gone no worker does.
TEST_F(ForkTest, PooledWorkersPreloadSharedChunksAndLetGoOfThem) {
  Golden g(&golden);
  auto j = WaitStatus(daemon, [](const nlohmann::json& j) { return j.value("preloaded_workers", 0) >= 2; });
  ASSERT_EQ(j.value("preloaded_workers", 0), 2) << j.dump() << daemon.Log();
  for (const auto& w : j["pool"]) EXPECT_EQ(ChunkHandles(w["pid"].get<pid_t>()), 2 * 2) << "2 chunks: fd + mapping";
  EXPECT_NE(daemon.Log().find("fork ahead: session"), std::string::npos);

  std::vector<std::unique_ptr<RawClient>> clones;
  auto [rc, out] = Fork(g, 2, "on", &clones);
  ASSERT_EQ(rc, 0) << out << daemon.Log();
  EXPECT_EQ(Count(daemon.Log(), "preloaded=2 "), 2u) << daemon.Log();
  EXPECT_NE(daemon.Log().find("descriptors exported ahead"), std::string::npos) << daemon.Log();
  for (auto& c : clones) EXPECT_EQ(Bytes(*c, frozen.dptr + 5 * kMiB, 64), frozen_bytes.substr(5 * kMiB, 64));

  // The refilled pool preloads too; an unrelated session served by one of
  // those workers holds none of the golden's chunks.
  j = WaitStatus(daemon, [](const nlohmann::json& j) { return j.value("preloaded_workers", 0) >= 2; });
  ASSERT_EQ(j.value("preloaded_workers", 0), 2) << j.dump();
  RawClient other;
  ASSERT_TRUE(other.Connect(daemon.socket(), kProtoHash, 0, "", 4000010).ok());
  PingReply pong;
  ASSERT_TRUE(other.Call(PingRequest{}, &pong).ok());
  j = DaemonStatus(daemon);
  pid_t other_worker = -1;
  for (const auto& s : j["sessions"])
    if (s["pid"] == 4000010) other_worker = s["worker_pid"].get<pid_t>();
  ASSERT_GT(other_worker, 0) << j.dump();
  EXPECT_EQ(ChunkHandles(other_worker), 0);

  // Released and gone: pooled workers let go; the clones keep what they use.
  EXPECT_EQ(RunCommand(Cli(daemon, "release --pid " + std::to_string(::getpid()))).first, 0);
  EXPECT_LT(g.Next().clone_index, 0);
  golden.Close();
  j = WaitStatus(daemon, [](const nlohmann::json& j) {
    for (const auto& w : j["pool"])
      if (ChunkHandles(w["pid"].get<pid_t>()) != 0) return false;
    return j["sessions"].size() == 3u;
  });
  for (const auto& w : j["pool"]) EXPECT_EQ(ChunkHandles(w["pid"].get<pid_t>()), 0) << j.dump();
  EXPECT_EQ(Bytes(*clones[1], frozen.dptr + 9 * kMiB, 64), frozen_bytes.substr(9 * kMiB, 64));
}

// --share auto shares the chunks that still hold what uploads wrote; a wrong
// guess is a loud fault in the writing clone only.
TEST_F(ForkTest, ShareAutoSharesChunksStillHoldingTheirUploads) {
  // The private buffer is rewritten by a kernel: no longer what was uploaded.
  ModuleGetFunctionReply fr;
  ASSERT_TRUE(golden.Call(ModuleGetFunctionRequest{.module = 1, .function = 6, .name = "smolvm_test_fill_u32"}, &fr).ok());
  std::string params(24, '\0');
  uint64_t p = priv.dptr, n = kPrivate / 4;
  uint32_t v = 77;
  std::memcpy(params.data(), &p, 8);
  std::memcpy(params.data() + 8, &v, 4);
  std::memcpy(params.data() + 16, &n, 8);
  golden.Queue(LaunchKernelRequest{.function = 6, .grid_x = 1, .grid_y = 1, .grid_z = 1, .block_x = 1, .block_y = 1,
                                   .block_z = 1, .shared_bytes = 0, .stream = 0, .params = params});
  std::string expect_priv = Bytes(golden, priv.dptr, kPrivate);
  Golden g(&golden);
  std::vector<std::unique_ptr<RawClient>> clones;
  auto [rc, out] = Fork(g, 2, "auto", &clones);
  ASSERT_EQ(rc, 0) << out << daemon.Log();
  // Shared: the two frozen chunks and the slab holding the uploaded table.
  EXPECT_EQ(Count(out, "shared=3 private=1 "), 2u) << out;
  for (auto& c : clones) {
    EXPECT_EQ(Bytes(*c, frozen.dptr + 3 * kMiB, 4096), frozen_bytes.substr(3 * kMiB, 4096));
    EXPECT_EQ(Bytes(*c, priv.dptr, kPrivate), expect_priv);
  }
  // The table was guessed shared; a kernel writing it faults in that clone.
  std::string wparams(12, '\0');
  std::memcpy(wparams.data(), &table.dptr, 8);
  clones[0]->Queue(LaunchKernelRequest{.function = 5, .grid_x = 1, .grid_y = 1, .grid_z = 1, .block_x = 1,
                                       .block_y = 1, .block_z = 1, .shared_bytes = 0, .stream = 0, .params = wparams});
  CtxSynchronizeReply sr;
  EXPECT_EQ(clones[0]->Call(CtxSynchronizeRequest{}, &sr).head.result, CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_TRUE(clones[1]->Call(CtxSynchronizeRequest{}, &sr).ok());
  std::string t = Bytes(*clones[1], table.dptr, 16);
  uint64_t ptrs[2];
  std::memcpy(ptrs, t.data(), 16);
  EXPECT_EQ(ptrs[0], frozen.dptr);

  // SMOLVM_CUDA_FORK_SHARE_WEIGHTS=0 makes off the default; the flag wins.
  std::vector<std::unique_ptr<RawClient>> more;
  std::pair<int, std::string> cli;
  std::thread t1([&] {
    cli = RunCommand("SMOLVM_CUDA_FORK_SHARE_WEIGHTS=0 " + Cli(daemon, "fork --pid " + std::to_string(::getpid())));
  });
  ForkpointWaitReply order = g.Next();
  auto c = std::make_unique<RawClient>();
  ASSERT_TRUE(c->Connect(daemon.socket(), kProtoHash, 2, order.token, 100100).ok());
  t1.join();
  EXPECT_NE(cli.second.find("shared=0 private=4"), std::string::npos) << cli.second;
  std::thread t2([&] {
    cli = RunCommand("SMOLVM_CUDA_FORK_SHARE_WEIGHTS=0 " +
                     Cli(daemon, "fork --share on --pid " + std::to_string(::getpid())));
  });
  order = g.Next();
  auto c2 = std::make_unique<RawClient>();
  ASSERT_TRUE(c2->Connect(daemon.socket(), kProtoHash, 2, order.token, 100101).ok());
  t2.join();
  // The frozen chunks, and the slab: shared once, read-only for good.
  EXPECT_NE(cli.second.find("shared=3 "), std::string::npos) << cli.second;
  EXPECT_EQ(RunCommand(Cli(daemon, "release --pid " + std::to_string(::getpid()))).first, 0);
}

// Issue 15: a clone is its golden's tenant: its worker drops to the
// golden's uid (and so reads the modules that tenant loaded).
TEST_F(ForkTest, ClonesRunAsTheirGoldensUid) {
  if (::geteuid() != 0) GTEST_SKIP() << "workers drop their uid only under a root daemon";
  Golden g(&golden);
  std::vector<std::unique_ptr<RawClient>> clones;
  auto [rc, out] = Fork(g, 2, "on", &clones);
  ASSERT_EQ(rc, 0) << out << daemon.Log();
  auto uid_of = [](int pid) {
    std::string s = ReadFile("/proc/" + std::to_string(pid) + "/status");
    size_t at = s.find("\nUid:\t");
    return at == std::string::npos ? -1L : std::stol(s.substr(at + 6));
  };
  nlohmann::json status = DaemonStatus(daemon);
  long golden_uid = -1;
  std::vector<long> clone_uids;
  for (const auto& s : status["sessions"]) {
    if (s["role"] == "clone") clone_uids.push_back(uid_of(s["worker_pid"]));
    else golden_uid = uid_of(s["worker_pid"]);
  }
  EXPECT_GT(golden_uid, 0);
  ASSERT_EQ(clone_uids.size(), 2u) << status.dump();
  for (long u : clone_uids) EXPECT_EQ(u, golden_uid);
  ASSERT_TRUE(RunCommand(Cli(daemon, "release --pid " + std::to_string(::getpid()))).first == 0);
  g.Join();
}

TEST_F(ForkTest, StatusReportsContextMemoryPerSession) {
  auto j = DaemonStatus(daemon);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["context_source"], "fixed");
  ASSERT_FALSE(j["sessions"].empty());
  for (const auto& s : j["sessions"]) EXPECT_EQ(s["context_mib"], 32.0) << s.dump();
  auto text = RunCommand(Cli(daemon, "status"));
  EXPECT_NE(text.second.find("CONTEXT_MIB"), std::string::npos) << text.second;
  EXPECT_NE(text.second.find("32.0"), std::string::npos) << text.second;
}

// Issue 34 item 4: a golden holding CUDA arrays or texture / surface
// objects is not forked (their handles would not survive into a clone's
// driver): refused by name before any work; once freed, it forks.
TEST_F(ForkTest, AGoldenHoldingArraysOrTextureObjectsIsRefusedByName) {
  ArrayCreateReply ar;
  ASSERT_TRUE(golden.Call(ArrayCreateRequest{.array = 0x900, .format = CU_AD_FORMAT_FLOAT, .channels = 1,
                                             .width = 16, .height = 16, .depth = 0, .flags = 0},
                          &ar).ok());
  std::vector<uint32_t> tex(kTexDescWords, 0);
  TexObjectCreateReply tr;
  ASSERT_TRUE(golden.Call(TexObjectCreateRequest{.res_kind = CU_RESOURCE_TYPE_ARRAY, .res = 0x900, .tex = tex}, &tr)
                  .ok());
  const std::string session = std::to_string(golden.hello().session_id);
  {
    Golden g(&golden);
    auto [rc, out] = RunCommand(Cli(daemon, "fork --session " + session + " --count 1 --share on"));
    EXPECT_NE(rc, 0);
    EXPECT_NE(out.find("a fork of a session holding CUDA arrays or texture or surface objects is not supported "
                       "(1 arrays, 1 objects): free them before the forkpoint"),
              std::string::npos)
        << out;
    EXPECT_EQ(RunCommand(Cli(daemon, "release --session " + session)).first, 0);
  }
  auto status = DaemonStatus(daemon);
  for (auto& s : status["sessions"]) EXPECT_NE(s["role"], "clone") << "nothing half made";
  std::vector<std::unique_ptr<RawClient>> clones;
  golden.Queue(ObjectDestroyRequest{.object = tr.object, .surface = 0});
  ArrayDestroyReply dr;
  ASSERT_TRUE(golden.Call(ArrayDestroyRequest{.array = 0x900}, &dr).ok());
  Golden g(&golden);
  auto [rc, out] = Fork(g, 1, "on", &clones);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(clones.size(), 1u);
  EXPECT_EQ(RunCommand(Cli(daemon, "release --session " + session)).first, 0);
}

TEST_F(ForkTest, BadRequestsAreRejectedAndNothingIsHalfMade) {
  Golden g(&golden);
  std::string pid = std::to_string(::getpid());
  auto r = RunCommand(Cli(daemon, "fork --pid " + pid + " --count 0"));
  EXPECT_NE(r.first, 0);
  EXPECT_NE(r.second.find("--count must be at least 1"), std::string::npos) << r.second;
  r = RunCommand(Cli(daemon, "fork --pid 4000000 --wait 0.2"));
  EXPECT_NE(r.first, 0);
  EXPECT_NE(r.second.find("no CUDA session of pid 4000000"), std::string::npos) << r.second;
  // A session that never reaches its forkpoint: a timeout, not a hang.
  RawClient busy;
  ASSERT_TRUE(busy.Connect(daemon.socket(), kProtoHash, 0, "", 4000001).ok());
  // (By session: `--pid` names a host pid, and this test's process holds
  // several sessions; issue 29.)
  r = RunCommand(Cli(daemon, "fork --session " + std::to_string(busy.hello().session_id) + " --wait 0.3"));
  EXPECT_NE(r.first, 0);
  EXPECT_NE(r.second.find("did not reach its forkpoint"), std::string::npos) << r.second;
  // More clones than the device can hold: refused before any work.
  r = RunCommand(Cli(daemon, "fork --pid " + pid + " --count 250 --share off"));
  EXPECT_NE(r.first, 0);
  EXPECT_NE(r.second.find("fork needs"), std::string::npos) << r.second;
  EXPECT_NE(r.second.find("MiB free"), std::string::npos) << r.second;
  // Nothing marked frozen in a session: share on is refused with the hint.
  RawClient unmarked;
  ASSERT_TRUE(unmarked.Connect(daemon.socket(), kProtoHash, 0, "", 4000002).ok());
  MemAllocReply a;
  ASSERT_TRUE(unmarked.Call(MemAllocRequest{.bytes = kMiB}, &a).ok());
  Golden g2(&unmarked);
  const std::string unmarked_session = std::to_string(unmarked.hello().session_id);
  r = RunCommand(Cli(daemon, "fork --session " + unmarked_session + " --share on"));
  EXPECT_NE(r.first, 0);
  EXPECT_NE(r.second.find("no memory marked frozen; use --share auto"), std::string::npos) << r.second;
  // Nothing uploaded there either: --share auto finds nothing to share.
  r = RunCommand(Cli(daemon, "fork --session " + unmarked_session + " --share auto"));
  EXPECT_NE(r.first, 0);
  EXPECT_NE(r.second.find("--share auto found no chunk"), std::string::npos) << r.second;
  // No clone session was left behind by any of these.
  auto status = nlohmann::json::parse(RunCommand(Cli(daemon, "status --json")).second);
  for (auto& s : status["sessions"]) EXPECT_NE(s["role"], "clone");
  // A made-up clone token is refused.
  RawClient intruder;
  EXPECT_EQ(intruder.Connect(daemon.socket(), kProtoHash, 2, "00112233445566778899aabbccddeeff").code(),
            static_cast<int32_t>(Code::kPermissionDenied));
  EXPECT_EQ(RunCommand(Cli(daemon, "release --session " + unmarked_session)).first, 0);
  EXPECT_EQ(RunCommand(Cli(daemon, "release --session " + std::to_string(golden.hello().session_id))).first, 0);
}

}  // namespace
}  // namespace smolvm::testing
