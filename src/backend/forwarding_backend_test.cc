// ForwardingBackend against a recording fake: every GpuBackend virtual, called
// through the forwarder, reaches the inner backend with the same arguments
// and returns what the inner backend returned (values, out-parameters and
// errors alike). The list of virtuals is read from gpu_backend.h, so a new
// virtual without a case here fails the test.
#include "backend/forwarding_backend.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <regex>
#include <set>
#include <sstream>

namespace smolvm {
namespace {

// An inner code no real backend uses, so a forwarded error is recognisably the inner's.
constexpr int32_t kInnerCode = 7001;

template <typename... A>
std::string Call(std::string_view name, const A&... args) {
  std::ostringstream os;
  os << name << "(";
  [[maybe_unused]] const char* sep = "";  // unused when Call has no argument
  ((os << sep << args, sep = ","), ...);
  os << ")";
  return os.str();
}

// Logs each call with its arguments; answers errors named after the call,
// and distinctive values and out-parameters where a call returns some.
class RecordingBackend final : public GpuBackend {
 public:
  mutable std::vector<std::string> calls;

  std::string_view Name() const override { return Log("Name"), "recording"; }
  GpuBackend* Innermost() override { return Log("Innermost"), this; }
  Status Init(int device) override { return Fail(Call("Init", device)); }
  Result<int> DeviceCount() override { return Log("DeviceCount"), 3; }
  Result<DeviceInfo> GetDeviceInfo(int device) override {
    Log(Call("GetDeviceInfo", device));
    DeviceInfo info;
    info.name = "recorded";
    info.total_mem = 12345;
    return info;
  }
  Status MemGetInfo(uint64_t* free_bytes, uint64_t* total_bytes) override {
    *free_bytes = 11;
    *total_bytes = 22;
    return Fail("MemGetInfo");
  }
  Status DeviceMemGetInfo(uint64_t* free_bytes, uint64_t* total_bytes) override {
    *free_bytes = 33;
    *total_bytes = 44;
    return Fail("DeviceMemGetInfo");
  }
  Status CtxSynchronize() override { return Fail("CtxSynchronize"); }
  Result<uint64_t> CtxGetLimit(int limit) override { return Log(Call("CtxGetLimit", limit)), 555u; }
  Status CtxSetLimit(int limit, uint64_t value) override { return Fail(Call("CtxSetLimit", limit, value)); }
  Status StreamPriorityRange(int* least, int* greatest) override {
    *least = 7;
    *greatest = -9;
    return Fail("StreamPriorityRange");
  }
  Result<uint64_t> CtxCreate(uint32_t flags) override { return Log(Call("CtxCreate", flags)), 903u; }
  Status CtxDestroy(uint64_t ctx) override { return Fail(Call("CtxDestroy", ctx)); }
  Status CtxSelect(uint64_t ctx) override { return Fail(Call("CtxSelect", ctx)); }
  Status ReserveArena(uint64_t base, uint64_t bytes) override { return Fail(Call("ReserveArena", base, bytes)); }
  uint64_t Granularity() const override { return Log("Granularity"), 4242; }
  Result<uint64_t> ChunkCreate(uint64_t bytes) override { return Log(Call("ChunkCreate", bytes)), bytes + 1; }
  Result<UniqueFd> ChunkExport(uint64_t chunk) override { return Fail(Call("ChunkExport", chunk)); }
  Result<uint64_t> ChunkImport(int fd, uint64_t bytes) override {
    return Log(Call("ChunkImport", fd, bytes)), bytes + 2;
  }
  Status ChunkRelease(uint64_t chunk) override { return Fail(Call("ChunkRelease", chunk)); }
  Status ChunkMap(uint64_t addr, uint64_t chunk, uint64_t bytes, bool writable) override {
    return Fail(Call("ChunkMap", addr, chunk, bytes, writable));
  }
  Status ChunkMapRun(uint64_t addr, std::span<const ChunkPiece> pieces, bool writable) override {
    std::string p;
    for (const ChunkPiece& piece : pieces) p += std::to_string(piece.chunk) + "/" + std::to_string(piece.bytes) + " ";
    return Fail(Call("ChunkMapRun", addr, p, writable));
  }
  Status ChunkSetAccess(uint64_t addr, uint64_t bytes, bool writable) override {
    return Fail(Call("ChunkSetAccess", addr, bytes, writable));
  }
  Status ChunkUnmap(uint64_t addr, uint64_t bytes) override { return Fail(Call("ChunkUnmap", addr, bytes)); }
  Status HostRegister(void* p, uint64_t bytes) override { return Fail(Call("HostRegister", p, bytes)); }
  Status HostUnregister(void* p) override { return Fail(Call("HostUnregister", p)); }
  Status MemcpyHtoD(uint64_t dst, const void* src, uint64_t bytes, uint64_t stream) override {
    return Fail(Call("MemcpyHtoD", dst, src, bytes, stream));
  }
  Status MemcpyDtoH(void* dst, uint64_t src, uint64_t bytes, uint64_t stream) override {
    return Fail(Call("MemcpyDtoH", dst, src, bytes, stream));
  }
  Status MemcpyDtoD(uint64_t dst, uint64_t src, uint64_t bytes, uint64_t stream) override {
    return Fail(Call("MemcpyDtoD", dst, src, bytes, stream));
  }
  Status Memset(uint64_t dst, uint32_t value, uint32_t elem_bytes, uint64_t count, uint64_t stream) override {
    return Fail(Call("Memset", dst, value, elem_bytes, count, stream));
  }
  Result<uint64_t> StreamCreate(uint32_t flags, int32_t priority) override {
    return Log(Call("StreamCreate", flags, priority)), 900u;
  }
  Status StreamDestroy(uint64_t stream) override { return Fail(Call("StreamDestroy", stream)); }
  Status StreamSynchronize(uint64_t stream) override { return Fail(Call("StreamSynchronize", stream)); }
  Status StreamQuery(uint64_t stream) override { return Fail(Call("StreamQuery", stream)); }
  Status StreamWaitEvent(uint64_t stream, uint64_t event, uint32_t flags) override {
    return Fail(Call("StreamWaitEvent", stream, event, flags));
  }
  Result<uint64_t> EventCreate(uint32_t flags) override { return Log(Call("EventCreate", flags)), 901u; }
  Status EventDestroy(uint64_t event) override { return Fail(Call("EventDestroy", event)); }
  Status EventRecord(uint64_t event, uint64_t stream) override { return Fail(Call("EventRecord", event, stream)); }
  Status EventSynchronize(uint64_t event) override { return Fail(Call("EventSynchronize", event)); }
  Status EventQuery(uint64_t event) override { return Fail(Call("EventQuery", event)); }
  Result<float> EventElapsedTime(uint64_t start, uint64_t end) override {
    return Log(Call("EventElapsedTime", start, end)), 1.5f;
  }
  Result<uint64_t> ModuleLoad(std::string_view image) override { return Log(Call("ModuleLoad", image)), 902u; }
  Status ModuleUnload(uint64_t module) override { return Fail(Call("ModuleUnload", module)); }
  Result<uint64_t> ModuleGetFunction(uint64_t module, const std::string& name) override {
    return Log(Call("ModuleGetFunction", module, name)), 903u;
  }
  Status ModuleGetGlobal(uint64_t module, const std::string& name, uint64_t* dptr, uint64_t* bytes) override {
    *dptr = 0xd000;
    *bytes = 64;
    return Fail(Call("ModuleGetGlobal", module, name));
  }
  Result<std::vector<ParamInfo>> FuncGetParamInfo(uint64_t function) override {
    Log(Call("FuncGetParamInfo", function));
    return std::vector<ParamInfo>{{0, 8}, {8, 4}};
  }
  Result<std::vector<int32_t>> FuncGetAttributes(uint64_t function) override {
    Log(Call("FuncGetAttributes", function));
    return std::vector<int32_t>{5, 6, 7};
  }
  Status FuncSetAttribute(uint64_t function, int32_t attr, int32_t value) override {
    return Fail(Call("FuncSetAttribute", function, attr, value));
  }
  Status LaunchKernel(uint64_t function, const LaunchConfig& c, uint64_t stream, std::string_view params) override {
    return Fail(Call("LaunchKernel", function, c.grid[0], c.grid[1], c.grid[2], c.block[0], c.block[1], c.block[2],
                     c.shared_bytes, stream, params));
  }
  Result<int32_t> OccupancyMaxBlocks(uint64_t function, int32_t block_size, uint64_t dynamic_smem,
                                     uint32_t flags) override {
    return Log(Call("OccupancyMaxBlocks", function, block_size, dynamic_smem, flags)), 17;
  }
  Status LaunchHostFunc(uint64_t stream, HostFn fn, void* user) override {
    return Fail(Call("LaunchHostFunc", stream, reinterpret_cast<uint64_t>(fn), reinterpret_cast<uint64_t>(user)));
  }
  Result<uint64_t> GraphCreate() override { return Log(Call("GraphCreate")), 50u; }
  Status GraphDestroy(uint64_t graph) override { return Fail(Call("GraphDestroy", graph)); }
  Result<uint64_t> GraphAddNode(uint64_t graph, const GraphNodeParams& n, std::span<const uint64_t> deps) override {
    return Log(Call("GraphAddNode", graph, static_cast<uint32_t>(n.kind), n.function, n.params, deps.size())), 51u;
  }
  Status GraphAddDependency(uint64_t graph, uint64_t from, uint64_t to) override {
    return Fail(Call("GraphAddDependency", graph, from, to));
  }
  Result<uint64_t> GraphClone(uint64_t graph) override { return Log(Call("GraphClone", graph)), 52u; }
  Result<std::vector<uint64_t>> GraphGetNodes(uint64_t graph) override {
    Log(Call("GraphGetNodes", graph));
    return std::vector<uint64_t>{7, 8};
  }
  Status StreamBeginCapture(uint64_t stream) override { return Fail(Call("StreamBeginCapture", stream)); }
  Result<uint64_t> StreamEndCapture(uint64_t stream) override { return Log(Call("StreamEndCapture", stream)), 53u; }
  Result<bool> StreamIsCapturing(uint64_t stream) override { return Log(Call("StreamIsCapturing", stream)), true; }
  Result<uint64_t> GraphInstantiate(uint64_t graph) override { return Log(Call("GraphInstantiate", graph)), 54u; }
  Status GraphExecDestroy(uint64_t exec) override { return Fail(Call("GraphExecDestroy", exec)); }
  Status GraphLaunch(uint64_t exec, uint64_t stream) override { return Fail(Call("GraphLaunch", exec, stream)); }
  Status GraphUpload(uint64_t exec, uint64_t stream) override { return Fail(Call("GraphUpload", exec, stream)); }
  Result<uint32_t> GraphExecUpdate(uint64_t exec, uint64_t graph, uint64_t* error_node) override {
    *error_node = 9;
    return Log(Call("GraphExecUpdate", exec, graph)), 2u;
  }
  Status GraphExecKernelNodeSetParams(uint64_t exec, uint64_t node, const GraphNodeParams& p) override {
    return Fail(Call("GraphExecKernelNodeSetParams", exec, node, p.function, p.params));
  }
  Result<uint64_t> ArrayCreate(const ArrayDesc& d) override {
    return Log(Call("ArrayCreate", d.format, d.channels, d.width, d.height, d.depth, d.flags)), 903u;
  }
  Status ArrayDestroy(uint64_t array) override { return Fail(Call("ArrayDestroy", array)); }
  Status Memcpy3D(const Copy3D& c, uint64_t stream) override {
    return Fail(Call("Memcpy3D", static_cast<uint32_t>(c.dst.kind), c.dst.addr, c.dst.x, static_cast<uint32_t>(c.src.kind),
                     c.src.addr, c.src.pitch, c.width, c.height, c.depth, stream));
  }
  Result<uint64_t> TexObjectCreate(const TexResource& r, const TexDesc& t) override {
    return Log(Call("TexObjectCreate", r.kind, r.handle, r.pitch, t.filter, t.border[3])), 904u;
  }
  Status TexObjectDestroy(uint64_t object) override { return Fail(Call("TexObjectDestroy", object)); }
  Result<uint64_t> SurfObjectCreate(uint64_t array) override { return Log(Call("SurfObjectCreate", array)), 905u; }
  Status SurfObjectDestroy(uint64_t object) override { return Fail(Call("SurfObjectDestroy", object)); }

