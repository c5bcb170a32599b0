// What workers send the daemon on their control links (control_ops.h
// 300-316), decoded by the generated control dispatch.
#include "daemon/control_links.h"
#include "daemon/daemon.h"
#include "proto/control_dispatch.h"

namespace smolvm {

struct Daemon::WorkerLink {
  Daemon& d;
  WorkerProc& w;
  using Ctx = proto::ControlContext;

  Status Handle(const proto::WorkerReadyRequest& r, Ctx*) {
    w.ready = true;
    w.context_bytes = r.context_bytes ? r.context_bytes : d.MeasuredContextBytes(w.pid);
    if (r.device_bytes) d.device_bytes_ = r.device_bytes;
    d.start_failures_ = 0;
    d.AssignWorkers();
    d.PrimeWorkers();
    return Status::Ok();
  }
  Status Handle(const proto::WorkerStateRequest& r, Ctx*) {
    d.OnSessionState(w, r);
    d.AdvanceForks();
    return Status::Ok();
  }
  Status Handle(const proto::WorkerStatsRequest& r, Ctx*) {
    d.OnSessionStats(w, r);
    return Status::Ok();
  }
  Status Handle(const proto::ForkManifestRequest& r, Ctx*) {
    d.OnForkManifest(w, r);
    return Status::Ok();
  }
  Status Handle(const proto::CloneBuiltRequest& r, Ctx*) {
    d.OnCloneBuilt(w, r);
    return Status::Ok();
  }
  Status Handle(const proto::ForkAheadRequest& r, Ctx*) {
    d.OnForkAhead(w, r);
    return Status::Ok();
  }
  Status Handle(const proto::PreloadDoneRequest& r, Ctx*) {
    d.OnPreloadDone(w, r);
    return Status::Ok();
  }
  Status Handle(const proto::WorkerOpsRequest& r, Ctx*) {
    if (r.session_id == w.session_id) (void)d.ops_.Update(r);
    return Status::Ok();
  }
};

void Daemon::OnWorkerControl(WorkerProc& w) {
  proto::FrameHeader h;
  std::string payload;
  std::vector<UniqueFd> fds;
  auto whole = w.control->TryReadFrame(&h, &payload, &fds);  // never waits (control_links.h)
  if (whole.ok() && !*whole) return;
  Status st = whole.status();
  if (!st.ok()) {
    w.control.reset();  // its exit arrives through the pidfd
    return;
  }
  WorkerLink link{*this, w};
  proto::ControlContext ctx{&h, &fds};
  // A frame that does not decode, or that a worker never sends, is dropped:
  // the worker is ours, and its session goes on.
  (void)proto::DispatchControl(link, h, payload, &ctx);
}

}  // namespace smolvm
