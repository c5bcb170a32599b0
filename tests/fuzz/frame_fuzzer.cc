// Fuzz target: arbitrary bytes as a guest's stream of frames, fed to a real
// Worker on the fake backend exactly as its serve loop does (header checks,
// decode, dispatch, handlers). Nothing may crash, hang or leak.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "backend/fake_backend.h"
#include "daemon/layout.h"
#include "daemon/worker.h"
#include "proto/dispatch.h"

namespace {

smolvm::Worker* TheWorker() {
  static smolvm::Worker* worker = [] {
    smolvm::WorkerOptions o;
    o.backend = "fake";
    o.arena_base = smolvm::kArenaBase;
    o.arena_bytes = 1ull << 32;
    o.host_base = smolvm::kHostBase;
    o.host_bytes = 1ull << 30;
    auto* w = new smolvm::Worker(std::make_unique<smolvm::FakeBackend>(), o);
    smolvm::Status st = w->Start();
    if (!st.ok()) {
      std::fprintf(stderr, "frame fuzzer: worker start failed: %s\n", st.ToString().c_str());
      __builtin_trap();
    }
    return w;
  }();
  return worker;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace smolvm::proto;
  smolvm::Worker* worker = TheWorker();
  size_t at = 0;
  std::string out;
  while (size - at >= kFrameHeaderBytes) {
    FrameHeader h = DecodeHeader(data + at);
    at += kFrameHeaderBytes;
    // The channel's own limits: oversized or fd-claiming frames never reach dispatch.
    if (h.payload_bytes > kMaxPayloadBytes || h.num_fds > 0) break;
    size_t n = std::min<size_t>(h.payload_bytes, size - at);
    std::string payload(reinterpret_cast<const char*>(data + at), n);
    at += n;
    std::vector<smolvm::UniqueFd> fds;
    CallContext ctx;
    ctx.header = &h;
    ctx.fds_in = &fds;
    out.clear();
    (void)Dispatch(*worker, h, payload, &ctx, &out);
  }
  return 0;
}
