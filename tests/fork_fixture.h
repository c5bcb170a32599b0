// The fake-backend fork fixture shared by fork_test.cc and
// fork_release_test.cc: a daemon with a pool of two, a golden session with
// frozen and private memory, a device-resident pointer table, a module,
// a stream and cuBLAS / cuBLASLt handles, and helpers that fork it through
// the CLI and attach each clone as its child would.
#pragma once

#include <cuda.h>
#include <gtest/gtest.h>

#include <dirent.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "worker/module_cache.h"
#include "daemon_client.h"
#include "forkpoint_golden.h"

namespace smolvm::testing {

using namespace smolvm::proto;
inline constexpr uint64_t kMiB = 1ull << 20;

inline std::string Cli(const DaemonProcess& d, const std::string& args) {
  return std::string(SMOLVM_BINARY) + " cuda " + args + " --socket " + d.socket();
}

inline std::string Bytes(RawClient& c, uint64_t src, uint64_t n) {
  MemcpyDtoHReply r;
  CallResult res = c.Call(MemcpyDtoHRequest{.src = src, .bytes = n, .stream = 0}, &r);
  EXPECT_TRUE(res.ok()) << res.head.message;
  return std::string(r.data);
}

inline std::string Pattern(uint64_t n, uint32_t seed) {
  std::string s(n, '\0');
  uint32_t x = seed;
  for (auto& c : s) {
    x = x * 1664525u + 1013904223u;
    c = static_cast<char>(x >> 24);
  }
  return s;
}

// Descriptors and mappings of fake chunks (memfds) a process holds: a chunk's
// memory lives while any process holds either.
inline int ChunkHandles(pid_t pid) {
  int n = 0;
  std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  if (DIR* d = ::opendir(dir.c_str())) {
    while (struct dirent* e = ::readdir(d)) {
      char target[256] = {};
      if (::readlink((dir + "/" + e->d_name).c_str(), target, sizeof target - 1) > 0 &&
          std::string(target).find("smolvm-fake-chunk") != std::string::npos)
        ++n;
    }
    ::closedir(d);
  }
  return n + static_cast<int>(Count(ReadFile("/proc/" + std::to_string(pid) + "/maps"), "smolvm-fake-chunk"));
}

inline nlohmann::json DaemonStatus(const DaemonProcess& d) {
  auto [rc, out] = RunCommand(Cli(d, "status --json"));
  return nlohmann::json::parse(rc == 0 ? out : "", nullptr, false);
}

// Polls the daemon's status until `pred` holds (or 10 s pass).
template <typename Pred>
nlohmann::json WaitStatus(const DaemonProcess& d, Pred pred) {
  nlohmann::json j;
  for (int i = 0; i < 1000; ++i) {
    j = DaemonStatus(d);
    if (!j.is_discarded() && pred(j)) return j;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return j;
}

class ForkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(golden.Connect(daemon.socket()).ok());
    ASSERT_TRUE(golden.Call(MemAllocRequest{.bytes = kFrozen}, &frozen).ok());
    ASSERT_TRUE(golden.Call(MemAllocRequest{.bytes = kPrivate}, &priv).ok());
    ASSERT_TRUE(golden.Call(MemAllocRequest{.bytes = 16}, &table).ok());
    // Uploads larger than one frame go in pieces.
    for (uint64_t off = 0; off < kFrozen; off += 32 * kMiB)
      golden.Queue(MemcpyHtoDRequest{.dst = frozen.dptr + off, .stream = 0,
                                     .data = std::string_view(frozen_bytes).substr(off, 32 * kMiB)});
    golden.Queue(MemcpyHtoDRequest{.dst = priv.dptr, .stream = 0, .data = private_bytes});
    uint64_t ptrs[2] = {frozen.dptr, priv.dptr};
    golden.Queue(MemcpyHtoDRequest{.dst = table.dptr, .stream = 0,
                                   .data = std::string_view(reinterpret_cast<char*>(ptrs), 16)});
    MarkFrozenReply m;
    ASSERT_TRUE(golden.Call(MarkFrozenRequest{.dptr = frozen.dptr, .bytes = kFrozen}, &m).ok());
    std::string image = "fake module";
    ModuleLoadReply lr;
    ASSERT_TRUE(golden.Call(ModuleLoadRequest{.module = 1, .hash = ModuleHash(image), .image = image}, &lr).ok());
    ModuleGetFunctionReply fr;
    ASSERT_TRUE(golden.Call(ModuleGetFunctionRequest{.module = 1, .function = 5, .name = "smolvm_test_write_u32"}, &fr).ok());
    golden.Queue(StreamCreateRequest{.stream = 0x100, .flags = 1, .priority = 0});
    // A cuBLAS handle bound to that stream with a workspace in private memory,
    // and a cuBLASLt handle: clones get them under the same ids.
    BlasCreateReply bc;
    ASSERT_TRUE(golden.Call(BlasCreateRequest{.handle = 0x500}, &bc).ok());
    golden.Queue(BlasSetStreamRequest{.handle = 0x500, .stream = 0x100});
    golden.Queue(BlasSetModeRequest{.handle = 0x500, .what = 1, .value = 1});
    golden.Queue(BlasSetWorkspaceRequest{.handle = 0x500, .dptr = priv.dptr, .bytes = kMiB});
    LtCreateReply lc;
    ASSERT_TRUE(golden.Call(LtCreateRequest{.handle = 0x600}, &lc).ok());
  }

  // Forks `n` clones through the CLI, attaching each as its child would.
  std::pair<int, std::string> Fork(Golden& g, int n, const std::string& share,
                                   std::vector<std::unique_ptr<RawClient>>* clones, const std::string& flags = "") {
    std::pair<int, std::string> cli;
    std::thread t([&] {
      cli = RunCommand(Cli(daemon, "fork --pid " + std::to_string(::getpid()) + " --count " + std::to_string(n) +
                                " --share " + share + flags));
    });
    for (int i = 0; i < n; ++i) {
      ForkpointWaitReply order = g.Next();
      if (order.clone_index < 0) break;
      auto c = std::make_unique<RawClient>();
      Status st = c->Connect(daemon.socket(), kProtoHash, 2, order.token, 100000 + order.clone_index);
      EXPECT_TRUE(st.ok()) << st.ToString();
      clones->push_back(std::move(c));
    }
    t.join();
    return cli;
  }

  static constexpr uint64_t kFrozen = 128 * kMiB;
  static constexpr uint64_t kPrivate = 8 * kMiB;
  DaemonProcess daemon{"fake", 2};
  RawClient golden;
  MemAllocReply frozen, priv, table;
  std::string frozen_bytes = Pattern(kFrozen, 1);
  std::string private_bytes = Pattern(kPrivate, 2);
};

}  // namespace smolvm::testing
