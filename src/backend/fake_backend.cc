#include "backend/fake_backend.h"

#include "backend/context_limits.h"
#include "backend/device_footprint.h"
#include "backend/fake_context_slots.h"

#include <cuda.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <functional>

namespace smolvm {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

Status FakeBackend::Cu(int32_t cu_result, const std::string& what) { return Status(cu_result, what); }

struct FakeBackend::Chunk {
  UniqueFd fd;
  uint64_t bytes = 0;
  bool imported = false;
};

struct FakeBackend::Mapping {
  uint64_t bytes = 0;
  uint64_t chunk = 0;
  bool writable = false;
  bool accessible = false;  // no access call has covered it yet
};

struct FakeBackend::Event {
  uint32_t flags = 0;
  bool recorded = false;
  Clock::time_point at;
};

FakeBackend::FakeBackend(FakeBackendOptions options) : options_(options) {}

FakeBackend::~FakeBackend() {
  FlushDeviceOutput();  // the context's end
  for (auto& [addr, m] : mappings_) ::munmap(reinterpret_cast<void*>(addr), m.bytes);
  if (arena_bytes_) ::munmap(reinterpret_cast<void*>(arena_base_), arena_bytes_);
  if (global_) ::munmap(global_, 4096);
}

int FakeBackend::CallCount(const std::string& method) const {
  auto it = calls_.find(method);
  return it == calls_.end() ? 0 : it->second;
}

void FakeBackend::FailNext(const std::string& method, int32_t cuda_result, int skip) {
  fail_next_[method] = {cuda_result, skip};
}

Status FakeBackend::Enter(const char* method) {
  ++calls_[method];
  auto it = fail_next_.find(method);
  if (it != fail_next_.end() && it->second.second > 0) {
    --it->second.second;
  } else if (it != fail_next_.end()) {
    int32_t code = it->second.first;
    fail_next_.erase(it);
    return Status(code, std::string(method) + ": injected failure");
  }
  if (sticky_ != 0) return Status(sticky_, std::string(method) + ": context is poisoned by an earlier fault");
  if (!initialized_ && std::strcmp(method, "Init") != 0 && std::strcmp(method, "DeviceCount") != 0)
    return Cu(CUDA_ERROR_NOT_INITIALIZED, std::string(method) + ": backend not initialised");
  return Status::Ok();
}

Status FakeBackend::Fault(const std::string& what) {
  sticky_ = CUDA_ERROR_ILLEGAL_ADDRESS;
  return Cu(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered (" + what + ")");
}

Status FakeBackend::CheckDevice(uint64_t addr, uint64_t bytes, bool write) {
  if (bytes == 0) return Status::Ok();
  uint64_t at = addr;
  const uint64_t end = addr + bytes;
  if (end < addr) return Cu(CUDA_ERROR_INVALID_VALUE, "address range wraps");
  // The module global lives outside the arena, like a real module's.
  uint64_t g = reinterpret_cast<uint64_t>(global_);
  if (global_ && addr >= g && end <= g + 4096) return Status::Ok();
  while (at < end) {
    auto it = mappings_.upper_bound(at);
    if (it == mappings_.begin()) return Cu(CUDA_ERROR_INVALID_VALUE, "address is not device memory");
    --it;
    if (at >= it->first + it->second.bytes)
      return Cu(CUDA_ERROR_INVALID_VALUE, "address is not device memory");
    if (!it->second.accessible) return Fault("access to a mapping without access rights");
    if (write && !it->second.writable) return Fault("write to a read-only mapping");
    at = it->first + it->second.bytes;
  }
  return Status::Ok();
}

Status FakeBackend::KernelAccess(uint64_t addr, uint64_t bytes, bool write) {
  Status s = CheckDevice(addr, bytes, write);
  if (s.ok() || sticky_ != 0) return s;
  return Fault("kernel touched memory that is not mapped device memory");
}

Status FakeBackend::KernelAccess(uint64_t addr, uint64_t count, uint64_t elem_bytes, bool write) {
  if (elem_bytes != 0 && count > ~uint64_t{0} / elem_bytes) return Fault("kernel ran past the end of memory");
  return KernelAccess(addr, count * elem_bytes, write);
}

Status FakeBackend::CheckStream(uint64_t stream) const {
  if (stream == kDefaultStream || stream == 2 || streams_.count(stream)) return Status::Ok();
  return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown stream");
}

Status FakeBackend::Init(int device) {
  RETURN_IF_ERROR(Enter("Init"));
  if (device != 0) return Cu(CUDA_ERROR_INVALID_DEVICE, "the fake has one device");
  ASSIGN_OR_RETURN(context_slot_, TakeFakeContextSlot(std::getenv("SMOLVM_FAKE_CONTEXTS")));
  global_ = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (global_ == MAP_FAILED) {
    global_ = nullptr;
    return Cu(CUDA_ERROR_OUT_OF_MEMORY, "mmap of the module global failed");
  }
  // The context's reservations for its limits (CUDA's defaults) are device
  // memory, as on a GPU: lowering a limit gives them back.
  const uint64_t limits = DefaultContextLimitBytes(Info());
  if (limits > options_.total_mem - used_bytes_) {
    ::munmap(global_, 4096);
    global_ = nullptr;
    return Cu(CUDA_ERROR_OUT_OF_MEMORY, "no room for a context on the fake device");
  }
  used_bytes_ += limits;
  initialized_ = true;
  return Status::Ok();
}

Result<int> FakeBackend::DeviceCount() {
  RETURN_IF_ERROR(Enter("DeviceCount"));
  return 1;
}

Result<DeviceInfo> FakeBackend::GetDeviceInfo(int device) {
  RETURN_IF_ERROR(Enter("GetDeviceInfo"));
  if (device != 0) return Cu(CUDA_ERROR_INVALID_DEVICE, "the fake has one device");
  return Info();
}

Status FakeBackend::MemGetInfo(uint64_t* free_bytes, uint64_t* total_bytes) {
  RETURN_IF_ERROR(Enter("MemGetInfo"));
  *total_bytes = options_.total_mem;
  *free_bytes = options_.total_mem - used_bytes_;
  return Status::Ok();
}

Status FakeBackend::CtxSynchronize() {
  FlushDeviceOutput();
  return Enter("CtxSynchronize");
}

namespace {
// The fake context's limits before any CtxSetLimit (CUDA's defaults); what
// they reserve counts as used from Init.
uint64_t DefaultLimit(int limit) {
  for (const ContextLimitValue& l : kCudaDefaultContextLimits)
    if (l.limit == limit) return l.value;
  return 0;
}
}  // namespace

Result<uint64_t> FakeBackend::CtxGetLimit(int limit) {
  RETURN_IF_ERROR(Enter("CtxGetLimit"));
  if (DefaultLimit(limit) == 0) return Cu(CUDA_ERROR_UNSUPPORTED_LIMIT, "limit not emulated by the fake");
  auto it = limits_.find(limit);
  return it == limits_.end() ? DefaultLimit(limit) : it->second;
}

Status FakeBackend::CtxSetLimit(int limit, uint64_t value) {
  RETURN_IF_ERROR(Enter("CtxSetLimit"));
  if (limit < 0 || limit > CU_LIMIT_MAX) return Cu(CUDA_ERROR_UNSUPPORTED_LIMIT, "unknown limit");
  if (DefaultLimit(limit) == 0) return Status::Ok();
  // The reservation is device memory, as on a GPU.
  const DeviceInfo info = Info();
  auto it = limits_.find(limit);
  uint64_t before = ContextLimitDeviceBytes(limit, it == limits_.end() ? DefaultLimit(limit) : it->second, info);
  uint64_t after = ContextLimitDeviceBytes(limit, value, info);
  if (after > before && (after - before > options_.total_mem || used_bytes_ > options_.total_mem - (after - before)))
    return Cu(CUDA_ERROR_OUT_OF_MEMORY, "fake device memory is full");
  used_bytes_ = used_bytes_ - before + after;
  limits_[limit] = value;
  return Status::Ok();
}

Status FakeBackend::StreamPriorityRange(int* least, int* greatest) {
  RETURN_IF_ERROR(Enter("StreamPriorityRange"));
  *least = 0;
  *greatest = -5;
  return Status::Ok();
}

Status FakeBackend::ReserveArena(uint64_t base, uint64_t bytes) {
  RETURN_IF_ERROR(Enter("ReserveArena"));
  if (arena_bytes_) return Cu(CUDA_ERROR_INVALID_VALUE, "arena already reserved");
  void* p = ::mmap(reinterpret_cast<void*>(base), bytes, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
  if (p == MAP_FAILED) return Cu(CUDA_ERROR_OUT_OF_MEMORY, "arena address range is taken");
  if (reinterpret_cast<uint64_t>(p) != base) {
    ::munmap(p, bytes);
    return Cu(CUDA_ERROR_OUT_OF_MEMORY, "arena was not granted at the requested address");
  }
  arena_base_ = base;
  arena_bytes_ = bytes;
  return Status::Ok();
}

Result<uint64_t> FakeBackend::ChunkCreate(uint64_t bytes) {
  RETURN_IF_ERROR(Enter("ChunkCreate"));
  if (bytes == 0 || bytes % options_.granularity != 0)
    return Cu(CUDA_ERROR_INVALID_VALUE, "chunk size is not a multiple of the granularity");
  if (used_bytes_ + bytes > options_.total_mem) return Cu(CUDA_ERROR_OUT_OF_MEMORY, "fake device memory is full");
  UniqueFd fd(::memfd_create("smolvm-fake-chunk", MFD_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus("memfd_create", errno);
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) < 0) return ErrnoStatus("ftruncate", errno);
  auto c = std::make_unique<Chunk>();
  c->fd = std::move(fd);
  c->bytes = bytes;
  uint64_t h = next_handle_++;
  chunks_[h] = std::move(c);
  used_bytes_ += bytes;
  return h;
}

Result<UniqueFd> FakeBackend::ChunkExport(uint64_t chunk) {
  RETURN_IF_ERROR(Enter("ChunkExport"));
  auto it = chunks_.find(chunk);
  if (it == chunks_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown chunk");
  int fd = ::fcntl(it->second->fd.get(), F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus("dup", errno);
  return UniqueFd(fd);
}

Result<uint64_t> FakeBackend::ChunkImport(int fd, uint64_t bytes) {
  RETURN_IF_ERROR(Enter("ChunkImport"));
  struct stat st;
  if (::fstat(fd, &st) < 0 || static_cast<uint64_t>(st.st_size) < bytes)
    return Cu(CUDA_ERROR_INVALID_VALUE, "imported descriptor is not a chunk of that size");
  int dup = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dup < 0) return ErrnoStatus("dup", errno);
  auto c = std::make_unique<Chunk>();
  c->fd.Reset(dup);
  c->bytes = bytes;
  c->imported = true;
  uint64_t h = next_handle_++;
  chunks_[h] = std::move(c);
  return h;
}

Status FakeBackend::ChunkRelease(uint64_t chunk) {
  RETURN_IF_ERROR(Enter("ChunkRelease"));
  auto it = chunks_.find(chunk);
  if (it == chunks_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown chunk");
  if (!it->second->imported) used_bytes_ -= it->second->bytes;
  chunks_.erase(it);
  return Status::Ok();
}

Status FakeBackend::MapNoAccess(uint64_t addr, uint64_t chunk, uint64_t bytes) {
  auto it = chunks_.find(chunk);
  if (it == chunks_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown chunk");
  if (bytes != it->second->bytes) return Cu(CUDA_ERROR_INVALID_VALUE, "map size differs from the chunk");
  if (addr < arena_base_ || addr + bytes > arena_base_ + arena_bytes_ || addr % options_.granularity)
    return Cu(CUDA_ERROR_INVALID_VALUE, "mapping outside the reserved arena");
  auto next = mappings_.lower_bound(addr);
  if ((next != mappings_.end() && next->first < addr + bytes) ||
      (next != mappings_.begin() && std::prev(next)->first + std::prev(next)->second.bytes > addr))
    return Cu(CUDA_ERROR_INVALID_VALUE, "range already mapped");
  void* p = ::mmap(reinterpret_cast<void*>(addr), bytes, PROT_NONE, MAP_SHARED | MAP_FIXED,
                   it->second->fd.get(), 0);
  if (p == MAP_FAILED) return ErrnoStatus("mmap chunk", errno);
  mappings_[addr] = Mapping{bytes, chunk, false, false};
  return Status::Ok();
}

Status FakeBackend::SetAccess(uint64_t addr, uint64_t bytes, bool writable) {
  ++calls_["cuMemSetAccess"];
  // The range must be exactly a run of back-to-back mappings.
  auto first = mappings_.find(addr);
  if (first == mappings_.end() || bytes == 0) return Cu(CUDA_ERROR_INVALID_VALUE, "not a mapped chunk");
  uint64_t at = addr;
  auto it = first;
  for (; it != mappings_.end() && it->first == at && at < addr + bytes; ++it) at += it->second.bytes;
  if (at != addr + bytes) return Cu(CUDA_ERROR_INVALID_VALUE, "access range is not a run of whole mappings");
  if (::mprotect(reinterpret_cast<void*>(addr), bytes, PROT_READ | (writable ? PROT_WRITE : 0)) < 0)
    return ErrnoStatus("mprotect", errno);
  for (auto m = first; m != it; ++m) {
    m->second.writable = writable;
    m->second.accessible = true;
  }
  return Status::Ok();
}

Status FakeBackend::ChunkMap(uint64_t addr, uint64_t chunk, uint64_t bytes, bool writable) {
  RETURN_IF_ERROR(Enter("ChunkMap"));
  RETURN_IF_ERROR(MapNoAccess(addr, chunk, bytes));
  Status st = SetAccess(addr, bytes, writable);
  if (!st.ok()) (void)ChunkUnmap(addr, bytes);
  return st;
}

Status FakeBackend::ChunkMapRun(uint64_t addr, std::span<const ChunkPiece> pieces, bool writable) {
  RETURN_IF_ERROR(Enter("ChunkMapRun"));
  uint64_t at = addr;
  Status st;
  size_t mapped = 0;
  for (const ChunkPiece& p : pieces) {
    st = MapNoAccess(at, p.chunk, p.bytes);
    if (!st.ok()) break;
    at += p.bytes;
    ++mapped;
  }
  if (st.ok() && at > addr) st = SetAccess(addr, at - addr, writable);
  if (!st.ok()) {
    at = addr;
    for (size_t i = 0; i < mapped; ++i) {
      (void)ChunkUnmap(at, pieces[i].bytes);
      at += pieces[i].bytes;
    }
  }
  return st;
}

Status FakeBackend::ChunkSetAccess(uint64_t addr, uint64_t bytes, bool writable) {
  RETURN_IF_ERROR(Enter("ChunkSetAccess"));
  return SetAccess(addr, bytes, writable);
}

Status FakeBackend::ChunkUnmap(uint64_t addr, uint64_t bytes) {
  RETURN_IF_ERROR(Enter("ChunkUnmap"));
  auto it = mappings_.find(addr);
  if (it == mappings_.end() || it->second.bytes != bytes)
    return Cu(CUDA_ERROR_INVALID_VALUE, "not a mapped chunk");
  // Back to a PROT_NONE reservation, as cuMemUnmap leaves the VA reserved.
  void* p = ::mmap(reinterpret_cast<void*>(addr), bytes, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  if (p == MAP_FAILED) return ErrnoStatus("mmap reservation", errno);
  mappings_.erase(it);
  return Status::Ok();
}

Status FakeBackend::HostRegister(void* p, uint64_t bytes) { return Enter("HostRegister"); }
Status FakeBackend::HostUnregister(void* p) { return Enter("HostUnregister"); }

Status FakeBackend::MemcpyHtoD(uint64_t dst, const void* src, uint64_t bytes, uint64_t stream) {
  RETURN_IF_ERROR(Enter("MemcpyHtoD"));
  RETURN_IF_ERROR(CheckStream(stream));
  if (Capturing(stream)) {
    GraphNodeParams n;
    n.kind = GraphNodeKind::kMemcpy;
    n.copy = GraphCopyKind::kHostToDevice;
    n.dst = dst, n.src = reinterpret_cast<uint64_t>(src), n.bytes = bytes;
    return CaptureNode(stream, std::move(n));
  }
  RETURN_IF_ERROR(CheckDevice(dst, bytes, true));
  std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
  return Status::Ok();
}

Status FakeBackend::MemcpyDtoH(void* dst, uint64_t src, uint64_t bytes, uint64_t stream) {
  FlushDeviceOutput();
  RETURN_IF_ERROR(Enter("MemcpyDtoH"));
  RETURN_IF_ERROR(CheckStream(stream));
  if (Capturing(stream)) {
    GraphNodeParams n;
    n.kind = GraphNodeKind::kMemcpy;
    n.copy = GraphCopyKind::kDeviceToHost;
    n.dst = reinterpret_cast<uint64_t>(dst), n.src = src, n.bytes = bytes;
    return CaptureNode(stream, std::move(n));
  }
  RETURN_IF_ERROR(CheckDevice(src, bytes, false));
  std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
  return Status::Ok();
}

Status FakeBackend::MemcpyDtoD(uint64_t dst, uint64_t src, uint64_t bytes, uint64_t stream) {
  RETURN_IF_ERROR(Enter("MemcpyDtoD"));
  RETURN_IF_ERROR(CheckStream(stream));
  if (Capturing(stream)) {
    GraphNodeParams n;
    n.kind = GraphNodeKind::kMemcpy;
    n.copy = GraphCopyKind::kDeviceToDevice;
    n.dst = dst, n.src = src, n.bytes = bytes;
    return CaptureNode(stream, std::move(n));
  }
  RETURN_IF_ERROR(CheckDevice(src, bytes, false));
  RETURN_IF_ERROR(CheckDevice(dst, bytes, true));
  std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
  return Status::Ok();
}

Status FakeBackend::Memset(uint64_t dst, uint32_t value, uint32_t elem_bytes, uint64_t count,
                           uint64_t stream) {
  RETURN_IF_ERROR(Enter("Memset"));
  RETURN_IF_ERROR(CheckStream(stream));
  if (elem_bytes != 1 && elem_bytes != 2 && elem_bytes != 4)
    return Cu(CUDA_ERROR_INVALID_VALUE, "memset element size must be 1, 2 or 4");
  if (count > ~uint64_t{0} / elem_bytes) return Cu(CUDA_ERROR_INVALID_VALUE, "memset size overflows");
  if (Capturing(stream)) {
    GraphNodeParams n;
    n.kind = GraphNodeKind::kMemset;
    n.dst = dst, n.value = value, n.elem_bytes = elem_bytes, n.width = count, n.height = 1;
    n.pitch = count * elem_bytes;
    return CaptureNode(stream, std::move(n));
  }
  return SetMemory(dst, value, elem_bytes, count);
}

Status FakeBackend::SetMemory(uint64_t dst, uint32_t value, uint32_t elem_bytes, uint64_t count) {
  if (count > ~uint64_t{0} / elem_bytes) return Cu(CUDA_ERROR_INVALID_VALUE, "memset size overflows");
  RETURN_IF_ERROR(CheckDevice(dst, count * elem_bytes, true));
  auto* p = reinterpret_cast<uint8_t*>(dst);
  if (elem_bytes == 1) {
    std::memset(p, static_cast<int>(value & 0xff), count);
  } else {
    for (uint64_t i = 0; i < count; ++i) std::memcpy(p + i * elem_bytes, &value, elem_bytes);
  }
  return Status::Ok();
}

Result<uint64_t> FakeBackend::StreamCreate(uint32_t flags, int32_t priority) {
  RETURN_IF_ERROR(Enter("StreamCreate"));
  uint64_t h = (next_handle_++) << 4;
  streams_[h] = flags;
  Own(h);
  return h;
}

Status FakeBackend::StreamDestroy(uint64_t stream) {
  RETURN_IF_ERROR(Enter("StreamDestroy"));
  if (!streams_.erase(stream)) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown stream");
  return Status::Ok();
}

Status FakeBackend::StreamSynchronize(uint64_t stream) {
  FlushDeviceOutput();
  RETURN_IF_ERROR(Enter("StreamSynchronize"));
  RETURN_IF_ERROR(CheckStream(stream));
  if (Capturing(stream)) return BreakCapture(stream, "a synchronization");
  return Status::Ok();
}

Status FakeBackend::StreamQuery(uint64_t stream) {
  RETURN_IF_ERROR(Enter("StreamQuery"));
  RETURN_IF_ERROR(CheckStream(stream));
  if (Capturing(stream)) return BreakCapture(stream, "a query");
  return Status::Ok();
}

Status FakeBackend::StreamWaitEvent(uint64_t stream, uint64_t event, uint32_t flags) {
  RETURN_IF_ERROR(Enter("StreamWaitEvent"));
  RETURN_IF_ERROR(CheckStream(stream));
  if (!events_.count(event)) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown event");
  auto ec = event_captures_.find(event);
  if (ec == event_captures_.end()) return Status::Ok();  // outside any capture: already complete here
  // The stream joins the event's capture, after the nodes the event marks.
  auto it = captures_.find(stream);
  if (it == captures_.end()) {
    if (stream == kDefaultStream) return Cu(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "the legacy stream cannot join a capture");
    captures_[stream] = Capture{ec->second.graph, ec->second.origin, ec->second.deps};
    return Status::Ok();
  }
  if (it->second.graph != ec->second.graph)
    return Cu(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "a wait across two captures");
  for (uint64_t d : ec->second.deps)
    if (std::find(it->second.deps.begin(), it->second.deps.end(), d) == it->second.deps.end()) it->second.deps.push_back(d);
  return Status::Ok();
}

Status FakeBackend::LaunchHostFunc(uint64_t stream, HostFn fn, void* user) {
  RETURN_IF_ERROR(Enter("LaunchHostFunc"));
  RETURN_IF_ERROR(CheckStream(stream));
  if (fn == nullptr) return Cu(CUDA_ERROR_INVALID_VALUE, "no host function");
  if (Capturing(stream)) {
    GraphNodeParams n;
    n.kind = GraphNodeKind::kHost;
    n.fn = fn, n.user = user;
    return CaptureNode(stream, std::move(n));
  }
  // The fake's streams are idle by now and run what comes next only after
  // this returns: stream order, on the calling thread.
  fn(user);
  return Status::Ok();
}

void FakeBackend::ForgetOwned(uint64_t h) {
  streams_.erase(h);
  events_.erase(h);
  captures_.erase(h);
  event_captures_.erase(h);
  if (auto m = modules_.find(h); m != modules_.end()) {
    used_bytes_ -= m->second;
    modules_.erase(m);
  }
  functions_.erase(h);
  function_attrs_.erase(h);
}

Result<uint64_t> FakeBackend::EventCreate(uint32_t flags) {
  RETURN_IF_ERROR(Enter("EventCreate"));
  uint64_t h = (next_handle_++) << 4;
  events_[h] = Event{flags, false, {}};
  Own(h);
  return h;
}

Status FakeBackend::EventDestroy(uint64_t event) {
  RETURN_IF_ERROR(Enter("EventDestroy"));
  if (!events_.erase(event)) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown event");
  return Status::Ok();
}

Status FakeBackend::EventRecord(uint64_t event, uint64_t stream) {
  RETURN_IF_ERROR(Enter("EventRecord"));
  RETURN_IF_ERROR(CheckStream(stream));
  if (!events_.count(event)) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown event");
  auto c = captures_.find(stream);
  if (c != captures_.end()) {
    // Recorded in a capture: it marks the stream's last nodes there.
    event_captures_[event] = EventCapture{c->second.graph, c->second.origin, c->second.deps};
    return Status::Ok();
  }
  event_captures_.erase(event);
  return RecordEvent(event);
}

bool FakeBackend::HasEvent(uint64_t event) const { return events_.count(event) != 0; }

Status FakeBackend::RecordEvent(uint64_t event) {
  auto it = events_.find(event);
  if (it == events_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown event");
  it->second.recorded = true;
  it->second.at = Clock::now();
  return Status::Ok();
}

Status FakeBackend::EventSynchronize(uint64_t event) {
  FlushDeviceOutput();
  RETURN_IF_ERROR(Enter("EventSynchronize"));
  if (!events_.count(event)) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown event");
  if (auto ec = event_captures_.find(event); ec != event_captures_.end())
    return BreakCapture(ec->second.origin, "a synchronization of an event recorded in a capture");
  return Status::Ok();
}

Status FakeBackend::EventQuery(uint64_t event) {
  RETURN_IF_ERROR(Enter("EventQuery"));
  if (!events_.count(event)) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown event");
  if (auto ec = event_captures_.find(event); ec != event_captures_.end())
    return BreakCapture(ec->second.origin, "a query of an event recorded in a capture");
  return Status::Ok();
}

Result<float> FakeBackend::EventElapsedTime(uint64_t start, uint64_t end) {
  RETURN_IF_ERROR(Enter("EventElapsedTime"));
  auto a = events_.find(start), b = events_.find(end);
  if (a == events_.end() || b == events_.end()) return Cu(CUDA_ERROR_INVALID_HANDLE, "unknown event");
  if ((a->second.flags | b->second.flags) & CU_EVENT_DISABLE_TIMING)
    return Cu(CUDA_ERROR_INVALID_HANDLE, "event created with timing disabled");
  if (!a->second.recorded || !b->second.recorded) return Cu(CUDA_ERROR_INVALID_HANDLE, "event not recorded");
  return std::chrono::duration<float, std::milli>(b->second.at - a->second.at).count();
}

}  // namespace smolvm