 private:
  void Log(std::string call) const { calls.push_back(std::move(call)); }
  Status Fail(std::string call) const {
    Log(call);
    return Status(kInnerCode, std::move(call));
  }
};

std::string Show(const Status& st) { return std::to_string(st.code()) + ":" + st.message(); }
template <typename T>
std::string Show(const Result<T>& r) {
  if (!r.ok()) return Show(r.status());
  std::ostringstream os;
  os << r.value();
  return os.str();
}

// One call of each virtual; returns what came back (value, error, out-parameters).
struct Case {
  std::string method;
  std::function<std::string(GpuBackend&, RecordingBackend& inner)> run;
};

std::vector<Case> Cases() {
  static const char kHost[16] = {};
  void* host = const_cast<char*>(kHost);
  auto pair = [](const Status& st, auto a, auto b) {
    return Show(st) + " " + std::to_string(a) + " " + std::to_string(b);
  };
  return {
      {"Name", [](GpuBackend& b, RecordingBackend&) { return std::string(b.Name()); }},
      {"Innermost",
       [](GpuBackend& b, RecordingBackend& inner) { return std::string(b.Innermost() == &inner ? "inner" : "not"); }},
      {"Init", [](GpuBackend& b, RecordingBackend&) { return Show(b.Init(5)); }},
      {"DeviceCount", [](GpuBackend& b, RecordingBackend&) { return Show(b.DeviceCount()); }},
      {"GetDeviceInfo",
       [](GpuBackend& b, RecordingBackend&) {
         auto r = b.GetDeviceInfo(2);
         return r.ok() ? r->name + " " + std::to_string(r->total_mem) : Show(r.status());
       }},
      {"MemGetInfo",
       [pair](GpuBackend& b, RecordingBackend&) {
         uint64_t f = 0, t = 0;
         Status st = b.MemGetInfo(&f, &t);
         return pair(st, f, t);
       }},
      {"DeviceMemGetInfo",
       [pair](GpuBackend& b, RecordingBackend&) {
         uint64_t f = 0, t = 0;
         Status st = b.DeviceMemGetInfo(&f, &t);
         return pair(st, f, t);
       }},
      {"CtxSynchronize", [](GpuBackend& b, RecordingBackend&) { return Show(b.CtxSynchronize()); }},
      {"CtxGetLimit", [](GpuBackend& b, RecordingBackend&) { return Show(b.CtxGetLimit(4)); }},
      {"CtxSetLimit", [](GpuBackend& b, RecordingBackend&) { return Show(b.CtxSetLimit(4, 1ull << 40)); }},
      {"StreamPriorityRange",
       [pair](GpuBackend& b, RecordingBackend&) {
         int least = 0, greatest = 0;
         Status st = b.StreamPriorityRange(&least, &greatest);
         return pair(st, least, greatest);
       }},
      {"CtxCreate", [](GpuBackend& b, RecordingBackend&) { return Show(b.CtxCreate(4)); }},
      {"CtxDestroy", [](GpuBackend& b, RecordingBackend&) { return Show(b.CtxDestroy(904)); }},
      {"CtxSelect", [](GpuBackend& b, RecordingBackend&) { return Show(b.CtxSelect(905)); }},
      {"ReserveArena", [](GpuBackend& b, RecordingBackend&) { return Show(b.ReserveArena(1ull << 44, 1ull << 36)); }},
      {"Granularity", [](GpuBackend& b, RecordingBackend&) { return std::to_string(b.Granularity()); }},
      {"ChunkCreate", [](GpuBackend& b, RecordingBackend&) { return Show(b.ChunkCreate(2u << 20)); }},
      {"ChunkExport",
       [](GpuBackend& b, RecordingBackend&) {
         auto r = b.ChunkExport(77);
         return r.ok() ? std::string("fd") : Show(r.status());
       }},
      {"ChunkImport", [](GpuBackend& b, RecordingBackend&) { return Show(b.ChunkImport(9, 4u << 20)); }},
      {"ChunkRelease", [](GpuBackend& b, RecordingBackend&) { return Show(b.ChunkRelease(78)); }},
      {"ChunkMap", [](GpuBackend& b, RecordingBackend&) { return Show(b.ChunkMap(0x1000, 79, 2u << 20, true)); }},
      {"ChunkMapRun",
       [](GpuBackend& b, RecordingBackend&) {
         ChunkPiece pieces[2] = {{80, 2u << 20}, {81, 4u << 20}};
         return Show(b.ChunkMapRun(0x2000, pieces, false));
       }},
      {"ChunkSetAccess", [](GpuBackend& b, RecordingBackend&) { return Show(b.ChunkSetAccess(0x3000, 6u << 20, true)); }},
      {"ChunkUnmap", [](GpuBackend& b, RecordingBackend&) { return Show(b.ChunkUnmap(0x4000, 8u << 20)); }},
      {"HostRegister", [host](GpuBackend& b, RecordingBackend&) { return Show(b.HostRegister(host, 16)); }},
      {"HostUnregister", [host](GpuBackend& b, RecordingBackend&) { return Show(b.HostUnregister(host)); }},
      {"MemcpyHtoD", [host](GpuBackend& b, RecordingBackend&) { return Show(b.MemcpyHtoD(0x5000, host, 16, 3)); }},
      {"MemcpyDtoH", [host](GpuBackend& b, RecordingBackend&) { return Show(b.MemcpyDtoH(host, 0x6000, 8, 4)); }},
      {"MemcpyDtoD", [](GpuBackend& b, RecordingBackend&) { return Show(b.MemcpyDtoD(0x7000, 0x8000, 32, 5)); }},
      {"Memset", [](GpuBackend& b, RecordingBackend&) { return Show(b.Memset(0x9000, 0xab, 2, 100, 6)); }},
      {"StreamCreate", [](GpuBackend& b, RecordingBackend&) { return Show(b.StreamCreate(1, -2)); }},
      {"StreamDestroy", [](GpuBackend& b, RecordingBackend&) { return Show(b.StreamDestroy(10)); }},
      {"StreamSynchronize", [](GpuBackend& b, RecordingBackend&) { return Show(b.StreamSynchronize(11)); }},
      {"StreamQuery", [](GpuBackend& b, RecordingBackend&) { return Show(b.StreamQuery(12)); }},
      {"StreamWaitEvent", [](GpuBackend& b, RecordingBackend&) { return Show(b.StreamWaitEvent(13, 14, 1)); }},
      {"EventCreate", [](GpuBackend& b, RecordingBackend&) { return Show(b.EventCreate(2)); }},
      {"EventDestroy", [](GpuBackend& b, RecordingBackend&) { return Show(b.EventDestroy(15)); }},
      {"EventRecord", [](GpuBackend& b, RecordingBackend&) { return Show(b.EventRecord(16, 17)); }},
      {"EventSynchronize", [](GpuBackend& b, RecordingBackend&) { return Show(b.EventSynchronize(18)); }},
      {"EventQuery", [](GpuBackend& b, RecordingBackend&) { return Show(b.EventQuery(19)); }},
      {"EventElapsedTime", [](GpuBackend& b, RecordingBackend&) { return Show(b.EventElapsedTime(20, 21)); }},
      {"ModuleLoad", [](GpuBackend& b, RecordingBackend&) { return Show(b.ModuleLoad("image-bytes")); }},
      {"ModuleUnload", [](GpuBackend& b, RecordingBackend&) { return Show(b.ModuleUnload(22)); }},
      {"ModuleGetFunction", [](GpuBackend& b, RecordingBackend&) { return Show(b.ModuleGetFunction(23, "kern")); }},
      {"ModuleGetGlobal",
       [pair](GpuBackend& b, RecordingBackend&) {
         uint64_t dptr = 0, bytes = 0;
         Status st = b.ModuleGetGlobal(24, "glob", &dptr, &bytes);
         return pair(st, dptr, bytes);
       }},
      {"FuncGetParamInfo",
       [](GpuBackend& b, RecordingBackend&) {
         auto r = b.FuncGetParamInfo(25);
         if (!r.ok()) return Show(r.status());
         std::string s;
         for (const ParamInfo& p : *r) s += std::to_string(p.offset) + "/" + std::to_string(p.size) + " ";
         return s;
       }},
      {"FuncGetAttributes",
       [](GpuBackend& b, RecordingBackend&) {
         auto r = b.FuncGetAttributes(26);
         if (!r.ok()) return Show(r.status());
         std::string s;
         for (int32_t a : *r) s += std::to_string(a) + " ";
         return s;
       }},
      {"FuncSetAttribute", [](GpuBackend& b, RecordingBackend&) { return Show(b.FuncSetAttribute(27, 8, 9)); }},
      {"LaunchKernel",
       [](GpuBackend& b, RecordingBackend&) {
         LaunchConfig c;
         c.grid[0] = 2, c.grid[1] = 3, c.grid[2] = 4;
         c.block[0] = 32, c.block[1] = 2, c.block[2] = 1;
         c.shared_bytes = 1024;
         return Show(b.LaunchKernel(28, c, 29, "params"));
       }},
      {"OccupancyMaxBlocks", [](GpuBackend& b, RecordingBackend&) { return Show(b.OccupancyMaxBlocks(30, 256, 512, 1)); }},
      {"LaunchHostFunc",
       [](GpuBackend& b, RecordingBackend&) {
         return Show(b.LaunchHostFunc(31, reinterpret_cast<GpuBackend::HostFn>(0x40), reinterpret_cast<void*>(0x41)));
       }},
      {"GraphCreate", [](GpuBackend& b, RecordingBackend&) { return Show(b.GraphCreate()); }},
      {"GraphDestroy", [](GpuBackend& b, RecordingBackend&) { return Show(b.GraphDestroy(32)); }},
      {"GraphAddNode",
       [](GpuBackend& b, RecordingBackend&) {
         GraphNodeParams n;
         n.kind = GraphNodeKind::kKernel;
         n.function = 33;
         n.params = "p";
         uint64_t deps[] = {1, 2};
         return Show(b.GraphAddNode(34, n, deps));
       }},
      {"GraphAddDependency", [](GpuBackend& b, RecordingBackend&) { return Show(b.GraphAddDependency(35, 36, 37)); }},
      {"GraphClone", [](GpuBackend& b, RecordingBackend&) { return Show(b.GraphClone(38)); }},
      {"GraphGetNodes",
       [](GpuBackend& b, RecordingBackend&) {
         auto r = b.GraphGetNodes(39);
         return r.ok() ? std::to_string(r->size()) : r.status().ToString();
       }},
      {"StreamBeginCapture", [](GpuBackend& b, RecordingBackend&) { return Show(b.StreamBeginCapture(40)); }},
      {"StreamEndCapture", [](GpuBackend& b, RecordingBackend&) { return Show(b.StreamEndCapture(41)); }},
      {"StreamIsCapturing", [](GpuBackend& b, RecordingBackend&) { return Show(b.StreamIsCapturing(42)); }},
      {"GraphInstantiate", [](GpuBackend& b, RecordingBackend&) { return Show(b.GraphInstantiate(43)); }},
      {"GraphExecDestroy", [](GpuBackend& b, RecordingBackend&) { return Show(b.GraphExecDestroy(44)); }},
      {"GraphLaunch", [](GpuBackend& b, RecordingBackend&) { return Show(b.GraphLaunch(45, 46)); }},
      {"GraphUpload", [](GpuBackend& b, RecordingBackend&) { return Show(b.GraphUpload(47, 48)); }},
      {"GraphExecUpdate",
       [](GpuBackend& b, RecordingBackend&) {
         uint64_t bad = 0;
         auto r = b.GraphExecUpdate(49, 50, &bad);
         return Show(r) + " " + std::to_string(bad);
       }},
      {"GraphExecKernelNodeSetParams",
       [](GpuBackend& b, RecordingBackend&) {
         GraphNodeParams n;
         n.function = 51;
         n.params = "q";
         return Show(b.GraphExecKernelNodeSetParams(52, 53, n));
       }},
      {"ArrayCreate",
       [](GpuBackend& b, RecordingBackend&) {
         return Show(b.ArrayCreate(ArrayDesc{.format = 0x20, .channels = 2, .width = 54, .height = 55, .depth = 56,
                                             .flags = 2}));
       }},
      {"ArrayDestroy", [](GpuBackend& b, RecordingBackend&) { return Show(b.ArrayDestroy(57)); }},
      {"Memcpy3D",
       [](GpuBackend& b, RecordingBackend&) {
         Copy3D c;
         c.dst = {CopySide::kArray, 58, 0, 0, 59, 0, 0};
         c.src = {CopySide::kDevice, 60, 61, 0, 0, 0, 0};
         c.width = 62, c.height = 63, c.depth = 64;
         return Show(b.Memcpy3D(c, 65));
       }},
      {"TexObjectCreate",
       [](GpuBackend& b, RecordingBackend&) {
         TexResource r{.kind = 3, .handle = 66, .pitch = 67};
         TexDesc t;
         t.filter = 1;
         t.border[3] = 0.5f;
         return Show(b.TexObjectCreate(r, t));
       }},
      {"TexObjectDestroy", [](GpuBackend& b, RecordingBackend&) { return Show(b.TexObjectDestroy(68)); }},
      {"SurfObjectCreate", [](GpuBackend& b, RecordingBackend&) { return Show(b.SurfObjectCreate(69)); }},
      {"SurfObjectDestroy", [](GpuBackend& b, RecordingBackend&) { return Show(b.SurfObjectDestroy(70)); }},
  };
}

// The virtuals GpuBackend declares, read from its header.
std::set<std::string> DeclaredVirtuals() {
  std::ifstream in(SMOLVM_GPU_BACKEND_HEADER);
  std::set<std::string> names;
  std::regex decl(R"(^\s*virtual\s+[^(~]*?\b(\w+)\()");
  std::string line;
  std::smatch m;
  while (std::getline(in, line))
    if (std::regex_search(line, m, decl)) names.insert(m[1]);
  return names;
}

TEST(ForwardingBackend, EveryVirtualReachesTheInnerBackendAndItsAnswerComesBack) {
  auto owned = std::make_unique<RecordingBackend>();
  RecordingBackend& inner = *owned;
  ForwardingBackend fwd(std::move(owned));
  RecordingBackend direct;

  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.method);
    inner.calls.clear();
    direct.calls.clear();
    std::string want = c.run(direct, direct);
    std::string got = c.run(fwd, inner);
    EXPECT_EQ(got, want) << "the forwarder answered differently from the inner backend";
    EXPECT_EQ(inner.calls, direct.calls) << "the inner backend saw a different call";
    ASSERT_EQ(inner.calls.size(), 1u);
    EXPECT_EQ(inner.calls[0].substr(0, c.method.size()), c.method);
  }
}

TEST(ForwardingBackend, CasesCoverEveryVirtualOfGpuBackend) {
  std::set<std::string> declared = DeclaredVirtuals();
  ASSERT_GE(declared.size(), 40u) << "could not read the virtuals from " << SMOLVM_GPU_BACKEND_HEADER;
  std::set<std::string> covered;
  for (const Case& c : Cases()) covered.insert(c.method);
  EXPECT_EQ(covered, declared) << "a GpuBackend virtual without a case here (or a case for none)";
}

}  // namespace
}  // namespace smolvm
