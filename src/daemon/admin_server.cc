// The admin server: operators' and supervisors' requests on the admin
// socket (<socket>.admin, 0600; control_ops.h 200-205), decoded by the
// generated control dispatch. Forks are queued for the fork engine
// (fork_engine.cc), whose reply comes when the clones are attached.
#include <sys/socket.h>

#include "daemon/control_links.h"
#include "daemon/daemon.h"
#include "proto/control_dispatch.h"

namespace smolvm {

struct Daemon::AdminLink {
  Daemon& d;
  uint64_t client;
  using Ctx = proto::ControlContext;

  Status Handle(const proto::AdminStatusRequest&, Ctx* ctx) {
    d.AdminReply(client, ctx->header->seq, ctx->header->op, Status::Ok(), StatusJson(d.CollectStatus()));
    return Status::Ok();
  }
  Status Handle(const proto::AdminForkRequest& r, Ctx* ctx) {
    d.StartFork(client, ctx->header->seq, r);
    return Status::Ok();
  }
  Status Handle(const proto::AdminReleaseRequest& r, Ctx* ctx) {
    d.Release(client, ctx->header->seq, r);
    return Status::Ok();
  }
  Status Handle(const proto::AdminMachineAttachRequest& r, Ctx* ctx) {
    d.AttachMachine(client, ctx->header->seq, r, ctx->fds_in);
    return Status::Ok();
  }
  Status Handle(const proto::AdminMachineForkRequest& r, Ctx* ctx) {
    d.StartMachineFork(client, ctx->header->seq, r);
    return Status::Ok();
  }
  Status Handle(const proto::AdminForkpointRequest& r, Ctx* ctx) {
    d.OnAdminForkpoint(client, ctx->header->seq, r);  // fork_ahead.cc
    return Status::Ok();
  }
};

void Daemon::AcceptAdmin() {
  auto fd = AcceptOn(admin_listen_.get(), SOCK_CLOEXEC);
  if (!fd.ok()) return;
  (void)SetLinkSendTimeout(fd->get());
  admin_clients_[next_admin_client_++] = std::make_unique<UnixChannel>(std::move(fd).value());
}

void Daemon::ServeAdmin(uint64_t client) {
  auto it = admin_clients_.find(client);
  if (it == admin_clients_.end()) return;
  UnixChannel& ch = *it->second;
  proto::FrameHeader h;
  std::string payload;
  std::vector<UniqueFd> fds;
  auto whole = ch.TryReadFrame(&h, &payload, &fds);  // never waits (control_links.h)
  if (whole.ok() && !*whole) return;
  Status st = whole.status();
  if (!st.ok()) {
    admin_clients_.erase(it);
    DetachEndpointsOf(client);
    return;
  }
  AdminLink link{*this, client};
  proto::ControlContext ctx{&h, &fds};
  // A request that does not decode, or an op the admin socket does not
  // take, is answered with why (a SYNC one; nothing waits on an ASYNC one).
  Status handled = proto::DispatchControl(link, h, payload, &ctx);
  if (!handled.ok() && !(h.flags & proto::kFlagAsync)) AdminReply(client, h.seq, h.op, handled, "");
}

void Daemon::AdminReply(uint64_t client, uint32_t seq, uint16_t op, const Status& st, const std::string& json) {
  auto it = admin_clients_.find(client);
  if (it == admin_clients_.end()) return;
  std::string out;
  if (st.ok()) {
    // AdminStatus, AdminFork and AdminMachineFork replies are one JSON string.
    proto::AppendReply(&out, op, seq, 0, proto::AdminForkReply{json});
  } else {
    proto::AppendErrorReply(&out, op, seq, st.code(), 0, st.message());
  }
  (void)it->second->Write(out);
}

void Daemon::StartFork(uint64_t client, uint32_t seq, const proto::AdminForkRequest& req) {
  const uint16_t op = proto::AdminForkRequest::kNumber;
  if (req.count == 0) return AdminReply(client, seq, op, InvalidArgument("--count must be at least 1"), "");
  if (req.count > 256) return AdminReply(client, seq, op, InvalidArgument("--count is at most 256"), "");
  auto share = proto::ShareModeOf(req.share);
  if (!share) return AdminReply(client, seq, op, InvalidArgument("--share must be on, off or auto"), "");
  Session* s = FindSession(req.session, req.pid);
  if (!s && (req.session || req.wait_ms == 0)) {
    std::string who = req.session ? "session " + std::to_string(req.session) : "pid " + std::to_string(req.pid);
    return AdminReply(client, seq, op, NotFound("no CUDA session of " + who + " (see 'smolvm cuda status')"), "");
  }
  if (QueueFork(client, seq, op, req.pid, s ? s->id : 0, req.count, *share, req.wait_ms)) AdvanceForks();
}

void Daemon::Release(uint64_t client, uint32_t seq, const proto::AdminReleaseRequest& req) {
  const uint16_t op = proto::AdminReleaseRequest::kNumber;
  Session* s = FindSession(req.session, req.pid);
  if (!s) return AdminReply(client, seq, op, NotFound("no CUDA session of pid " + std::to_string(req.pid)), "");
  if (s->state != "forkpoint")
    return AdminReply(client, seq, op, InvalidArgument("the session is not waiting at its forkpoint"), "");
  // Its clones may still be copying its memory: it stays until they are built.
  for (const auto& [id, job] : forks_)
    if (job.golden == s->id)
      return AdminReply(client, seq, op,
                        Unavailable("a fork of this session is in progress (release it once the fork is done)"), "");
  auto w = workers_.find(s->worker_pid);
  if (w == workers_.end() || !w->second.control) return AdminReply(client, seq, op, Unavailable("its worker is gone"), "");
  std::string out;
  proto::AppendRequest(&out, proto::ForkGoRequest{{proto::ForkOrder{-1, ""}}}, 0);
  (void)w->second.control->Write(out);
  s->state = "running";
  auto it = admin_clients_.find(client);
  if (it != admin_clients_.end()) {
    std::string rep;
    proto::AppendReply(&rep, op, seq, 0, proto::AdminReleaseReply{});
    (void)it->second->Write(rep);
  }
}

}  // namespace smolvm
