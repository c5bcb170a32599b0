// The `_cuda-worker` process (WorkerMain): brings a Worker up as the
// daemon's user, serves the daemon's orders while pooled, then enters its
// jail (worker_jail.h, worker_seccomp.h) before it rebuilds a clone or
// adopts a guest, and serves that one session.
#include <cuda.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/diagnostics.h"
#include "backend/backend_factory.h"
#include "worker/control.h"
#include "daemon/machine_budget.h"
#include "worker/library_preload.h"
#include "worker/worker.h"
#include "worker/worker_jail.h"
#include "worker/worker_seccomp.h"
#include "proto/control_dispatch.h"
#include "proto/frame.h"
#include "transport/unix_channel.h"

namespace smolvm {

namespace {

// Drops to the tenant's uid and loads the seccomp filter: after this the
// worker reads guest bytes. False (the worker must end) when it cannot.
bool EnterJail(Worker& worker, WorkerJail& jail, uint32_t uid) {
  auto t0 = std::chrono::steady_clock::now();
  auto modules = jail.Enter(uid);
  if (std::getenv("SMOLVM_WORKER_TRACE") != nullptr)
    std::fprintf(Diagnostics(), "smolvm worker %d: jail entered as uid %u in %.3f ms\n", ::getpid(), uid,
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  if (modules.ok() && !modules->empty()) worker.set_module_cache_dir(*modules);
  if (!modules.ok()) {
    std::fprintf(Diagnostics(), "smolvm worker %d: cannot enter its jail (uid %u): %s\n", ::getpid(), uid,
                 modules.status().ToString().c_str());
    return false;
  }
  return true;
}

// The daemon's orders to a pooled worker, through the generated control
// dispatch: preloads, then one clone build or one adoption. A handler that
// must end the process says how in `exit`.
//
// The jail is entered once, at the first of: a preload (as its golden's
// tenant: the fork that follows does not wait for the uid change), a clone
// build, an adoption. Once in, the worker takes orders for that uid only:
// any other ends it (kWorkerExitJailFailed), so a worker preloaded for one
// tenant can never serve another (the daemon retires it instead).
struct PooledLink {
  Worker& worker;
  UnixChannel& control;
  WorkerJail& jail;
  bool built_clone = false;
  bool jailed = false;
  uint32_t jail_uid = 0;
  int exit = kWorkerExitServed;
  bool adopted = false;
  proto::WorkerAdoptRequest adopt{};
  UniqueFd guest{};
  using Ctx = proto::ControlContext;

  Status Fail(int code, Status why) {
    exit = code;
    return why;
  }
  // Enters the jail as uid, or checks that the worker is in uid's already.
  Status Jail(uint32_t uid) {
    if (jailed) {
      if (uid == jail_uid) return Status::Ok();
      std::fprintf(Diagnostics(), "smolvm worker %d: an order for uid %u while in the jail of uid %u\n", ::getpid(), uid,
                   jail_uid);
      return Fail(kWorkerExitJailFailed, PermissionDenied("an order for another tenant's uid"));
    }
    if (!EnterJail(worker, jail, uid)) return Fail(kWorkerExitJailFailed, Internal("jail"));
    jailed = true;
    jail_uid = uid;
    return Status::Ok();
  }
  Status Handle(const proto::ForkPreloadRequest& pre, Ctx*) {
    if (built_clone) return Malformed("ForkPreload after a clone build");
    if (pre.jail != 0) {
      RETURN_IF_ERROR(Jail(pre.uid));
    } else if (jailed) {
      return Malformed("a ForkPreload outside the jail the worker is in");
    }
    auto chunk_fds = ReceiveChunkFds(control, pre.num_chunks);
    if (!chunk_fds.ok()) return Fail(kWorkerExitBadControl, chunk_fds.status());
    proto::PreloadDoneRequest done = worker.Preload(pre, *chunk_fds);
    if (done.result != 0)
      std::fprintf(Diagnostics(), "smolvm worker %d: preload for session %llu failed: %s\n", ::getpid(),
                   static_cast<unsigned long long>(pre.golden), done.message.c_str());
    std::string out;
    proto::AppendRequest(&out, done, 0);
    if (Status st = control.Write(out); !st.ok()) return Fail(kWorkerExitControlLost, st);
    return Status::Ok();
  }
  Status Handle(const proto::PreloadDropRequest&, Ctx*) {
    if (built_clone) return Malformed("PreloadDrop after a clone build");
    worker.DropPreload();
    return Status::Ok();
  }
  Status Handle(const proto::CloneBuildRequest& build, Ctx*) {
    // A fork: become a copy of the golden, then wait for the clone's guest.
    if (built_clone) return Malformed("a second CloneBuild");
    RETURN_IF_ERROR(Jail(build.uid));
    auto chunk_fds = ReceiveChunkFds(control, build.num_chunks);
    Result<proto::CloneBuiltRequest> built =
        chunk_fds.ok() ? worker.BuildClone(build, *chunk_fds) : Result<proto::CloneBuiltRequest>(chunk_fds.status());
    proto::CloneBuiltRequest reply;
    if (built.ok()) {
      reply = *built;
    } else {
      reply.result = built.status().code() ? built.status().code() : static_cast<int32_t>(Code::kInternal);
      reply.message = built.status().message();
    }
    std::string out;
    proto::AppendRequest(&out, reply, 0);
    Status sent = control.Write(out);
    if (!sent.ok()) return Fail(kWorkerExitCloneFailed, sent);
    if (!built.ok()) return Fail(kWorkerExitCloneFailed, built.status());
    built_clone = true;
    return Status::Ok();
  }
  Status Handle(const proto::WorkerAdoptRequest& a, Ctx* ctx) {
    if (ctx->fds_in->size() != 1) return Malformed("WorkerAdopt without exactly the guest's socket");
    RETURN_IF_ERROR(Jail(a.uid));
    adopt = a;
    guest = std::move((*ctx->fds_in)[0]);
    adopted = true;
    return Status::Ok();
  }
};

}  // namespace

int WorkerMain(int control_fd, const WorkerOptions& options) {
  // The daemon supervises us; if it dies, so do we (and our GPU memory goes).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() == 1) return kWorkerExitBadOptions;
  auto mode = ParseSeccompMode(options.seccomp);
  if (!mode.ok()) {
    std::fprintf(Diagnostics(), "smolvm worker: %s\n", mode.status().ToString().c_str());
    return kWorkerExitBadOptions;
  }
  // Opened while the worker may still open anything; the supervisor writes it.
  int learn_fd = -1;
  if (*mode == SeccompMode::kLearn) {
    learn_fd = ::open(options.seccomp_learn.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (learn_fd < 0) {
      std::fprintf(Diagnostics(), "smolvm worker: seccomp learn file %s: %s\n", options.seccomp_learn.c_str(), strerror(errno));
      return kWorkerExitBadOptions;
    }
  }
  // Before the driver starts: it reads CUDA_CACHE_PATH once.
  auto jail = WorkerJail::Prepare(options.jail_dir, *mode, learn_fd, options.host_bytes + (64ull << 20));
  if (!jail.ok()) {
    std::fprintf(Diagnostics(), "smolvm worker: %s\n", jail.status().ToString().c_str());
    return kWorkerExitBadOptions;
  }
  WorkerOptions opts = options;
  if (const char* nr = std::getenv("SMOLVM_WORKER_TEST_SYSCALL")) opts.test_syscall = std::atol(nr);
  UnixChannel control{UniqueFd(control_fd)};
  // Before the driver starts: what it prints for the guest's kernels (device
  // printf and assert) is the guest's output (device_output.h).
  auto output = DeviceOutput::Capture();
  if (!output.ok())
    std::fprintf(Diagnostics(), "smolvm worker %d: device output stays in this log: %s\n", ::getpid(),
                 output.status().ToString().c_str());
  auto backend = MakeBackend(options.backend);
  if (!backend.ok()) {
    std::fprintf(Diagnostics(), "smolvm worker: %s\n", backend.status().ToString().c_str());
    return kWorkerExitBadOptions;
  }
  // Pass-through until the daemon hands over a machine's budget.
  auto budgeted = std::make_unique<BudgetedBackend>(std::move(backend).value());
  BudgetedBackend* budget_slot = budgeted.get();
  Worker worker(std::move(budgeted), opts);
  if (output.ok()) worker.set_device_output(output->get());
  Status st = worker.Start();
  if (!st.ok()) {
    std::fprintf(Diagnostics(), "smolvm worker %d: start failed: %s\n", ::getpid(), st.ToString().c_str());
    // The daemon tells a full device from a broken one (worker_pool.cc).
    return st.code() == CUDA_ERROR_OUT_OF_MEMORY ? kWorkerExitNoMemory : kWorkerExitStartFailed;
  }
  uint64_t free0 = 0, total = 0;
  (void)worker.backend().DeviceMemGetInfo(&free0, &total);
  std::string out;
  proto::AppendRequest(&out, proto::WorkerReadyRequest{static_cast<uint32_t>(::getpid()), 0, total}, 0);
  if (!control.Write(out).ok()) return kWorkerExitControlLost;
  worker.PreloadLibraries(LibrariesToPreloadFromEnv());  // off a fork's path (library_preload.h)

  // Pooled: preload orders until a clone build, then an adoption.
  PooledLink link{worker, control, *jail};
  while (!link.adopted) {
    proto::FrameHeader h;
    std::string payload;
    std::vector<UniqueFd> fds;
    st = ReadControlTakingBudget(control, budget_slot, &h, &payload, &fds);
    if (!st.ok()) return kWorkerExitServed;  // the daemon let us go unused
    proto::ControlContext ctx{&h, &fds};
    st = proto::DispatchControl(link, h, payload, &ctx);
    if (link.exit != kWorkerExitServed) return link.exit;
    if (!st.ok()) {
      std::fprintf(Diagnostics(), "smolvm worker %d: bad control message from the daemon: %s\n", ::getpid(),
                   st.ToString().c_str());
      return kWorkerExitBadControl;
    }
  }
  // Serving an unrelated session: hold no other session's chunks.
  if (!link.built_clone) worker.DropPreload();
  // What the process printed before its session is no guest's: to the log.
  if (output.ok()) {
    for (const DeviceOutput::Piece& p : (*output)->Take()) std::fputs(p.text.c_str(), Diagnostics());
  }
  auto guest = std::make_unique<UnixChannel>(std::move(link.guest));
  st = worker.Serve(std::move(guest), link.adopt, &control);
  if (!st.ok())
    std::fprintf(Diagnostics(), "smolvm worker %d: session %llu ended: %s\n", ::getpid(),
                 static_cast<unsigned long long>(link.adopt.session_id), st.ToString().c_str());
  return kWorkerExitServed;
}

}  // namespace smolvm
