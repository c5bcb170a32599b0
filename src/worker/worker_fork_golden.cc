// The golden's half of a fork: it blocks in ForkpointWait until the daemon
// orders a fork or a release (ForkGo); ForkPrepare freezes and describes its
// session (the manifest and its chunks' descriptors); at the forkpoint with
// changed memory it exports its chunks ahead (ForkAhead) so a fork need not.
// A fork of N clones is two messages from the daemon: one ForkPrepare and
// one ForkGo carrying all N orders, which the worker hands to the guest's
// ForkpointWaits one after another (the guest forks a child per order).
#include <cuda.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <set>

#include "base/diagnostics.h"
#include "proto/control_dispatch.h"
#include "worker/control.h"
#include "worker/worker.h"

namespace smolvm {

Status Worker::AnswerForkpoint(Channel& guest) {
  if (!forkpoint_waiting_ || fork_orders_.empty()) return Status::Ok();
  proto::ForkOrder go = fork_orders_.front();
  fork_orders_.pop_front();
  forkpoint_waiting_ = false;
  std::string reply;
  AppendDeviceOutput(&reply);
  proto::AppendReply(&reply, proto::ForkpointWaitRequest::kNumber, forkpoint_seq_, deferred_,
                     proto::ForkpointWaitReply{go.clone_index, go.token});
  deferred_ = 0;
  RETURN_IF_ERROR(WriteReply(guest, reply));
  if (go.clone_index < 0) ahead_epoch_ = 0;  // the daemon lets go of the ahead export on release
  if (go.clone_index < 0 && control_) {
    std::string note;
    proto::AppendRequest(&note, proto::WorkerStateRequest{session_id_, "running"}, 0);
    (void)control_->Write(note);
  }
  return Status::Ok();
}

// What the daemon may send a serving worker: fork orders for its golden.
struct Worker::ServingLink {
  Worker& w;
  Channel& guest;
  Status Handle(const proto::ForkPrepareRequest& r, proto::ControlContext*) { return w.PrepareFork(r); }
  Status Handle(const proto::ForkAheadAskRequest& r, proto::ControlContext*) {
    w.OnForkAheadAsk(r.at != 0);
    return Status::Ok();
  }
  Status Handle(const proto::ForkGoRequest& r, proto::ControlContext*) {
    if (r.orders.empty()) return Malformed("ForkGo without an order");
    w.fork_orders_.insert(w.fork_orders_.end(), r.orders.begin(), r.orders.end());
    return w.AnswerForkpoint(guest);
  }
};

Status Worker::OnControl(Channel& guest) {
  proto::FrameHeader h;
  std::string payload;
  std::vector<UniqueFd> fds;
  Status st = control_->ReadFrame(&h, &payload, &fds);
  if (!st.ok()) {
    // The daemon is gone; PR_SET_PDEATHSIG ends us too, but do not spin.
    control_ = nullptr;
    return Status::Ok();
  }
  ServingLink link{*this, guest};
  proto::ControlContext ctx{&h, &fds};
  return proto::DispatchControl(link, h, payload, &ctx);
}

Result<std::vector<uint64_t>> Worker::ShareCandidates(proto::ShareMode share) {
  std::vector<uint64_t> out;
  if (share == proto::ShareMode::kOn) {
    for (const auto& [addr, c] : memory_->chunks())
      if (memory_->ChunkIsFrozen(addr)) out.push_back(addr);
    return out;
  }
  // auto: verified against the device once per epoch (the golden is
  // synchronized and blocked at its forkpoint, so its memory holds still).
  if (auto_epoch_ != epoch_) {
    RETURN_IF_ERROR(backend_->CtxSynchronize());
    ASSIGN_OR_RETURN(auto_chunks_, memory_->AutoShareChunks());
    auto_epoch_ = epoch_;
  }
  return auto_chunks_;
}

void Worker::SendAhead() {
  auto t0 = std::chrono::steady_clock::now();
  // What a fork will likely share: the frozen chunks, or when nothing is
  // marked frozen, what --share auto would pick.
  auto frozen = ShareCandidates(proto::ShareMode::kOn);
  std::vector<uint64_t> candidates = frozen.ok() ? *frozen : std::vector<uint64_t>{};
  if (candidates.empty()) {
    auto guessed = ShareCandidates(proto::ShareMode::kAuto);
    if (guessed.ok()) {
      candidates = *guessed;
    } else {
      std::fprintf(Diagnostics(), "smolvm worker %d: --share auto check failed: %s\n", ::getpid(),
                   guessed.status().ToString().c_str());
    }
  }
  std::set<uint64_t> pick(candidates.begin(), candidates.end());
  std::vector<UniqueFd> owned;
  std::vector<int> fds;
  proto::ManifestChunkList chunks;
  for (const auto& [addr, c] : memory_->chunks()) {
    auto fd = backend_->ChunkExport(c.handle);
    if (!fd.ok()) {
      std::fprintf(Diagnostics(), "smolvm worker %d: ahead export failed: %s\n", ::getpid(), fd.status().ToString().c_str());
      return;  // forks export at fork time instead
    }
    fds.push_back(fd->get());
    owned.push_back(std::move(fd).value());
    chunks.chunks.push_back({addr, c.bytes, static_cast<uint8_t>(pick.count(addr) ? 1 : 0), c.id});
  }
  std::string list;
  proto::Encoder enc(&list);
  proto::EncodeFields(enc, chunks);
  std::string out;
  proto::AppendRequest(
      &out, proto::ForkAheadRequest{session_id_, epoch_, list, static_cast<uint32_t>(fds.size()), AheadSetup()}, 0);
  if (!control_->Write(out).ok() || !SendChunkFds(*control_, fds).ok()) return;
  ahead_epoch_ = epoch_;
  std::fprintf(Diagnostics(), "smolvm worker %d: fork ahead: %zu chunks exported, %zu to preload, %.1f ms\n", ::getpid(),
               fds.size(), pick.size(),
               std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
}

Status Worker::PrepareFork(const proto::ForkPrepareRequest& req) {
  proto::ForkManifestRequest m;
  auto fail = [&](const Status& why) {
    m.result = why.code() ? why.code() : static_cast<int32_t>(Code::kInternal);
    m.message = why.message();
    std::string out;
    proto::AppendRequest(&out, m, 0);
    return control_->Write(out);
  };
  if (!forkpoint_waiting_) return fail(Status(Code::kInvalidArgument, "the session is not at its forkpoint"));
  if (VmmInUse())
    return fail(Status(static_cast<int32_t>(CUDA_ERROR_NOT_SUPPORTED),
                       "a fork of a session holding cuMemMap mappings (expandable segments) is not supported yet"));
  if (!captures_.empty())
    return fail(Status(static_cast<int32_t>(CUDA_ERROR_NOT_SUPPORTED), "a fork while a stream captures a graph"));
  if (arrays_ && !arrays_->empty())
    return fail(Status(static_cast<int32_t>(CUDA_ERROR_NOT_SUPPORTED),
                       "a fork of a session holding CUDA arrays or texture or surface objects is not supported (" +
                           std::to_string(arrays_->array_count()) + " arrays, " +
                           std::to_string(arrays_->object_count()) +
                           " objects): free them before the forkpoint (docs/fork.md)"));
  if (!contexts_.empty())
    return fail(Status(static_cast<int32_t>(CUDA_ERROR_NOT_SUPPORTED),
                       "a fork of a session holding " + std::to_string(contexts_.size()) +
                           " context(s) of its own (cuCtxCreate) is not supported: destroy them before the forkpoint"));
  if (graph_log_.overflowed())
    return fail(Status(static_cast<int32_t>(CUDA_ERROR_NOT_SUPPORTED),
                       "a fork of a session whose graph log (what clones replay) passed 256 MiB"));
  const auto mode = proto::ShareModeOf(req.share);
  if (!mode) return fail(InvalidArgument("share must be on, off or auto"));
  auto t0 = std::chrono::steady_clock::now();
  auto ms_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
  };
  Status st = backend_->CtxSynchronize();
  if (!st.ok()) return fail(st);
  bool share = *mode != proto::ShareMode::kOff;
  if (share) {
    auto picked = ShareCandidates(*mode);
    if (!picked.ok()) return fail(picked.status());
    if (picked->empty() && *mode == proto::ShareMode::kOn) return fail(InvalidArgument("no memory marked frozen; use --share auto"));
    if (picked->empty())
      return fail(InvalidArgument(
          "--share auto found no chunk that still holds what host-to-device copies wrote (weights computed on the "
          "device are not found); mark them with smolvmMarkFrozen and use --share on, or use --share off"));
    // Shared memory is read-only for everyone from now on, the golden too.
    st = memory_->ShareChunks(*picked);
    if (!st.ok()) return fail(st);
  }
  double share_ms = ms_since(t0);
  auto t1 = std::chrono::steady_clock::now();
  std::vector<UniqueFd> owned;
  std::vector<int> fds;
  const bool reuse_ahead = ahead_epoch_ == epoch_;
  for (const auto& [addr, c] : memory_->chunks()) {
    if (!reuse_ahead) {
      auto fd = backend_->ChunkExport(c.handle);
      if (!fd.ok()) return fail(fd.status());
      fds.push_back(fd->get());
      owned.push_back(std::move(fd).value());
    }
    if (share && c.shared) {
      m.shared_bytes += c.bytes;
    } else {
      m.private_bytes += c.bytes;
    }
  }
  // The chunks are the ones the ForkAhead of this epoch exported, in the
  // same order: the daemon still holds their descriptors.
  if (reuse_ahead) m.ahead_generation = ahead_epoch_;
  proto::ForkManifestBody body;
  body.layout = memory_->ExportLayout();
  if (!share) {
    // The control arm: nothing is shared, whatever was shared before.
    for (auto& c : body.layout.chunks) c.shared = 0;
  }
  DescribeSetup(&body);
  if (Status g = DescribeGlobals(&body); !g.ok()) return fail(g);
  if (Status st = DescribeLimits(&body); !st.ok())
    std::fprintf(Diagnostics(), "smolvm worker %d: fork prepare: context limits not read (%s); clones keep a fresh worker's\n",
                 ::getpid(), st.ToString().c_str());
  for (const auto& [id, b] : blas_handles_) {
    proto::ManifestBlas rec{id, b.stream, {}, b.workspace, b.workspace_bytes};
    for (const auto& [what, value] : b.modes) rec.modes.push_back({what, value});
    body.blas.push_back(std::move(rec));
  }
  for (const auto& [id, h] : lt_handles_) body.lt.push_back(id);
  graph_log_.Describe(&body);
  uint64_t total = 0;
  (void)backend_->DeviceMemGetInfo(&m.free_bytes, &total);
  m.manifest = proto::EncodeManifest(body);
  m.num_chunks = static_cast<uint32_t>(fds.size());
  std::fprintf(Diagnostics(), "smolvm worker %d: fork prepare: sync+share %.1f ms, %s %.1f ms\n", ::getpid(), share_ms,
               reuse_ahead ? "descriptors exported ahead" : ("export " + std::to_string(fds.size()) + " chunks").c_str(),
               ms_since(t1));
  // What each clone copies, beside what lives in it (`smolvm cuda status`
  // shows the chunk totals; this line says which allocations they hold).
  if (share)
    std::fprintf(Diagnostics(), "smolvm worker %d: fork prepare: %s\n", ::getpid(),
                 FormatPrivateSummary(memory_->PrivateSummary()).c_str());
  std::string out;
  proto::AppendRequest(&out, m, 0);
  RETURN_IF_ERROR(control_->Write(out));
  RETURN_IF_ERROR(SendChunkFds(*control_, fds));
  SendStats();  // its shared chunks changed
  return Status::Ok();
}

void Worker::DnnManifest(proto::ForkManifestBody* body) const {
  for (const auto& [id, h] : dnn_.handles) body->dnn_handles.push_back({id, h.stream});
  body->dnn_log = dnn_.log;
}

}  // namespace smolvm
