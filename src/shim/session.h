// Session: the guest shim's one connection to its worker, and the queue of
// ASYNC ops waiting to ride with the next SYNC op.
//
// Process: the guest program. Threads: any; every method below except the
// constructor and the runner's (ReadForRunner, SendHostFuncDone) REQUIRES
// mu() held by the caller (the Runtime takes it once per CUDA call, so a
// call's ops stay contiguous on the wire).
//
// Lifecycle: constructed unconnected; Connect() dials, says Hello and
// reserves the arena and pinned-host ranges. Connect() is idempotent. A
// failure is permanent for the session: once it failed (no daemon, protocol
// mismatch, connection lost) every later call returns the same failure
// without touching the socket, and the reason was printed once on stderr.
//
// Ordering: the worker executes frames in the order they were written, so an
// ASYNC op queued before a SYNC op is executed before it. Errors of ASYNC ops
// come back as `deferred` in a later reply; TakeDeferred() hands the first
// one to the caller exactly once.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "base/status.h"
#include "base/unique_fd.h"
#include "proto/enums.h"
#include "proto/frame.h"
#include "proto/messages.h"
#include "shim/host_funcs.h"
#include "shim/host_mirror.h"
#include "transport/unix_channel.h"

namespace smolvm::shim {

// How a failed session answers CUDA calls (a cudaError_t value).
enum class SessionFailure : int {
  kNone = 0,
  kNoDevice = 100,            // cudaErrorNoDevice: no socket configured or nobody listening
  kInitialization = 3,        // cudaErrorInitializationError: handshake refused (e.g. mismatch)
  kDevicesUnavailable = 46,   // cudaErrorDevicesUnavailable: connection lost mid-session
  kNotPermitted = 800,        // cudaErrorNotPermitted: a CUDA call from a host function
};

struct SessionOptions {
  std::string socket_path;  // SMOLVM_CUDA_SOCKET
  std::string token;        // SMOLVM_CUDA_TOKEN
  uint32_t role = 0;        // 0 standalone, 1 golden, 2 clone
  // Reserve [arena) and [host) ranges in this process (off in unit tests that
  // run several sessions in one process against fake servers).
  bool reserve_ranges = true;
  // Queued bytes, and queued ops, that trigger a flush without waiting for
  // a SYNC op (0 ops: by bytes only). A program that issues work for a long
  // time between synchronizations (torch: one loss.item() per step) would
  // otherwise leave the GPU idle until it synchronizes; a batch of a few
  // dozen ops keeps the worker and the GPU busy behind it at the cost of one
  // write per batch. SMOLVM_SHIM_FLUSH_OPS overrides the op count.
  //
  // The two differ in whether the guest waits. A batch of flush_ops is
  // offered without waiting: what the socket does not take now stays queued
  // (in order) and goes with the next batch, so a guest that issues faster
  // than its worker executes runs ahead by up to flush_bytes of its own
  // memory plus the socket's buffer, as without batches (issue 15: a waiting
  // batch write held the H200 launch micro-benchmark's issue rate at its
  // completion rate, 0.61x the previous build's). Only flush_bytes of
  // unwritten ops, a SYNC op, a descriptor and Flush() wait; at flush_bytes
  // the guest waits until half of it is left unwritten, so once it is that
  // far ahead it stays between flush_bytes / 2 and flush_bytes ahead (4 MiB:
  // the bytes before batches, ~65,000 launches).
  size_t flush_bytes = 4u << 20;
  size_t flush_ops = 32;
  // The session of a host-function thread (host_funcs.h): never connects,
  // every call fails with cudaErrorNotPermitted.
  bool host_function_thread = false;
  // Ask for a session without descriptors (SMOLVM_CUDA_NO_FDS=1; a gVisor
  // machine's endpoint makes every session so by itself): host_mirror.h.
  bool no_descriptors = false;

  static SessionOptions FromEnv();
};

// The guest context (a CtxCreate id; 0: the primary context) the calling
// thread's CUDA calls run in, as the driver's context calls leave it
// (forward_driver_context.cc), and a scope that sends a call's ops in the
// primary context whatever the thread has current (the runtime's own
// modules load there: worker/context_table.h).
inline thread_local uint64_t t_guest_context = 0;
inline thread_local int t_primary_scope = 0;
struct PrimaryContextScope {
  PrimaryContextScope() { ++t_primary_scope; }
  ~PrimaryContextScope() { --t_primary_scope; }
  PrimaryContextScope(const PrimaryContextScope&) = delete;
  PrimaryContextScope& operator=(const PrimaryContextScope&) = delete;
};

class Session {
 public:
  explicit Session(SessionOptions options);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  std::mutex& mu() { return mu_; }

