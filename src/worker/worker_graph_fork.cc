// Graphs across a fork (graph_log.h): the golden's worker logs what builds
// its graphs; a clone's worker replays it, once its guest registered its
// pinned memory again (memcpy nodes read it), before the guest's first
// other request.
#include <cuda.h>

#include <unistd.h>

#include <cstdio>

#include "base/diagnostics.h"
#include "proto/frame.h"
#include "worker/worker.h"

namespace smolvm {
namespace {

template <typename Req>
bool DecodeAs(std::string_view payload, Req* q) {
  proto::Decoder dec(payload);
  return proto::Decode(dec, q);
}

template <typename Req>
proto::ManifestGraphCall Encoded(const Req& q) {
  proto::ManifestGraphCall c{Req::kNumber, {}, 1};
  proto::Encoder enc(&c.request);
  proto::Encode(enc, q);
  return c;
}

// Ops a capture can hold (the log keeps them when their stream captured).
bool CapturableOp(uint16_t op) {
  using proto::Op;
  switch (static_cast<Op>(op)) {
    case Op::kLaunchKernel:
    case Op::kLaunchKernelEx:
    case Op::kMemcpyHtoDHost:
    case Op::kMemcpyDtoHHost:
    case Op::kMemcpyDtoD:
    case Op::kMemset:
    case Op::kEventRecord:
    case Op::kStreamWaitEvent:
    case Op::kLaunchHostFunc:
    case Op::kGraphLaunch:
    case Op::kGraphUpload:
    case Op::kLtMatmul:
    case Op::kBlasGemm:
    case Op::kBlasLevel1:
    case Op::kDnnExecute:
      return true;
    default:
      return false;
  }
}

}  // namespace

bool Worker::OnCapturingStream(uint16_t op, std::string_view payload) {
  if (captures_.empty() || !CapturableOp(op)) return false;
  using proto::Op;
  uint64_t stream = 0;
  bool found = false;
  auto take = [&](auto q) {
    if (DecodeAs(payload, &q)) stream = q.stream, found = true;
  };
  switch (static_cast<Op>(op)) {
    case Op::kLaunchKernel: take(proto::LaunchKernelRequest{}); break;
    case Op::kLaunchKernelEx: take(proto::LaunchKernelExRequest{}); break;
    case Op::kMemcpyHtoDHost: take(proto::MemcpyHtoDHostRequest{}); break;
    case Op::kMemcpyDtoHHost: take(proto::MemcpyDtoHHostRequest{}); break;
    case Op::kMemcpyDtoD: take(proto::MemcpyDtoDRequest{}); break;
    case Op::kMemset: take(proto::MemsetRequest{}); break;
    case Op::kEventRecord: take(proto::EventRecordRequest{}); break;
    case Op::kStreamWaitEvent: take(proto::StreamWaitEventRequest{}); break;
    case Op::kLaunchHostFunc: take(proto::LaunchHostFuncRequest{}); break;
    case Op::kGraphLaunch: take(proto::GraphLaunchRequest{}); break;
    case Op::kGraphUpload: take(proto::GraphUploadRequest{}); break;
    case Op::kLtMatmul: take(proto::LtMatmulRequest{}); break;
    case Op::kBlasGemm:
    case Op::kBlasLevel1: {
      uint64_t handle = 0;
      if (op == proto::BlasGemmRequest::kNumber) {
        proto::BlasGemmRequest q;
        if (DecodeAs(payload, &q)) handle = q.handle;
      } else {
        proto::BlasLevel1Request q;
        if (DecodeAs(payload, &q)) handle = q.handle;
      }
      auto it = blas_handles_.find(handle);
      if (it != blas_handles_.end()) stream = it->second.stream, found = true;
      break;
    }
    case Op::kDnnExecute: {
      proto::DnnExecuteRequest q;
      if (!DecodeAs(payload, &q)) break;
      auto it = dnn_.handles.find(q.handle);
      if (it != dnn_.handles.end()) stream = it->second.stream, found = true;
      break;
    }
    default:
      break;
  }
  if (!found) return false;
  Result<uint64_t> s = Stream(stream);
  if (!s.ok()) return false;
  Result<bool> capturing = backend_->StreamIsCapturing(*s);
  return capturing.ok() && *capturing;
}

void Worker::LogForGraphs(const proto::FrameHeader& h, std::string_view payload, const Status& status) {
  const uint16_t op = h.op;
  const bool graph_op = GraphLog::IsGraphOp(op) && op != proto::GraphLaunchRequest::kNumber &&
                        op != proto::GraphUploadRequest::kNumber;
  if (graph_op) {
    const bool end = op == proto::StreamEndCaptureRequest::kNumber;
    if (!status.ok() && !end) return;
    if (!graph_log_.active()) {
      // The log starts with the streams and events alive now: a clone may
      // lack those destroyed later, which the logged work still names.
      for (const auto& [id, s] : streams_) graph_log_.Append(proto::StreamCreateRequest::kNumber,
                                                             Encoded(proto::StreamCreateRequest{id, s.flags, s.priority}).request);
      for (const auto& [id, e] : events_)
        graph_log_.Append(proto::EventCreateRequest::kNumber, Encoded(proto::EventCreateRequest{id, e.flags}).request);
    }
    graph_log_.Append(op, payload, status.ok());
  } else if (!graph_log_.active() || !status.ok()) {
    return;
  } else if (GraphLog::IsSettingOp(op) || OnCapturingStream(op, payload)) {
    graph_log_.Append(op, payload);
  }
  if (captures_.empty() && (graphs_ == nullptr || graphs_->Empty())) {
    graph_log_.Clear();
    if (graphs_) graphs_->ResetNames();
  }
}

void Worker::ReplayGraphsIfDue(uint16_t op) {
  // The guest registers its pinned segments first thing after its Hello.
  if (graph_replay_ == nullptr || op == proto::HostRegisterRequest::kNumber) return;
  std::unique_ptr<proto::ForkManifestBody> want = std::move(graph_replay_);
  Status st = ReplayGraphs(*want);
  if (!st.ok())
    std::fprintf(Diagnostics(), "smolvm worker %d: session %llu: the golden's graphs could not be rebuilt: %s\n", ::getpid(),
                 static_cast<unsigned long long>(session_id_), st.ToString().c_str());
}

Status Worker::ReplayGraphs(const proto::ForkManifestBody& want) {
  if (want.graph_log.empty()) return Status::Ok();
  graph_log_.BeginReplay(want);
  for (const proto::ManifestGraphCall& call : want.graph_log) {
    const uint16_t op = static_cast<uint16_t>(call.op);
    if (!proto::IsKnownOp(op) || (!GraphLog::IsGraphOp(op) && !GraphLog::IsSettingOp(op) &&
                                  !CapturableOp(op)))
      return Malformed("clone manifest: a graph log entry of op " + std::to_string(op));
    if (op == proto::StreamCreateRequest::kNumber) {
      proto::StreamCreateRequest q;
      if (DecodeAs(call.request, &q) && streams_.count(q.stream)) {
        graph_log_.Append(op, call.request);
        continue;
      }
    }
    if (op == proto::EventCreateRequest::kNumber) {
      proto::EventCreateRequest q;
      if (DecodeAs(call.request, &q) && events_.count(q.event)) {
        graph_log_.Append(op, call.request);
        continue;
      }
    }
    uint64_t ended_graph = 0;
    if (op == proto::StreamEndCaptureRequest::kNumber) {
      proto::StreamEndCaptureRequest q;
      if (DecodeAs(call.request, &q))
        if (auto it = captures_.find(q.stream); it != captures_.end()) ended_graph = it->second;
    }
    proto::FrameHeader h;
    h.op = op;
    h.flags = proto::IsAsyncOp(op) ? proto::kFlagAsync : 0;
    h.payload_bytes = static_cast<uint32_t>(call.request.size());
    proto::CallContext ctx;
    ctx.header = &h;
    std::string reply;  // the golden's guest had its answer
    proto::DispatchOutcome o = proto::Dispatch(*this, h, call.request, &ctx, &reply);
    if (op == proto::StreamEndCaptureRequest::kNumber && !call.ok) {
      // The golden's capture failed: the clone's ends too, and keeps nothing.
      if (o.status.ok() && ended_graph != 0) (void)Graphs().Destroy(ended_graph);
      graph_log_.Append(op, call.request, false);
      continue;
    }
    if (!o.status.ok())
      return Status(o.status.code(), std::string("replaying the golden's graphs: ") + proto::OpName(op) + ": " +
                                         o.status.message());
    graph_log_.Append(op, call.request);
  }
  if (!captures_.empty()) return Malformed("clone manifest: the graph log leaves a capture open");
  // The libraries' streams and modes as the golden holds them now.
  if (blas_) {
    for (const auto& b : want.blas) {
      auto it = blas_handles_.find(b.id);
      if (it == blas_handles_.end()) continue;
      it->second.stream = b.stream;
      ASSIGN_OR_RETURN(uint64_t s, Stream(b.stream));
      RETURN_IF_ERROR(blas_->SetStream(it->second.handle, s));
      for (const auto& m : b.modes) RETURN_IF_ERROR(blas_->SetMode(it->second.handle, static_cast<BlasMode>(m.what), m.value));
      if (b.workspace_bytes) RETURN_IF_ERROR(blas_->SetWorkspace(it->second.handle, b.workspace, b.workspace_bytes));
    }
  }
  if (dnn_.backend) {
    for (const auto& d : want.dnn_handles) {
      auto it = dnn_.handles.find(d.id);
      if (it == dnn_.handles.end() || d.stream == 0) continue;
      it->second.stream = d.stream;
      ASSIGN_OR_RETURN(uint64_t s, Stream(d.stream));
      RETURN_IF_ERROR(dnn_.backend->SetStream(it->second.handle, s));
    }
  }
  return Status::Ok();
}

}  // namespace smolvm
