// Writes seed inputs for the frame fuzzer: valid frames of every op family.
// Usage: make_seeds DIR
#include <cstdio>
#include <fstream>
#include <string>

#include "backend/blas_backend.h"
#include "proto/frame.h"

using namespace smolvm::proto;

static void Write(const std::string& dir, const std::string& name, const std::string& bytes) {
  std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  std::string d = argv[1], s;
  AppendRequest(&s, PingRequest{}, 1);
  Write(d, "ping", s);
  s.clear();
  AppendRequest(&s, MemAllocRequest{.bytes = 4096}, 1);
  AppendRequest(&s, MemcpyHtoDRequest{.dst = 0x680000000000ull, .stream = 0, .data = "abcdefgh"}, 2);
  AppendRequest(&s, MemcpyDtoHRequest{.src = 0x680000000000ull, .bytes = 8, .stream = 0}, 3);
  AppendRequest(&s, MemsetRequest{.dst = 0x680000000000ull, .value = 1, .elem_bytes = 4, .count = 2, .stream = 0}, 4);
  AppendRequest(&s, MemFreeRequest{.dptr = 0x680000000000ull}, 5);
  Write(d, "memory", s);
  s.clear();
  AppendRequest(&s, StreamCreateRequest{.stream = 0x100, .flags = 1, .priority = 0}, 1);
  AppendRequest(&s, EventCreateRequest{.event = 0x200, .flags = 0}, 2);
  AppendRequest(&s, EventRecordRequest{.event = 0x200, .stream = 0x100}, 3);
  AppendRequest(&s, StreamWaitEventRequest{.stream = 0, .event = 0x200}, 4);
  AppendRequest(&s, EventElapsedTimeRequest{.start = 0x200, .end = 0x200}, 5);
  AppendRequest(&s, StreamDestroyRequest{.stream = 0x100}, 6);
  Write(d, "streams", s);
  s.clear();
  AppendRequest(&s, ModuleLoadRequest{.module = 1, .hash = std::string(16, 'h'), .image = "x"}, 1);
  AppendRequest(&s, ModuleGetFunctionRequest{.module = 1, .function = 2, .name = "smolvm_test_fill_u32"}, 2);
  AppendRequest(&s, LaunchKernelRequest{.function = 2, .grid_x = 1, .grid_y = 1, .grid_z = 1, .block_x = 1, .block_y = 1, .block_z = 1, .params = std::string(24, '\0')}, 3);
  Write(d, "module", s);
  s.clear();
  // Pinned host segments: the memfd rides with the frame (num_fds = 1; the
  // fuzzer attaches one more, unannounced, to frames with an odd seq).
  constexpr uint64_t kHost = 0x5c0000000000ull, kDev = 0x680000000000ull;  // kHostBase, kArenaBase
  AppendRequest(&s, MemAllocRequest{.bytes = 1 << 20}, 2);
  AppendRequest(&s, HostRegisterRequest{.addr = kHost, .bytes = 2 << 20}, 4, 1);
  AppendRequest(&s, MemcpyHtoDHostRequest{.dst = kDev, .src = kHost, .bytes = 4096, .stream = 0}, 6);
  AppendRequest(&s, MemcpyDtoHHostRequest{.dst = kHost + 4096, .src = kDev, .bytes = 4096, .stream = 0}, 8);
  AppendRequest(&s, HostUnregisterRequest{.addr = kHost}, 10);
  AppendRequest(&s, PingRequest{}, 11, 2);
  Write(d, "host", s);
  s.clear();
  AppendRequest(&s, MemAllocRequest{.bytes = 1 << 20}, 2);
  AppendRequest(&s, BlasCreateRequest{.handle = 5}, 4);
  AppendRequest(&s, BlasGemmRequest{.handle = 5, .fn = 0, .transa = 0, .transb = 0, .m = 4, .n = 4, .k = 4,
                                    .a = kDev, .atype = 0, .lda = 4, .b = kDev, .btype = 0, .ldb = 4,
                                    .c = kDev + 4096, .ctype = 0, .ldc = 4, .batch = 1, .compute = 68,
                                    .algo = -1, .alpha = std::string(4, '\0'), .beta = std::string(4, '\0')}, 6);
  AppendRequest(&s, BlasLevel1Request{.handle = 5, .fn = 1, .n = 16, .alpha = std::string(4, '\0'), .x = kDev,
                                      .incx = 1}, 8);
  AppendRequest(&s, PingRequest{}, 10);
  Write(d, "blas", s);
  s.clear();
  AppendRequest(&s, DeviceGetInfoRequest{.device = 0}, 1);
  AppendRequest(&s, MemGetInfoRequest{}, 2);
  AppendRequest(&s, CtxGetLimitRequest{.limit = 0}, 3);
  Write(d, "device", s);
  s.clear();
  // Host functions: a launch, the guest's answer to the worker's call 1.
  AppendRequest(&s, StreamCreateRequest{.stream = 0x100, .flags = 1, .priority = 0}, 1);
  AppendRequest(&s, LaunchHostFuncRequest{.stream = 0x100, .fn = 0x1000, .user = 0x2000, .kind = 0}, 2);
  AppendRequest(&s, HostFuncDoneRequest{.call = 1}, 0);
  AppendRequest(&s, StreamSynchronizeRequest{.stream = 0x100}, 3);
  Write(d, "hostfn", s);
  s.clear();
  // Graphs: capture of a memset and a kernel, explicit nodes, instantiate,
  // launch, update, a cycle, destroy.
  AppendRequest(&s, MemAllocRequest{.bytes = 1 << 20}, 1);
  AppendRequest(&s, StreamCreateRequest{.stream = 0x100, .flags = 1, .priority = 0}, 2);
  AppendRequest(&s, ModuleLoadRequest{.module = 1, .hash = std::string(16, 'h'), .image = "x"}, 3);
  AppendRequest(&s, ModuleGetFunctionRequest{.module = 1, .function = 2, .name = "smolvm_test_fill_u32"}, 4);
  AppendRequest(&s, StreamBeginCaptureRequest{.stream = 0x100, .mode = 0, .graph = 0x300}, 5);
  AppendRequest(&s, MemsetRequest{.dst = kDev, .value = 1, .elem_bytes = 4, .count = 16, .stream = 0x100}, 6);
  AppendRequest(&s, LaunchKernelRequest{.function = 2, .grid_x = 1, .grid_y = 1, .grid_z = 1, .block_x = 1, .block_y = 1,
                                        .block_z = 1, .stream = 0x100, .params = std::string(24, '\0')}, 7);
  AppendRequest(&s, StreamEndCaptureRequest{.stream = 0x100}, 8);
  AppendRequest(&s, GraphCreateRequest{.graph = 0x400}, 9);
  AppendRequest(&s, GraphAddEmptyNodeRequest{.graph = 0x400, .node = 0x401}, 10);
  AppendRequest(&s, GraphAddMemsetNodeRequest{.graph = 0x400, .node = 0x402, .deps = {0x401}, .dst = kDev, .value = 2,
                                              .elem_bytes = 1, .width = 64, .height = 2, .pitch = 128}, 11);
  AppendRequest(&s, GraphAddMemcpyNodeRequest{.graph = 0x400, .node = 0x403, .deps = {0x402}, .dst = kDev + 4096,
                                              .src = kDev, .bytes = 64, .kind = 3}, 12);
  AppendRequest(&s, GraphAddChildNodeRequest{.graph = 0x400, .node = 0x404, .deps = {0x403}, .child = 0x300}, 13);
  AppendRequest(&s, GraphAddDependenciesRequest{.graph = 0x400, .from = {0x404}, .to = {0x401}}, 14);
  AppendRequest(&s, GraphAddMemAllocNodeRequest{.graph = 0x400, .node = 0x405, .deps = {0x404}, .bytes = 4096}, 15);
  AppendRequest(&s, GraphGetNodesRequest{.graph = 0x300}, 16);
  AppendRequest(&s, GraphInstantiateRequest{.exec = 0x500, .graph = 0x400, .flags = 0}, 17);
  AppendRequest(&s, GraphLaunchRequest{.exec = 0x500, .stream = 0x100}, 18);
  AppendRequest(&s, GraphExecUpdateRequest{.exec = 0x500, .graph = 0x300}, 19);
  AppendRequest(&s, GraphCloneRequest{.clone = 0x600, .graph = 0x400}, 20);
  AppendRequest(&s, GraphExecDestroyRequest{.exec = 0x500}, 21);
  AppendRequest(&s, GraphDestroyRequest{.graph = 0x400}, 22);
  AppendRequest(&s, PingRequest{}, 23);
  Write(d, "graphs", s);

  // CUDA arrays, 3-D copies, texture and surface objects (ops 180-186).
  s.clear();
  AppendRequest(&s, MemAllocRequest{.bytes = 1 << 20}, 1);
  AppendRequest(&s, ArrayCreateRequest{.array = 7, .format = 0x20, .channels = 1, .width = 8, .height = 4}, 2);
  AppendRequest(&s, ArrayCreateRequest{.array = 8, .format = 0x20, .channels = 1, .width = 8, .height = 4,
                                       .flags = 2}, 3);
  AppendRequest(&s, Memcpy3DRequest{.dst_kind = 2, .dst = 7, .dst_pos = {0, 0, 0}, .src_kind = 3, .src_pitch = 32,
                                    .src_height = 4, .src_pos = {0, 0, 0}, .extent = {32, 4, 1},
                                    .data = std::string(128, 'a')}, 4);
  AppendRequest(&s, Memcpy3DRequest{.dst_kind = 1, .dst = kDev, .dst_pitch = 64, .dst_height = 4,
                                    .dst_pos = {0, 0, 0}, .src_kind = 2, .src = 7, .src_pos = {0, 0, 0},
                                    .extent = {32, 4, 1}}, 5);
  AppendRequest(&s, Memcpy3DToHostRequest{.src_kind = 2, .src = 7, .src_pos = {8, 1, 0}, .extent = {16, 2, 1}}, 6);
  AppendRequest(&s, TexObjectCreateRequest{.res_kind = 0, .res = 7, .tex = std::vector<uint32_t>(14, 0)}, 7);
  AppendRequest(&s, TexObjectCreateRequest{.res_kind = 2, .res = kDev, .format = 0x20, .channels = 1, .width = 256,
                                           .tex = std::vector<uint32_t>(14, 0)}, 8);
  AppendRequest(&s, SurfObjectCreateRequest{.array = 8}, 9);
  AppendRequest(&s, ObjectDestroyRequest{.object = 1, .surface = 0}, 0);
  AppendRequest(&s, ArrayDestroyRequest{.array = 7}, 10);
  AppendRequest(&s, PingRequest{}, 11);
  Write(d, "arrays", s);
  s.clear();
  // Contexts the program creates: memory, a stream, a module and a launch
  // in one, the primary's kernel there, a destroyed and an unknown one.
  AppendRequest(&s, CtxCreateRequest{.ctx = 1, .flags = 4}, 1);
  AppendRequest(&s, ModuleLoadRequest{.module = 1, .hash = std::string(16, 'h'), .image = "x"}, 2);
  AppendRequest(&s, ModuleGetFunctionRequest{.module = 1, .function = 2, .name = "smolvm_test_fill_u32"}, 3);
  AppendRequest(&s, CtxSetCurrentRequest{.ctx = 1}, 4);
  AppendRequest(&s, MemAllocRequest{.bytes = 4096}, 5);
  AppendRequest(&s, StreamCreateRequest{.stream = 0x100, .flags = 1, .priority = 0}, 6);
  AppendRequest(&s, ModuleLoadRequest{.module = 3, .hash = std::string(16, 'h'), .image = "x"}, 7);
  AppendRequest(&s, ModuleGetFunctionRequest{.module = 3, .function = 4, .name = "smolvm_test_fill_u32"}, 8);
  AppendRequest(&s, LaunchKernelRequest{.function = 2, .grid_x = 1, .grid_y = 1, .grid_z = 1, .block_x = 1, .block_y = 1,
                                        .block_z = 1, .stream = 0x100, .params = std::string(24, '\0')}, 9);
  AppendRequest(&s, FuncSetAttributeRequest{.function = 2, .attr = 8, .value = 65536}, 10);
  AppendRequest(&s, CtxSetCurrentRequest{.ctx = 0}, 11);
  AppendRequest(&s, CtxDestroyRequest{.ctx = 1}, 12);
  AppendRequest(&s, CtxDestroyRequest{.ctx = 1}, 13);
  AppendRequest(&s, CtxSetCurrentRequest{.ctx = 7}, 14);
  AppendRequest(&s, MemAllocRequest{.bytes = 4096}, 15);
  AppendRequest(&s, CtxSetCurrentRequest{.ctx = 0}, 16);
  AppendRequest(&s, PingRequest{}, 17);
  Write(d, "contexts", s);
  return 0;
}
