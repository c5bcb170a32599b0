#include "shim/session.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "proto/messages.h"
#include "proto/proto_hash.h"

namespace smolvm::shim {

SessionOptions SessionOptions::FromEnv() {
  SessionOptions o;
  if (const char* s = std::getenv("SMOLVM_CUDA_SOCKET")) o.socket_path = s;
  if (const char* t = std::getenv("SMOLVM_CUDA_TOKEN")) o.token = t;
  if (const char* f = std::getenv("SMOLVM_SHIM_FLUSH_OPS")) {
    char* end = nullptr;
    unsigned long v = std::strtoul(f, &end, 10);
    if (end != f && *end == '\0' && v <= 1000000) o.flush_ops = v;  // else the default stays
  }
  if (const char* n = std::getenv("SMOLVM_CUDA_NO_FDS")) o.no_descriptors = std::strcmp(n, "1") == 0;
  return o;
}

Session::Session(SessionOptions options) : options_(std::move(options)) {}

Session::~Session() {
  // The runner first: it may be reading the channel.
  runner_.reset();
  // Closing the channel ends the worker's session. The reservations (and
  // any pinned segments mapped inside them) go with it.
  channel_.reset();
  if (arena_reservation_ != nullptr) ::munmap(arena_reservation_, hello_.arena_bytes);
  if (host_reservation_ != nullptr) ::munmap(host_reservation_, hello_.host_bytes);
}

Status Session::Fail(SessionFailure how, const std::string& message) {
  if (failure_ == SessionFailure::kNone) {
    failure_ = how;
    int32_t code = how == SessionFailure::kInitialization ? static_cast<int32_t>(Code::kProtocolMismatch)
                                                          : static_cast<int32_t>(Code::kUnavailable);
    failure_status_ = Status(code, message);
    std::fprintf(stderr, "%s\n", message.c_str());
    std::fflush(stderr);
    // The runner may be asleep on the socket: end the connection under it
    // and let the channel go with the session.
    if (runner_ != nullptr && runner_->running() && channel_ != nullptr)
      ::shutdown(channel_->fd(), SHUT_RDWR);
    else
      channel_.reset();
  }
  return failure_status_;
}

Status Session::Connect() {
  if (failure_ != SessionFailure::kNone) return failure_status_;
  if (channel_ != nullptr) return Status::Ok();
  if (options_.host_function_thread)
    return Fail(SessionFailure::kNotPermitted,
                "smolvm cudart: a host function (cudaLaunchHostFunc, cudaStreamAddCallback, a graph's host node) "
                "made a CUDA call; CUDA does not permit it there (cudaErrorNotPermitted)");
  if (options_.socket_path.empty())
    return Fail(SessionFailure::kNoDevice,
                "smolvm cudart: SMOLVM_CUDA_SOCKET is not set; no remote GPU (CUDA calls return "
                "cudaErrorNoDevice)");
  Result<UniqueFd> sock = ConnectUnix(options_.socket_path);
  if (!sock.ok())
    return Fail(SessionFailure::kNoDevice, "smolvm cudart: cannot reach the CUDA daemon: " +
                                               sock.status().message() +
                                               " (CUDA calls return cudaErrorNoDevice)");
  channel_ = std::make_unique<UnixChannel>(std::move(sock).value());
  wire_ctx_ = 0;  // a new worker runs ops in its primary context
  RETURN_IF_ERROR(Handshake());
  if (options_.reserve_ranges && arena_reservation_ == nullptr) RETURN_IF_ERROR(ReserveRanges());
  return Status::Ok();
}

void Session::DetachForClone(const std::string& token) {
  // The parent's runner thread did not survive fork(2); its object (and
  // whatever its mutexes held) is not touched again.
  if (runner_ != nullptr) (void)runner_.release();
  stash_full_ = false;
  stash_error_ = Status::Ok();
  channel_.reset();
  queue_.clear();
  queue_written_ = 0;
  ops_since_offer_ = 0;
  reply_payload_.clear();
  queued_ops_ = 0;
  deferred_ = 0;
  synced_ = false;  // the clone's worker is not known idle
  failure_ = SessionFailure::kNone;
  failure_status_ = Status::Ok();
  options_.role = 2;
  options_.token = token;
}

Status Session::Handshake() {
  proto::HelloRequest req;
  req.proto_hash = proto::kProtoHash;
  req.role = options_.role;
  req.pid = static_cast<uint32_t>(::getpid());
  req.token = options_.token;
  req.flags = options_.no_descriptors ? proto::kHelloNoDescriptors : 0;
  uint32_t seq = NextSeq();
  proto::AppendRequest(&queue_, req, seq);
  RETURN_IF_ERROR(WriteQueue({}));
  std::string payload;
  RETURN_IF_ERROR(ReadReply(static_cast<uint16_t>(proto::Op::kHello), seq, &payload));
  proto::ReplyHead head;
  Status st = proto::DecodeReply(payload, &head, &hello_);
  if (!st.ok()) return Fail(SessionFailure::kInitialization, "smolvm cudart: malformed Hello reply: " + st.message());
  if (head.result != 0) {
    // The daemon's message is printed as it is: for a mismatch it is exactly
    // "PROTOCOL MISMATCH: client wire hash <hex> != server <hex>".
    std::string msg = head.result == static_cast<int32_t>(Code::kProtocolMismatch)
                          ? head.message
                          : "smolvm cudart: the CUDA daemon refused the session: " + head.message;
    return Fail(SessionFailure::kInitialization, msg);
  }
  return Status::Ok();
}

Status Session::ReserveRanges() {
  auto reserve = [this](uint64_t base, uint64_t bytes, const char* what, void** out) -> Status {
    if (bytes == 0) return Status::Ok();
    void* want = reinterpret_cast<void*>(base);
    void* p = ::mmap(want, bytes, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED || p != want) {
      int err = errno;
      if (p != MAP_FAILED) ::munmap(p, bytes);
      char buf[160];
      std::snprintf(buf, sizeof buf, "smolvm cudart: cannot reserve the %s range [0x%llx, +0x%llx): %s", what,
                    static_cast<unsigned long long>(base), static_cast<unsigned long long>(bytes),
                    p == MAP_FAILED ? strerror(err) : "kernel placed it elsewhere");
      return Fail(SessionFailure::kInitialization, buf);
    }
    *out = p;
    return Status::Ok();
  };
  RETURN_IF_ERROR(reserve(hello_.arena_base, hello_.arena_bytes, "device arena", &arena_reservation_));
  RETURN_IF_ERROR(reserve(hello_.host_base, hello_.host_bytes, "pinned host", &host_reservation_));
  return Status::Ok();
}

Status Session::WriteQueue(std::span<const int> fds) {
  if (queue_.empty() && fds.empty()) return Status::Ok();
  if (channel_ == nullptr) return Connect().ok() ? Internal("no channel") : failure_status_;
  // Descriptors ride with the first byte written here: a frame that carries
  // one is written alone, after a Flush (see Call).
  Status st;
  {
    std::lock_guard w(write_mu_);
    st = channel_->Write(std::string_view(queue_).substr(queue_written_), fds);
  }
  queue_.clear();
  queue_written_ = 0;
  queued_ops_ = 0;
  ops_since_offer_ = 0;
  if (!st.ok()) return Broken("smolvm cudart: lost the connection to the CUDA worker: " + st.message() +
                              " (CUDA calls now return cudaErrorDevicesUnavailable)");
  return Status::Ok();
}

Status Session::Flush() {
  if (queue_.empty()) return Status::Ok();
  RETURN_IF_ERROR(Connect());
  return WriteQueue({});
}

void Session::FlushQueued() {
  ops_since_offer_ = 0;
  // With host functions in use every write is whole frames (see write_mu_).
  if (runner_ != nullptr) {
    (void)WriteQueue({});
    return;
  }
  size_t unwritten = unwritten_bytes();
  // Past flush_bytes the guest waits, but only until half of it is left:
  // it stays that far ahead of its worker (a wait for the whole queue let
  // the worker catch up at every full queue: the launch benchmark's issue
  // rate fell to 0.79x the previous build's, which wrote 4 MiB at a time).
  if (unwritten >= options_.flush_bytes) {
    (void)WriteUnwritten(unwritten - options_.flush_bytes / 2);
    return;
  }
  (void)OfferQueue();
}

Status Session::OfferQueue() {
  if (queue_.empty()) return Status::Ok();
  RETURN_IF_ERROR(Connect());
  if (channel_ == nullptr) return Internal("no channel");
  Result<size_t> n = [&] {
    std::lock_guard w(write_mu_);
    return channel_->TryWrite(std::string_view(queue_).substr(queue_written_));
  }();
  if (!n.ok())
    return Broken("smolvm cudart: lost the connection to the CUDA worker: " + n.status().message() +
                  " (CUDA calls now return cudaErrorDevicesUnavailable)");
  MarkWritten(*n);
  return Status::Ok();
}

Status Session::WriteUnwritten(size_t bytes) {
  if (bytes == 0) return Status::Ok();
  RETURN_IF_ERROR(Connect());
  if (channel_ == nullptr) return Internal("no channel");
  Status st;
  {
    std::lock_guard w(write_mu_);
    st = channel_->Write(std::string_view(queue_).substr(queue_written_, bytes));
  }
  if (!st.ok())
    return Broken("smolvm cudart: lost the connection to the CUDA worker: " + st.message() +
                  " (CUDA calls now return cudaErrorDevicesUnavailable)");
  MarkWritten(bytes);
  return Status::Ok();
}

void Session::MarkWritten(size_t bytes) {
  queue_written_ += bytes;
  if (queue_written_ == queue_.size()) {
    queue_.clear();
    queue_written_ = 0;
    queued_ops_ = 0;
  } else if (queue_written_ >= queue_.size() / 2) {
    // Keeps the buffer within twice what is unwritten, each byte moved at
    // most once on average.
    queue_.erase(0, queue_written_);
    queue_written_ = 0;
  }
}

Status Session::WriteDeviceOutput(std::string_view payload) {
  proto::DeviceOutputRequest m;
  proto::Decoder dec(payload);
  if (!proto::Decode(dec, &m) || (m.fd != 1 && m.fd != 2))
    return Malformed("a DeviceOutput from the worker does not decode");
  // Straight to the descriptor, as the driver writes device printf natively:
  // the program's own stdio buffer is not flushed ahead of it.
  std::string_view text = m.text;
  while (!text.empty()) {
    ssize_t n = ::write(static_cast<int>(m.fd), text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the program closed it: the text is lost, as natively
    text.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

Status Session::ReadFrameRouted(proto::FrameHeader* h, std::string* payload) {
  for (;;) {
    std::vector<UniqueFd> fds;
    Status st;
    if (stash_full_) {
      stash_full_ = false;
      *h = stash_header_;
      payload->swap(stash_payload_);
    } else if (!stash_error_.ok()) {
      st = stash_error_;
    } else {
      st = channel_->HasBufferedFrame() ? Status::Ok() : WaitUntilReadable(channel_->fd(), spin_us_);
      if (st.ok()) st = channel_->ReadFrame(h, payload, &fds);
    }
    if (!st.ok()) return st;
    if (h->flags & proto::kFlagReply) return Status::Ok();
    if (h->op == proto::DeviceOutputRequest::kNumber) {
      RETURN_IF_ERROR(WriteDeviceOutput(*payload));
      continue;
    }
    if (h->op == proto::HostLandRequest::kNumber) {
      RETURN_IF_ERROR(RouteLanding(*payload));
      continue;
    }
    if (h->op != proto::HostFuncCallRequest::kNumber) return Status::Ok();
    proto::HostFuncCallRequest call;
    proto::Decoder dec(*payload);
    if (!proto::Decode(dec, &call)) return Malformed("a HostFuncCall from the worker does not decode");
    Callbacks().Push(call);
  }
}

Status Session::ReadReply(uint16_t op, uint32_t seq, std::string* payload) {
  proto::FrameHeader h;
  HostFuncRunner* runner = runner_.get();
  if (runner != nullptr) runner->ReaderWants();
  Status st;
  {
    std::lock_guard r(read_mu_);
    st = ReadFrameRouted(&h, payload);
  }
  if (runner != nullptr) runner->ReaderDone();
  if (!st.ok())
    return Broken("smolvm cudart: lost the connection to the CUDA worker: " + st.message() +
                  " (CUDA calls now return cudaErrorDevicesUnavailable)");
  if (!(h.flags & proto::kFlagReply) || h.seq != seq || (h.op != op && h.op != 0)) {
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "smolvm cudart: unexpected frame from the CUDA worker (op %u seq %u flags %u, awaiting op %u "
                  "seq %u)",
                  h.op, h.seq, h.flags, op, seq);
    return Broken(buf);
  }
  return Status::Ok();
}

HostFuncRunner& Session::Callbacks() {
  if (runner_ == nullptr) {
    // Whole frames from here on: finish a frame a write left cut short.
    if (queue_written_ != 0) (void)WriteQueue({});
    runner_ = std::make_unique<HostFuncRunner>(this);
  }
  runner_->Start();
  return *runner_;
}

Session::RunnerRead Session::ReadForRunner(int wake_fd, HostFuncRunner* runner) {
  if (stash_full_ || !stash_error_.ok()) return RunnerRead::kStashed;
  if (channel_ == nullptr) return RunnerRead::kFailed;
  if (!channel_->HasBufferedFrame()) {
    struct pollfd p[2] = {{channel_->fd(), POLLIN, 0}, {wake_fd, POLLIN, 0}};
    int n = ::poll(p, 2, -1);
    if (n < 0) return RunnerRead::kNothing;
    if (p[1].revents & POLLIN) {
      uint64_t drained;
      (void)!::read(wake_fd, &drained, sizeof drained);
      return RunnerRead::kWoken;
    }
    if (p[0].revents == 0) return RunnerRead::kNothing;
  }
  proto::FrameHeader h;
  std::vector<UniqueFd> fds;
  Status st = channel_->ReadFrame(&h, &stash_payload_, &fds);
  if (!st.ok()) {
    stash_error_ = st;
    return RunnerRead::kFailed;
  }
  if (h.op == proto::DeviceOutputRequest::kNumber && !(h.flags & proto::kFlagReply)) {
    stash_error_ = WriteDeviceOutput(stash_payload_);
    return stash_error_.ok() ? RunnerRead::kRouted : RunnerRead::kFailed;
  }
  if (h.op == proto::HostLandRequest::kNumber && !(h.flags & proto::kFlagReply)) {
    stash_error_ = RouteLanding(stash_payload_);
    return stash_error_.ok() ? RunnerRead::kRouted : RunnerRead::kFailed;
  }
  if (h.op == proto::HostFuncCallRequest::kNumber && !(h.flags & proto::kFlagReply)) {
    proto::HostFuncCallRequest call;
    proto::Decoder dec(stash_payload_);
    if (proto::Decode(dec, &call)) {
      runner->Push(call);
      return RunnerRead::kRouted;
    }
    stash_error_ = Malformed("a HostFuncCall from the worker does not decode");
    return RunnerRead::kFailed;
  }
  stash_header_ = h;
  stash_full_ = true;
  return RunnerRead::kStashed;
}

void Session::SendHostFuncDone(uint64_t call) {
  std::string frame;
  proto::AppendRequest(&frame, proto::HostFuncDoneRequest{call}, 0);
  std::lock_guard w(write_mu_);
  // A failed session leaves the channel shut down; the write then fails and
  // the next CUDA call reports the failure.
  if (channel_ != nullptr) (void)channel_->Write(frame);
}

void Session::SendHostFetchData(uint64_t addr, uint64_t bytes) {
  if (mirror_ == nullptr || !mirror_->Contains(addr, bytes)) return;  // the worker keeps its mirror's bytes
  std::lock_guard w(write_mu_);
  for (uint64_t off = 0; off < bytes && channel_ != nullptr; off += HostMirror::kChunkBytes) {
    std::string frame;
    proto::HostFetchDataRequest m;
    m.addr = addr + off;
    m.data = std::string_view(reinterpret_cast<const char*>(addr + off),
                              std::min<uint64_t>(HostMirror::kChunkBytes, bytes - off));
    proto::AppendRequest(&frame, m, 0);
    if (!channel_->Write(frame).ok()) return;  // the next CUDA call reports the failure
  }
}

void Session::NoteDeferred(int32_t deferred) {
  if (deferred != 0 && deferred_ == 0) deferred_ = deferred;
}

int32_t Session::TakeDeferred() { return std::exchange(deferred_, 0); }

int32_t Session::TakeDeferredIn(int32_t lo, int32_t hi) {
  if (deferred_ < lo || deferred_ >= hi) return 0;
  return std::exchange(deferred_, 0);
}

namespace {

void AppendRawFrame(std::string* out, uint16_t op, bool async, uint32_t seq, std::string_view payload) {
  proto::FrameHeader h;
  h.payload_bytes = static_cast<uint32_t>(payload.size());
  h.op = op;
  h.flags = async ? proto::kFlagAsync : 0;
  h.seq = seq;
  size_t at = out->size();
  out->resize(at + proto::kFrameHeaderBytes);
  proto::EncodeHeader(h, reinterpret_cast<uint8_t*>(out->data() + at));
  out->append(payload.data(), payload.size());
}

}  // namespace

// What the worker refuses as not supported names itself too: once per op,
// with the worker's message ("smolvm cuda: the worker refused ModuleLoad as
// not supported: ...").
static void ReportWorkerNotSupported(uint16_t op, const std::string& message) {
  static std::atomic<bool> reported[256];
  if (reported[op & 0xff].exchange(true)) return;
  const char* name = proto::OpName(op);
  std::fprintf(stderr, "smolvm cuda: the worker refused %s as not supported: %s\n",
               name != nullptr ? name : "an op", message.c_str());
  std::fflush(stderr);
}

void Session::EnqueueRaw(uint16_t op, std::string_view payload) {
  NoteContext();
  AppendRawFrame(&queue_, op, true, NextSeq(), payload);
  ++queued_ops_;
  ++ops_since_offer_;
  Count(&queued_by_op_, op);
  if (FlushDue()) FlushQueued();
}

Status Session::CallRaw(uint16_t op, std::string_view payload, std::string_view* fields) {
  RETURN_IF_ERROR(Connect());
  NoteContext();
  Count(&round_trips_by_op_, op);
  uint32_t seq = NextSeq();
  AppendRawFrame(&queue_, op, false, seq, payload);
  RETURN_IF_ERROR(WriteQueue({}));
  RETURN_IF_ERROR(ReadReply(op, seq, &reply_payload_));
  proto::Decoder dec(reply_payload_);
  proto::ReplyHead head;
  dec.Get(&head.result);
  dec.Get(&head.deferred);
  if (!dec.ok()) return Broken("malformed reply to op " + std::to_string(op));
  NoteDeferred(head.deferred);
  size_t consumed = reply_payload_.size() - dec.remaining();
  if (head.result != 0) {
    dec.Get(&head.message);
    constexpr int32_t kCudaNotSupported = 801;  // CUDA_ERROR_NOT_SUPPORTED
    if (head.result == kCudaNotSupported || head.result == static_cast<int32_t>(Code::kNotSupported))
      ReportWorkerNotSupported(op, head.message);
    return Status(head.result, std::move(head.message));
  }
  *fields = std::string_view(reply_payload_).substr(consumed);
  return Status::Ok();
}

}  // namespace smolvm::shim