  // Dials and handshakes once. OK when connected; otherwise the permanent
  // failure (see failure()).
  Status Connect();
  bool connected() const { return channel_ != nullptr && failure_ == SessionFailure::kNone; }
  SessionFailure failure() const { return failure_; }
  const Status& failure_status() const { return failure_status_; }
  const proto::HelloReply& hello() const { return hello_; }
  // No descriptor may cross the connection (the Hello reply said so):
  // pinned memory is mirrored and large copies go inline (host_mirror.h).
  bool no_descriptors() const { return (hello_.flags & proto::kHelloNoDescriptors) != 0; }
  // Where HostLand frames go (REQUIRES mu() held when set; before the first
  // copy into pinned memory).
  void set_mirror(HostMirror* mirror) { mirror_ = mirror; }

  // Queues an ASYNC op. Never fails by itself: a transport error surfaces
  // from the Flush or Call that writes it.
  template <typename Req>
  void Enqueue(const Req& m) {
    static_assert(Req::kKind == proto::OpKind::ASYNC);
    NoteContext();
    proto::AppendRequest(&queue_, m, NextSeq());
    ++queued_ops_;
    ++ops_since_offer_;
    Count(&queued_by_op_, static_cast<uint16_t>(Req::kOp));
    if (FlushDue()) FlushQueued();
  }

  // Sends the queue and `m` in one write and waits for m's reply. Returns the
  // op's result as a Status (code = CUresult or smolvm Code, message from the
  // host), or the session's failure when the transport broke. When `fd` >= 0
  // it rides with m's frame (the queue is flushed first, in its own write).
  // `bytes` fields of *rep point into the session's reply buffer: valid
  // until the next Call.
  template <typename Req, typename Rep>
  Status Call(const Req& m, Rep* rep, int fd = -1) {
    static_assert(Req::kKind == proto::OpKind::SYNC);
    RETURN_IF_ERROR(Connect());
    NoteContext();
    Count(&round_trips_by_op_, static_cast<uint16_t>(Req::kOp));
    uint32_t seq = NextSeq();
    if (fd >= 0) {
      // It would fail in sendmsg and end the session for good.
      if (no_descriptors()) return NotSupported(std::string(Req::kName) + " with a descriptor, in a session without");
      RETURN_IF_ERROR(Flush());
      proto::AppendRequest(&queue_, m, seq, 1);
      int fds[1] = {fd};
      RETURN_IF_ERROR(WriteQueue(fds));
    } else {
      proto::AppendRequest(&queue_, m, seq);
      RETURN_IF_ERROR(WriteQueue({}));
    }
    proto::ReplyHead head;
    RETURN_IF_ERROR(ReadReply(static_cast<uint16_t>(Req::kOp), seq, &reply_payload_));
    Status st = proto::DecodeReply(reply_payload_, &head, rep);
    if (!st.ok()) return Broken("malformed reply to " + std::string(Req::kName) + ": " + st.message());
    NoteDeferred(head.deferred);
    if (head.result != 0) return Status(head.result, std::move(head.message));
    return Status::Ok();
  }

  // The same for a request already encoded (the library shims, lib_api.h):
  // `payload` is the op's fields. CallRaw points *fields at the reply's
  // encoded fields (valid until the next Call).
  void EnqueueRaw(uint16_t op, std::string_view payload);
  Status CallRaw(uint16_t op, std::string_view payload, std::string_view* fields);

  // In a forked child: forgets the parent's connection (closing only this
  // process's copy of the socket, never writing to it) so the next Connect()
  // says Hello as a clone with `token`. The reserved ranges stay.
  void DetachForClone(const std::string& token);

  // The context the worker runs ops in is not known (a CtxDestroy may have
  // changed it): the next op says it again.
  void ForgetWireContext() { wire_ctx_ = ~uint64_t{0}; }

