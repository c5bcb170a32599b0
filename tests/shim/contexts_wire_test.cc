// Contexts the program creates (ops 190-192: CtxCreate, CtxDestroy,
// CtxSetCurrent) straight on the wire, as a hostile guest could send them,
// against `smolvm _cuda-daemon --backend fake`: what is made in a context
// goes with it, handles that were never created, were destroyed already or
// belong to another session are refused, the per-session cap and --gpu-mem
// refuse a guest creating contexts in a loop, its session only failing.
#include <cuda.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "daemon_client.h"
#include "hostile_fixture.h"
#include "worker/context_table.h"
#include "worker/module_cache.h"

namespace smolvm::testing {
namespace {

using namespace smolvm::proto;

constexpr uint64_t kN = 64;

bool Has(const std::vector<uint64_t>& v, uint64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

class ContextsWireTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(c.Connect(daemon.socket()).ok()) << daemon.Log();
    ASSERT_TRUE(other.Connect(daemon.socket()).ok()) << daemon.Log();
  }
  // What the next round trip reports as deferred (the queued ops' first error).
  int32_t Deferred(RawClient& client) {
    PingReply rep;
    CallResult r = client.Call(PingRequest{}, &rep);
    EXPECT_TRUE(r.transport.ok());
    return r.head.deferred;
  }
  int32_t Create(RawClient& client, uint64_t ctx) {
    CtxCreateReply rep;
    CallResult r = client.Call(CtxCreateRequest{.ctx = ctx, .flags = 0}, &rep);
    EXPECT_TRUE(r.transport.ok());
    return r.head.result;
  }
  int32_t Destroy(RawClient& client, uint64_t ctx, CtxDestroyReply* rep) {
    CallResult r = client.Call(CtxDestroyRequest{.ctx = ctx}, rep);
    EXPECT_TRUE(r.transport.ok());
    return r.head.result;
  }
  // Loads the fake's module as `module` and resolves the fill kernel as `function`.
  void Resolve(RawClient& client, uint64_t module, uint64_t function) {
    const std::string image = "the fake loads any image", hash = ModuleHash(image);
    ModuleLoadReply lr;
    CallResult r = client.Call(ModuleLoadRequest{.module = module, .hash = hash, .image = image}, &lr);
    ASSERT_TRUE(r.ok()) << r.head.message;
    ModuleGetFunctionReply fr;
    r = client.Call(ModuleGetFunctionRequest{.module = module, .function = function, .name = "smolvm_test_fill_u32"},
                    &fr);
    ASSERT_TRUE(r.ok()) << r.head.message;
  }
  void Fill(RawClient& client, uint64_t function, uint64_t dptr, uint32_t value, uint64_t stream = 0) {
    params.assign(24, '\0');
    std::memcpy(params.data(), &dptr, 8);
    std::memcpy(params.data() + 8, &value, 4);
    std::memcpy(params.data() + 16, &kN, 8);
    client.Queue(LaunchKernelRequest{.function = function, .grid_x = 1, .grid_y = 1, .grid_z = 1, .block_x = 64,
                                     .block_y = 1, .block_z = 1, .shared_bytes = 0, .stream = stream,
                                     .params = params});
  }
  // The u32 at dptr + 4 i, read in whatever context is current.
  uint32_t At(RawClient& client, uint64_t dptr, uint64_t i) {
    MemcpyDtoHReply rep;
    CallResult r = client.Call(MemcpyDtoHRequest{.src = dptr + 4 * i, .bytes = 4, .stream = 0}, &rep);
    EXPECT_TRUE(r.ok()) << r.head.message;
    uint32_t v = 0;
    if (rep.data.size() == 4) std::memcpy(&v, rep.data.data(), 4);
    return v;
  }
  DaemonProcess daemon{"fake", 2};
  RawClient c, other;
  std::string params;
};

// Allocations, streams, events, modules and launches in a created context;
// its memory is reachable from the primary (unified addressing); all of it
// goes with cuCtxDestroy, after which its handles fail.
TEST_F(ContextsWireTest, WhatIsMadeInAContextRunsThereAndGoesWithIt) {
  // The primary's own buffer and module, before any context is created.
  MemAllocReply m;
  ASSERT_TRUE(c.Call(MemAllocRequest{.bytes = kN * 4}, &m).ok());
  const uint64_t primary_buf = m.dptr;
  Resolve(c, 0x10, 0x11);

  ASSERT_EQ(Create(c, 1), 0) << daemon.Log();
  c.Queue(CtxSetCurrentRequest{.ctx = 1});
  ASSERT_TRUE(c.Call(MemAllocRequest{.bytes = kN * 4}, &m).ok());
  const uint64_t buf = m.dptr;
  c.Queue(StreamCreateRequest{.stream = 0x30, .flags = 0, .priority = 0});
  c.Queue(EventCreateRequest{.event = 0x40, .flags = 0});
  Resolve(c, 0x20, 0x21);            // a module of context 1
  Fill(c, 0x21, buf, 100, 0x30);     // its own kernel on its own stream
  Fill(c, 0x11, primary_buf, 500);   // the primary's kernel, run in context 1 (an instance loaded there)
  StreamSynchronizeReply ss;
  ASSERT_TRUE(c.Call(StreamSynchronizeRequest{.stream = 0x30}, &ss).ok());
  EXPECT_EQ(Deferred(c), 0);
  EXPECT_EQ(At(c, buf, 5), 105u);
  EXPECT_EQ(At(c, primary_buf, 7), 507u);
  // Back in the primary: context 1's memory reads as natively under unified addressing.
  c.Queue(CtxSetCurrentRequest{.ctx = 0});
  EXPECT_EQ(At(c, buf, 9), 109u);

  CtxDestroyReply d;
  ASSERT_EQ(Destroy(c, 1, &d), 0);
  EXPECT_TRUE(Has(d.freed, buf));
  EXPECT_FALSE(Has(d.freed, primary_buf));
  EXPECT_TRUE(Has(d.streams, 0x30));
  EXPECT_TRUE(Has(d.events, 0x40));
  EXPECT_TRUE(Has(d.modules, 0x20));
  EXPECT_FALSE(Has(d.modules, 0x10));
  // Its handles are gone; the primary's still work.
  MemFreeReply f;
  EXPECT_EQ(c.Call(MemFreeRequest{.dptr = buf}, &f).head.result, CUDA_ERROR_INVALID_VALUE);
  EXPECT_NE(c.Call(StreamSynchronizeRequest{.stream = 0x30}, &ss).head.result, 0);
  Fill(c, 0x21, primary_buf, 1);
  EXPECT_NE(Deferred(c), 0);
  Fill(c, 0x11, primary_buf, 900);
  EXPECT_EQ(Deferred(c), 0);
  EXPECT_EQ(At(c, primary_buf, 3), 903u);
  EXPECT_TRUE(c.Call(MemFreeRequest{.dptr = primary_buf}, &f).ok());
}

// A kernel attribute set while a created context is current is its
// instance's there, as the runtime sets it on the current context's kernel.
TEST_F(ContextsWireTest, AKernelAttributeSetInAContextIsItsInstancesThere) {
  MemAllocReply m;
  ASSERT_TRUE(c.Call(MemAllocRequest{.bytes = kN * 4}, &m).ok());
  Resolve(c, 0x10, 0x11);
  ASSERT_EQ(Create(c, 1), 0);
  c.Queue(CtxSetCurrentRequest{.ctx = 1});
  FuncSetAttributeReply fa;
  ASSERT_TRUE(c.Call(FuncSetAttributeRequest{.function = 0x11, .attr = CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                             .value = 100000},
                     &fa)
                  .ok());
  auto launch = [&](RawClient& client) {
    params.assign(24, '\0');
    uint32_t value = 1;
    std::memcpy(params.data(), &m.dptr, 8);
    std::memcpy(params.data() + 8, &value, 4);
    std::memcpy(params.data() + 16, &kN, 8);
    client.Queue(LaunchKernelRequest{.function = 0x11, .grid_x = 1, .grid_y = 1, .grid_z = 1, .block_x = 64,
                                     .block_y = 1, .block_z = 1, .shared_bytes = 100000, .stream = 0,
                                     .params = params});
    return Deferred(client);
  };
  EXPECT_EQ(launch(c), 0);
  c.Queue(CtxSetCurrentRequest{.ctx = 0});
  EXPECT_EQ(launch(c), CUDA_ERROR_INVALID_VALUE);  // the primary's kernel kept its 48 KiB
}

// Hostile handles: id 0 (the primary), an id in use, a context destroyed
// twice, one never created, another session's: each refused, that call
// only failing.
TEST_F(ContextsWireTest, HostileHandlesAreRefused) {
  EXPECT_EQ(Create(c, 0), CUDA_ERROR_INVALID_VALUE);
  CtxCreateReply cr;
  EXPECT_EQ(c.Call(CtxCreateRequest{.ctx = 6, .flags = 0x100}, &cr).head.result, CUDA_ERROR_INVALID_VALUE);
  CallResult dump = c.Call(CtxCreateRequest{.ctx = 6, .flags = CU_CTX_COREDUMP_ENABLE}, &cr);
  EXPECT_EQ(dump.head.result, CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_NE(dump.head.message.find("core dump flags is not supported"), std::string::npos) << dump.head.message;
  EXPECT_EQ(c.Call(CtxCreateRequest{.ctx = 6, .flags = CU_CTX_SCHED_BLOCKING_SYNC}, &cr).head.result, 0);
  ASSERT_EQ(Create(c, 5), 0);
  EXPECT_EQ(Create(c, 5), CUDA_ERROR_INVALID_VALUE);
  CtxDestroyReply d;
  EXPECT_EQ(Destroy(c, 0, &d), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(Destroy(c, 77, &d), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(Destroy(c, ~0ull, &d), CUDA_ERROR_INVALID_CONTEXT);
  // Another session's handle: its ids are its own, context 5 is not one.
  EXPECT_EQ(Destroy(other, 5, &d), CUDA_ERROR_INVALID_CONTEXT);
  other.Queue(CtxSetCurrentRequest{.ctx = 5});
  EXPECT_EQ(Deferred(other), CUDA_ERROR_INVALID_CONTEXT);
  // Until it names a valid one, its ops that need a context fail by name...
  MemAllocReply m;
  CallResult r = other.Call(MemAllocRequest{.bytes = 4096}, &m);
  EXPECT_EQ(r.head.result, CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_NE(r.head.message.find("MemAlloc"), std::string::npos) << r.head.message;
  other.Queue(CtxSetCurrentRequest{.ctx = 0});
  EXPECT_TRUE(other.Call(MemAllocRequest{.bytes = 4096}, &m).ok());
  // ... and c's context 5 is untouched.
  c.Queue(CtxSetCurrentRequest{.ctx = 5});
  ASSERT_TRUE(c.Call(MemAllocRequest{.bytes = 4096}, &m).ok());
  EXPECT_EQ(Destroy(c, 5, &d), 0);
  EXPECT_TRUE(Has(d.freed, m.dptr));
  EXPECT_EQ(Destroy(c, 5, &d), CUDA_ERROR_INVALID_CONTEXT);  // twice
  // Destroyed while current: the worker is back in the primary.
  EXPECT_TRUE(c.Call(MemAllocRequest{.bytes = 4096}, &m).ok());
  c.Queue(CtxSetCurrentRequest{.ctx = 5});  // a destroyed context named again
  EXPECT_EQ(Deferred(c), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(c.Call(MemAllocRequest{.bytes = 4096}, &m).head.result, CUDA_ERROR_INVALID_CONTEXT);
}

// What a created context cannot run here is refused by name while it is
// current; the primary runs it.
TEST_F(ContextsWireTest, OpsACreatedContextCannotTakeAreRefusedByName) {
  ASSERT_EQ(Create(c, 3), 0);
  c.Queue(CtxSetCurrentRequest{.ctx = 3});
  CtxSetLimitReply sl;
  CallResult r = c.Call(CtxSetLimitRequest{.limit = CU_LIMIT_PRINTF_FIFO_SIZE, .value = 1 << 20}, &sl);
  EXPECT_EQ(r.head.result, CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_NE(r.head.message.find("CtxSetLimit is not supported while a context the program created"), std::string::npos)
      << r.head.message;
  c.Queue(GraphCreateRequest{.graph = 9});
  EXPECT_EQ(Deferred(c), CUDA_ERROR_NOT_SUPPORTED);
  // Ops a guest may not send, or that no table has, are refused as anywhere
  // (the frame fuzzer found an unknown op here ending the worker).
  c.Queue(DeviceOutputRequest{.fd = 1, .text = "not the guest's to send"});
  EXPECT_EQ(Deferred(c), static_cast<int32_t>(Code::kUnknownOp));
  c.Queue(CtxSetCurrentRequest{.ctx = 42});  // invalid: every op needing a context fails
  EXPECT_EQ(Deferred(c), CUDA_ERROR_INVALID_CONTEXT);
  std::string unknown(kFrameHeaderBytes, '\0');  // SYNC, never queued: answered at once
  EncodeHeader({.payload_bytes = 0, .op = 4242, .flags = 0, .seq = 77}, reinterpret_cast<uint8_t*>(unknown.data()));
  ASSERT_TRUE(c.channel().Write(unknown).ok());
  FrameHeader h;
  std::string payload;
  std::vector<UniqueFd> fds;
  ASSERT_TRUE(c.channel().ReadFrame(&h, &payload, &fds).ok());
  ReplyHead head;
  PingReply pr;
  ASSERT_TRUE(DecodeReply(payload, &head, &pr).ok());
  EXPECT_EQ(head.result, static_cast<int32_t>(Code::kUnknownOp));
  c.Queue(CtxSetCurrentRequest{.ctx = 0});
  EXPECT_EQ(Deferred(c), 0);
  c.Queue(CtxSetCurrentRequest{.ctx = 0});
  EXPECT_TRUE(c.Call(CtxSetLimitRequest{.limit = CU_LIMIT_PRINTF_FIFO_SIZE, .value = 1 << 20}, &sl).ok());
}

// A guest creating contexts in a loop stops at the session's cap; the
// session goes on, another session is not affected, a destroy frees a place.
TEST_F(ContextsWireTest, ContextsPerSessionAreCapped) {
  const uint32_t cap = ContextTable::kMaxContexts;
  for (uint64_t id = 1; id <= cap; ++id) ASSERT_EQ(Create(c, id), 0) << id;
  CtxCreateReply rep;
  CallResult r = c.Call(CtxCreateRequest{.ctx = 100, .flags = 0}, &rep);
  EXPECT_EQ(r.head.result, CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_NE(r.head.message.find("at most " + std::to_string(cap) + " contexts of its own"), std::string::npos)
      << r.head.message;
  for (int i = 0; i < 50; ++i) EXPECT_EQ(Create(c, 200 + i), CUDA_ERROR_OUT_OF_MEMORY);
  MemAllocReply m;
  EXPECT_TRUE(c.Call(MemAllocRequest{.bytes = 4096}, &m).ok());
  EXPECT_EQ(Create(other, 1), 0);
  CtxDestroyReply d;
  ASSERT_EQ(Destroy(c, 2, &d), 0);
  EXPECT_EQ(Create(c, 100), 0);
}

// docs/fork.md: a clone gets none of a golden's own contexts, so a fork is
// refused by name while the golden holds some; the golden goes on and, once
// it destroyed them, forks.
TEST_F(ContextsWireTest, AForkIsRefusedWhileTheGoldenHoldsContextsOfItsOwn) {
  MemAllocReply m;
  ASSERT_TRUE(c.Call(MemAllocRequest{.bytes = 2 << 20}, &m).ok());
  ASSERT_EQ(Create(c, 1), 0);
  const std::string session = std::to_string(c.hello().session_id);
  auto cli = [&](const std::string& args) {
    return RunCommand(std::string(SMOLVM_BINARY) + " cuda " + args + " --session " + session + " --socket " +
                      daemon.socket());
  };
  {
    Golden g(&c);
    auto [rc, out] = cli("fork --count 1 --share off");
    EXPECT_NE(rc, 0) << out;
    EXPECT_NE(out.find("a fork of a session holding 1 context(s) of its own (cuCtxCreate) is not supported"),
              std::string::npos)
        << out << daemon.Log();
    EXPECT_EQ(cli("release").first, 0);
    EXPECT_LT(g.Next().clone_index, 0);
  }
  CtxDestroyReply d;
  ASSERT_EQ(Destroy(c, 1, &d), 0);
  Golden g(&c);
  std::pair<int, std::string> forked;
  std::thread t([&] { forked = cli("fork --count 1 --share off"); });
  ForkpointWaitReply order = g.Next();
  RawClient clone;
  if (order.clone_index >= 0) {
    EXPECT_TRUE(clone.Connect(daemon.socket(), kProtoHash, 2, order.token, 100000 + order.clone_index).ok());
  }
  t.join();
  EXPECT_EQ(forked.first, 0) << forked.second;
  EXPECT_EQ(Create(clone, 1), 0);  // the clone's own
  EXPECT_EQ(cli("release").first, 0);
  EXPECT_LT(g.Next().clone_index, 0);
}

// Each created context is charged to the machine's --gpu-mem (what a
// context costs, 32 MiB on the fake): past it, CtxCreate is refused with
// CUDA_ERROR_OUT_OF_MEMORY and the session goes on; a destroy refunds it.
TEST(ContextsGpuMem, EachContextIsChargedToGpuMem) {
  DaemonProcess d(DaemonArgs{.pool = 1});
  Machine a;
  ASSERT_TRUE(Attach(d, &a, "a", 112).ok());  // the worker's context (32) and two more
  RawClient c;
  ASSERT_TRUE(c.Connect(a.socket).ok()) << d.Log();
  CtxCreateReply rep;
  ASSERT_TRUE(c.Call(CtxCreateRequest{.ctx = 1, .flags = 0}, &rep).ok()) << d.Log();
  ASSERT_TRUE(c.Call(CtxCreateRequest{.ctx = 2, .flags = 0}, &rep).ok());
  CallResult r = c.Call(CtxCreateRequest{.ctx = 3, .flags = 0}, &rep);
  EXPECT_EQ(r.head.result, CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_NE(r.head.message.find("cuCtxCreate"), std::string::npos) << r.head.message;
  MemAllocReply m;
  EXPECT_TRUE(c.Call(MemAllocRequest{.bytes = 4 << 20}, &m).ok());
  // Status counts them with the worker's context, not as chunks.
  nlohmann::json charged;
  for (int i = 0; i < 300; ++i) {
    const nlohmann::json status = StatusOf(d);
    for (const auto& s : status["sessions"])
      if (s["session"] == c.hello().session_id) charged = s["gpu_mem_charged"];
    if (!charged.is_null() && charged["chunks_mib"] == 4.0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(charged["context_mib"], 96.0) << charged.dump();
  EXPECT_EQ(charged["chunks_mib"], 4.0) << charged.dump();
  // 32 + 2 x 32 + 4 of 112: a third context does not fit until one goes.
  CtxDestroyReply dr;
  ASSERT_TRUE(c.Call(CtxDestroyRequest{.ctx = 1}, &dr).ok());
  EXPECT_TRUE(c.Call(CtxCreateRequest{.ctx = 3, .flags = 0}, &rep).ok());
}

}  // namespace
}  // namespace smolvm::testing