  // Writes the queued ASYNC ops now (no reply is awaited); waits while the
  // socket is full.
  Status Flush();
  // Ends the current batch now, as a batch of flush_ops is ended: what the
  // socket takes is written, the rest goes with the next batch; never waits
  // (but past flush_bytes, as Enqueue). For an op that sets the GPU a long
  // task (a graph launch): held until the batch fills or the program
  // synchronizes, the GPU would sit idle meanwhile, which it does not
  // natively.
  void Offer() {
    if (!queue_.empty() && connected()) FlushQueued();
  }

  // The device's last known idle point. A device synchronization that
  // succeeded marks it (every op issued before it has completed in the
  // calling thread's context); any op issued since, by any thread, ends it.
  // While it holds, a synchronization of that context has nothing to wait
  // for and no error to report, and is answered in the guest, as CUDA's
  // runtime answers it without a round trip to the device.
  void MarkSynchronized() {
    synced_at_ = issued_;
    synced_ctx_ = CallerContext();
    synced_ = true;
  }
  bool SynchronizedSinceLastOp() const { return synced_ && synced_at_ == issued_ && synced_ctx_ == CallerContext(); }
  // Ops queued since the queue was last wholly written (a write that did
  // not wait and was cut short leaves them all counted).
  size_t queued_ops() const { return queued_ops_; }
  // Bytes queued and not yet written.
  size_t unwritten_bytes() const { return queue_.size() - queue_written_; }

  // What this session sent, by wire op: SYNC ops, each one round trip (the
  // caller waited for the worker's reply), and ASYNC ops queued. Lifetime
  // totals, never reset (a clone keeps its parent's). The hot-path tests and
  // smolvm_shim_op_counts (shim_stats.cc) read them.
  static constexpr size_t kOpSlots = 1024;
  using OpCounts = std::array<uint64_t, kOpSlots>;
  const OpCounts& round_trips_by_op() const { return round_trips_by_op_; }
  const OpCounts& queued_by_op() const { return queued_by_op_; }

  // --- host functions (host_funcs.h) ----------------------------------------
  // The runner, started on first use. REQUIRE mu() held.
  HostFuncRunner& Callbacks();
  bool callbacks_started() const { return runner_ != nullptr && runner_->running(); }
  // Joins the runner (before fork(2)); REQUIRES mu() held and no call
  // pending (the worker synchronized).
  void StopCallbacks() {
    if (runner_) runner_->Stop();
  }
  // After the fork, in the parent: the runner again, if there was one.
  void RestartCallbacks() {
    if (runner_) runner_->Start();
  }
  // For the runner thread: reading is serialized by read_mu(); a CUDA call
  // reads while it waits for its reply, the runner while none does.
  std::mutex& read_mu() { return read_mu_; }
  enum class RunnerRead { kNothing, kRouted, kStashed, kWoken, kFailed };
  // REQUIRES read_mu() held: waits for the connection or `wake_fd`; a
  // HostFuncCall goes to `runner`, anything else (a reply, a failure) is
  // kept for the CUDA call that reads next.
  RunnerRead ReadForRunner(int wake_fd, HostFuncRunner* runner);
  // The runner's answer, written between whole frames (no lock but the
  // writer's: the session lock may be held by a call waiting for it).
  void SendHostFuncDone(uint64_t call);
  // The runner's answer to a HostFetch (host_mirror.h): this process's bytes
  // [addr, +bytes) in HostFetchData frames, when they lie in a mirrored
  // segment; written like SendHostFuncDone, which follows.
  void SendHostFetchData(uint64_t addr, uint64_t bytes);
  // Host functions queued and not finished (one may be running): a copy
  // from pinned memory queued now must read it when its stream reaches it.
  bool callbacks_unfinished() const { return runner_ != nullptr && runner_->unfinished() != 0; }

  // The first unreported failure of an earlier ASYNC op (0 when none);
  // cleared by the call.
  int32_t TakeDeferred();
  // Takes the deferred failure only when it lies in [lo, hi) (a library's
  // status range); 0 otherwise.
  int32_t TakeDeferredIn(int32_t lo, int32_t hi);

 private:
  // The sequence number of the next op issued (any op, SYNC or ASYNC).
  uint32_t NextSeq() {
    ++issued_;
    return next_seq_++;
  }
  // The context the calling thread's next op runs in.
  static uint64_t CallerContext() { return t_primary_scope > 0 ? 0 : t_guest_context; }
  // Queues a CtxSetCurrent ahead of the next op when the calling thread's
  // context is not the one the worker runs ops in.
  void NoteContext() {
    const uint64_t want = CallerContext();
    if (want == wire_ctx_) return;
    proto::CtxSetCurrentRequest m;
    m.ctx = want;
    proto::AppendRequest(&queue_, m, NextSeq());
    ++queued_ops_;
    Count(&queued_by_op_, static_cast<uint16_t>(proto::Op::kCtxSetCurrent));
    wire_ctx_ = want;
  }
  uint64_t wire_ctx_ = 0;  // the context the worker runs this session's ops in
  Status WriteQueue(std::span<const int> fds);
  // The flush Enqueue triggers (see SessionOptions::flush_ops): when
  // flush_bytes are unwritten, waits until half of that is left; else
  // offers the queue to the socket.
  void FlushQueued();
  // Writes what the socket takes now of the unwritten queue, never waiting.
  Status OfferQueue();
  // Writes the next `bytes` of the unwritten queue, waiting while the socket
  // is full; may end inside a frame (its rest goes first, before anything
  // else: the stream keeps the queue's order).
  Status WriteUnwritten(size_t bytes);
  // The first `bytes` of the unwritten queue were written.
  void MarkWritten(size_t bytes);
  Status ReadReply(uint16_t op, uint32_t seq, std::string* payload);
  Status Handshake();
  Status ReserveRanges();
  void NoteDeferred(int32_t deferred);
  // Marks the session failed (printing `message` once) and returns the failure.
  Status Fail(SessionFailure how, const std::string& message);
  Status Broken(const std::string& message) { return Fail(SessionFailure::kDevicesUnavailable, message); }
  static void Count(OpCounts* counts, uint16_t op) { ++(*counts)[op < kOpSlots ? op : 0]; }
  bool FlushDue() const {
    return unwritten_bytes() >= options_.flush_bytes ||
           (options_.flush_ops != 0 && ops_since_offer_ >= options_.flush_ops);
  }

  SessionOptions options_;
  std::mutex mu_;
  // Writes to the channel take write_mu_ (the runner's HostFuncDone writes
  // without mu_); reads take read_mu_ (ReadReply, the runner). While the
  // runner exists, the queue is written whole frames at a time, so a
  // HostFuncDone always lands between frames.
  std::mutex write_mu_;
  std::mutex read_mu_;
  std::unique_ptr<HostFuncRunner> runner_;
  // A frame the runner read for a CUDA call (REQUIRES read_mu_).
  bool stash_full_ = false;
  proto::FrameHeader stash_header_;
  std::string stash_payload_;
  Status stash_error_;
  // Reads the next frame that is not a HostFuncCall (those go to the
  // runner); REQUIRES read_mu_.
  Status ReadFrameRouted(proto::FrameHeader* h, std::string* payload);
  // A DeviceOutput frame's text to this process's fd 1 or 2 (what its
  // kernels printed, at the sync point whose reply follows).
  Status WriteDeviceOutput(std::string_view payload);
  // A HostLand frame (an unsolicited one from the worker) into mirror_.
  Status RouteLanding(std::string_view payload) {
    return mirror_ != nullptr ? mirror_->Land(payload) : Malformed("a HostLand in a session with descriptors");
  }
  HostMirror* mirror_ = nullptr;
  std::unique_ptr<UnixChannel> channel_;
  SessionFailure failure_ = SessionFailure::kNone;
  Status failure_status_;
  proto::HelloReply hello_;
  // Frames in issue order; [0, queue_written_) was written already (by a
  // write that did not wait and was cut short). Empty once all is written.
  std::string queue_;
  size_t queue_written_ = 0;
  size_t ops_since_offer_ = 0;  // ops queued since the last flush or offer
  std::string reply_payload_;  // backs bytes fields of the last reply
  size_t queued_ops_ = 0;
  uint32_t next_seq_ = 1;
  uint64_t issued_ = 0;  // ops issued over the session's life
  // MarkSynchronized(): issued_ then, the context synchronized.
  bool synced_ = false;
  uint64_t synced_at_ = 0;
  uint64_t synced_ctx_ = 0;
  const int spin_us_ = GuestSpinMicros();
  int32_t deferred_ = 0;
  void* arena_reservation_ = nullptr;
  void* host_reservation_ = nullptr;
  OpCounts round_trips_by_op_{};
  OpCounts queued_by_op_{};
};

}  // namespace smolvm::shim
